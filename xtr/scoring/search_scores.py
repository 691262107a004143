"""Document scoring for retrieval: f_XTR' over retrieved tokens (eq. 4) and the f_ColBERT baselines.

XTR (Lee et al., 2023) scores documents from the token retrieval results alone. Each of the n
query tokens retrieves its top-k' document tokens from the whole corpus; a document D is a
candidate if any of its tokens was retrieved, and

  f_xtr_prime(Q, D) = (1/n) sum_i max_j [A_ij q_i.d_j + (1 - A_ij) m_i]

where A_ij = 1 if query token i retrieved token j of D, and m_i is the similarity imputed for
query tokens that retrieved nothing of D (by default query token i's k'-th retrieval score, an
upper bound of its true max on D). The T5-ColBERT baseline instead reranks candidates with the
exact sum-of-max over all their tokens (`colbert_rerank` by `xtr.scoring.functions.f_colbert`;
`exact_maxsim`), and ALIGNER refines them with its sparse alignment and saliences
(`alignment_rerank`).
"""
import functools
from typing import Sequence
from typing import Tuple
from typing import Union

import jax
import jax.numpy as jnp
import numpy as np

from xtr.scoring import alignment as alignment_lib
from xtr.scoring import functions

Impute = Union[str, float]

IMPUTE_MODES = ("top_k_prime", "zero", "none")


def _imputed_scores(token_scores: np.ndarray, valid: np.ndarray, impute: Impute) -> np.ndarray:
  """m_i of eq. 4 for every query token.

  Args:
    token_scores: [n, k'] float32 retrieval scores, sorted descending per row.
    valid: [n, k'] bool, True for real retrieved tokens (a prefix of each row).
    impute: "top_k_prime" or "zero" (a constant and "none" never call this).

  Returns:
    [n] float32. For "top_k_prime", each row's last valid score: the k'-th score (or the last
    one if the index had fewer than k' tokens); 0 for a row without valid entries.
  """
  n = len(token_scores)
  if impute == "top_k_prime":
    last = valid.sum(axis=1) - 1
    return np.where(last >= 0, token_scores[np.arange(n), np.maximum(last, 0)],
                    0.0).astype(np.float32)
  if impute == "zero":
    return np.zeros(n, np.float32)
  raise ValueError(f"impute must be one of {IMPUTE_MODES} or a float, got {impute!r}.")


def _run_starts(*keys: np.ndarray) -> np.ndarray:
  """Sorted keys [M] (several: sorted as tuples) -> indices where a run of equal keys starts."""
  if not len(keys[0]):
    return np.zeros(0, int)
  changes = functools.reduce(np.logical_or, [x[1:] != x[:-1] for x in keys])
  return np.flatnonzero(np.concatenate([[True], changes]))


def _by_document(docs: np.ndarray) -> np.ndarray:
  """[M] int32 document indices >= 0 -> the stable order [M] that sorts them: numpy's stable
  sort of 16-bit keys is a radix sort, so the order is that of the low 16 bits, then, if any
  index is larger, of the high 16 (least significant digit first), in O(M)."""
  order = np.argsort(docs.astype(np.uint16), kind="stable")
  high = docs >> 16
  if high.any():
    order = order[np.argsort(high[order].astype(np.uint16), kind="stable")]
  return order


def f_xtr_prime(token_scores: np.ndarray, token_doc_ids: np.ndarray,
                query_mask: np.ndarray | None = None,
                impute: Impute = "top_k_prime") -> Tuple[np.ndarray, np.ndarray]:
  """f_XTR' (eq. 4) of every document retrieved by one query, in numpy on the host.

  Linear passes over the M = n·k' retrieved tokens (O(M) time and memory whatever the corpus
  size). Taken row by row (query token i, then rank), the tokens are ordered by document with a
  stable radix sort (`_by_document`), which keeps each document's tokens in (i, rank) order: a
  (document, i) run starts at its best rank, i.e. its max_j A_ij q_i.d_j, rows being sorted. A
  document's score sums, over its runs, the gain max - m_i on top of sum_i m_i (a constant m_i = c:
  its runs' maxima plus c per query token that missed it, which cannot cancel in float32).
  (SciFact-sized retrievals, 21 tokens × k' 1000, one thread: 0.37 ms with the top-k, against
  0.98 with a comparison sort of packed (document, token, rank) keys; see docs/performance.md.)

  Args:
    token_scores: [n, k'] retrieval scores of each query token, sorted descending per row.
    token_doc_ids: [n, k'] int, document index of each retrieved token; -1 = padding (the index
      had fewer than k' tokens), at the end of its row.
    query_mask: [n] bool, True for valid query tokens (None: all); padding query tokens
      retrieve nothing and do not count in n.
    impute: m_i for query tokens that retrieved no token of a document: "top_k_prime" (the
      k'-th, i.e. last valid, retrieval score of token i), "zero", a float constant, or "none"
      (no imputation: average only over the query tokens that retrieved the document).

  Returns:
    doc_ids: [C] int32, the C candidate documents in increasing order.
    scores: [C] float32 their f_XTR' scores.
  """
  scores, doc_ids = np.asarray(token_scores, np.float32), np.asarray(token_doc_ids)
  if query_mask is not None:
    scores, doc_ids = scores[query_mask], doc_ids[query_mask]
  n, k_prime = scores.shape
  valid = doc_ids >= 0
  flat = np.flatnonzero(valid)  # i·k' + rank of each retrieved token, ascending.
  docs = doc_ids.ravel()[flat]
  order = _by_document(docs)
  docs, flat = docs[order], flat[order]
  token = flat // k_prime
  pairs = _run_starts(docs, token)  # Each (document, token) run starts at its best rank.
  docs, token, pair_max = docs[pairs], token[pairs], scores.ravel()[flat[pairs]]
  starts = _run_starts(docs)
  candidates = docs[starts].astype(np.int32)
  if not len(candidates):
    return candidates, np.zeros(0, np.float32)
  hits = np.diff(np.append(starts, len(docs)))
  if impute == "none":
    return candidates, (np.add.reduceat(pair_max, starts) / hits).astype(np.float32)
  if isinstance(impute, str):  # m_i are similarities: sum_i m_i plus each hit's gain max - m_i.
    imputed = _imputed_scores(scores, valid, impute)
    total = imputed.sum() + np.add.reduceat(pair_max - imputed[token], starts)
  else:  # A constant, which may be far larger: added apart, it does not cancel in float32.
    total = np.add.reduceat(pair_max, starts) + (n - hits) * np.float32(impute)
  return candidates, (total / max(n, 1)).astype(np.float32)


