"""BEIR-layout training pairs: (query, positive) from `qrels/{split}.tsv` plus a sampled negative
(`uniform_negative` from the corpus, or `bm25_negative`, a BM25 hard negative).

`data_dir` holds corpus.jsonl ({"_id", "title", "text"}), queries.jsonl ({"_id", "text"}) and
qrels/{split}.tsv (header `query-id<TAB>corpus-id<TAB>score`; score > 0 marks a positive), each
possibly gzipped (`corpus.jsonl.gz`). The files are small enough to validate in Python; the
pairs then become tensors.
"""
from collections.abc import Callable
from collections.abc import Mapping
import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os

from absl import logging
import gin
import numpy as np
import seqio
import tensorflow as tf

from xtr import io
from xtr.data import beir_files
from xtr.data import bm25


@dataclasses.dataclass(frozen=True)
class BeirPairs:
  """The (query, positive document) pairs of one qrels split.

  Attributes:
    queries: text of each query that has a positive, by query index.
    docs: `document_text` of every corpus document, by corpus index (corpus.jsonl order).
    pairs: [P, 2] int64 (query index, corpus index) of each positive, in qrels order.
  """
  queries: tuple[str, ...]
  docs: tuple[str, ...]
  pairs: np.ndarray


@gin.configurable
def load_pairs(data_dir: str = gin.REQUIRED, split: str = "train") -> BeirPairs:
  """Reads and validates `data_dir` (cached: the source and `to_triples` both need it).

  `beir_pairs` reads the gin-bound `data_dir`; each task of `tasks.register_tasks.beir_tasks`
  passes its own (the qrels `split` is shared).

  Raises:
    ValueError: naming the file, line and field of the first malformed or inconsistent row.
  """
  return _load_pairs(os.fspath(data_dir), split)


@functools.lru_cache(maxsize=8)
def _load_pairs(data_dir: str, split: str) -> BeirPairs:
  corpus, queries, qrels, qrels_path = beir_files.read_split(data_dir, split)
  doc_index = {doc_id: i for i, doc_id in enumerate(corpus)}
  query_ids = [query_id for query_id, docs in qrels.items() if any(s > 0 for s in docs.values())]
  if not query_ids:
    raise ValueError(f"{qrels_path}: no row has score > 0")
  pairs = [(q, doc_index[doc_id])
           for q, query_id in enumerate(query_ids)
           for doc_id, score in qrels[query_id].items()
           if score > 0]
  return BeirPairs(queries=tuple(queries[query_id] for query_id in query_ids),
                   docs=tuple(corpus.values()), pairs=np.array(pairs, np.int64))


def pairs_dataset(split: str, shuffle_files: bool, seed: int | None = None,
                  data_dir: str | None = None) -> tf.data.Dataset:
  """seqio dataset_fn: {"query_index", "positive_index"} ([] int64) of `load_pairs(data_dir)`
  (None: the gin-bound data_dir), in order.

  `load_pairs.split` picks the qrels; the seqio split is always "train", and the pairs are
  shuffled (and their negatives drawn) downstream.
  """
  del split, shuffle_files, seed
  pairs = _pairs(data_dir).pairs
  return tf.data.Dataset.from_tensor_slices({
      "query_index": pairs[:, 0],
      "positive_index": pairs[:, 1]
  })


# Draws a negative for a query: (query_index [] int64, seed [2] int64 stateless seed) -> corpus
# index [] int64 that is not one of the query's positives. A NegativeSampler prepares one for
# the pairs (once, in numpy); the draw itself runs in TF inside tf.data.
Sample = Callable[[tf.Tensor, tf.Tensor], tf.Tensor]
NegativeSampler = Callable[[BeirPairs], Sample]


def _pairs(data_dir: str | None) -> BeirPairs:
  return load_pairs() if data_dir is None else load_pairs(data_dir)


