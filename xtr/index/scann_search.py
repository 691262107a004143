"""Loading an index's serialized ScaNN searcher and searching it: no pickle, no TensorFlow.

ScaNN's own `load_searcher` unpickles `scann_docids.pkl` whenever that file exists. `load` here
never does: it loads only the files that the manifest lists (checked by the caller), refuses any
other file under scann/ by name, and accepts an assets file only if it names listed files.

The `scann` package's `__init__` imports TensorFlow (~620 MB resident) when it is installed;
searching needs only ScaNN's pybind extension, which `_pybind` loads from the package's
directory without running that `__init__`.
"""
import functools
import importlib.machinery
import importlib.util
import os
import re
import sys
from typing import Any

import numpy as np

from xtr.index import files

ASSETS = "scann_assets.pbtxt"
_ASSET_PATH = re.compile(r'^\s*asset_path:\s*"([^"]*)"\s*$', re.MULTILINE)
_PYBIND = "scann_pybind"  # The extension's module name (as `scann` itself imports it).


@functools.cache
def _pybind():
  """ScaNN's pybind extension module, without importing the `scann` package."""
  if _PYBIND in sys.modules:  # Imported by `scann` (an export in this process): the same one.
    return sys.modules[_PYBIND]
  spec = importlib.util.find_spec("scann")
  if spec is None or not spec.submodule_search_locations:
    raise ImportError("ScaNN is not installed: pip install scann")
  path = os.path.join(spec.submodule_search_locations[0], "scann_ops", "cc", "python",
                      _PYBIND + ".so")
  loader = importlib.machinery.ExtensionFileLoader(_PYBIND, path)
  module = importlib.util.module_from_spec(
      importlib.util.spec_from_file_location(_PYBIND, path, loader=loader))
  loader.exec_module(module)
  sys.modules[_PYBIND] = module
  return module


def listed_names(listed: dict[str, Any], scann_dir: str = files.SCANN_DIR) -> set[str]:
  """The names of the files in `scann_dir` (scann/, or an updated index's scann.gN/) among a
  manifest's listed files."""
  prefix = scann_dir + "/"
  return {path[len(prefix):] for path in listed if path.startswith(prefix)}


def check_files(scann_dir: str, names: set[str]) -> None:
  """Refuses scann/ unless it holds exactly the listed `names`, and its assets name only them."""
  present = set(os.listdir(scann_dir))
  unlisted = sorted(present - names)
  if unlisted:
    raise files.DamagedIndexError(
        f"{scann_dir} holds files that its manifest does not list: {unlisted}. xtr loads only "
        "listed files (and never ScaNN's pickled doc ids); remove them or re-export the index.")
  pickled = sorted(name for name in names if name.endswith(".pkl"))
  if pickled or ASSETS not in names:
    raise files.DamagedIndexError(
        f"{scann_dir}: the manifest lists {pickled or 'no ' + ASSETS}; xtr loads ScaNN from its "
        f"{ASSETS} and never unpickles. Re-export the index.")
  with open(os.path.join(scann_dir, ASSETS), encoding="utf-8") as f:
    assets = _ASSET_PATH.findall(f.read())
  strange = sorted(set(assets) - names)
  if strange:
    raise files.DamagedIndexError(
        f"{os.path.join(scann_dir, ASSETS)} names files that the manifest does not list: "
        f"{strange}. Re-export the index.")


def load(scann_dir: str, names: set[str]) -> Any:
  """The searcher (a `ScannNumpy`) serialized in `scann_dir`; its listed `names` must have been
  verified."""
  check_files(scann_dir, names)
  with open(os.path.join(scann_dir, ASSETS), encoding="utf-8") as f:
    assets = f.read()
  return _pybind().ScannNumpy(scann_dir, assets)


def search(searcher: Any, queries: np.ndarray, k: int, reorder_k: int, leaves_to_search: int | None,
           threads: int) -> tuple[np.ndarray, np.ndarray]:
  """queries: [Q, D] float32 -> (rows [Q, k] uint32, scores [Q, k] float32, NaN = none).

  `leaves_to_search` partitions per query (None: as built); `threads` > 1 spreads the queries
  over that many threads (one query per task), 1 searches them in this thread.
  """
  pre_reorder = max(reorder_k, k) if reorder_k else -1
  leaves = -1 if leaves_to_search is None else leaves_to_search
  if threads > 1:
    searcher.set_num_threads(threads)
  return searcher.search_batched(queries, k, pre_reorder, leaves, threads > 1, 1)
