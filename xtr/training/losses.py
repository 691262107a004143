"""The in-batch training loss of XTR (Lee et al., 2023) and its metrics, on the [B, C] document
scores of `xtr.scoring.functions` (B queries, C documents of the global batch; n query tokens,
m document tokens)."""
import jax
import jax.numpy as jnp
import optax


def positive_token_hits(retrieved: jax.Array, q_mask: jax.Array,
                        positive_index: jax.Array) -> jax.Array:
  """Which valid query tokens retrieved at least one token of their positive document.

  Args:
    retrieved: [B, n, C, m] bool (`retrieval_mask`).
    q_mask: [B, n] bool.
    positive_index: [B] int, index in [0, C) of each query's positive document.

  Returns:
    [B, n] bool, False for padding query tokens.
  """
  positive = jnp.take_along_axis(retrieved, positive_index[:, None, None, None], axis=2)
  return jnp.any(positive, axis=(2, 3)) & q_mask


def in_batch_cross_entropy(scores: jax.Array, positive_index: jax.Array) -> jax.Array:
  """Softmax cross-entropy of each query's positive document over the raw scores of all C
  documents (a -inf score, e.g. a masked false negative, takes no probability).

  Args:
    scores: [B, C] f_colbert or f_xtr scores.
    positive_index: [B] int.

  Returns:
    [B] float32 losses; the training loss is their mean.
  """
  return optax.softmax_cross_entropy_with_integer_labels(scores.astype(jnp.float32), positive_index)


def distillation_kl(scores: jax.Array, teacher_scores: jax.Array) -> jax.Array:
  """KL(teacher ‖ student) of the in-batch softmax distributions over the C documents.

  Args:
    scores: [B, C] the student's scores (a -inf score takes no probability).
    teacher_scores: [B, C] the teacher's, -inf where the student's are; no gradient flows
      into them.

  Returns:
    [B] float32 Σ_c p_t(c) (log p_t(c) − log p_s(c)).
  """
  teacher_log_p = jax.nn.log_softmax(jax.lax.stop_gradient(teacher_scores.astype(jnp.float32)))
  log_p = jax.nn.log_softmax(scores.astype(jnp.float32))
  terms = jnp.exp(teacher_log_p) * (teacher_log_p - log_p)
  return jnp.sum(jnp.where(jnp.isfinite(teacher_scores), terms, 0.0), axis=-1)


def in_batch_accuracy(scores: jax.Array, positive_index: jax.Array) -> jax.Array:
  """Whether each query's positive scores strictly above every other document (ties fail).

  Args:
    scores: [B, C].
    positive_index: [B] int.

  Returns:
    [B] float32, 1.0 where the positive is ranked first.
  """
  positive = jnp.take_along_axis(scores, positive_index[:, None], axis=1)
  return (jnp.sum(scores >= positive, axis=1) == 1).astype(jnp.float32)