def excluded_pairs(data: BeirPairs) -> np.ndarray:
  """[E, 2] int64 (query index, corpus index), sorted and unique, of the documents no negative of
  a query may be: its positives and every document of the same text as one of them (NFCorpus
  holds 40 groups of identical documents: one was drawn as the negative of its twin)."""
  twins: dict[str, list[int]] = {}
  for i, text in enumerate(data.docs):
    twins.setdefault(text, []).append(i)
  rows = [(q, twin) for q, d in data.pairs.tolist() for twin in twins[data.docs[d]]]
  return np.unique(np.array(rows, np.int64).reshape(-1, 2), axis=0)


def uniform_negative(data: BeirPairs) -> Sample:
  """Draws a corpus document uniformly from those that `excluded_pairs` does not exclude for the
  query.

  Draws r in [0, N - k) for the query's k excluded documents p_0 < ... < p_{k-1}; the r-th other
  document is r + #{i : p_i - i <= r} (p_i - i counts the documents before p_i that are not
  excluded).
  """
  by_query = excluded_pairs(data)
  starts = np.searchsorted(by_query[:, 0], np.arange(len(data.queries) + 1))
  if np.diff(starts).max() >= len(data.docs):
    raise ValueError("A query has every corpus document as a positive: no negative to sample.")

  def sample(query_index: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    start, end = tf.gather(starts, query_index), tf.gather(starts, query_index + 1)
    positives = tf.constant(by_query[:, 1])[start:end]
    r = tf.random.stateless_uniform([], seed, minval=0, maxval=len(data.docs) - (end - start),
                                    dtype=tf.int64)
    below = positives - tf.range(end - start) <= r
    return r + tf.reduce_sum(tf.cast(below, tf.int64))

  return sample


@gin.configurable
def bm25_negative(data: BeirPairs, depth: int = 100, cache_dir: str = "~/.cache/xtr/bm25",
                  without_candidates: str = "uniform") -> Sample:
  """Draws a BM25 hard negative uniformly from the query's top-`depth` BM25 documents
  (`bm25_top_docs`, mined once and cached in `cache_dir`) that are neither positives of the query
  (nor of their text, `excluded_pairs`) nor unmatched (score 0).

  A query may have no such document (NFCorpus has queries whose top 100 are all positives):
  without_candidates="uniform" draws its negatives as `uniform_negative` does (logging how many
  queries do); "error" refuses.

  Raises:
    ValueError: with "error", naming a query that has no such document (raise `depth`).
  """
  if without_candidates not in ("uniform", "error"):
    raise ValueError(f"bm25_negative.without_candidates={without_candidates!r}: expected "
                     "'uniform' or 'error'.")
  top = bm25_top_docs(data, depth, cache_dir)
  num_docs = len(data.docs)
  excluded = excluded_pairs(data)
  pair_keys = excluded[:, 0] * num_docs + excluded[:, 1]  # (query, doc) -> one int64
  is_positive = np.isin(np.arange(len(data.queries))[:, None] * num_docs + top, pair_keys)
  candidate = (top >= 0) & ~is_positive
  counts = candidate.sum(axis=1)
  if counts.min() == 0:
    query = data.queries[int(np.argmin(counts))]
    if without_candidates == "error":
      raise ValueError(f"Query {query!r}: its top-{depth} BM25 documents are all positives or "
                       "unmatched; no negative to sample.")
    logging.warning(
        "%d of %d queries (e.g. %r) have no BM25 negative in their top %d: their "
        "negatives are uniform.", np.sum(counts == 0), len(counts), query, depth)
  starts = np.concatenate([[0], np.cumsum(counts)])
  candidates = top[candidate]
  uniform = uniform_negative(data)

  def sample(query_index: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
    count = tf.gather(counts, query_index)
    r = tf.random.stateless_uniform([], seed, minval=0, maxval=tf.maximum(count, 1), dtype=tf.int64)
    return tf.cond(count > 0, lambda: tf.gather(candidates,
                                                tf.gather(starts, query_index) + r),
                   lambda: uniform(query_index, seed))

  return sample


def bm25_top_docs(data: BeirPairs, depth: int, cache_dir: str) -> np.ndarray:
  """[Q, min(depth, N)] int64: each query's best BM25 documents (`xtr.data.bm25.Bm25` with its
  defaults) by corpus index, best first, -1 where a document matches no query token.

  Mined once, then read from `cache_dir/<key>.npy`; the key hashes the queries, the documents,
  `depth` and the BM25 settings, so changed data are mined afresh. The file's sha256 is kept
  beside it (`<key>.npy.sha256`): a cached file that does not match it, or that is not
  [Q, min(depth, N)] int64 in [-1, N), is mined again (a warning names it).
  """
  settings = {
      "bm25s": importlib.metadata.version("bm25s"),
      "k1": bm25.K1,
      "b": bm25.B,
      "depth": depth
  }
  key = hashlib.sha256(json.dumps([settings, data.queries, data.docs]).encode()).hexdigest()
  cache_dir = os.path.expanduser(cache_dir)
  path = os.path.join(cache_dir, f"{key}.npy")
  shape = (len(data.queries), min(depth, len(data.docs)))
  top = _cached(path, shape, len(data.docs))
  if top is None:
    top = _mine_bm25(data, depth)
    os.makedirs(cache_dir, exist_ok=True)
    # Unique temporaries and renames: hosts mining the same data at once write the same bytes.
    io.atomic_write(path, lambda f: np.save(f, top), unique=True)
    io.atomic_write(path + ".sha256", lambda f: f.write(io.sha256(path).encode()), unique=True)
  return top


def _cached(path: str, shape: tuple[int, int], num_docs: int) -> np.ndarray | None:
  """The BM25 ranks cached at `path` if they are as `bm25_top_docs` says, else None."""
  if not os.path.lexists(path):
    return None
  try:
    with io.open_regular(path + ".sha256") as f:
      recorded = f.read(64).decode("ascii", "replace")
    with io.open_regular(path) as f:
      if os.fstat(f.fileno()).st_size > 8 * shape[0] * shape[1] + 4096:
        raise ValueError("it is larger than its ranks")
      if io.digest(f) != recorded:
        raise ValueError("its sha256 is not the one recorded beside it")
      f.seek(0)
      top = np.load(f, allow_pickle=False)
    if top.dtype != np.int64 or top.shape != shape or (top.size and
                                                       (top.min() < -1 or top.max() >= num_docs)):
      raise ValueError(f"it holds {top.dtype} {top.shape}, not int64 {shape} in [-1, {num_docs})")
  except io.UnsafeFileError:
    raise  # Neither read nor replaced: a symlink or FIFO in the cache is not one of its files.
  except (OSError, ValueError, EOFError) as e:
    logging.warning("The cached BM25 ranks %s are damaged (%s): mining them again.", path, e)
    return None
  return top


def _mine_bm25(data: BeirPairs, depth: int) -> np.ndarray:
  index = bm25.Bm25([str(i) for i in range(len(data.docs))], data.docs)
  top, scores = index.top_k(data.queries, depth)
  return np.where(scores > 0, top, -1)


@gin.configurable
def to_triples(dataset: tf.data.Dataset, negative_sampler: NegativeSampler = uniform_negative,
               data_dir: str | None = None) -> tf.data.Dataset:
  """seqio preprocessor: pair indices of `pairs_dataset(data_dir=data_dir)` -> {"query",
  "positive", "negative"} ([] string each).

  The negative is drawn afresh for every example of every epoch, from seqio's per-example seeds
  (deterministic for the task's seed).
  """
  data = _pairs(data_dir)
  queries, docs = tf.constant(data.queries), tf.constant(data.docs)
  sample_negative = negative_sampler(data)

  @seqio.map_over_dataset(num_seeds=1)
  def triple(example: Mapping[str, tf.Tensor], seed: tf.Tensor) -> dict[str, tf.Tensor]:
    negative = sample_negative(example["query_index"], seed)
    return {
        "query": tf.gather(queries, example["query_index"]),
        "positive": tf.gather(docs, example["positive_index"]),
        "negative": tf.gather(docs, negative)
    }

  return triple(dataset)
