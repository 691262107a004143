"""A newcomer's first hour: the README's First run, `make smoke`'s config, the tools' --help
examples, xtr-search's hint at a terminal, and the compilation cache shared by processes."""
import ast
import json
import os
import pathlib
import pty
import re
import shutil
import subprocess
import sys

import gin
import pytest

from tests.retrieval_setup import REPO
import xtr

# The tools whose --help examples a newcomer copies (module docstrings).
TOOLS = sorted(p.stem
               for p in (REPO / "xtr" / "cli").glob("*.py")
               if "def console_entry_point" in p.read_text())
# What the First run creates: paths under it in --help examples need not exist before.
FIRST_RUN_OUTPUTS = "runs/smoke"
# Flags that name what a command reads.
INPUT_FLAGS = ("gin_file", "checkpoint", "index", "corpus", "data_dir", "queries")
HINT = "reading queries from stdin, one per line; Ctrl-D to end"


def _first_run_section() -> str:
  readme = (REPO / "README.md").read_text()
  return readme.split("\n## First run\n", 1)[1].split("\n## ", 1)[0]


def test_smoke_config_names_only_paths_inside_the_repository():
  """gin/runs/smoke.gin parses, and every path it binds (includes resolved) is a relative path
  inside the repository that exists, but the run's own output directory."""
  gin.clear_config()
  gin.add_config_file_search_path(str(REPO))
  try:
    gin.parse_config_files_and_bindings([str(REPO / "gin/runs/smoke.gin")], [])
    model_dir = gin.query_parameter("MODEL_DIR/gin.macro.value")
    config = gin.config_str()
  finally:
    gin.clear_config()
  paths = [p for p in re.findall(r"'([^']*)'", config) if "/" in p]
  assert model_dir == FIRST_RUN_OUTPUTS and "data/scifact" in paths, config
  for path in paths:
    assert not os.path.isabs(path) and "://" not in path, path
    resolved = (REPO / path).resolve()
    assert resolved.is_relative_to(REPO), path
    assert path == model_dir or resolved.exists(), path


def test_smoke_config_trains_on_the_bundled_data(tmp_path):
  """`make smoke`'s run, 2 steps: the bundled SciFact pairs tokenized with the bundled T5
  vocabulary train the tiny T5 and leave a checkpoint."""
  run = subprocess.run([
      sys.executable, "-m", "xtr.cli.train", "--gin_file=gin/runs/smoke.gin",
      f"--gin_bindings=MODEL_DIR = '{tmp_path}'", "--gin_bindings=trainer.train.num_steps = 2",
      "--gin_bindings=trainer.train.log_every_steps = 1"
  ], capture_output=True, text=True, cwd=REPO, env={
      **os.environ, "XLA_FLAGS": ""
  }, check=True)
  losses = [float(x) for x in re.findall(r"\| loss ([0-9.]+) \|", run.stdout)]
  assert len(losses) == 2 and all(0 < loss < 10 for loss in losses), run.stdout
  assert (tmp_path / "checkpoints" / "2").is_dir()


@pytest.mark.parametrize("tool", TOOLS)
def test_help_examples_name_existing_paths_or_placeholders(tool):
  """Every path given to a flag in the module docstring's example commands exists in the
  repository, is made by the First run (runs/smoke) or by `make demo` where the example says
  so, or is a placeholder in capitals."""
  doc = ast.get_docstring(ast.parse((REPO / "xtr" / "cli" / f"{tool}.py").read_text()))
  examples = re.findall(r"^  (?:# after `make demo`.*\n  )?(?:.*\| )?xtr-\S+ .*(?:\\\n.*)*", doc,
                        flags=re.MULTILINE)
  assert examples, f"xtr/cli/{tool}.py's docstring has no example command"
  for example in examples:
    after_demo = "# after `make demo`" in example
    for flag, value in re.findall(r"--(\w+)=([^\s\]]+)", example):
      if flag not in INPUT_FLAGS:
        continue
      value = value.split("=")[-1]  # --checkpoint=LABEL=DIR
      made = value.startswith(FIRST_RUN_OUTPUTS) or after_demo and value.startswith("runs/demo")
      placeholder = re.fullmatch(r"[A-Z][A-Z0-9_]*(/\S*)?(\.\w+)?", value)
      assert made or placeholder or (REPO / value).exists(), f"{tool}: --{flag}={value}"


