"""JAX's persistent compilation cache for the command-line tools: a process reuses what an
earlier one compiled (e.g. `xtr-search`'s query encoder) instead of compiling it again.

Entries are keyed by the XLA computation, the compiler options, the devices and the versions
of jax and jaxlib, so one cache is safely shared by every model, index and tool. The cache is
`$XDG_CACHE_HOME/xtr/jax` (`~/.cache/xtr/jax` by default); `--compilation_cache=DIR` puts it
elsewhere and `--compilation_cache=off` turns it off.
"""
import functools
import os
from typing import Callable
from typing import Sequence

from absl import flags
import jax

_CACHE = flags.DEFINE_string(
    "compilation_cache", "default", "JAX's persistent compilation cache: a directory, "
    "'default' ($XDG_CACHE_HOME/xtr/jax, else ~/.cache/xtr/jax) or 'off'.",
    module_name="xtr.cli")  # Listed in every tool's --help, with the flags all tools share.


def default_dir() -> str:
  """$XDG_CACHE_HOME/xtr/jax, or ~/.cache/xtr/jax."""
  cache_home = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
  return os.path.join(cache_home, "xtr", "jax")


def enable(directory: str | None = None) -> None:
  """Caches this process's compilations in `directory` (None: `default_dir()`) and reuses them.

  Every compilation is cached however short (JAX's default keeps only those over 1 s): a
  search's encoder compiles in well under a second, and its process lives little longer.
  A Python program (e.g. with `xtr.Searcher`) calls it before its first search.
  """
  jax.config.update("jax_compilation_cache_dir", directory or default_dir())
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def using_cache(main: Callable[[Sequence[str]], None]) -> Callable[[Sequence[str]], None]:
  """`main`, run with the cache of --compilation_cache (read once the flags are parsed)."""

  @functools.wraps(main)
  def run(argv: Sequence[str]) -> None:
    if _CACHE.value != "off":
      enable(None if _CACHE.value == "default" else _CACHE.value)
    main(argv)

  return run