@functools.partial(jax.jit, static_argnames=("impute", "top_k"))
def f_xtr_prime_top(token_scores: jax.Array, token_doc_ids: jax.Array, query_mask: jax.Array,
                    impute: Impute, top_k: int) -> tuple[jax.Array, jax.Array]:
  """`f_xtr_prime` then `top_candidates` of Q queries in XLA, for retrievals left on the device.

  The same algorithm with static shapes: a query's M = n·k' retrieved tokens sorted by
  (document, query token, rank), each (document, token) run's first entry is its max; runs are
  summed into per-document segments (at most M), whose top_k are returned.

  Args:
    token_scores: [Q, n, k'] float32, descending per row.
    token_doc_ids: [Q, n, k'] int32 document of each (-1 = none, at the end of its row).
    query_mask: [Q, n] bool, the query tokens that count (rows of the others are ignored).
    impute: as `f_xtr_prime`'s.
    top_k: documents returned per query.

  Returns:
    doc_ids [Q, top_k] int32 by decreasing score, ties to the lower doc id, -1 past the
    candidates; scores [Q, top_k] float32, -inf where doc_ids is -1.
  """
  one_query = functools.partial(_f_xtr_prime_top, impute=impute, top_k=top_k)
  return jax.vmap(one_query)(token_scores, token_doc_ids, query_mask)


def _f_xtr_prime_top(token_scores: jax.Array, token_doc_ids: jax.Array, query_mask: jax.Array,
                     impute: Impute, top_k: int) -> tuple[jax.Array, jax.Array]:
  """`f_xtr_prime_top` of one query: [n, k'] retrieval, [n] mask -> [top_k] docs and scores."""
  n, k_prime = token_scores.shape
  none = jnp.iinfo(jnp.int32).max  # Sorts after every document.
  valid = (token_doc_ids >= 0) & query_mask[:, None]
  docs = jnp.where(valid, token_doc_ids, none).ravel()
  token = jnp.broadcast_to(jnp.arange(n)[:, None], (n, k_prime)).ravel()
  rank = jnp.broadcast_to(jnp.arange(k_prime)[None], (n, k_prime)).ravel()
  docs, token, rank, scores = jax.lax.sort((docs, token, rank, token_scores.ravel()), num_keys=3)
  new_doc = jnp.concatenate([jnp.array([True]), docs[1:] != docs[:-1]])
  new_pair = new_doc | jnp.concatenate([jnp.array([True]), token[1:] != token[:-1]])
  first = new_pair & (docs != none)  # The best entry of each (document, query token).
  segment = jnp.cumsum(new_doc) - 1
  total = lambda x: jax.ops.segment_sum(x, segment, num_segments=n * k_prime)
  segment_doc = jnp.full(n * k_prime, none).at[segment].min(docs)
  hit_max, hits = total(jnp.where(first, scores, 0.0)), total(first.astype(jnp.float32))
  if impute == "none":
    doc_scores = hit_max / jnp.maximum(hits, 1)
  elif isinstance(impute, str):  # As `f_xtr_prime`: sum_i m_i plus each hit's gain.
    imputed = _imputed_scores_xla(token_scores, valid, impute) * query_mask
    gains = total(jnp.where(first, scores - imputed[token], 0.0))
    doc_scores = (imputed.sum() + gains) / jnp.maximum(query_mask.sum(), 1)
  else:  # A constant, added apart (`f_xtr_prime`).
    doc_scores = (hit_max + (query_mask.sum() - hits) * jnp.float32(impute)) / jnp.maximum(
        query_mask.sum(), 1)
  doc_scores = jnp.where(segment_doc != none, doc_scores, -jnp.inf)
  top_scores, where = jax.lax.top_k(doc_scores, min(top_k, n * k_prime))
  top_docs = jnp.where(top_scores > -jnp.inf, segment_doc[where], -1)
  missing = (0, top_k - top_scores.shape[0])
  return (jnp.pad(top_docs, missing,
                  constant_values=-1), jnp.pad(top_scores, missing, constant_values=-jnp.inf))


