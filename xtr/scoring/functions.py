"""Multi-vector scoring functions of XTR (Lee et al., 2023) and ColBERT, on token vectors.

Shapes: B queries of n tokens, C documents of m tokens (every document of the global batch,
positives and negatives), D the token embedding size. Token embeddings are L2-normalized; padding
tokens are marked False in `q_mask` [B, n] / `d_mask` [C, m].

- `f_colbert` (eq. 1): (1/n) sum_i max_j q_i.d_j over all tokens of each document.
- `f_xtr` (eq. 2): the same sum over only the tokens retrieved by in-batch token retrieval: each
  query token retrieves its top-k_train tokens among all C*m document tokens of the batch
  (A_ij = 1), and f_xtr(Q, D) = (1/Z) sum_i max_j A_ij q_i.d_j with Z the number of query tokens
  that retrieved at least one token of D.

Both are built from `token_scores` [B, n, C, m], which the training objective computes once and
shares with `retrieval_mask` and its metrics (`xtr.training.losses`); search and analysis score
with the same functions.
"""
import jax
import jax.numpy as jnp


def token_scores(q: jax.Array, d: jax.Array) -> jax.Array:
  """All query-token x document-token similarities q_i.d_j, in float32.

  Args:
    q: [B, n, D] query token embeddings (any float dtype).
    d: [C, m, D] document token embeddings.

  Returns:
    [B, n, C, m] float32 scores.
  """
  return jnp.einsum("bnd,cmd->bncm", q.astype(jnp.float32), d.astype(jnp.float32),
                    precision=jax.lax.Precision.HIGHEST)


def retrieval_mask(scores: jax.Array, q_mask: jax.Array, d_mask: jax.Array, k_train: int,
                   excluded: jax.Array | None = None) -> jax.Array:
  """In-batch token retrieval: A_ij of eq. 2.

  Each valid query token retrieves exactly min(k_train, C*m) entries of the flattened [C*m] token
  scores: lax.top_k breaks ties towards the lower flat index, and its indices are scattered back
  into a mask. (Thresholding at the k-th value would be cheaper but retrieves more than k_train
  tokens on ties, e.g. duplicated documents in a batch.) Padding document tokens score -inf so they
  are only reached when k_train exceeds the number of valid tokens, and are then masked out.
  The mask is a constant for autodiff: selection is not differentiated. Documents `excluded`
  for a query (its in-batch false negatives: copies of its positive) are left out like padding,
  so that they take none of its k_train slots.

  Args:
    scores: [B, n, C, m] float32 token scores (`token_scores`).
    q_mask: [B, n] bool, True for valid query tokens.
    d_mask: [C, m] bool, True for valid document tokens.
    k_train: number of document tokens each query token retrieves (static).
    excluded: [B, C] bool, True where query b retrieves nothing of document c (None: none).

  Returns:
    [B, n, C, m] bool, True where query token (b, i) retrieved token j of document c; all False for
    padding query tokens.
  """
  b, n, c, m = scores.shape
  valid = jnp.broadcast_to(d_mask, (b, 1, c, m))
  if excluded is not None:
    valid = valid & ~excluded[:, None, :, None]
  flat = jnp.where(valid, scores, -jnp.inf).reshape(b, n, c * m)
  _, top = jax.lax.top_k(jax.lax.stop_gradient(flat), min(k_train, c * m))  # [B, n, k]

  def scatter(indices: jax.Array) -> jax.Array:
    return jnp.zeros(c * m, dtype=bool).at[indices].set(True)

  retrieved = jax.vmap(jax.vmap(scatter))(top).reshape(b, n, c, m)
  return retrieved & valid & q_mask[:, :, None, None]


