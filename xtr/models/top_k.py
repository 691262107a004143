"""The two top-k selections of ALIGNER (Qian et al., 2022) over a masked row of scores: the hard
top-k mask, and the entropy-regularized top-k of eq. 4–5 (a differentiable relaxation). The
salience gate (`xtr.models.salience`) selects tokens with them, the pairwise alignment
(`xtr.scoring.alignment`) aligned tokens."""
import jax
import jax.numpy as jnp


def entropy_topk(s: jax.Array, mask: jax.Array, k: jax.Array | float, epsilon: float,
                 num_iters: int = 100) -> jax.Array:
  """λ of ALIGNER eq. 4: argmax_λ s·λ + ε H(λ) s.t. Σ λ = k, 0 ≤ λ ≤ 1, H(λ) = -Σ λ log λ.

  Over the valid entries only (λ = 0 on padding); k is clipped to their number. The solution is
  λ_i = min(1, exp((s_i + a) / ε)) with a such that Σ λ = k; it is found by the coordinate
  updates of eq. 5 (Appendix A.1), in log space:

    a ← ε ln k − ε ln Σ_i exp((s_i + b_i) / ε),   b_i ← min(−s_i − a, 0).

  Started from a and b = 0 as the paper says, they need thousands of iterations at ε = 0.002
  (each one moves a by about ε ln k); here they start from a = −s_(k) (minus the k-th largest
  valid score, where the ε → 0 solution puts it) and converge linearly: on 30 uniform scores
  with k = 12, |Σλ − k| is 2e-3 after 50 iterations, 3e-5 after 100 (the default) and 5e-9
  after 200, at ε = 0.002 and 0.05 alike, in float64 (float32 stops near 1e-5;
  tests/test_alignment.py). Gradients flow through the unrolled iterations.

  Args:
    s: [..., m] float scores.
    mask: [..., m] bool, the valid entries (broadcastable to s).
    k: [...] or a scalar: the budget Σ λ (e.g. ⌈α·m⌉).
    epsilon: ε > 0; as ε → 0, λ tends to the top-k mask.
    num_iters: coordinate updates (each updates a, then b).

  Returns:
    [..., m] λ (float32, or float64 for float64 s).
  """
  s = jnp.asarray(s)
  s = s.astype(jnp.promote_types(s.dtype, jnp.float32))
  mask = jnp.broadcast_to(mask, s.shape)
  num_valid = jnp.sum(mask, axis=-1)
  k = jnp.clip(jnp.broadcast_to(jnp.asarray(k, s.dtype), num_valid.shape), 0, num_valid)
  descending = -jnp.sort(jnp.where(mask, -s, jnp.inf), axis=-1)  # padding last, as -inf
  kth = jnp.clip(jnp.ceil(k).astype(jnp.int32) - 1, 0, s.shape[-1] - 1)
  a = -jnp.take_along_axis(descending, kth[..., None], axis=-1)[..., 0]
  a = jnp.where(jnp.isfinite(a), a, 0.0)  # rows without valid entries
  b = jnp.minimum(-s - a[..., None], 0.0)
  log_k = jnp.log(jnp.maximum(k, 1e-30))

  def update(_, ab):
    _, b = ab
    logits = jnp.where(mask, (s + b) / epsilon, -jnp.inf)
    log_sum = jax.nn.logsumexp(logits, axis=-1)
    a = epsilon * (log_k - jnp.where(jnp.isfinite(log_sum), log_sum, 0.0))
    return a, jnp.minimum(-s - a[..., None], 0.0)

  a, b = jax.lax.fori_loop(0, num_iters, update, (a, b))
  lam = jnp.exp(jnp.minimum(s + a[..., None] + b, 0.0) / epsilon)
  return jnp.where(mask & (k[..., None] > 0), lam, 0.0)


def top_mask(s: jax.Array, mask: jax.Array, k: jax.Array, max_k: int) -> jax.Array:
  """[..., m] bool: the k (per row, [...]) highest valid entries of each row of s; ties go to
  the lower index.

  One `lax.top_k` of the static bound max_k >= k (not a sort of every row: ALIGNER's
  strategies keep a few tokens of a row), spread back over the row by a one-hot sum; memory
  O(max_k · size of s).
  """
  max_k = max(1, min(max_k, s.shape[-1]))
  values, index = jax.lax.top_k(jnp.where(mask, s, -jnp.inf), max_k)  # lower index first on ties
  keep = (jnp.arange(max_k) < k[..., None]) & (values > -jnp.inf)
  return jnp.any(jax.nn.one_hot(index, s.shape[-1], dtype=bool) & keep[..., None], axis=-2)