def _imputed_scores_xla(token_scores: jax.Array, valid: jax.Array, impute: Impute) -> jax.Array:
  """`_imputed_scores` in XLA: [n, k'] scores and validity -> m_i [n] float32."""
  if impute == "top_k_prime":
    last = valid.sum(axis=1) - 1
    return jnp.where(last >= 0,
                     jnp.take_along_axis(token_scores,
                                         jnp.maximum(last, 0)[:, None], axis=1)[:, 0], 0.0)
  if impute == "zero":
    return jnp.zeros(token_scores.shape[0], jnp.float32)
  raise ValueError(f"impute must be one of {IMPUTE_MODES} or a float, got {impute!r}.")


def top_candidates(doc_ids: np.ndarray, scores: np.ndarray,
                   k: int) -> Tuple[np.ndarray, np.ndarray]:
  """The k best of one query's M candidates (doc_ids [M] increasing, scores [M]).

  Returns:
    doc_ids: [k] int32 by decreasing score, ties to the earlier candidate (the lower doc id);
      -1 past the M candidates.
    scores: [k] float32, -inf where doc_ids is -1; a NaN score (only a damaged index's vectors
      give one) ranks first, where the caller sees it, rather than dropping candidates.
  """
  doc_ids, scores = np.asarray(doc_ids, np.int32), np.asarray(scores, np.float32)
  key = np.where(np.isnan(scores), np.inf, scores)
  kept = np.arange(len(scores))
  if len(scores) > k:  # Every candidate at least as good as the k-th, in doc id order.
    kept = np.flatnonzero(key >= np.partition(key, len(key) - k)[len(key) - k])
  order = kept[np.argsort(-key[kept], kind="stable")][:k]
  missing = k - len(order)
  return (np.pad(doc_ids[order], (0, missing),
                 constant_values=-1), np.pad(scores[order], (0, missing), constant_values=-np.inf))


_colbert = jax.jit(functions.f_colbert)


@functools.partial(jax.jit, static_argnames="alignment")
def aligner_scores(q: jax.Array, q_mask: jax.Array, u_q: jax.Array | None, d: jax.Array,
                   d_mask: jax.Array, u_d: jax.Array | None,
                   alignment: alignment_lib.Alignment) -> jax.Array:
  """ALIGNER's sim(Q, D) (eq. 1-2) of every query and document: q [B, n, D], q_mask [B, n],
  u_q [B, n] (None: 1), d [C, m, D], d_mask [C, m], u_d [C, m] (None: 1) -> [B, C] float32."""
  return alignment.from_token_scores(functions.token_scores(q, d), q_mask, d_mask, u_q, u_d)


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
  [docs_per_step, bucket(longest doc), D] with its mask, by `xtr.scoring.functions.f_colbert`.

  Args:
    q: [n, D] query token vectors; q_mask: [n] bool.
    doc_vectors: the candidates' token vectors, each [len_j, D] with len_j >= 1 (e.g. gathered by
      the index's `doc_vectors`).
    docs_per_step: static number of candidates scored per device call.

  Returns:
    [len(doc_vectors)] float32 scores, in the order of doc_vectors.
  """
  scores = [
      np.asarray(_colbert(q[None], q_mask[None], d, d_mask))[0, :num]
      for num, d, d_mask, _ in _padded_blocks(doc_vectors, None, docs_per_step)
  ]
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
  scores = [
      np.asarray(aligner_scores(q[None], q_mask[None], u_q, d, d_mask, u_d, alignment))[0, :num]
      for num, d, d_mask, u_d in _padded_blocks(doc_vectors, doc_saliences, docs_per_step)
  ]
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
  blocks = [
      _exact_block(q[s:s + queries_per_step], q_mask[s:s + queries_per_step], doc_vectors, doc_mask,
                   k, docs_per_step) for s in range(0, len(q), queries_per_step)
  ]
  return (np.concatenate([b[0] for b in blocks]), np.concatenate([b[1] for b in blocks]))


def _exact_block(q: np.ndarray, q_mask: np.ndarray, doc_vectors: np.ndarray, doc_mask: np.ndarray,
                 k: int, docs_per_step: int) -> Tuple[np.ndarray, np.ndarray]:
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
    best_index, best_scores = _maxsim_merge(best_index, best_scores, q_tokens, q_of_token, q_length,
                                            d, d_mask, d_index, k)
  return np.asarray(best_index), np.asarray(best_scores)
