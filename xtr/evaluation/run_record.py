"""Run records: a run's results with what made them, so that a number can be checked again.

  {"results": ..., "command": "xtr-demo --gin_file=...", "git_commit": "345bb22… (+ changes)",
   "gin_config": the operative gin config, "data_sha256": {file: sha256}, "date": "2026-…"}

`xtr-demo` writes one beside its metrics (`{out_dir}/run.json`), and `xtr-eval-beir`'s --out
report carries the same provenance fields beside its metrics (so do the launch/ scripts' reports,
which it writes); docs/runs/ holds those that the docs quote, and tests/test_run_records.py
checks the docs' tables against them.
"""
import datetime
import os
import pathlib
import shlex
import subprocess
import sys
from typing import Any
from typing import Sequence

import gin

from xtr import io
from xtr.data import beir_files

REPO = pathlib.Path(__file__).resolve().parents[2]
_start_commit: list[str | None] = []  # `git_commit()` when the run started (`mark_start`).


def record(results: Any, data_dirs: Sequence[str], split: str) -> dict[str, Any]:
  """`results` with their `provenance`."""
  return {"results": results, **provenance(data_dirs, split)}


def provenance(data_dirs: Sequence[str], split: str) -> dict[str, Any]:
  """The command line, git commit, operative gin config, `data_sha256` of the data, and the date
  (UTC)."""
  return {
      "command": shlex.join([os.path.basename(sys.argv[0]), *sys.argv[1:]]),
      "git_commit": _start_commit[0] if _start_commit else git_commit(),
      "gin_config": gin.operative_config_str(),
      "data_sha256": data_sha256(data_dirs, split),
      "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
  }


def data_sha256(data_dirs: Sequence[str], split: str) -> dict[str, str]:
  """{path: sha256} of each BEIR directory's corpus, queries and `split` qrels."""
  return {
      path: io.sha256(path) for path in (beir_files.resolve(data_dir, name)
                                        for data_dir in data_dirs
                                        for name in ("corpus.jsonl", "queries.jsonl",
                                                     os.path.join("qrels", f"{split}.tsv")))
  }


def mark_start() -> None:
  """Makes this process's records name the commit checked out now, not the one at the time they
  are written: a long run's record names the code it started with, even if a commit is made (or
  a file changed) while it runs. The CLIs call it first."""
  _start_commit[:] = [git_commit()]


def git_commit() -> str | None:
  """The commit of the xtr checkout this code runs from, with " (+ changes)" if its tracked files
  differ from it; None outside a git checkout (an installed package) or without git."""
  if not (REPO / ".git").exists():
    return None
  try:
    run = lambda *args: subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=
                                       True, check=True, timeout=30).stdout.strip()
    commit = run("rev-parse", "HEAD")
    changed = run("status", "--porcelain", "--untracked-files=no")
  except (OSError, subprocess.SubprocessError):
    return None
  return commit + (" (+ changes)" if changed else "")
