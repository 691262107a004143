"""The `xtr-search` console script: ScaNN's helper process starts before the tool's imports.

`xtr.cli.search` imports JAX and flax (~0.5 s on 2 cores) before absl parses its flags, and
ScaNN's load takes ~0.9 s for the demo's index. This module reads --index and --searcher with
absl's own parser (known flags only; --flagfile is read too) and, for a ScaNN search, starts the
helper (`xtr.index.scann_process.start_early`), then imports and runs the tool, which takes the
helper over once it has verified the index (docs/performance.md, "Cold start").
"""
import sys
from typing import Sequence

from absl import flags

from xtr.index import scann_process


def start_helper(argv: Sequence[str]) -> None:
  """Starts ScaNN's helper for the --index of a ScaNN search in `argv`, if there is one."""
  index = scann_index(argv)
  if index:
    scann_process.start_early(index)


def scann_index(argv: Sequence[str]) -> str | None:
  """--index of a ScaNN search in `argv`, else None (also for arguments absl cannot parse: the
  tool refuses them)."""
  early = flags.FlagValues()
  index = flags.DEFINE_string("index", None, "", flag_values=early)
  searcher = flags.DEFINE_string("searcher", "scann", "", flag_values=early)
  try:
    early(list(argv), known_only=True)
  except flags.Error:
    return None
  return index.value if searcher.value == "scann" else None


def console_entry_point() -> None:
  start_helper(sys.argv)
  from xtr.cli import search  # pylint: disable=import-outside-toplevel  # After the helper starts.
  search.console_entry_point()
