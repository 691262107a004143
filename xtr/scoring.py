"""Document scoring for retrieval: f_XTR' over retrieved tokens (eq. 4) and the f_ColBERT baselines.

XTR (Lee et al., 2023) scores documents from the token retrieval results alone. Each of the n
query tokens retrieves its top-k' document tokens from the whole corpus; a document D is a
candidate if any of its tokens was retrieved, and

  f_xtr_prime(Q, D) = (1/n) sum_i max_j [A_ij q_i.d_j + (1 - A_ij) m_i]

where A_ij = 1 if query token i retrieved token j of D, and m_i is the similarity imputed for
query tokens that retrieved nothing of D (by default query token i's k'-th retrieval score, an
upper bound of its true max on D). The T5-ColBERT baseline instead reranks candidates with the
exact sum-of-max over all their tokens (`colbert_rerank` by `xtr.losses.f_colbert`; `exact_maxsim`),
and ALIGNER refines them with its sparse alignment and saliences (`alignment_rerank`).
"""
import functools
from typing import Sequence, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from xtr import alignment as alignment_lib
from xtr import losses

Impute = Union[str, float]

_IMPUTE_MODES = ("top_k_prime", "zero", "none")
_NO_DOC = np.iinfo(np.int32).max  # Sort key of padding entries: after every real document.


def _imputed_scores(token_scores: jax.Array, valid: jax.Array, impute: Impute) -> jax.Array:
  """m_i of eq. 4 for every query token.

  Args:
    token_scores: [n, k'] float32 retrieval scores.
    valid: [n, k'] bool, True for real retrieved tokens of valid query tokens.
    impute: "top_k_prime", "zero" or a float constant ("none" never calls this).

  Returns:
    [n] float32. For "top_k_prime", the lowest valid score of each row: its last valid entry,
    rows being sorted, i.e. the k'-th score (or the last one if the index had fewer than k'
    tokens). A row without valid entries gets 0 (it only happens for padding query tokens,
    which are left out of the sum, and for an empty index, which has no candidates).
  """
  n = token_scores.shape[0]
  if impute == "top_k_prime":
    lowest = jnp.min(token_scores, axis=1, where=valid, initial=jnp.inf)
    return jnp.where(jnp.any(valid, axis=1), lowest, 0.0)
  if impute == "zero":
    return jnp.zeros(n, jnp.float32)
  if isinstance(impute, (int, float)) and not isinstance(impute, bool):
    return jnp.full(n, impute, jnp.float32)
  raise ValueError(f"impute must be one of {_IMPUTE_MODES} or a float, got {impute!r}.")


def _first_of_run(x: jax.Array) -> jax.Array:
  """[M] bool, True where x differs from its predecessor (always True at 0)."""
  return jnp.concatenate([jnp.ones(1, bool), x[1:] != x[:-1]])


