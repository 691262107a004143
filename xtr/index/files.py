"""The files of an index directory: names, atomic writes, checksums, checked reads, the manifest.

Every file is written under `<name>.tmp` and renamed, so a killed export leaves only complete
files (plus temporaries that the resumed export replaces). Everything read back is untrusted:
JSON and .npy only (never pickle), regular files only (never through a symlink: `xtr.io`),
sizes checked before anything is allocated from them, with errors that name the file.
"""
import json
import math
import os
import posixpath
import re
from typing import Any
from typing import BinaryIO

import numpy as np

from xtr import io

FORMAT = 2
MANIFEST = "manifest.json"
WRITER = "writer.json"
LOCK = "export.lock"  # flock-ed while an export or repair writes the directory.
DOC_IDS = "doc_ids.jsonl"
DOC_OFFSETS = "doc_offsets.npy"
SCANN_TOKENS = "scann_tokens.npy"
SCANN_DIR = "scann"
DELETED_DOCS = "deleted_docs.npy"  # [n] int64 increasing: the documents updates deleted.
VOCABULARY_DIR = "vocabulary"  # The export's copy of the model's vocabulary file.
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


def generation_name(name: str, generation: int) -> str:
  """The name in generation `generation` of a file or directory that an update rewrites
  (`xtr.index.update`): `name` itself in generation 0 (an export), else doc_ids.g3.jsonl,
  scann.g3, ..."""
  if not generation:
    return name
  stem, dot, extension = name.partition(".")
  return f"{stem}.g{generation}{dot}{extension}"


def names(manifest: dict[str, Any]) -> dict[str, str]:
  """{base name: its name in the manifest's generation} of the files an update rewrites."""
  generation = manifest.get("generation", 0)
  return {
      name: generation_name(name, generation)
      for name in (DOC_IDS, DOC_OFFSETS, SCANN_TOKENS, SCANN_DIR, DELETED_DOCS)
  }


def chunk_doc_starts(manifest: dict[str, Any]) -> np.ndarray:
  """[C + 1] int64: chunk c holds docs starts[c]:starts[c + 1]."""
  return np.cumsum([0] + [c["num_docs"] for c in manifest["chunks"]], dtype=np.int64)


def doc_offsets(index_dir: str, manifest: dict[str, Any]) -> np.ndarray:
  """[N + 1] int64 doc offsets of a checked manifest's index (checked: `check_offsets`)."""
  path = os.path.join(index_dir, names(manifest)[DOC_OFFSETS])
  offsets = np.asarray(load_npy(path, (manifest["num_docs"] + 1,), "int64"))
  check_offsets(offsets, manifest, path)
  return offsets


def doc_ids(index_dir: str, manifest: dict[str, Any]) -> list[str]:
  """The [N] doc ids of a checked manifest's index, one JSON string per line."""
  path = os.path.join(index_dir, names(manifest)[DOC_IDS])
  with io.open_regular(path) as f:
    ids = [json_line(line, path, n) for n, line in enumerate(f, start=1)]
  if len(ids) != manifest["num_docs"] or not all(isinstance(i, str) for i in ids):
    raise DamagedIndexError(f"{path}: expected {manifest['num_docs']} doc id strings.")
  return ids


