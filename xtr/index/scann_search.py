"""Loading an index's serialized ScaNN searcher and searching it: no pickle, no TensorFlow.

ScaNN's own `load_searcher` unpickles `scann_docids.pkl` whenever that file exists, and reads
whatever paths its `scann_assets.pbtxt` names. `load` here never unpickles: it loads only the
files that the manifest lists (checked by the caller), refuses any other file under scann/ by
name, reads the assets file only in the form ScaNN writes it (each asset a listed file of
scann/, by name), hands ScaNN an assets text written anew from what it parsed, and checks the
row count of every per-row array against the index's before ScaNN reads them.

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

from xtr import io
from xtr.index import files

ASSETS = "scann_assets.pbtxt"
# One asset as ScaNN writes it: a type and the name of a file beside the assets file.
_ASSET = re.compile(r'assets \{\s*asset_type: ([A-Z][A-Z0-9_]*)\s*asset_path: "([^"/\\]+)"\s*\}\s*')
_MAX_ASSETS_BYTES = 1 << 16
_NORMS = "INT8_NORMS_NPY"  # One norm a row, or none (an empty array).
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


def check_files(scann_dir: str, names: set[str], rows: int) -> str:
  """The assets text to load scann/ with (`_assets`), refusing scann/ unless it holds exactly
  the listed `names`, its assets name only them and each per-row array has `rows` rows."""
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
  assets = _assets(os.path.join(scann_dir, ASSETS), names)
  for kind, name in assets:
    if per_row(kind):
      _check_rows(os.path.join(scann_dir, name), rows, empty_allowed=kind == _NORMS)
  return "".join(
      f'assets {{\n  asset_type: {kind}\n  asset_path: "{name}"\n}}\n' for kind, name in assets)


def per_row(kind: str) -> bool:
  """Whether ScaNN's assets of type `kind` hold one row per token (its partition, its codes, the
  vectors it rescores with, its norm)."""
  return kind.endswith("DATASET_NPY") or kind in ("TOKENIZATION_NPY", _NORMS)


def written_assets(scann_dir: str) -> dict[str, str]:
  """{asset type: file name} of the searcher that this process has just serialized in
  `scann_dir`."""
  return dict(_assets(os.path.join(scann_dir, ASSETS), set(os.listdir(scann_dir))))


def _assets(path: str, names: set[str]) -> list[tuple[str, str]]:
  """(asset type, file name) of each asset of the assets file `path`, which must read as ScaNN
  writes it and name only listed files (`names`)."""
  with io.open_regular(path) as f:
    data = f.read(_MAX_ASSETS_BYTES + 1)
  try:
    text = data[:_MAX_ASSETS_BYTES].decode("utf-8")
  except UnicodeDecodeError as e:
    raise files.DamagedIndexError(f"{path} is not ScaNN's assets file ({e}); re-export the "
                                  "index.") from None
  if len(data) > _MAX_ASSETS_BYTES:
    raise files.DamagedIndexError(f"{path} holds more than {_MAX_ASSETS_BYTES:,} bytes: not "
                                  "ScaNN's assets file; re-export the index.")
  assets, position = [], 0
  while position < len(text):
    asset = _ASSET.match(text, position)
    if asset is None:
      raise files.DamagedIndexError(
          f"{path}: character {position + 1} does not continue an `assets {{ asset_type: ... "
          'asset_path: "NAME" }` entry as ScaNN writes them; re-export the index.')
    assets.append(asset.groups())
    position = asset.end()
  strange = sorted({name for _, name in assets} - names)
  if strange:
    raise files.DamagedIndexError(
        f"{path} names files that the manifest does not list: {strange}. Re-export the index.")
  return assets


def _check_rows(path: str, rows: int, empty_allowed: bool) -> None:
  """Refuses the .npy file `path` unless it holds `rows` rows (or none, if `empty_allowed`)."""
  with io.open_regular(path) as f:
    shape = files.npy_header(f, path)[0]
  if not shape or shape[0] != rows and not (empty_allowed and shape[0] == 0):
    raise files.DamagedIndexError(f"{path} holds {list(shape)}, not the {rows} rows of the "
                                  "index's token retrieval: the token index is damaged.")


def load(scann_dir: str, names: set[str], rows: int) -> Any:
  """The searcher (a `ScannNumpy`) serialized in `scann_dir`; its listed `names` must have been
  verified, and `rows` is the number of tokens it holds."""
  assets = check_files(scann_dir, names, rows)
  try:
    return _pybind().ScannNumpy(scann_dir, assets)
  except (RuntimeError, IndexError, ValueError) as e:
    raise files.DamagedIndexError(f"{scann_dir}: ScaNN cannot load it ({e}): the token index is "
                                  "damaged; re-export it.") from None


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