@functools.partial(jax.jit, static_argnames=("impute",))
def f_xtr_prime(token_scores: jax.Array, token_doc_ids: jax.Array, query_mask: jax.Array,
                impute: Impute = "top_k_prime") -> Tuple[jax.Array, jax.Array]:
  """f_XTR' (eq. 4) of every document retrieved by one query.

  Sort-based segment reduction, O(M log M) time and O(M) memory for the M = n * k' retrieved
  (query token, document) pairs, independent of the corpus size. (A dense [n, M] scatter-max over
  the candidate documents would be O(n^2 k'): 41M floats per query for n = 32, k' = 40,000.)
    1. Stable-sort the flat positions of the pairs by document id; padding entries (document -1
       or padding query token) get the largest key and go last. Flat positions are token-major,
       so within a document the pairs are grouped by query token.
    2. segment_max over the (document, query token) runs gives max_j A_ij q_i.d_j (rows need not
       be sorted).
    3. segment_sum over the document runs of (max_i - m_i) and of the hit count; the score is
       (sum_i m_i + sum of gains) / n over valid query tokens, or for impute="none" the mean of
       the maxima over the query tokens that hit the document (f_XTR's Z instead of n).
  A single sort key with one int payload is the cheapest XLA sort here (about twice as fast on
  CPU as sorting by (document, token, score) keys); the segment ops are linear.

  Args:
    token_scores: [n, k'] retrieval scores of each query token, sorted descending per row.
    token_doc_ids: [n, k'] int, document index of each retrieved token; -1 = padding (the index
      had fewer than k' tokens).
    query_mask: [n] bool, True for valid query tokens; padding query tokens retrieve nothing and
      do not count in n.
    impute: static. m_i for query tokens that retrieved no token of a document: "top_k_prime"
      (the k'-th, i.e. last valid, retrieval score of token i), "zero", a float constant, or
      "none" (no imputation: average only over the query tokens that retrieved the document).

  Returns:
    doc_ids: [n * k'] int32, the candidate documents in increasing id order, then -1 padding.
    scores: [n * k'] float32 f_XTR' scores; -inf for padding.
  """
  n, k_prime = token_scores.shape
  size = n * k_prime
  scores = jnp.asarray(token_scores, jnp.float32)
  valid = (token_doc_ids >= 0) & query_mask[:, None]
  keys = jnp.where(valid, token_doc_ids, _NO_DOC).astype(jnp.int32).reshape(size)
  docs, positions = jax.lax.sort((keys, jnp.arange(size, dtype=jnp.int32)), num_keys=1,
                                 is_stable=True)
  tokens = positions // k_prime
  new_doc = _first_of_run(docs)
  new_pair = new_doc | _first_of_run(tokens)
  real = docs != _NO_DOC
  doc_segment = jnp.where(real, jnp.cumsum(new_doc) - 1, size)  # size: dropped by segment ops.
  pair_segment = jnp.where(real, jnp.cumsum(new_pair) - 1, size)
  pair_max = jax.ops.segment_max(scores.reshape(size)[positions], pair_segment, size,
                                 indices_are_sorted=True)[jnp.minimum(pair_segment, size - 1)]
  doc_sum = functools.partial(jax.ops.segment_sum, segment_ids=doc_segment, num_segments=size,
                              indices_are_sorted=True)
  hits = doc_sum(new_pair.astype(jnp.int32))
  if impute == "none":
    doc_scores = doc_sum(jnp.where(new_pair, pair_max, 0.0)) / jnp.maximum(hits, 1)
  else:
    imputed = _imputed_scores(scores, valid, impute)
    gains = doc_sum(jnp.where(new_pair, pair_max - imputed[tokens], 0.0))
    total = jnp.sum(jnp.where(query_mask, imputed, 0.0)) + gains
    doc_scores = total / jnp.maximum(jnp.sum(query_mask), 1)
  doc_ids = jnp.full(size, -1, jnp.int32).at[doc_segment].set(docs, mode="drop")
  return doc_ids, jnp.where(hits > 0, doc_scores, -jnp.inf)