def scann_rows(index_dir: str, manifest: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
  """The ScaNN rows' tokens: ([R] int64 the token of each row (a new array): the listed
  scann_tokens (a pruned or updated index, or rows in partition order) or every token in order,
  [R] int64 the same tokens in increasing order). Refuses a table that repeats or leaves the
  tokens (in O(T), without sorting it)."""
  num_tokens = manifest["num_tokens"]
  if names(manifest)[SCANN_TOKENS] not in manifest["files"]:
    rows = np.arange(num_tokens, dtype=np.int64)
    return rows, rows
  path = os.path.join(index_dir, names(manifest)[SCANN_TOKENS])
  rows = np.array(load_npy(path, (manifest["num_indexed_tokens"],), "int64"))
  if len(rows) and (rows.min() < 0 or rows.max() >= num_tokens):
    raise DamagedIndexError(f"{path} does not hold token indices of the index: the token index is "
                            "damaged.")
  held = increasing(rows, num_tokens)
  if len(held) != len(rows):
    raise DamagedIndexError(f"{path} repeats token indices: the token index is damaged.")
  return rows, held


def increasing(tokens: np.ndarray, num_tokens: int) -> np.ndarray:
  """[R] int64 token indices in [0, num_tokens) -> the distinct ones in increasing order:
  `tokens` itself when they strictly increase (a pruned export's table), else by marking them
  in a [num_tokens] mask (O(T), where sorting rows in partition order would be O(T log T))."""
  if np.all(tokens[1:] > tokens[:-1]):
    return tokens
  held = np.zeros(num_tokens, bool)
  held[tokens] = True
  return np.flatnonzero(held)


def deleted_docs(index_dir: str, manifest: dict[str, Any]) -> np.ndarray:
  """[n] int64 increasing: the docs that updates deleted (tombstones; none in an export)."""
  if not manifest.get("num_deleted_docs"):
    return np.zeros(0, np.int64)
  path = os.path.join(index_dir, names(manifest)[DELETED_DOCS])
  docs = np.asarray(load_npy(path, (manifest["num_deleted_docs"],), "int64"))
  if np.any(np.diff(docs) <= 0) or docs[0] < 0 or docs[-1] >= manifest["num_docs"]:
    raise DamagedIndexError(f"{path} does not hold increasing doc indices of the index: the "
                            "token index is damaged.")
  return docs


def chunk_files(index_dir: str, chunk: int) -> dict[str, str]:
  """{"vectors", "doc_index", "salience", "chunk"}: the paths of chunk `chunk`'s files (salience
  only for a model with salience heads)."""
  return {
      name: os.path.join(index_dir, "chunks", f"{name}-{chunk:05d}.{ext}")
      for name, ext in (("vectors", "npy"), ("doc_index", "npy"), ("salience", "npy"), ("chunk",
                                                                                        "json"))
  }


def write_npy(path: str, array: np.ndarray) -> None:
  io.atomic_write(path, lambda f: np.save(f, array, allow_pickle=False))


def read_json(path: str) -> Any:
  """The JSON value in the regular file `path`; a ValueError naming the file if it is not valid
  JSON, or nested too deeply to parse (`io.UnsafeFileError` if it is a symlink, FIFO, ...)."""
  with io.open_regular(path) as f:
    try:
      return json.load(f)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, ...
      raise DamagedIndexError(
          f"{path} is not valid JSON ({e}): the token index is damaged.") from None


def json_line(line: bytes, path: str, line_number: int) -> Any:
  """One line of a .jsonl file; a ValueError naming the file and line if it is not JSON (or
  nested too deeply to parse)."""
  try:
    return json.loads(line)
  except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, ...
    raise DamagedIndexError(f"{path}:{line_number}: not valid JSON ({e}): the token index is "
                            "damaged.") from None


def record(path: str) -> dict[str, Any]:
  """{"sha256", "size"} of the regular file `path` inside an index: how a manifest lists it."""
  with io.open_regular(path) as f:
    return {"sha256": io.digest(f), "size": os.fstat(f.fileno()).st_size}


def bytes_by_kind(manifest: dict[str, Any]) -> dict[str, int]:
  """Bytes of an index's listed files by kind: "scann" (token retrieval: scann/ and
  scann_tokens.npy), "vectors", "salience", "doc_index", "records" (chunk records, doc ids and
  offsets)."""
  out = dict.fromkeys(("scann", "vectors", "salience", "doc_index", "records"), 0)
  retrieval = names(manifest)
  for path, record in manifest["files"].items():
    chunk_kind = posixpath.basename(path).rsplit("-", 1)[0]  # chunks/<kind>-00000.npy
    if path.startswith(retrieval[SCANN_DIR] + "/") or path == retrieval[SCANN_TOKENS]:
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


def rows_between(rows: np.ndarray, start: int, stop: int) -> np.ndarray:
  """rows [R] increasing -> those in [start, stop), less start (a chunk's own rows)."""
  return rows[np.searchsorted(rows, start):np.searchsorted(rows, stop)] - start


def npy_header(f: BinaryIO, path: str) -> tuple[tuple[int, ...], bool, np.dtype]:
  """(shape, fortran order, dtype) of the .npy file `f` (named `path`), read from its start;
  `f` is left at its data."""
  try:
    version = np.lib.format.read_magic(f)
    return (np.lib.format.read_array_header_1_0
            if version == (1, 0) else np.lib.format.read_array_header_2_0)(f)
  except ValueError as e:
    raise DamagedIndexError(f"{path} is unreadable ({e}): the token index is damaged.") from e


def load_npy(path: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
  """Memory-maps the regular file `path` (symlinks refused), checking its header's shape and
  dtype against the index's records and its size against theirs before mapping it."""
  try:
    f = io.open_regular(path)
  except FileNotFoundError:
    raise FileNotFoundError(f"{path} is missing: the token index is damaged.") from None
  with f:
    found_shape, fortran_order, found_dtype = npy_header(f, path)
    if found_shape != shape or found_dtype != np.dtype(dtype) or fortran_order:
      raise DamagedIndexError(f"{path} holds {found_dtype}{list(found_shape)}, expected "
                              f"{dtype}{list(shape)}: the token index is damaged.")
    size = os.fstat(f.fileno()).st_size
    expected = f.tell() + math.prod(shape) * found_dtype.itemsize
    if size != expected:
      raise DamagedIndexError(f"{path} is {size} bytes, its header says {expected}: the token "
                              "index is damaged.")
    if not math.prod(shape):  # mmap cannot map 0 bytes.
      return np.zeros(shape, dtype)
    return np.memmap(f, dtype, "r", f.tell(), shape)


_FIELDS = {
    "format": int,
    "dim": int,
    "dtype": str,
    "model": dict,
    "fingerprint": str,
    "docs_per_chunk": int,
    "corpus": dict,
    "num_docs": int,
    "num_tokens": int,
    "scann": dict,
    "chunks": list,
    "files": dict
}


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
  if manifest["num_docs"] < 0 or manifest["num_tokens"] < 0 or manifest["docs_per_chunk"] < 1:
    refuse("num_docs, num_tokens or docs_per_chunk is out of range")
  if manifest["dtype"] not in DTYPES:
    refuse(f"dtype {manifest['dtype']!r} is not one of {DTYPES}")
  for relative, record in manifest["files"].items():
    if (posixpath.isabs(relative) or posixpath.normpath(relative) != relative or
        relative.startswith("..")):
      refuse(f"files: {relative!r} is not a path inside the index")
    if (not isinstance(record, dict) or not isinstance(record.get("sha256"), str) or
        not isinstance(record.get("size"), int)):
      refuse(f"files[{relative!r}] needs a string sha256 and an integer size")
  if not isinstance(manifest.get("vectors_stored", True), bool):
    refuse("field 'vectors_stored' is not a boolean")
  stored = manifest.get("vectors_stored", True)
  generation = manifest.get("generation", 0)
  if not isinstance(generation, int) or isinstance(generation, bool) or generation < 0:
    refuse("field 'generation' is not a non-negative integer")
  per_chunk = manifest["docs_per_chunk"]
  for i, chunk in enumerate(manifest["chunks"]):
    if (not isinstance(chunk, dict) or not isinstance(chunk.get("num_tokens"), int) or any(
        (key in chunk) != stored for key in ("file", "doc_index_file")) or
        any(not isinstance(chunk[key], str) or chunk[key] not in manifest["files"]
            for key in CHUNK_FILES
            if key in chunk)):
      refuse(f"chunks[{i}] needs listed files (vectors and doc index exactly when "
             "vectors_stored) and an integer num_tokens")
    num_docs = chunk.get("num_docs")
    # An export's chunks but its last hold docs_per_chunk docs; an update's added ones follow.
    if (not isinstance(num_docs, int) or not 0 < num_docs <= per_chunk or
        (not generation and i < len(manifest["chunks"]) - 1 and num_docs != per_chunk)):
      refuse(f"chunks[{i}].num_docs is not 1 to docs_per_chunk = {per_chunk} (all of them in "
             "an exported chunk but the last)")
  if sum(c["num_docs"] for c in manifest["chunks"]) != manifest["num_docs"]:
    refuse(f"the chunks do not hold num_docs = {manifest['num_docs']} documents")
  prune_doc = manifest.get("prune_doc")
  current = names(manifest)
  if prune_doc is not None and (not isinstance(prune_doc, (int, float)) or
                                isinstance(prune_doc, bool) or not 0 < prune_doc <= 1):
    refuse(f"prune_doc {prune_doc!r} is not a number in (0, 1]")
  if (prune_doc is not None or
      generation) and (current[SCANN_TOKENS] not in manifest["files"] or
                       not isinstance(manifest.get("num_indexed_tokens"), int)):
    refuse(f"a pruned or updated index needs a listed {current[SCANN_TOKENS]} and an integer "
           "num_indexed_tokens")
  indexed = manifest.get("num_indexed_tokens", manifest["num_tokens"])
  if (not isinstance(indexed, int) or isinstance(indexed, bool) or
      not 0 <= indexed <= manifest["num_tokens"] or
      (current[SCANN_TOKENS] not in manifest["files"] and indexed != manifest["num_tokens"])):
    refuse(f"num_indexed_tokens is not a count of the tokens, all of them unless "
           f"{current[SCANN_TOKENS]} is listed")
  deleted = manifest.get("num_deleted_docs", 0)
  if (not isinstance(deleted, int) or isinstance(deleted, bool) or
      not 0 <= deleted <= manifest["num_docs"] or
      (deleted > 0) != (current[DELETED_DOCS] in manifest["files"])):
    refuse(f"num_deleted_docs is not a count of the docs, with {current[DELETED_DOCS]} listed "
           "exactly when it is positive")
  reorder_k = manifest["scann"].get("reorder_k")
  if not isinstance(reorder_k, int) or isinstance(reorder_k, bool) or not 0 <= reorder_k < 2**31:
    refuse("scann.reorder_k is not an integer in [0, 2^31)")
  for required in (current[DOC_IDS], current[DOC_OFFSETS]):
    if required not in manifest["files"]:
      refuse(f"files does not list {required}")


def complete_manifest(index_dir: str) -> dict[str, Any]:
  """The checked manifest of the complete index at `index_dir` (`check_manifest`).

  Raises:
    FileNotFoundError: `index_dir` holds no manifest (no index, or an unfinished export).
  """
  path = os.path.join(index_dir, MANIFEST)
  if not os.path.lexists(path):
    raise FileNotFoundError(f"{index_dir} is not a complete token index (no {MANIFEST}).")
  manifest = read_json(path)
  check_manifest(manifest, path)
  return manifest


def check_offsets(offsets: np.ndarray, manifest: dict[str, Any], path: str) -> None:
  """Refuses doc offsets [N + 1] that do not start at 0, decrease, end elsewhere than at
  num_tokens or disagree with the chunks' token counts: what the reader allocates from them is
  then bounded by the index's files."""

  def refuse(problem: str):
    raise DamagedIndexError(f"{path} {problem}: the token index is damaged.")

  if offsets[0] != 0 or np.any(np.diff(offsets) < 0):
    refuse("does not start at 0 and increase")
  if offsets[-1] != manifest["num_tokens"]:
    refuse(f"ends at {offsets[-1]}, not at num_tokens = {manifest['num_tokens']}")
  if np.diff(offsets[chunk_doc_starts(manifest)]).tolist() != [
      c["num_tokens"] for c in manifest["chunks"]
  ]:
    refuse("disagrees with the token counts of the chunks")
