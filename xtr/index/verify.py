"""Checking an index directory's files against the sha256 and size its manifest records.

Modes (`--verify` of the search tools):
  full  every file is hashed before its first use, on every open;
  fast  (default) files up to SMALL_FILE bytes are hashed on every open; a larger file (vector
        chunks, ScaNN's hashed dataset, ...) is hashed once, and `verified.json` beside the
        manifest records its sha256 with its size, mtime, ctime, inode and device: later opens
        skip it while all of them are unchanged. A copied, extracted or rewritten file gets a new
        ctime or inode, so a record that came with a downloaded index never vouches for it;
  off   sizes only.
Sizes are checked in every mode: a missing, truncated or extended file is refused at open, and
so is a listed name that is a symlink, FIFO or device (`xtr.io`).
"""
from collections.abc import Iterable
import os
import sys
from typing import Any

from xtr import io
from xtr.index import files

MODES = ("full", "fast", "off")
RECORD = "verified.json"
SMALL_FILE = 16 << 20


def repair_hint(index_dir: str, updated: bool = False) -> str:
  """What to do about damage to the index at `index_dir` (`updated`: in place, since its export,
  which --repair refuses)."""
  if updated:
    return (f"{index_dir} was updated in place (xtr-export --add/--delete), which --repair cannot "
            "redo: restore it from a copy, or export the updated corpus into a new directory.")
  return (f"Repair: rerun the xtr-export command that wrote {index_dir} with --repair (it keeps "
          "the chunks that verify, re-encodes from the first damaged one and rebuilds the rest).")


def _stamp(stat: os.stat_result, sha256: str) -> list[Any]:
  return [sha256, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]


class Verifier:
  """Checks the files of one index directory, each at most once per process."""

  def __init__(self, index_dir: str, listed: dict[str, dict[str, Any]], mode: str = "fast",
               updated: bool = False):
    """listed: the manifest's {relative path: {"sha256", "size"}}; updated: whether the index
    was updated in place (`repair_hint`)."""
    if mode not in MODES:
      raise ValueError(f"verify mode must be one of {MODES}, got {mode!r}")
    self.index_dir = index_dir
    self.listed = listed
    self.mode = mode
    self.hint = repair_hint(index_dir, updated)
    self._checked = set()

  def _path(self, relative: str) -> str:
    return io.inside(self.index_dir, relative)

  def check_sizes(self) -> None:
    """Refuses a listed file that is missing, not a regular file, or whose size differs from
    the manifest's."""
    for relative, expected in self.listed.items():
      path = self._path(relative)
      try:
        size = io.regular_size(path)
      except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing: the token index is damaged. " +
                                self.hint) from None
      if size != expected["size"]:
        raise files.DamagedIndexError(
            f"{path} is damaged: {size} bytes, the manifest records {expected['size']}. " +
            self.hint)

  def check(self, relatives: Iterable[str]) -> None:
    """Verifies the sha256 of each listed file (per the mode) before it is first used."""
    todo = [r for r in relatives if r not in self._checked]
    if self.mode == "off" or not todo:
      self._checked.update(todo)
      return
    records = self._read_records() if self.mode == "fast" else {}
    updated = False
    for relative in todo:
      path, expected = self._path(relative), self.listed[relative]["sha256"]
      stat = os.lstat(path)
      large = self.mode == "fast" and stat.st_size > SMALL_FILE
      if large and records.get(relative) == _stamp(stat, expected):
        continue
      if files.record(path)["sha256"] != expected:
        raise files.DamagedIndexError(
            f"{path} is damaged: its sha256 differs from the one its manifest records. " +
            self.hint)
      if large:
        records[relative], updated = _stamp(stat, expected), True
    self._checked.update(todo)
    if updated:
      self._write_records(records)

  def _read_records(self) -> dict[str, Any]:
    path = os.path.join(self.index_dir, RECORD)
    try:
      records = files.read_json(path)
    except (OSError, files.DamagedIndexError):
      return {}  # None yet, or unreadable: verify again.
    return records if isinstance(records, dict) else {}

  def _write_records(self, records: dict[str, Any]) -> None:
    path = os.path.join(self.index_dir, RECORD)
    try:  # A fresh temporary of its own: concurrent readers may record at once.
      io.write_json(path, records, unique=True)
    except OSError as e:
      print(f"Note: cannot record verified files ({e}); the next open verifies them again.",
            file=sys.stderr, flush=True)
