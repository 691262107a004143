"""Exact (brute-force) token search in JAX: a running top-k over blocks of document tokens."""
from collections.abc import Iterator
from collections.abc import Sequence
import functools

import jax
import jax.numpy as jnp
import numpy as np

_TOKEN_BLOCK = 16384  # document tokens scored per step
_QUERY_BLOCK = 1024  # query tokens per step


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
  """[Q, D] -> blocks of at most _QUERY_BLOCK rows, zero-padded to a power-of-2 size (few
  distinct shapes to compile)."""
  size = min(_QUERY_BLOCK, _next_power_of_2(len(queries)))
  padded = np.zeros((-(-len(queries) // size) * size, queries.shape[1]), np.float32)
  padded[:len(queries)] = queries
  return [jnp.asarray(padded[i:i + size]) for i in range(0, len(padded), size)]


def _token_blocks(chunks: Sequence[np.ndarray],
                  size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
  """Yields (vectors [size, D], token index [size] int32) over the tokens of `chunks` ([T_c, D]
  each) in order, across chunk boundaries; the last block is padded with zero vectors of token
  index -1."""
  vectors, filled, offset = [], 0, 0
  for chunk_vectors in chunks:
    start = 0
    while start < len(chunk_vectors):
      take = min(size - filled, len(chunk_vectors) - start)
      vectors.append(chunk_vectors[start:start + take])
      filled, start = filled + take, start + take
      if filled == size:
        yield np.concatenate(vectors), np.arange(offset, offset + size, dtype=np.int32)
        vectors, filled, offset = [], 0, offset + size
  if filled:
    vectors.append(np.zeros((size - filled, chunks[0].shape[1]), chunks[0].dtype))
    tokens = np.arange(offset, offset + size, dtype=np.int32)
    yield np.concatenate(vectors), np.where(np.arange(size) < filled, tokens, -1)


def search(chunks: Sequence[np.ndarray], queries: np.ndarray,
           k: int) -> tuple[np.ndarray, np.ndarray]:
  """The exact top-k document tokens of each query token.

  Args:
    chunks: the token vectors [T_c, D] of each chunk, in token order (T tokens in all).
    queries: [Q, D] float32.
    k: tokens to keep per query token.

  Returns:
    (scores [Q, k] float32, token index [Q, k] int64), -inf / -1 where fewer than k tokens.
  """
  num_tokens = sum(len(c) for c in chunks)
  blocks = _query_blocks(queries)
  top = [(jnp.full((len(b), k), -jnp.inf), jnp.full((len(b), k), -1, jnp.int32)) for b in blocks]
  for vectors, tokens in _token_blocks(chunks, min(_TOKEN_BLOCK, _next_power_of_2(num_tokens))):
    vectors, tokens = jnp.asarray(vectors), jnp.asarray(tokens)
    top = [_merge_block(*state, b, vectors, tokens, k=k) for state, b in zip(top, blocks)]
  scores = np.concatenate([np.asarray(s) for s, _ in top])[:len(queries)]
  return scores, np.concatenate([np.asarray(t) for _, t in top])[:len(queries)].astype(np.int64)