def xtr_candidates(token_scores: np.ndarray, token_doc_ids: np.ndarray, impute: Impute
                   ) -> Tuple[jax.Array, jax.Array]:
  """`f_xtr_prime` of one query's n' retrieving tokens (token_scores, token_doc_ids [n', k']),
  padded to a multiple of 8 rows: few compiled shapes, and a short query sorts fewer entries
  than one padded to the encoder's query length."""
  rows = -(-max(len(token_scores), 1) // 8) * 8
  k_prime = token_scores.shape[1]
  scores = np.full((rows, k_prime), -np.inf, np.float32)
  doc_ids = np.full((rows, k_prime), -1, np.int32)
  scores[:len(token_scores)], doc_ids[:len(token_doc_ids)] = token_scores, token_doc_ids
  return f_xtr_prime(scores, doc_ids, np.arange(rows) < len(token_scores), impute)


@functools.partial(jax.jit, static_argnames=("impute",))
def f_xtr_prime_batch(token_scores: jax.Array, token_doc_ids: jax.Array, query_mask: jax.Array,
                      impute: Impute = "top_k_prime") -> Tuple[jax.Array, jax.Array]:
  """`f_xtr_prime` over a batch of queries.

  Args:
    token_scores: [Q, n, k'] float; token_doc_ids: [Q, n, k'] int; query_mask: [Q, n] bool.
    impute: static, as in `f_xtr_prime`.

  Returns:
    doc_ids: [Q, n * k'] int32 and scores: [Q, n * k'] float32, per query as in `f_xtr_prime`.
  """
  return jax.vmap(functools.partial(f_xtr_prime, impute=impute))(token_scores, token_doc_ids,
                                                                 query_mask)


@functools.partial(jax.jit, static_argnames=("k",))
def top_documents(doc_ids: jax.Array, scores: jax.Array, k: int) -> Tuple[jax.Array, jax.Array]:
  """The k best-scoring documents, padding (doc id < 0) excluded.

  Ties go to the earlier entry (the lower document id for `f_xtr_prime` outputs).

  Args:
    doc_ids: [..., M] int candidate documents, negative = padding.
    scores: [..., M] float scores.
    k: static number of documents to keep.

  Returns:
    doc_ids: [..., k] int32 by decreasing score, -1 where fewer than k candidates exist.
    scores: [..., k] float32, -inf where doc_ids is -1.
  """
  doc_ids = jnp.asarray(doc_ids, jnp.int32)
  scores = jnp.where(doc_ids >= 0, jnp.asarray(scores, jnp.float32), -jnp.inf)
  missing = max(k - doc_ids.shape[-1], 0)
  if missing:
    pad = [(0, 0)] * (doc_ids.ndim - 1) + [(0, missing)]
    doc_ids = jnp.pad(doc_ids, pad, constant_values=-1)
    scores = jnp.pad(scores, pad, constant_values=-jnp.inf)
  top_scores, top = jax.lax.top_k(scores, k)
  top_ids = jnp.take_along_axis(doc_ids, top, axis=-1)
  return jnp.where(top_ids >= 0, top_ids, -1), jnp.where(top_ids >= 0, top_scores, -jnp.inf)


def top_candidates(doc_ids: np.ndarray, scores: np.ndarray, k: int
                   ) -> Tuple[np.ndarray, np.ndarray]:
  """`top_documents` of one query's M candidates (doc_ids [M], scores [M]), padded to a
  power-of-two M: XLA compiles once per bucket instead of once per candidate count."""
  size = _bucket(len(doc_ids))
  padded_ids = np.full(size, -1, np.int32)
  padded_scores = np.full(size, -np.inf, np.float32)
  padded_ids[:len(doc_ids)], padded_scores[:len(scores)] = doc_ids, scores
  top_ids, top_scores = top_documents(padded_ids, padded_scores, k)
  return np.asarray(top_ids), np.asarray(top_scores)


_colbert = jax.jit(losses.f_colbert)


@functools.partial(jax.jit, static_argnames="alignment")
def _aligner(q, q_mask, u_q, d, d_mask, u_d, alignment):
  return alignment.from_token_scores(losses.token_scores(q, d), q_mask, d_mask, u_q, u_d)


def _bucket(length: int) -> int:
  """Next power of two >= length (at least 8): few distinct padded shapes, so few compilations."""
  return max(8, 1 << (max(length, 1) - 1).bit_length())


def _padded_blocks(doc_vectors: Sequence[np.ndarray], doc_saliences: Sequence[np.ndarray] | None,
                   docs_per_step: int):
  """Yields (number of docs, d [docs_per_step, bucket, D], d_mask, u_d or None) over blocks of
  candidates, each zero-padded to the power-of-two bucket of its longest document."""
  for start in range(0, len(doc_vectors), docs_per_step):
    block = doc_vectors[start:start + docs_per_step]
    length = _bucket(max(len(d) for d in block))
    d = np.zeros((docs_per_step, length, block[0].shape[-1]), block[0].dtype)
    d_mask = np.zeros((docs_per_step, length), bool)
    u_d = None if doc_saliences is None else np.zeros((docs_per_step, length), np.float32)
    for j, vectors in enumerate(block):
      d[j, :len(vectors)] = vectors
      d_mask[j, :len(vectors)] = True
      if u_d is not None:
        u_d[j, :len(vectors)] = doc_saliences[start + j]
    yield len(block), d, d_mask, u_d


def colbert_rerank(q: np.ndarray, q_mask: np.ndarray, doc_vectors: Sequence[np.ndarray],
                   docs_per_step: int = 64) -> np.ndarray:
  """Exact f_ColBERT (eq. 1) of candidate documents: ColBERT's rerank stage.

  The candidates are scored docs_per_step at a time, each block zero-padded to
  [docs_per_step, bucket(longest doc), D] with its mask, by `xtr.losses.f_colbert`.

  Args:
    q: [n, D] query token vectors; q_mask: [n] bool.
    doc_vectors: the candidates' token vectors, each [len_j, D] with len_j >= 1 (e.g. gathered by
      the index's `doc_vectors`).
    docs_per_step: static number of candidates scored per device call.

  Returns:
    [len(doc_vectors)] float32 scores, in the order of doc_vectors.
  """
  scores = [np.asarray(_colbert(q[None], q_mask[None], d, d_mask))[0, :num]
            for num, d, d_mask, _ in _padded_blocks(doc_vectors, None, docs_per_step)]
  return np.concatenate(scores) if scores else np.zeros(0, np.float32)


def alignment_rerank(q: np.ndarray, q_mask: np.ndarray, u_q: np.ndarray | None,
                     doc_vectors: Sequence[np.ndarray], doc_saliences: Sequence[np.ndarray] | None,
                     alignment: alignment_lib.Alignment, docs_per_step: int = 64) -> np.ndarray:
  """ALIGNER's refinement stage: sim(Q, D) (eq. 1–2) of candidate documents with all their tokens.

  Args:
    q: [n, D] query token vectors; q_mask: [n] bool; u_q: [n] query saliences (None: 1).
    doc_vectors: the candidates' token vectors, each [len_j, D], len_j >= 1.
    doc_saliences: their token saliences, each [len_j] (None: 1).
    alignment: the pairwise alignment and normalization.
    docs_per_step: static number of candidates scored per device call.

  Returns:
    [len(doc_vectors)] float32 scores, in the order of doc_vectors.
  """
  u_q = None if u_q is None else u_q[None]
  scores = [np.asarray(_aligner(q[None], q_mask[None], u_q, d, d_mask, u_d, alignment))[0, :num]
            for num, d, d_mask, u_d in _padded_blocks(doc_vectors, doc_saliences, docs_per_step)]
  return np.concatenate(scores) if scores else np.zeros(0, np.float32)


@functools.partial(jax.jit, static_argnames=("k",))
def _maxsim_merge(best_index: jax.Array, best_scores: jax.Array, q_tokens: jax.Array,
                  q_of_token: jax.Array, q_length: jax.Array, d: jax.Array, d_mask: jax.Array,
                  d_index: jax.Array, k: int) -> Tuple[jax.Array, jax.Array]:
  """Merges one chunk of documents into the running top-k of every query of a block.

  Args:
    best_index: [Q, k] int32 and best_scores: [Q, k] float32, the top-k so far.
    q_tokens: [T, D] the valid query tokens of the block's Q queries, concatenated.
    q_of_token: [T] int32 query of each token (Q for padding tokens).
    q_length: [Q] float32 valid tokens per query (at least 1).
    d: [c, m, D]; d_mask: [c, m] bool; d_index: [c] int32 corpus index, -1 for padding documents.
    k: static.

  Returns:
    The updated (best_index, best_scores).
  """
  token_scores = jnp.einsum("td,cmd->tcm", q_tokens, d, precision=jax.lax.Precision.HIGHEST)
  token_max = jnp.max(token_scores, axis=-1, where=d_mask[None], initial=-jnp.inf)  # [T, c]
  num_queries = best_index.shape[0]
  totals = jax.ops.segment_sum(token_max, q_of_token, num_segments=num_queries + 1)
  chunk_scores = jnp.where(d_index >= 0, totals[:num_queries] / q_length[:, None], -jnp.inf)
  scores = jnp.concatenate([best_scores, chunk_scores], axis=1)
  index = jnp.concatenate([best_index, jnp.broadcast_to(d_index, chunk_scores.shape)], axis=1)
  top_scores, top = jax.lax.top_k(scores, k)
  return jnp.take_along_axis(index, top, axis=1), top_scores


def exact_maxsim(q: np.ndarray, q_mask: np.ndarray, doc_vectors: np.ndarray, doc_mask: np.ndarray,
                 k: int, docs_per_step: int = 32,
                 query_tokens_per_step: int = 8192) -> Tuple[np.ndarray, np.ndarray]:
  """Exact f_ColBERT top-k over a whole (small) corpus: the upper bound of token retrieval.

  Queries go in blocks of at most `query_tokens_per_step` padded tokens; each block streams the
  corpus docs_per_step documents at a time, keeping a running top-k per query, and scores all of
  its valid query tokens against a chunk in one matmul (memory O(query_tokens_per_step *
  docs_per_step * m)). Ties go to the lower document index.

  Args:
    q: [Q, n, D] query token vectors; q_mask: [Q, n] bool.
    doc_vectors: [N, m, D] padded document token vectors; doc_mask: [N, m] bool.
    k: number of documents to return per query.
    docs_per_step: static number of documents scored per device call.
    query_tokens_per_step: bound on Q_block * n.

  Returns:
    doc_index: [Q, k] int32 corpus indices by decreasing score (-1 if k > N).
    scores: [Q, k] float32 f_ColBERT scores (-inf where doc_index is -1).
  """
  queries_per_step = max(1, query_tokens_per_step // q.shape[1])
  blocks = [_exact_block(q[s:s + queries_per_step], q_mask[s:s + queries_per_step], doc_vectors,
                         doc_mask, k, docs_per_step)
            for s in range(0, len(q), queries_per_step)]
  return (np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks]))