def f_colbert_from_token_scores(scores: jax.Array, q_mask: jax.Array,
                                d_mask: jax.Array) -> jax.Array:
  """Eq. 1 from precomputed token scores.

  Args:
    scores: [B, n, C, m] float32 token scores.
    q_mask: [B, n] bool.
    d_mask: [C, m] bool; every document needs at least one valid token (else it scores -inf).

  Returns:
    [B, C] float32: mean over valid query tokens of the max over valid document tokens.
  """
  total, count = f_colbert_parts(scores, q_mask, d_mask)
  return total / jnp.maximum(count, 1)


def f_colbert_parts(scores: jax.Array, q_mask: jax.Array,
                    d_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Eq. 1 as (sum over valid query tokens of their max [B, C], number of valid query tokens
  [B, C]): sums over any split of the query tokens add up to the whole's."""
  token_max = jnp.max(scores, axis=-1, where=d_mask, initial=-jnp.inf)  # [B, n, C]
  total = jnp.sum(jnp.where(q_mask[:, :, None], token_max, 0.0), axis=1)
  return total, jnp.broadcast_to(jnp.sum(q_mask, axis=1)[:, None], total.shape)


def f_xtr_from_token_scores(scores: jax.Array, retrieved: jax.Array,
                            d_mask: jax.Array) -> jax.Array:
  """Eq. 2 from precomputed token scores and retrieval mask.

  max_j A_ij q_i.d_j runs over the valid tokens of D, a non-retrieved token counting 0: a query
  token whose only retrieved tokens of D score below 0 contributes 0 unless it retrieved all of
  D's tokens. Query tokens that retrieved nothing of D contribute 0 and are left out of Z; a
  document nobody retrieved (Z = 0) scores 0 (Z is clipped to 1).

  Args:
    scores: [B, n, C, m] float32 token scores.
    retrieved: [B, n, C, m] bool, A of eq. 2 (`retrieval_mask`).
    d_mask: [C, m] bool.

  Returns:
    [B, C] float32 f_xtr scores; gradients flow through the retrieved token scores only.
  """
  total, hits = f_xtr_parts(scores, retrieved, d_mask)
  return total / jnp.maximum(hits, 1)


def f_xtr_parts(scores: jax.Array, retrieved: jax.Array,
                d_mask: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Eq. 2 as (its numerator [B, C], Z [B, C]: the query tokens that retrieved a token of D):
  sums over any split of the query tokens add up to the whole's."""
  kept = jnp.where(retrieved, scores, 0.0)
  token_max = jnp.max(kept, axis=-1, where=d_mask, initial=-jnp.inf)  # [B, n, C]
  hit = jnp.any(retrieved, axis=-1)  # [B, n, C]
  return jnp.sum(jnp.where(hit, token_max, 0.0), axis=1), jnp.sum(hit, axis=1)


def f_colbert(q: jax.Array, q_mask: jax.Array, d: jax.Array, d_mask: jax.Array) -> jax.Array:
  """f_ColBERT (eq. 1), sum-of-max over all document tokens.

  Args:
    q: [B, n, D] query token embeddings; q_mask: [B, n] bool.
    d: [C, m, D] document token embeddings; d_mask: [C, m] bool.

  Returns:
    [B, C] float32 scores.
  """
  return f_colbert_from_token_scores(token_scores(q, d), q_mask, d_mask)


def f_xtr(q: jax.Array, q_mask: jax.Array, d: jax.Array, d_mask: jax.Array,
          k_train: int) -> jax.Array:
  """f_XTR (eq. 2), sum-of-max over the tokens retrieved by in-batch top-k_train retrieval.

  Args:
    q: [B, n, D] query token embeddings; q_mask: [B, n] bool.
    d: [C, m, D] document token embeddings; d_mask: [C, m] bool.
    k_train: tokens retrieved per query token among all C*m batch tokens (static under jit).

  Returns:
    [B, C] float32 scores.
  """
  scores = token_scores(q, d)
  return f_xtr_from_token_scores(scores, retrieval_mask(scores, q_mask, d_mask, k_train), d_mask)
