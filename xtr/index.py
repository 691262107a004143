"""Token index: every document token vector of a corpus on disk, searched exactly or with ScaNN.

One index directory (a sharded export writes one per shard, `shard_path(root, s, num_shards)`,
and `open_index(root)` fans out over them as one index):

  writer.json                 the writer's settings, so that a killed export resumes with them
  chunks/vectors-00000.npy    [T_c, D] float32|float16 token vectors of chunk 0
  chunks/doc_index-00000.npy  [T_c] int32 doc index (within this directory) of each token
  chunks/chunk-00000.json     doc ids, doc lengths and sha256 of the two .npy files of chunk 0;
                              written after them, so its presence marks the chunk complete
  scann/                      the serialized ScaNN searcher over all T tokens (relative paths)
  doc_ids.jsonl               one JSON string per line: doc index -> corpus doc id
  doc_offsets.npy             [N + 1] int64: doc i owns token rows offsets[i]:offsets[i + 1]
  manifest.json               written last: its presence means the index is complete

Chunk c holds docs c * docs_per_chunk onwards, in corpus order; token ids are row numbers in the
concatenation of the chunks. Every file is written under `<name>.tmp` and renamed, so a killed
export leaves only complete files (plus temporaries that the resumed export overwrites).

Identical inputs give byte-identical directories: ScaNN's k-means is seeded with k-means++
initialisation (`random_init=False`); ScaNN's random initialisation is not seeded and makes its
serialized partitioner, codebooks and hashed dataset differ from run to run.
"""
import dataclasses
import functools
import hashlib
import json
import math
import os
import re
import shutil
from collections.abc import Callable, Iterator, Sequence
from typing import Any, BinaryIO

import gin
import jax
import jax.numpy as jnp
import numpy as np
from scann.scann_ops.py import scann_ops_pybind

FORMAT = 1
MANIFEST = "manifest.json"
WRITER = "writer.json"
DTYPES = ("float32", "float16")
_SHARD_NAME = re.compile(r"shard-\d{5}-of-(\d{5})")
_AH_MIN_TOKENS = 16  # ScaNN's LUT16 asymmetric hashing trains 16 centers per block.
_EXACT_TOKEN_BLOCK = 16384  # document tokens scored per step of exact search
_EXACT_QUERY_BLOCK = 1024  # query tokens per step of exact search


@gin.configurable
@dataclasses.dataclass(frozen=True)
class ScannConfig:
  """ScaNN tree + asymmetric hashing (AH) settings; the defaults are the released XTR code's.

  Released XTR: tree(num_leaves=min(2000, T), num_leaves_to_search=100,
  training_sample_size=min(250000, T)).score_ah(1, anisotropic_quantization_threshold=0.1), no
  reordering. Here the tree has min(num_leaves, ceil(sqrt(T))) leaves for T tokens (the usual
  sqrt(T) k-means sizing, equal to the released 2000 from T = 4M tokens on) and searches
  min(num_leaves_to_search, leaves) of them. Indexes of fewer than 16 tokens are too small to
  train AH codebooks and are scored exactly by ScaNN (no tree).

  Attributes:
    num_leaves: upper bound on the number of k-means partitions.
    num_leaves_to_search: partitions searched per query token.
    training_sample_size: tokens sampled to train the partitions.
    dims_per_block: dimensions per AH block (1 or 2; 1 is more accurate).
    anisotropic_quantization_threshold: AH score-aware quantization threshold (ScaNN's eta).
    reorder_k: if > 0, rescore this many AH candidates exactly (ScaNN stores float32 vectors).
  """
  num_leaves: int = 2000
  num_leaves_to_search: int = 100
  training_sample_size: int = 250_000
  dims_per_block: int = 1
  anisotropic_quantization_threshold: float = 0.1
  reorder_k: int = 0


def shard_path(root: str, shard: int, num_shards: int) -> str:
  """Directory of shard `shard` of a sharded export under `root`."""
  return os.path.join(root, f"shard-{shard:05d}-of-{num_shards:05d}")