def _exact_block(q: np.ndarray, q_mask: np.ndarray, doc_vectors: np.ndarray,
                 doc_mask: np.ndarray, k: int, docs_per_step: int) -> Tuple[np.ndarray, np.ndarray]:
  """exact_maxsim of one block of queries (q [Q, n, D], q_mask [Q, n])."""
  num_queries, num_docs = q.shape[0], doc_vectors.shape[0]
  q_of_token = np.nonzero(q_mask)[0].astype(np.int32)
  padded = -(-max(len(q_of_token), 1) // 256) * 256  # Few distinct shapes to compile.
  q_tokens = np.zeros((padded, q.shape[-1]), np.float32)
  q_tokens[:len(q_of_token)] = q[q_mask]
  q_of_token = np.pad(q_of_token, (0, padded - len(q_of_token)), constant_values=num_queries)
  q_length = np.maximum(q_mask.sum(axis=1), 1).astype(np.float32)
  best_index = jnp.full((num_queries, k), -1, jnp.int32)
  best_scores = jnp.full((num_queries, k), -jnp.inf, jnp.float32)
  for start in range(0, num_docs, docs_per_step):
    d_index = np.arange(start, start + docs_per_step, dtype=np.int32)
    d_index[d_index >= num_docs] = -1
    d = doc_vectors[start:start + docs_per_step]
    d_mask = doc_mask[start:start + docs_per_step]
    missing = docs_per_step - d.shape[0]
    if missing:
      d = np.pad(d, [(0, missing), (0, 0), (0, 0)])
      d_mask = np.pad(d_mask, [(0, missing), (0, 0)])
    best_index, best_scores = _maxsim_merge(best_index, best_scores, q_tokens, q_of_token,
                                            q_length, d, d_mask, d_index, k)
  return np.asarray(best_index), np.asarray(best_scores)
