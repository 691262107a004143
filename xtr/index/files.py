"""The files of an index directory: names, atomic writes, checksums, checked reads, the manifest.

Every file is written under `<name>.tmp` and renamed, so a killed export leaves only complete
files (plus temporaries that the resumed export overwrites). Everything read back is untrusted:
JSON and .npy only (never pickle), with errors that name the file.
"""
import hashlib
import json
import os
import posixpath
import re
from collections.abc import Callable
from typing import Any, BinaryIO

import numpy as np

from xtr import storage

FORMAT = 2
MANIFEST = "manifest.json"
WRITER = "writer.json"
DOC_IDS = "doc_ids.jsonl"
DOC_OFFSETS = "doc_offsets.npy"
SCANN_TOKENS = "scann_tokens.npy"
SCANN_DIR = "scann"
DTYPES = ("float32", "float16")
# `xtr-export --store_vectors`: the stored token vectors' dtype, or none (an index for f_XTR'
# only: ScaNN and the document map, no float vectors for refinement or brute force).
STORE_VECTORS = ("none", *DTYPES)
CHUNK_FILES = ("file", "doc_index_file", "salience_file")  # A manifest chunk's file fields.
SHARD_NAME = re.compile(r"shard-\d{5}-of-(\d{5})")


class DamagedIndexError(ValueError):
  """A file of an index differs from what its manifest records."""


def shard_path(root: str, shard: int, num_shards: int) -> str:
  """Directory of shard `shard` of a sharded export under `root`."""
  return os.path.join(root, f"shard-{shard:05d}-of-{num_shards:05d}")


def chunk_files(index_dir: str, chunk: int) -> dict[str, str]:
  """{"vectors", "doc_index", "salience", "chunk"}: the paths of chunk `chunk`'s files (salience
  only for a model with salience heads)."""
  return {name: os.path.join(index_dir, "chunks", f"{name}-{chunk:05d}.{ext}")
          for name, ext in (("vectors", "npy"), ("doc_index", "npy"), ("salience", "npy"),
                            ("chunk", "json"))}


def atomic_write(path: str, write: Callable[[BinaryIO], None], tmp: str | None = None) -> None:
  """Writes `path` through a temporary (`path.tmp` by default) and a rename: `path` is either
  absent or complete."""
  tmp = tmp or path + ".tmp"
  with open(tmp, "wb") as f:
    write(f)
  os.replace(tmp, path)


def write_json(path: str, value: Any, tmp: str | None = None) -> None:
  atomic_write(path, lambda f: f.write(json.dumps(value, indent=1, sort_keys=True).encode()), tmp)


def write_npy(path: str, array: np.ndarray) -> None:
  atomic_write(path, lambda f: np.save(f, array, allow_pickle=False))


def read_json(path: str) -> Any:
  """The JSON value in `path`; a ValueError naming the file if it is not valid JSON."""
  with open(path, "rb") as f:
    try:
      return json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise DamagedIndexError(f"{path} is not valid JSON ({e}): the token index is damaged."
                              ) from None


def json_line(line: bytes, path: str, line_number: int) -> Any:
  """One line of a .jsonl file; a ValueError naming the file and line if it is not JSON."""
  try:
    return json.loads(line)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise DamagedIndexError(f"{path}:{line_number}: not valid JSON ({e}): the token index is "
                            "damaged.") from None


def sha256(path: str) -> str:
  """The sha256 of the file at `path` (local or gs://)."""
  digest = hashlib.sha256()
  with storage.open_binary(path) as f:
    for block in iter(lambda: f.read(1 << 24), b""):
      digest.update(block)
  return digest.hexdigest()


def record(path: str) -> dict[str, Any]:
  """{"sha256", "size"} of the file at `path`: how a manifest lists it."""
  return {"sha256": sha256(path), "size": os.path.getsize(path)}


def bytes_by_kind(manifest: dict[str, Any]) -> dict[str, int]:
  """Bytes of an index's listed files by kind: "scann" (token retrieval: scann/ and
  scann_tokens.npy), "vectors", "salience", "doc_index", "records" (chunk records, doc ids and
  offsets)."""
  out = dict.fromkeys(("scann", "vectors", "salience", "doc_index", "records"), 0)
  for path, record in manifest["files"].items():
    chunk_kind = posixpath.basename(path).rsplit("-", 1)[0]  # chunks/<kind>-00000.npy
    if path.startswith(SCANN_DIR + "/") or path == SCANN_TOKENS:
      kind = "scann"
    elif path.endswith(".npy") and chunk_kind in ("vectors", "salience", "doc_index"):
      kind = chunk_kind
    else:
      kind = "records"
    out[kind] += record["size"]
  return out