def test_readme_first_run_searcher_snippet_runs(exported, tmp_path):
  """The First run's Python snippet, verbatim, in a directory where runs/smoke is a tiny
  checkpoint and runs/smoke/index its index: it prints the first query's top 3, as
  xtr.Searcher gives them here."""
  snippets = re.findall(r"```python\n(.*?)```", _first_run_section(), flags=re.DOTALL)
  assert len(snippets) == 1
  shutil.copytree(exported[0], tmp_path / "runs/smoke")
  shutil.copytree(exported[1], tmp_path / "runs/smoke/index")
  process = subprocess.run([sys.executable, "-c", snippets[0]], capture_output=True, text=True,
                           cwd=tmp_path, env={
                               **os.environ, "PYTHONPATH": str(REPO)
                           })
  assert process.returncode == 0, process.stderr
  expected = xtr.Searcher(str(exported[1]), str(exported[0])).search(["what causes scurvy"],
                                                                     top_k=3)[0]
  printed = [line.split() for line in process.stdout.splitlines()]
  assert [doc_id for doc_id, _ in printed] == [doc_id for doc_id, _ in expected]
  assert [float(score) for _, score in printed] == [round(s, 3) for _, s in expected]


def test_first_run_commands_use_only_the_repository():
  """The First run's shell commands name the bundled data and runs/smoke, nothing beside the
  repository, and the venv's tools."""
  commands = re.findall(r"```bash\n(.*?)```", _first_run_section(), flags=re.DOTALL)[0]
  assert "../" not in commands and "source .venv/bin/activate" in commands
  for flag, value in re.findall(r"--(\w+)=(\S+)", commands):
    if flag in INPUT_FLAGS or flag == "out":
      assert value.startswith(FIRST_RUN_OUTPUTS) or (REPO / value).exists(), f"--{flag}={value}"


def _search_with_stdin_of(stdin_is_terminal: bool) -> str:
  """xtr-search's stderr, given one query on a terminal (a pty) or a pipe; the index does not
  exist, so it stops once the queries are read."""
  code = ("import sys; sys.argv = ['xtr-search', *sys.argv[1:]]; from xtr.cli import search; "
          "search.console_entry_point()")
  command = [sys.executable, "-c", code, "--index=/nonexistent", "--checkpoint=/nonexistent"]
  if not stdin_is_terminal:
    return subprocess.run(command, input="what causes scurvy\n", capture_output=True, text=True,
                          cwd=REPO).stderr
  controller, terminal = pty.openpty()
  try:
    process = subprocess.Popen(command, stdin=terminal, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, cwd=REPO)
    os.write(controller, b"what causes scurvy\n\x04")  # Ctrl-D at a line's start: end of input.
    return process.communicate(timeout=120)[1]
  finally:
    os.close(terminal)
    os.close(controller)


@pytest.mark.parametrize("stdin_is_terminal", [True, False])
def test_search_hints_at_stdin_only_on_a_terminal(stdin_is_terminal):
  stderr = _search_with_stdin_of(stdin_is_terminal)
  assert "/nonexistent" in stderr  # It read the query, then went on to the index.
  assert (HINT in stderr) == stdin_is_terminal, stderr


def _cache_entries(directory: pathlib.Path) -> set[str]:
  return {p.name for p in directory.iterdir()} if directory.exists() else set()


def test_a_second_process_reuses_the_first_ones_compilations(exported, tmp_path):
  """The first xtr-search fills the default cache ($XDG_CACHE_HOME/xtr/jax); a second one,
  given that directory, takes every program it compiles from it (JAX logs each compilation and
  each cache hit) and writes nothing; --compilation_cache=off writes no cache."""

  def search(xdg: pathlib.Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg), "JAX_LOG_COMPILES": "1", "XLA_FLAGS": ""}
    return subprocess.run([
        sys.executable, "-m", "xtr.cli.search", f"--index={exported[1]}",
        f"--checkpoint={exported[0]}", "--top_k=3", *flags
    ], input="what causes scurvy\n", capture_output=True, text=True, cwd=REPO, env=env, check=True)

  cache = tmp_path / "xdg/xtr/jax"
  first = search(tmp_path / "xdg")
  written = _cache_entries(cache)
  assert written and "Persistent compilation cache hit" not in first.stderr
  second = search(tmp_path / "elsewhere", f"--compilation_cache={cache}")
  assert _cache_entries(cache) == written
  compiled = second.stderr.count("Finished XLA compilation of")
  assert compiled and second.stderr.count("Persistent compilation cache hit for") == compiled
  assert not (tmp_path / "elsewhere").exists()
  assert json.loads(second.stdout) == json.loads(first.stdout)
  search(tmp_path / "off", "--compilation_cache=off")
  assert not (tmp_path / "off").exists()