def check_compatible(manifest: dict[str, Any], dim: int, fingerprint: str) -> None:
  """Raises ValueError unless the index was built with this token dim and checkpoint."""
  problems = []
  if manifest["dim"] != dim:
    problems.append(f"token dim {manifest['dim']} (index) vs {dim} (query model)")
  if manifest["fingerprint"] != fingerprint:
    problems.append(f"checkpoint fingerprint {manifest['fingerprint']!r} (index) vs "
                    f"{fingerprint!r} (query model)")
  if problems:
    raise ValueError("The token index does not match the query model: " + "; ".join(problems)
                     + ". Re-export the index with this model.")


# ---------------------------------------------------------------------------------------------
# Files.


def _atomic_write(path: str, write: Callable[[BinaryIO], None]) -> None:
  """Writes `path` through `path.tmp` and a rename: `path` is either absent or complete."""
  tmp = path + ".tmp"
  with open(tmp, "wb") as f:
    write(f)
  os.replace(tmp, path)


def _write_json(path: str, value: Any) -> None:
  _atomic_write(path, lambda f: f.write(json.dumps(value, indent=1, sort_keys=True).encode()))


def _write_npy(path: str, array: np.ndarray) -> None:
  _atomic_write(path, lambda f: np.save(f, array, allow_pickle=False))


def _read_json(path: str) -> Any:
  with open(path, "rb") as f:
    return json.load(f)


def _sha256(path: str) -> str:
  digest = hashlib.sha256()
  with open(path, "rb") as f:
    for block in iter(lambda: f.read(1 << 24), b""):
      digest.update(block)
  return digest.hexdigest()


def _check_sha256(path: str, expected: str) -> None:
  if _sha256(path) != expected:
    raise ValueError(f"{path} is corrupt: its sha256 differs from the one recorded when it was "
                     "written.")