def scann_bytes(manifest: dict[str, Any]) -> int:
  """Bytes of the token-retrieval index: the scann/ files (and, pruned, scann_tokens.npy)."""
  return bytes_by_kind(manifest)["scann"]


def load_npy(path: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
  """Memory-maps `path`, checking its shape and dtype against the index's records."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} is missing: the token index is damaged.")
  try:
    array = np.load(path, mmap_mode="r", allow_pickle=False)
  except ValueError as e:
    raise DamagedIndexError(f"{path} is unreadable ({e}): the token index is damaged.") from e
  if array.shape != shape or array.dtype != np.dtype(dtype):
    raise DamagedIndexError(f"{path} holds {array.dtype}{list(array.shape)}, expected "
                            f"{dtype}{list(shape)}: the token index is damaged.")
  return array


_FIELDS = {"format": int, "dim": int, "dtype": str, "model": dict, "fingerprint": str,
           "docs_per_chunk": int, "corpus": dict, "num_docs": int, "num_tokens": int,
           "scann": dict, "chunks": list, "files": dict}


def check_manifest(manifest: Any, path: str) -> None:
  """Refuses a manifest that is not what `IndexWriter.finalize` writes, naming the field."""
  def refuse(problem: str):
    raise DamagedIndexError(f"{path}: {problem}; the token index is damaged.")

  if not isinstance(manifest, dict):
    refuse("not a JSON object")
  if manifest.get("format") == 1:
    raise ValueError(
        f"{path}: this index was written by an older xtr (format 1), which stored its model as "
        "gin text; xtr no longer runs configuration read from an index. Re-export it into a new "
        "directory: xtr-export --gin_file=<the model's gin file> --checkpoint=... --corpus=... "
        "--out=NEW_DIR.")
  for field, kind in _FIELDS.items():
    if not isinstance(manifest.get(field), kind) or isinstance(manifest.get(field), bool):
      refuse(f"field '{field}' is missing or not a {kind.__name__}")
  if manifest["format"] != FORMAT:
    refuse(f"format {manifest['format']}, expected {FORMAT}")
  if manifest["dtype"] not in DTYPES:
    refuse(f"dtype {manifest['dtype']!r} is not one of {DTYPES}")
  for relative, record in manifest["files"].items():
    if (posixpath.isabs(relative) or posixpath.normpath(relative) != relative
        or relative.startswith("..")):
      refuse(f"files: {relative!r} is not a path inside the index")
    if (not isinstance(record, dict) or not isinstance(record.get("sha256"), str)
        or not isinstance(record.get("size"), int)):
      refuse(f"files[{relative!r}] needs a string sha256 and an integer size")
  if not isinstance(manifest.get("vectors_stored", True), bool):
    refuse("field 'vectors_stored' is not a boolean")
  stored = manifest.get("vectors_stored", True)
  for i, chunk in enumerate(manifest["chunks"]):
    if (not isinstance(chunk, dict) or not isinstance(chunk.get("num_tokens"), int)
        or any((key in chunk) != stored for key in ("file", "doc_index_file"))
        or any(chunk[key] not in manifest["files"] for key in CHUNK_FILES if key in chunk)):
      refuse(f"chunks[{i}] needs listed files (vectors and doc index exactly when "
             "vectors_stored) and an integer num_tokens")
  prune_doc = manifest.get("prune_doc")
  if prune_doc is not None and (
      not isinstance(prune_doc, (int, float)) or isinstance(prune_doc, bool)
      or not 0 < prune_doc <= 1 or SCANN_TOKENS not in manifest["files"]
      or not isinstance(manifest.get("num_indexed_tokens"), int)):
    refuse(f"prune_doc {prune_doc!r} needs a number in (0, 1], a listed {SCANN_TOKENS} and an "
           "integer num_indexed_tokens")
  if not isinstance(manifest["scann"].get("reorder_k"), int):
    refuse("scann.reorder_k is not an integer")
  for required in (DOC_IDS, DOC_OFFSETS):
    if required not in manifest["files"]:
      refuse(f"files does not list {required}")
