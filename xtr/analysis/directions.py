"""The two directions of alignment in relevance = Σ_ij S_ij A_ij (Wu et al., 2024, §3 and §6.3).

  q→d  each query token i picks document tokens: A is a sparse alignment of `xtr.scoring.alignment`
       (`Alignment.matrix`; ColBERT's sum of max is top-1 with Z = n, ALIGNER's top-k or top-p
       with saliences), scored by `alignment.normalized_sum`.
  d→q  each valid document token j spreads one unit of alignment over the valid query tokens:
       A_ij = softmax_i(S_ij / τ) (the paper's "MVDR (q←d)", the cross-attention view of a
       generative retriever); relevance = Σ_ij S_ij A_ij, or that divided by the document's
       valid length m_c (`per_token`), since the sum grows with the document.

For term matching (`term_matching`) each direction has a hard and a soft alignment:
  q→d hard  1 at j = argmax_j S_ij (ties to the lower j)   q→d soft  softmax_j(S_ij / τ)
  d→q hard  1 at i = argmax_i S_ij (ties to the lower i)   d→q soft  softmax_i(S_ij / τ)

Shapes follow `xtr.scoring.functions`: token scores s [B, n, C, m] for B queries of n tokens and C
documents of m tokens; q_mask [B, n], d_mask [C, m] bool. Every A is 0 where a query or document
token is padding.
"""
import jax
import jax.numpy as jnp

KINDS = ("q→d hard", "q→d soft", "d→q hard", "d→q soft")


def _valid(q_mask: jax.Array, d_mask: jax.Array) -> jax.Array:
  """[B, n, C, m] bool: both tokens of a pair are valid."""
  return q_mask[:, :, None, None] & d_mask[None, None]


def _softmax(s: jax.Array, valid: jax.Array, axis: int, temperature: float) -> jax.Array:
  """softmax(s / τ) over the valid entries along `axis`; 0 elsewhere (and where none is valid)."""
  logits = jnp.where(valid, s / temperature, -jnp.inf)
  peak = jnp.max(logits, axis=axis, keepdims=True)
  e = jnp.where(valid, jnp.exp(logits - jnp.where(jnp.isfinite(peak), peak, 0.0)), 0.0)
  return e / jnp.maximum(jnp.sum(e, axis=axis, keepdims=True), 1e-30)


def _argmax_mask(s: jax.Array, valid: jax.Array, axis: int) -> jax.Array:
  """1 at the highest valid entry along `axis` (ties to the lower index), 0 elsewhere."""
  best = jnp.argmax(jnp.where(valid, s, -jnp.inf), axis=axis, keepdims=True)
  index = jax.lax.broadcasted_iota(jnp.int32, s.shape, axis)
  return ((index == best) & valid).astype(jnp.float32)


def document_to_query(s: jax.Array, q_mask: jax.Array, d_mask: jax.Array,
                      temperature: float) -> jax.Array:
  """The d→q alignment A_ij = softmax_i(S_ij / τ) -> [B, n, C, m]; each valid column sums to 1."""
  return _softmax(s, _valid(q_mask, d_mask), 1, temperature)


def document_to_query_scores(s: jax.Array, q_mask: jax.Array, d_mask: jax.Array, temperature: float,
                             per_token: bool) -> jax.Array:
  """d→q relevance [B, C]: Σ_ij S_ij A_ij, divided by m_c if `per_token`."""
  total = jnp.sum(s * document_to_query(s, q_mask, d_mask, temperature), axis=(1, 3))
  if per_token:
    total = total / jnp.maximum(jnp.sum(d_mask, axis=-1), 1)[None]
  return total


def term_alignments(s: jax.Array, q_mask: jax.Array, d_mask: jax.Array,
                    temperature: float) -> dict[str, jax.Array]:
  """The hard and soft alignments of both directions (module docstring): {kind: [B, n, C, m]}."""
  valid = _valid(q_mask, d_mask)
  return {
      "q→d hard": _argmax_mask(s, valid, 3),
      "q→d soft": _softmax(s, valid, 3, temperature),
      "d→q hard": _argmax_mask(s, valid, 1),
      "d→q soft": _softmax(s, valid, 1, temperature)
  }
