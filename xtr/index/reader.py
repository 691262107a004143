"""Opening and searching a complete index directory, or the shards of a sharded export as one.

An index on disk is untrusted input: its manifest is JSON checked field by field, its files are
checked against the manifest's sizes on open and its sha256s before their first use
(`xtr.index.verify`), and nothing in it is executed (the model is data, ScaNN loads without
pickle).
"""
from collections.abc import Sequence
from concurrent import futures
import os
from typing import Any

import numpy as np

from xtr import io
from xtr.index import device
from xtr.index import exact
from xtr.index import files
from xtr.index import scann_process
from xtr.index import scann_search
from xtr.index import verify as verify_lib

SEARCHERS = ("scann", "bruteforce", "device")  # Token retrieval: `TokenIndex.search_tokens`.
FANOUT_THREADS = os.cpu_count() or 1  # At most this many shards are searched at once.


class _Shard:
  """One complete index directory (see `xtr.index`); doc indices are local to it."""

  def __init__(self, path: str, verify: str):
    manifest_path = os.path.join(path, files.MANIFEST)
    if not os.path.lexists(manifest_path):
      raise _incomplete(path)
    self.path = path
    self.manifest = files.read_json(manifest_path)
    files.check_manifest(self.manifest, manifest_path)
    self.dim = self.manifest["dim"]
    self.num_docs = self.manifest["num_docs"]
    self.num_tokens = self.manifest["num_tokens"]
    self._verifier = verify_lib.Verifier(path, self.manifest["files"], verify,
                                         bool(self.manifest.get("updates")))
    self._verifier.check_sizes()
    self._names = files.names(self.manifest)  # This generation's doc ids, offsets, ScaNN, ...
    self._verifier.check(self._names[name]
                         for name in (files.DOC_IDS, files.DOC_OFFSETS, files.SCANN_TOKENS,
                                      files.DELETED_DOCS)
                         if self._names[name] in self.manifest["files"])
    self.doc_ids = files.doc_ids(path, self.manifest)
    self.doc_offsets = files.doc_offsets(path, self.manifest)
    self.deleted_docs = files.deleted_docs(path, self.manifest)  # Tombstones of updates.
    self._chunk_doc_starts = files.chunk_doc_starts(self.manifest)
    self.has_vectors = self.manifest.get("vectors_stored", True)
    self._chunk_vectors = [
        files.load_npy(self._file(chunk["file"]), (chunk["num_tokens"], self.dim),
                       self.manifest["dtype"])
        for chunk in self.manifest["chunks"]
        if self.has_vectors
    ]
    self.has_salience = bool(self.manifest["model"].get("salience"))
    if self.has_salience != all("salience_file" in c for c in self.manifest["chunks"]):
      raise files.DamagedIndexError(f"{manifest_path}: the model's salience and the chunks' "
                                    "salience files disagree; the token index is damaged.")
    self._chunk_saliences = [
        files.load_npy(self._file(chunk["salience_file"]), (chunk["num_tokens"],), "float32")
        for chunk in self.manifest["chunks"]
        if self.has_salience
    ]
    self._unverified_chunks = [
        c[key] for c in self.manifest["chunks"] for key in files.CHUNK_FILES if key in c
    ]
    self.num_indexed_tokens = self.manifest.get("num_indexed_tokens", self.num_tokens)
    # When ScaNN's rows are not the tokens in order (pruned, updated, or in partition order):
    # [T'] the token of each ScaNN row, and, if they are not all the tokens, the same tokens in
    # increasing order (the rows of brute-force and device search).
    self._scann_rows = self._retrieval_tokens = None
    if self._names[files.SCANN_TOKENS] in self.manifest["files"]:
      self._scann_rows, held = files.scann_rows(path, self.manifest)
      if self.num_indexed_tokens < self.num_tokens:
        self._retrieval_tokens = held
    self._scann = None
    self._doc_of_token = None  # [T] int32 local doc of each token, built by `locate`.

  def _file(self, relative: str) -> str:
    """The path of a file that the manifest lists (`io.inside` the index)."""
    return io.inside(self.path, relative)

  def vocabulary_file(self) -> str:
    """The index's copy of its model's vocabulary file, verified."""
    vocabulary = self.manifest["model"].get("vocabulary")
    recorded = vocabulary.get("path") if isinstance(vocabulary, dict) else None
    if not isinstance(recorded, str) or recorded not in self.manifest["files"]:
      raise ValueError(
          f"{os.path.join(self.path, files.MANIFEST)} records the vocabulary {recorded!r}, "
          "which is not a file of the index (it was exported before xtr kept a copy of its "
          "vocabulary): search it with --vocabulary=PATH, a local copy of that file.")
    self._verifier.check([recorded])
    return self._file(recorded)

  def _chunks(self) -> list[np.ndarray]:
    """The chunks' token vectors [T_c, D] (memory-mapped), verified before their first use."""
    if not self.has_vectors:
      raise ValueError(f"the index at {self.path} was exported with --store_vectors=none: it "
                       "holds no token vectors (only --scoring=xtr with --searcher=scann).")
    if self._unverified_chunks:
      self._verifier.check(self._unverified_chunks)
      self._unverified_chunks = []
    return self._chunk_vectors

  def verify(self) -> None:
    """Checks the sha256 of every listed file against the manifest (all of them, now)."""
    verify_lib.Verifier(self.path, self.manifest["files"], "full",
                        bool(self.manifest.get("updates"))).check(self.manifest["files"])

  def doc_vectors(self, docs: np.ndarray) -> list[np.ndarray]:
    """Local docs [k] -> their token vectors, one [len_i, D] float32 array each."""
    return self._gather(self._chunks(), docs, np.float32)

  def doc_saliences(self, docs: np.ndarray) -> list[np.ndarray]:
    """Local docs [k] -> their token saliences, one [len_i] float32 array each (an index with
    salience and vectors)."""
    self._chunks()  # Verifies the salience files with the vectors.
    return self._gather(self._chunk_saliences, docs, np.float32)

  def _gather(self, per_chunk: Sequence[np.ndarray], docs: np.ndarray,
              dtype: type) -> list[np.ndarray]:
    """The rows of local docs `docs` [k] in per-chunk arrays, one array per doc in docs' order:
    one fancy-indexed read per chunk, not one per doc."""
    chunk_of = np.searchsorted(self._chunk_doc_starts, docs, side="right") - 1
    out = [None] * len(docs)
    for chunk in np.unique(chunk_of):
      where = np.flatnonzero(chunk_of == chunk)
      first_row = self.doc_offsets[self._chunk_doc_starts[chunk]]
      starts = self.doc_offsets[docs[where]] - first_row
      lengths = self.doc_offsets[docs[where] + 1] - first_row - starts
      ends = np.cumsum(lengths)
      rows = np.repeat(starts - (ends - lengths), lengths) + np.arange(ends[-1] if len(ends) else 0)
      block = np.asarray(per_chunk[chunk][rows], dtype)
      for i, part in zip(where, np.split(block, ends[:-1])):
        out[i] = part
    return out

  def locate(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token indices (-1 = none) -> (local doc index, position in that doc), -1 for none.

    Looks the docs up in a [T] int32 table (4 bytes per token in memory, built on first use):
    a gather, ~14x faster than a binary search of the doc offsets on SciFact's retrievals."""
    if self._doc_of_token is None:
      self._doc_of_token = np.repeat(np.arange(self.num_docs, dtype=np.int32),
                                     np.diff(self.doc_offsets))
    found = tokens >= 0
    docs = np.where(found, self._doc_of_token[np.where(found, tokens, 0)], -1)
    positions = np.where(found, tokens - self.doc_offsets[docs], -1).astype(np.int32)
    return docs, positions

  def load_scann(self, in_helper: bool = False) -> None:
    """Verifies and loads the ScaNN searcher (once); `in_helper`: in a helper process, which
    loads while this one goes on (`scann_process`)."""
    if self._scann is None:
      scann_dir = self._names[files.SCANN_DIR]
      names = scann_search.listed_names(self.manifest["files"], scann_dir)
      self._verifier.check(f"{scann_dir}/{name}" for name in sorted(names))
      load = scann_process.started if in_helper else scann_search.load
      self._scann = load(os.path.join(self.path, scann_dir), names, self.num_indexed_tokens)

  def search_scann(self, queries: np.ndarray, k: int, leaves_to_search: int | None = None,
                   threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """queries: [Q, D] float32 -> (scores [Q, k] float32, token index [Q, k] int64, -1 = none);
    `leaves_to_search` partitions per query (None: as built), queries spread over `threads`."""
    self.load_scann()
    tokens, scores = scann_search.search(self._scann, queries, k,
                                         self.manifest["scann"]["reorder_k"], leaves_to_search,
                                         threads)
    missing = np.isnan(scores)  # ScaNN found fewer than k tokens.
    tokens = np.where(missing, -1, tokens.astype(np.int64))
    return np.where(missing, -np.inf, scores).astype(np.float32), _tokens(tokens, self._scann_rows)

  def search_exact(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """queries: [Q, D] float32 -> (scores [Q, k] float32, token index [Q, k] int64, -1 = none);
    over the tokens ScaNN indexes (all, or those that pruning kept and updates did not
    delete)."""
    scores, rows = exact.search(self.retrieval_chunks(), queries, k)
    return scores, _tokens(rows, self._retrieval_tokens)

  def retrieval_chunks(self) -> list[np.ndarray]:
    """The vectors [T_c', D] of the tokens that token retrieval holds, per chunk: all of them
    (memory-mapped), or those that pruning kept and updates did not delete (copies), in token
    order."""
    chunks = self._chunks()
    if self._retrieval_tokens is None:
      return chunks
    offsets = np.cumsum([0] + [len(c) for c in chunks])
    return [
        chunks[c][files.rows_between(self._retrieval_tokens, offsets[c], offsets[c + 1])]
        for c in range(len(chunks))
    ]

  def retrieval_locations(self) -> tuple[np.ndarray, np.ndarray]:
    """(local doc [T'] int32, position [T'] int32) of each token that token retrieval holds."""
    return self.locate(_tokens(np.arange(self.num_indexed_tokens), self._retrieval_tokens))


def _tokens(rows: np.ndarray, table: np.ndarray | None) -> np.ndarray:
  """Rows of a token retrieval (-1 = none) -> token indices of the shard, by `table` [T'] (None:
  the rows are the tokens)."""
  if table is None:
    return rows
  return np.where(rows >= 0, table[np.maximum(rows, 0)], -1)


def merge_shards(results: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
                 doc_starts: Sequence[int], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Per query token, the top-k of the shards' top-k lists.

  Args:
    results: per shard, (scores [Q, k] descending, local doc index [Q, k], position of the token
      in its doc [Q, k]), -1 = none.
    doc_starts: per shard, its first global doc index.
    k: entries to keep.

  Returns:
    (scores [Q, k] float32, global doc index [Q, k] int32, position [Q, k] int32); ties keep
    shard order. One shard's lists are returned as they are (no sort).
  """
  if len(results) == 1:
    scores, docs, positions = results[0]
    return scores, docs.astype(np.int32), positions.astype(np.int32)
  scores = np.concatenate([s for s, _, _ in results], axis=1)
  docs = np.concatenate(
      [np.where(d >= 0, d + start, -1) for (_, d, _), start in zip(results, doc_starts)], axis=1)
  positions = np.concatenate([p for _, _, p in results], axis=1)
  order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
  return (np.take_along_axis(scores, order, axis=1), np.take_along_axis(docs, order,
                                                                        axis=1).astype(np.int32),
          np.take_along_axis(positions, order, axis=1))


class TokenIndex:
  """A token index directory, or the shards of a sharded export searched as one index.

  Global doc indices (and `doc_ids`) concatenate the shards' in shard order. The shards are
  searched on up to FANOUT_THREADS threads at once, and their top-k' lists merged.
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
    self.num_indexed_tokens = sum(s.num_indexed_tokens for s in shards)
    # [n] increasing global docs that updates deleted: tombstones, in no token retrieval.
    self.deleted_docs = np.concatenate(
        [s.deleted_docs + start for s, start in zip(shards, self._doc_starts)])
    self._check_distinct_ids()
    self.scann_bytes = sum(files.scann_bytes(s.manifest) for s in shards)  # token retrieval
    self.has_salience = shards[0].has_salience
    self.has_vectors = shards[0].has_vectors
    self._device = None  # device.DeviceTokens, loaded by `on_device`.
    self._pool = None  # The threads that search the shards, made on the first search.

  def _check_distinct_ids(self) -> None:
    """Refuses two live documents with one id (which no export or update writes: both refuse
    a repeated id), naming the doc ids files and lines of both."""
    live = [self.doc_ids[doc] for doc in self.live_docs().tolist()]
    if len(set(live)) == len(live):
      return
    first = {}
    for doc in self.live_docs().tolist():
      earlier = first.setdefault(self.doc_ids[doc], doc)
      if earlier != doc:
        raise files.DamagedIndexError(
            f"{self._doc_ids_line(doc)}: the document id {self.doc_ids[doc]!r} is also that of "
            f"{self._doc_ids_line(earlier)}: the token index is damaged.")

  def _doc_ids_line(self, doc: int) -> str:
    """`path:line` of global doc `doc` in its shard's doc ids file."""
    shard = int(np.searchsorted(self._doc_starts, doc, side="right")) - 1
    path = os.path.join(self._shards[shard].path,
                        files.names(self._shards[shard].manifest)[files.DOC_IDS])
    return f"{path}:{doc - self._doc_starts[shard] + 1}"

  def live_docs(self) -> np.ndarray:
    """[N - n] int64: the (global) docs that no update deleted."""
    return np.setdiff1d(np.arange(self.num_docs), self.deleted_docs)

  def verify(self) -> None:
    """Raises DamagedIndexError naming any file whose sha256 differs from the manifest's."""
    for shard in self._shards:
      shard.verify()

  def vocabulary_file(self) -> str:
    """The index's copy of its model's vocabulary file (the first shard's), verified."""
    return self._shards[0].vocabulary_file()

  def load_scann(self, in_helper: bool = False) -> None:
    """Verifies and loads every shard's ScaNN searcher now rather than at the first search.

    `in_helper`: a single shard's in a helper process (`scann_process`); shards load one after
    the other in this process, since ScaNN holds its codes twice while it loads: in helpers,
    all would at once."""
    for shard in self._shards:
      shard.load_scann(in_helper and len(self._shards) == 1)

  def on_device(self) -> device.DeviceTokens:
    """The tokens of token retrieval (every shard's) resident on the local devices, with their
    global docs and positions; loaded on first use with the gin-configured `DeviceConfig`, and
    again when that changes."""
    config = device.DeviceConfig()
    if self._device is None or self._device.config != config:
      self._device = None  # Freed before the new copy is made.
      self._device = device.DeviceTokens(*self.retrieval_tokens(), config)
    return self._device

  def retrieval_tokens(self) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """The tokens of token retrieval (every shard's): their vectors (float16 chunks [T_c, D],
    memory-mapped) and each one's global doc [T] and position in it [T]."""
    locations = [shard.retrieval_locations() for shard in self._shards]
    docs = np.concatenate([d + start for (d, _), start in zip(locations, self._doc_starts)])
    positions = np.concatenate([p for _, p in locations])
    return [c for shard in self._shards for c in shard.retrieval_chunks()], docs, positions

  def doc_vectors(self, doc_indices: Sequence[int]) -> list[np.ndarray]:
    """All token vectors of the given (global) docs: one [len_i, D] float32 array per doc."""
    return self._per_doc(_Shard.doc_vectors, doc_indices)

  def doc_saliences(self, doc_indices: Sequence[int]) -> list[np.ndarray]:
    """The token saliences of the given (global) docs: one [len_i] float32 array per doc."""
    if not self.has_salience:
      raise ValueError(f"the index at {self.path} holds no token saliences: its model has no "
                       "salience heads.")
    return self._per_doc(_Shard.doc_saliences, doc_indices)

  def _per_doc(self, read, doc_indices: Sequence[int]) -> list[np.ndarray]:
    """`read(shard, local docs)` of the given global docs, one array per doc in their order."""
    doc_indices = np.asarray(doc_indices, dtype=np.int64)
    if np.any((doc_indices < 0) | (doc_indices >= self.num_docs)):
      raise IndexError(f"doc indices out of range [0, {self.num_docs}) of the index at {self.path}")
    shards = np.searchsorted(self._doc_starts, doc_indices, side="right") - 1
    out = [None] * len(doc_indices)
    for shard in np.unique(shards):
      where = np.flatnonzero(shards == shard)
      for i, array in zip(where,
                          read(self._shards[shard], doc_indices[where] - self._doc_starts[shard])):
        out[i] = array
    return out

  def search(self, query_vectors: np.ndarray, k_prime: int, searcher: str = "scann",
             leaves_to_search: int | None = None,
             threads: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(scores [Q, k'], doc_index [Q, k']) of `search_tokens` (which see)."""
    scores, doc_index, _ = self.search_tokens(query_vectors, k_prime, searcher, leaves_to_search,
                                              threads)
    return scores, doc_index

  def search_tokens(self, query_vectors: np.ndarray, k_prime: int, searcher: str = "scann",
                    leaves_to_search: int | None = None,
                    threads: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Retrieves the top-k' document tokens of each query token by dot product.

    Args:
      query_vectors: [Q, D] float32 query token vectors.
      k_prime: tokens to retrieve per query token.
      searcher: "scann" (approximate, as built), "bruteforce" (exact, JAX, streamed from the
        host) or "device" (`on_device`: resident in device memory).
      leaves_to_search: ScaNN partitions searched per query token (None: as built; more is
        slower and closer to exact).
      threads: ScaNN threads the query tokens are spread over (1: this thread only).

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
    if searcher not in SEARCHERS:
      raise ValueError(f"searcher must be one of {SEARCHERS}, got {searcher!r}")
    if searcher == "device":
      return tuple(np.asarray(a) for a in self.on_device().search(queries, k_prime))
    searchers = {
        "scann": lambda shard: shard.search_scann(queries, k_prime, leaves_to_search, threads),
        "bruteforce": lambda shard: shard.search_exact(queries, k_prime)
    }

    def search_shard(shard: _Shard) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
      scores, tokens = searchers[searcher](shard)
      return scores, *shard.locate(tokens)

    if len(self._shards) == 1:
      return merge_shards([search_shard(self._shards[0])], self._doc_starts, k_prime)
    if self._pool is None:  # ScaNN and numpy release the GIL: the shards are searched at once.
      self._pool = futures.ThreadPoolExecutor(min(len(self._shards), FANOUT_THREADS))
    return merge_shards(list(self._pool.map(search_shard, self._shards)), self._doc_starts, k_prime)


def _sharded_manifest(shards: Sequence[_Shard]) -> dict[str, Any]:
  """A summary manifest of consistent shards: their common settings and total counts.

  The shards must share the model, checkpoint and corpus, and hold consecutive document ranges
  of that corpus that together cover it.
  """
  common = ("format", "dim", "dtype", "model", "fingerprint", "prune_doc", "vectors_stored")
  first = shards[0].manifest
  corpus = {key: first["corpus"].get(key) for key in ("path", "sha256", "total_docs")}
  stop = 0
  for shard in shards:
    differ = [key for key in common if shard.manifest.get(key) != first.get(key)]
    if shard.manifest["corpus"].get("sha256") != corpus["sha256"]:
      differ.append("corpus sha256")
    if differ:
      raise ValueError(f"{shard.path} differs from {shards[0].path} in {', '.join(differ)}: the "
                       "shards come from different exports.")
    docs = shard.manifest["corpus"].get("docs")
    if docs != [stop, stop + shard.num_docs]:
      raise ValueError(f"{shard.path} holds corpus documents {docs}, expected "
                       f"{[stop, stop + shard.num_docs]}: the shards do not tile one corpus.")
    stop += shard.num_docs
  if stop != corpus["total_docs"]:
    raise ValueError(f"the shards of {os.path.dirname(shards[0].path)} hold {stop} documents of "
                     f"a corpus of {corpus['total_docs']}.")
  return {
      **{
          key: first[key] for key in common if key in first
      }, "corpus": corpus,
      "num_docs": sum(s.num_docs for s in shards),
      "num_tokens": sum(s.num_tokens for s in shards),
      "shards": [os.path.basename(s.path) for s in shards]
  }


def _shard_dirs(root: str) -> list[str]:
  """The shard-SSSSS-of-NNNNN subdirectories of `root` in shard order ([] if none)."""
  found = [name for name in os.listdir(root) if files.SHARD_NAME.fullmatch(name)]
  if not found:
    return []
  num_shards = {int(files.SHARD_NAME.fullmatch(name)[1]) for name in found}
  expected = {os.path.basename(files.shard_path(root, s, n)) for n in num_shards for s in range(n)}
  if len(num_shards) != 1 or set(found) != expected:
    raise ValueError(f"{root}: shard directories {sorted(found)} are not one complete set "
                     f"(missing {sorted(expected - set(found))}).")
  return [io.inside(root, name) for name in sorted(found)]


def open_index(path: str, verify: str = "fast") -> TokenIndex:
  """Opens a complete index directory, or fans out over the shard-* subdirectories of `path`.

  Args:
    verify: "full", "fast" or "off" (`xtr.index.verify`).

  Raises:
    FileNotFoundError: no index at `path`, or one of its files is missing.
    ValueError: the index is incomplete (no manifest), damaged (`DamagedIndexError`), from an
      older xtr, or its shards are inconsistent.
  """
  if not os.path.isdir(path):
    raise FileNotFoundError(f"no token index at {path}: not a directory")
  if (os.path.lexists(os.path.join(path, files.MANIFEST)) or
      os.path.lexists(os.path.join(path, files.WRITER))):
    return TokenIndex(path, [_Shard(path, verify)])
  shard_dirs = _shard_dirs(path)
  if not shard_dirs:
    raise FileNotFoundError(f"no token index at {path}: neither {files.MANIFEST} nor "
                            "shard-*-of-* subdirectories")
  return TokenIndex(path, [_Shard(d, verify) for d in shard_dirs])


def _incomplete(path: str) -> ValueError:
  """Why the index at `path` has no manifest: a repair or export writing it, or a killed one."""
  holder = io.holder(os.path.join(path, files.LOCK))
  if holder and holder.startswith("repair"):
    return ValueError(f"the token index at {path} is being repaired ({holder}): search again "
                      "when the repair has finished.")
  if holder:
    return ValueError(f"the token index at {path} is being exported ({holder}): search again "
                      "when the export has finished.")
  return ValueError(f"{path} is an incomplete token index (no {files.MANIFEST}): finish its "
                    "export (or rerun the interrupted --repair).")


def check_compatible(manifest: dict[str, Any], dim: int, fingerprint: str) -> None:
  """Raises ValueError unless the index was built with this token dim and checkpoint."""
  problems = []
  if manifest["dim"] != dim:
    problems.append(f"token dim {manifest['dim']} (index) vs {dim} (query model)")
  if manifest["fingerprint"] != fingerprint:
    problems.append(f"checkpoint fingerprint {manifest['fingerprint']!r} (index) vs "
                    f"{fingerprint!r} (query model)")
  if problems:
    raise ValueError("The token index does not match the query model: " + "; ".join(problems) +
                     ". Re-export the index with this model.")