def _load_npy(path: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
  """Memory-maps `path`, checking its shape and dtype against the index's records."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"{path} is missing: the token index is damaged.")
  try:
    array = np.load(path, mmap_mode="r", allow_pickle=False)
  except ValueError as e:
    raise ValueError(f"{path} is unreadable ({e}): the token index is damaged.") from e
  if array.shape != shape or array.dtype != np.dtype(dtype):
    raise ValueError(f"{path} holds {array.dtype}{list(array.shape)}, expected "
                     f"{dtype}{list(shape)} (e.g. a token dim mismatch).")
  return array


def _chunk_files(index_dir: str, chunk: int) -> dict[str, str]:
  return {name: os.path.join(index_dir, "chunks", f"{name}-{chunk:05d}.{ext}")
          for name, ext in (("vectors", "npy"), ("doc_index", "npy"), ("chunk", "json"))}


# ---------------------------------------------------------------------------------------------
# ScaNN.


def _build_scann(vectors: np.ndarray, config: ScannConfig
                 ) -> tuple[scann_ops_pybind.ScannSearcher, dict[str, Any]]:
  """vectors: [T, D] float32 -> (ScaNN dot-product searcher, its settings as built).

  The settings are `config` with num_leaves, num_leaves_to_search and training_sample_size
  replaced by the values used (see ScannConfig), plus the scoring ("asymmetric_hashing" or, below
  16 tokens, "brute_force").
  """
  num_tokens = len(vectors)
  builder = scann_ops_pybind.builder(vectors, 10, "dot_product")
  if num_tokens < _AH_MIN_TOKENS:
    settings = dataclasses.asdict(config) | {"scoring": "brute_force", "num_leaves": 0,
                                             "num_leaves_to_search": 0, "reorder_k": 0}
    return builder.score_brute_force().build(), settings
  num_leaves = min(config.num_leaves, math.isqrt(num_tokens - 1) + 1)  # ceil(sqrt(T))
  settings = dataclasses.asdict(config) | {
      "scoring": "asymmetric_hashing", "num_leaves": num_leaves,
      "num_leaves_to_search": min(config.num_leaves_to_search, num_leaves),
      "training_sample_size": min(config.training_sample_size, num_tokens)}
  # k-means++ initialisation is seeded; ScaNN's random initialisation is not (non-deterministic).
  builder = builder.tree(settings["num_leaves"], settings["num_leaves_to_search"],
                         training_sample_size=settings["training_sample_size"],
                         random_init=False)
  builder = builder.score_ah(
      config.dims_per_block,
      anisotropic_quantization_threshold=config.anisotropic_quantization_threshold)
  if config.reorder_k:
    builder = builder.reorder(config.reorder_k)
  return builder.build(), settings


# ---------------------------------------------------------------------------------------------
# Writing.


class IndexWriter:
  """Writes one index directory chunk by chunk; a killed export resumes at `completed_chunks()`.

  Usage: for chunk in range(writer.completed_chunks(), num_chunks): write_chunk(chunk, ...);
  then finalize(). Chunks must be written in order and all but the last hold docs_per_chunk docs.
  """

  def __init__(self, out_dir: str, dim: int, dtype: str, model_info: dict[str, Any],
               fingerprint: str, docs_per_chunk: int):
    if str(np.dtype(dtype)) not in DTYPES:
      raise ValueError(f"dtype {dtype} is not one of {DTYPES}")
    if os.path.exists(os.path.join(out_dir, MANIFEST)):
      raise FileExistsError(f"{os.path.join(out_dir, MANIFEST)} exists: the index is complete.")
    self.out_dir = out_dir
    # The JSON round trip makes `settings` compare equal to the settings read back on resume.
    self.settings = json.loads(json.dumps({
        "format": FORMAT, "dim": dim, "dtype": str(np.dtype(dtype)), "model": model_info,
        "fingerprint": fingerprint, "docs_per_chunk": docs_per_chunk}))
    os.makedirs(os.path.join(out_dir, "chunks"), exist_ok=True)
    self._check_or_write_settings()
    self._next_chunk = self.completed_chunks()

  def _check_or_write_settings(self) -> None:
    path = os.path.join(self.out_dir, WRITER)
    if not os.path.exists(path):
      _write_json(path, self.settings)
      return
    previous = _read_json(path)
    changed = sorted(k for k in self.settings.keys() | previous.keys()
                     if self.settings.get(k) != previous.get(k))
    if changed:
      raise ValueError(f"{path}: this export was started with other settings ({', '.join(changed)}"
                       f" differ: {[previous.get(k) for k in changed]} before, "
                       f"{[self.settings.get(k) for k in changed]} now); use a new directory.")

  def completed_chunks(self) -> int:
    """Number of chunks 0, 1, ... whose files are all complete on disk."""
    chunk = 0
    while os.path.exists(_chunk_files(self.out_dir, chunk)["chunk"]):
      chunk += 1
    return chunk

  def write_chunk(self, chunk_id: int, doc_ids: Sequence[str],
                  vectors: Sequence[np.ndarray]) -> None:
    """Writes the token vectors of docs chunk_id * docs_per_chunk onwards.

    Args:
      chunk_id: must be the next chunk (`completed_chunks()` of a fresh or resumed writer).
      doc_ids: corpus ids of the chunk's docs (1 to docs_per_chunk of them).
      vectors: per doc, its token vectors [len_i, D] (len_i may be 0).
    """
    if chunk_id != self._next_chunk:
      raise ValueError(f"chunk {chunk_id} written out of order: the next chunk of "
                       f"{self.out_dir} is {self._next_chunk}")
    if not 0 < len(doc_ids) <= self.settings["docs_per_chunk"] or len(vectors) != len(doc_ids):
      raise ValueError(f"chunk {chunk_id}: got {len(doc_ids)} doc ids and {len(vectors)} vector "
                       f"arrays, expected 1 to {self.settings['docs_per_chunk']} of each")
    dim = self.settings["dim"]
    vectors = [np.asarray(v) for v in vectors]
    for doc_id, doc_vectors in zip(doc_ids, vectors):
      if doc_vectors.ndim != 2 or doc_vectors.shape[1] != dim:
        raise ValueError(f"chunk {chunk_id}, doc {doc_id!r}: vectors of shape "
                         f"{doc_vectors.shape}, expected [length, {dim}]")
    lengths = [len(v) for v in vectors]
    first_doc = chunk_id * self.settings["docs_per_chunk"]
    doc_index = np.repeat(np.arange(first_doc, first_doc + len(doc_ids), dtype=np.int32), lengths)
    # The leading [0, D] array keeps the shape when every doc of the chunk is empty.
    tokens = np.concatenate([np.zeros((0, dim)), *vectors], dtype=self.settings["dtype"])
    files = _chunk_files(self.out_dir, chunk_id)
    _write_npy(files["vectors"], tokens)
    _write_npy(files["doc_index"], doc_index)
    _write_json(files["chunk"], {
        "doc_ids": list(doc_ids), "doc_lengths": lengths,
        "vectors_sha256": _sha256(files["vectors"]),
        "doc_index_sha256": _sha256(files["doc_index"])})
    self._next_chunk += 1

  def finalize(self, scann_config: ScannConfig | None = None) -> dict[str, Any]:
    """Checks the chunks, builds ScaNN and writes doc ids, offsets and (last) the manifest.

    ScaNN is built over all T tokens in memory: a float32 [T, D] copy (4 * T * D bytes, e.g.
    0.8 GB for 1.5M tokens of dim 128) plus ScaNN's own structures; shard larger corpora.

    Returns:
      The manifest.
    """
    metas = [_read_json(_chunk_files(self.out_dir, c)["chunk"]) for c in range(self._next_chunk)]
    chunks = [self._checked_chunk(c, meta) for c, meta in enumerate(metas)]
    lengths = [n for meta in metas for n in meta["doc_lengths"]]
    if not sum(lengths):
      raise ValueError(f"{self.out_dir}: no document tokens were written")
    vectors = np.concatenate(
        [_load_npy(os.path.join(self.out_dir, c["file"]), (c["num_tokens"], self.settings["dim"]),
                   self.settings["dtype"]) for c in chunks], dtype=np.float32)
    scann_settings = self._write_scann(vectors, scann_config or ScannConfig())
    del vectors
    doc_ids = [doc_id for meta in metas for doc_id in meta["doc_ids"]]
    doc_ids_path = os.path.join(self.out_dir, "doc_ids.jsonl")
    _atomic_write(doc_ids_path,
                  lambda f: f.write("".join(json.dumps(i) + "\n" for i in doc_ids).encode()))
    offsets_path = os.path.join(self.out_dir, "doc_offsets.npy")
    _write_npy(offsets_path, np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]))
    manifest = {**self.settings, "num_docs": len(doc_ids), "num_tokens": sum(lengths),
                "scann": scann_settings, "chunks": chunks,
                "doc_ids_sha256": _sha256(doc_ids_path),
                "doc_offsets_sha256": _sha256(offsets_path)}
    _write_json(os.path.join(self.out_dir, MANIFEST), manifest)
    return manifest

  def _checked_chunk(self, chunk: int, meta: dict[str, Any]) -> dict[str, Any]:
    """Verifies chunk `chunk` on disk against its record `meta`; returns its manifest entry."""
    files = _chunk_files(self.out_dir, chunk)
    if chunk < self._next_chunk - 1 and len(meta["doc_ids"]) != self.settings["docs_per_chunk"]:
      raise ValueError(f"{files['chunk']}: {len(meta['doc_ids'])} docs in a chunk that is not the"
                       f" last, expected docs_per_chunk = {self.settings['docs_per_chunk']}")
    for name in ("vectors", "doc_index"):
      _check_sha256(files[name], meta[f"{name}_sha256"])
    return {"file": os.path.relpath(files["vectors"], self.out_dir),
            "num_docs": len(meta["doc_ids"]), "num_tokens": sum(meta["doc_lengths"]),
            "sha256": meta["vectors_sha256"],
            "doc_index_file": os.path.relpath(files["doc_index"], self.out_dir),
            "doc_index_sha256": meta["doc_index_sha256"]}

  def _write_scann(self, vectors: np.ndarray, config: ScannConfig) -> dict[str, Any]:
    searcher, settings = _build_scann(vectors, config)
    final = os.path.join(self.out_dir, "scann")
    tmp = final + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    searcher.serialize(tmp, relative_path=True)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return settings


# ---------------------------------------------------------------------------------------------
# Exact search.


@functools.partial(jax.jit, static_argnames="k")
def _merge_block(top_scores: jax.Array, top_tokens: jax.Array, queries: jax.Array,
                 vectors: jax.Array, tokens: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
  """Scores a block of document tokens and merges it into the running top-k of each query token.

  On equal scores, earlier tokens win (lax.top_k keeps the lower index; the running top-k comes
  first), so the result is a stable sort of all tokens by descending score.

  Args:
    top_scores: [Q, k] float32 best scores so far, descending (-inf = none yet).
    top_tokens: [Q, k] int32 token index of each (-1 = none yet).
    queries: [Q, D] float32.
    vectors: [T_b, D] float32|float16 document tokens, in token order.
    tokens: [T_b] int32 token index of each; -1 marks padding.
    k: number of tokens to keep.

  Returns:
    The merged (top_scores, top_tokens).
  """
  scores = jnp.dot(queries, vectors.astype(jnp.float32).T, precision=jax.lax.Precision.HIGHEST)
  scores = jnp.where(tokens >= 0, scores, -jnp.inf)
  block_scores, block_positions = jax.lax.top_k(scores, min(k, vectors.shape[0]))
  scores = jnp.concatenate([top_scores, block_scores], axis=1)
  candidates = jnp.concatenate([top_tokens, tokens[block_positions]], axis=1)
  top_scores, positions = jax.lax.top_k(scores, k)
  return top_scores, jnp.take_along_axis(candidates, positions, axis=1)


def _next_power_of_2(n: int) -> int:
  return 1 << max(n - 1, 0).bit_length()


def _query_blocks(queries: np.ndarray) -> list[jax.Array]:
  """[Q, D] -> blocks of at most _EXACT_QUERY_BLOCK rows, zero-padded to a power-of-2 size (few
  distinct shapes to compile)."""
  size = min(_EXACT_QUERY_BLOCK, _next_power_of_2(len(queries)))
  padded = np.zeros((-(-len(queries) // size) * size, queries.shape[1]), np.float32)
  padded[:len(queries)] = queries
  return [jnp.asarray(padded[i:i + size]) for i in range(0, len(padded), size)]


# ---------------------------------------------------------------------------------------------
# Reading.


class _Shard:
  """One complete index directory (see the module docstring); doc indices are local to it."""

  def __init__(self, path: str):
    manifest_path = os.path.join(path, MANIFEST)
    if not os.path.exists(manifest_path):
      raise ValueError(f"{path} is an incomplete token index (no {MANIFEST}): finish its export.")
    self.path = path
    self.manifest = _read_json(manifest_path)
    if self.manifest["format"] != FORMAT:
      raise ValueError(f"{manifest_path}: format {self.manifest['format']}, expected {FORMAT}")
    self.dim = self.manifest["dim"]
    self.num_docs = self.manifest["num_docs"]
    self.num_tokens = self.manifest["num_tokens"]
    self.doc_ids = self._read_doc_ids()
    self.doc_offsets = _load_npy(os.path.join(path, "doc_offsets.npy"), (self.num_docs + 1,),
                                 "int64")
    self._chunks = [self._open_chunk(chunk) for chunk in self.manifest["chunks"]]
    self._scann = None

  def _read_doc_ids(self) -> list[str]:
    path = os.path.join(self.path, "doc_ids.jsonl")
    if not os.path.exists(path):
      raise FileNotFoundError(f"{path} is missing: the token index is damaged.")
    with open(path, "rb") as f:
      doc_ids = [json.loads(line) for line in f]
    if len(doc_ids) != self.num_docs:
      raise ValueError(f"{path}: {len(doc_ids)} doc ids, expected {self.num_docs}")
    return doc_ids

  def _open_chunk(self, chunk: dict[str, Any]) -> np.ndarray:
    """-> the chunk's token vectors [T_c, D], memory-mapped."""
    return _load_npy(os.path.join(self.path, chunk["file"]), (chunk["num_tokens"], self.dim),
                     self.manifest["dtype"])

  def verify(self) -> None:
    """Checks the sha256 of every chunk, doc id and offset file against the manifest."""
    for chunk in self.manifest["chunks"]:
      _check_sha256(os.path.join(self.path, chunk["file"]), chunk["sha256"])
      _check_sha256(os.path.join(self.path, chunk["doc_index_file"]), chunk["doc_index_sha256"])
    _check_sha256(os.path.join(self.path, "doc_ids.jsonl"), self.manifest["doc_ids_sha256"])
    _check_sha256(os.path.join(self.path, "doc_offsets.npy"), self.manifest["doc_offsets_sha256"])

  def doc_vectors(self, doc: int) -> np.ndarray:
    """-> [len, D] float32 token vectors of local doc `doc`."""
    chunk = doc // self.manifest["docs_per_chunk"]
    chunk_start = self.doc_offsets[chunk * self.manifest["docs_per_chunk"]]
    start, end = self.doc_offsets[doc] - chunk_start, self.doc_offsets[doc + 1] - chunk_start
    return np.array(self._chunks[chunk][start:end], dtype=np.float32)

  def locate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token indices (-1 = none) -> (local doc index, position in that doc), -1 for none."""
    docs = np.searchsorted(self.doc_offsets, tokens, side="right") - 1
    positions = tokens - self.doc_offsets[np.maximum(docs, 0)]
    return (np.where(tokens >= 0, docs, -1).astype(np.int32),
            np.where(tokens >= 0, positions, -1).astype(np.int32))

  def search_scann(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """queries: [Q, D] float32 -> (scores [Q, k] float32, token index [Q, k] int64, -1 = none)."""
    if self._scann is None:
      self._scann = scann_ops_pybind.load_searcher(os.path.join(self.path, "scann"))
    reorder_k = self.manifest["scann"]["reorder_k"]
    tokens, scores = self._scann.search_batched_parallel(
        queries, final_num_neighbors=k,
        pre_reorder_num_neighbors=max(reorder_k, k) if reorder_k else None)
    missing = np.isnan(scores)  # ScaNN found fewer than k tokens.
    return (np.where(missing, -np.inf, scores).astype(np.float32),
            np.where(missing, -1, tokens.astype(np.int64)))

  def search_exact(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """queries: [Q, D] float32 -> (scores [Q, k] float32, token index [Q, k] int64, -1 = none)."""
    blocks = _query_blocks(queries)
    top = [(jnp.full((len(b), k), -jnp.inf), jnp.full((len(b), k), -1, jnp.int32))
           for b in blocks]
    for vectors, tokens in self._token_blocks(min(_EXACT_TOKEN_BLOCK,
                                                  _next_power_of_2(self.num_tokens))):
      vectors, tokens = jnp.asarray(vectors), jnp.asarray(tokens)
      top = [_merge_block(*state, b, vectors, tokens, k=k) for state, b in zip(top, blocks)]
    scores = np.concatenate([np.asarray(s) for s, _ in top])[:len(queries)]
    return scores, np.concatenate([np.asarray(t) for _, t in top])[:len(queries)].astype(np.int64)

  def _token_blocks(self, size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Yields (vectors [size, D], token index [size] int32) over all tokens in order, across
    chunk boundaries; the last block is padded with zero vectors of token index -1."""
    vectors, filled, offset = [], 0, 0
    for chunk_vectors in self._chunks:
      start = 0
      while start < len(chunk_vectors):
        take = min(size - filled, len(chunk_vectors) - start)
        vectors.append(chunk_vectors[start:start + take])
        filled, start = filled + take, start + take
        if filled == size:
          yield np.concatenate(vectors), np.arange(offset, offset + size, dtype=np.int32)
          vectors, filled, offset = [], 0, offset + size
    if filled:
      vectors.append(np.zeros((size - filled, self.dim), self.manifest["dtype"]))
      tokens = np.arange(offset, offset + size, dtype=np.int32)
      yield np.concatenate(vectors), np.where(np.arange(size) < filled, tokens, -1)


def _merge_shards(results: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
                  doc_starts: Sequence[int], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Per query token, the top-k of the shards' top-k lists.

  Args:
    results: per shard, (scores [Q, k] descending, local doc index [Q, k], position of the token
      in its doc [Q, k]), -1 = none.
    doc_starts: per shard, its first global doc index.
    k: entries to keep.

  Returns:
    (scores [Q, k] float32, global doc index [Q, k] int32, position [Q, k] int32); ties keep
    shard order.
  """
  scores = np.concatenate([s for s, _, _ in results], axis=1)
  docs = np.concatenate([np.where(d >= 0, d + start, -1) for (_, d, _), start in
                         zip(results, doc_starts)], axis=1)
  positions = np.concatenate([p for _, _, p in results], axis=1)
  order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
  return (np.take_along_axis(scores, order, axis=1),
          np.take_along_axis(docs, order, axis=1).astype(np.int32),
          np.take_along_axis(positions, order, axis=1))


class TokenIndex:
  """A token index directory, or the shards of a sharded export searched as one index.

  Global doc indices (and `doc_ids`) concatenate the shards' in shard order.
  """

  def __init__(self, path: str, shards: Sequence[_Shard]):
    self.path = path
    self._shards = list(shards)
    self._doc_starts = np.cumsum([0] + [s.num_docs for s in shards])
    self.doc_ids = [doc_id for shard in shards for doc_id in shard.doc_ids]
    self.doc_lengths = np.concatenate([np.diff(shard.doc_offsets) for shard in shards])  # [N]
    self.manifest = shards[0].manifest if len(shards) == 1 else _sharded_manifest(shards)
    self.dim = self.manifest["dim"]
    self.num_docs = self.manifest["num_docs"]
    self.num_tokens = self.manifest["num_tokens"]

  def verify(self) -> None:
    """Raises ValueError naming any file whose sha256 differs from the manifest's (reads all)."""
    for shard in self._shards:
      shard.verify()

  def doc_vectors(self, doc_indices: Sequence[int]) -> list[np.ndarray]:
    """All token vectors of the given (global) docs: one [len_i, D] float32 array per doc."""
    doc_indices = np.asarray(doc_indices, dtype=np.int64)
    if np.any((doc_indices < 0) | (doc_indices >= self.num_docs)):
      raise IndexError(f"doc indices out of range [0, {self.num_docs}) of the index at {self.path}")
    shards = np.searchsorted(self._doc_starts, doc_indices, side="right") - 1
    return [self._shards[s].doc_vectors(int(d) - self._doc_starts[s])
            for s, d in zip(shards, doc_indices)]

  def search(self, query_vectors: np.ndarray, k_prime: int,
             searcher: str = "scann") -> tuple[np.ndarray, np.ndarray]:
    """(scores [Q, k'], doc_index [Q, k']) of `search_tokens` (which see)."""
    scores, doc_index, _ = self.search_tokens(query_vectors, k_prime, searcher)
    return scores, doc_index

  def search_tokens(self, query_vectors: np.ndarray, k_prime: int, searcher: str = "scann"
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Retrieves the top-k' document tokens of each query token by dot product.

    Args:
      query_vectors: [Q, D] float32 query token vectors.
      k_prime: tokens to retrieve per query token.
      searcher: "scann" (approximate, as built) or "bruteforce" (exact, JAX).

    Returns:
      scores: [Q, k'] float32, descending; -inf where fewer than k' tokens were found.
      doc_index: [Q, k'] int32 global doc index of each retrieved token; -1 with score -inf.
      position: [Q, k'] int32 position of each retrieved token in its document; -1 likewise.
    """
    queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
    if queries.ndim != 2 or queries.shape[1] != self.dim:
      raise ValueError(f"query vectors of shape {queries.shape} do not match the index at "
                       f"{self.path}: index dim {self.dim} vs query dim {queries.shape[-1]}")
    if k_prime < 1:
      raise ValueError(f"k_prime must be positive, got {k_prime}")
    searchers = {"scann": _Shard.search_scann, "bruteforce": _Shard.search_exact}
    if searcher not in searchers:
      raise ValueError(f"searcher must be one of {list(searchers)}, got {searcher!r}")
    search = searchers[searcher]
    results = [(scores, *shard.locate(tokens)) for shard in self._shards
               for scores, tokens in [search(shard, queries, k_prime)]]
    return _merge_shards(results, self._doc_starts, k_prime)


def _sharded_manifest(shards: Sequence[_Shard]) -> dict[str, Any]:
  """A summary manifest of consistent shards: their common settings and total counts."""
  common = ("format", "dim", "dtype", "model", "fingerprint")
  first = shards[0].manifest
  for shard in shards[1:]:
    differ = [key for key in common if shard.manifest[key] != first[key]]
    if differ:
      raise ValueError(f"{shard.path} differs from {shards[0].path} in {', '.join(differ)}: the "
                       "shards come from different exports.")
  return {**{key: first[key] for key in common},
          "num_docs": sum(s.num_docs for s in shards),
          "num_tokens": sum(s.num_tokens for s in shards),
          "shards": [os.path.basename(s.path) for s in shards]}


def _shard_dirs(root: str) -> list[str]:
  """The shard-SSSSS-of-NNNNN subdirectories of `root` in shard order ([] if none)."""
  found = [name for name in os.listdir(root) if _SHARD_NAME.fullmatch(name)]
  if not found:
    return []
  num_shards = {int(_SHARD_NAME.fullmatch(name)[1]) for name in found}
  expected = {os.path.basename(shard_path(root, s, n)) for n in num_shards for s in range(n)}
  if len(num_shards) != 1 or set(found) != expected:
    raise ValueError(f"{root}: shard directories {sorted(found)} are not one complete set "
                     f"(missing {sorted(expected - set(found))}).")
  return [os.path.join(root, name) for name in sorted(found)]


def open_index(path: str) -> TokenIndex:
  """Opens a complete index directory, or fans out over the shard-* subdirectories of `path`.

  Raises:
    FileNotFoundError: no index at `path`, or one of its files is missing.
    ValueError: the index is incomplete (no manifest), damaged or its shards are inconsistent.
  """
  if not os.path.isdir(path):
    raise FileNotFoundError(f"no token index at {path}: not a directory")
  if os.path.exists(os.path.join(path, MANIFEST)) or os.path.exists(os.path.join(path, WRITER)):
    return TokenIndex(path, [_Shard(path)])
  shard_dirs = _shard_dirs(path)
  if not shard_dirs:
    raise FileNotFoundError(f"no token index at {path}: neither {MANIFEST} nor shard-*-of-* "
                            "subdirectories")
  return TokenIndex(path, [_Shard(d) for d in shard_dirs])
