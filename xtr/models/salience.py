"""ALIGNER's unary salience (Qian et al., 2022, §3.2): how much each token of a text matters.

  u_i = λ_i · ReLU(w·v_i + b)                                                    (eq. 3)

v_i is the token vector, (w, b) the salience head of its role (queries and documents have their
own, `xtr_encoder.XTREncoder` holds both) and λ a gate that makes u sparse. The gate `variant`:

  entropy_lp  (default, ALIGNER) λ = `top_k.entropy_topk` of the head's outputs s: the
              entropy-regularized top-k of eq. 4 with k = ⌈α·m⌉ over the m valid tokens,
              solved by the updates of eq. 5; differentiable.
  relu        λ = 1: no sparsity (Figure 6's "ReLU").
  hard        λ = the 0/1 top-⌈α·m⌉ mask of s (Figure 6's "Hard": eq. 4 without entropy), by
              stop-gradient: the selection is a constant in the backward pass, so gradients reach
              the selected tokens' s only.
  l1          λ = 1, and the loss adds `l1` × the mean u of the valid tokens (ColBERTer-style
              pruning by an L1 penalty, which ALIGNER's related work describes).

At search time u ranks tokens for pruning (keep the top β·m; `prune`), and weights the alignment
(A = Ã ⊙ (u^q ⊗ u^d), `alignment.sparse_alignment_scores`).
"""
import dataclasses

import gin
import jax
import jax.numpy as jnp
import numpy as np

from xtr.models import top_k

VARIANTS = ("entropy_lp", "relu", "hard", "l1")
ROLES = ("query", "document")


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Salience:
  """The salience gate of both roles (ALIGNER trains α^q = 0.5, α^d = 0.4, ε = 0.002).

  Attributes:
    variant: one of VARIANTS (module docstring).
    alpha_q, alpha_d: sparsity ratios α of the query and document gates: k = ⌈α·m⌉ of the m
      valid tokens (entropy_lp, hard).
    epsilon: ε of eq. 4 (entropy_lp).
    num_iters: updates of eq. 5 (entropy_lp).
    l1: coefficient of the L1 penalty (variant "l1" only).
  """
  variant: str = "entropy_lp"
  alpha_q: float = 0.5
  alpha_d: float = 0.4
  epsilon: float = 0.002
  num_iters: int = 100
  l1: float = 0.0

  def __post_init__(self):
    if self.variant not in VARIANTS:
      raise ValueError(f"Salience.variant must be one of {VARIANTS}, got {self.variant!r}")
    for name in ("alpha_q", "alpha_d"):
      if not 0 < getattr(self, name) <= 1:
        raise ValueError(f"Salience.{name} must be in (0, 1], got {getattr(self, name)}")
    if self.epsilon <= 0 or self.num_iters < 1:
      raise ValueError(f"Salience needs epsilon > 0 and num_iters >= 1, got {self.epsilon} and "
                       f"{self.num_iters}")
    if self.l1 < 0 or (self.l1 > 0) != (self.variant == "l1"):
      raise ValueError(f"Salience.l1 = {self.l1}: a positive coefficient goes with variant 'l1' "
                       f"(and only with it), got variant {self.variant!r}")

  def gate(self, s: jax.Array, mask: jax.Array, role: str) -> jax.Array:
    """u of eq. 3 from the head's outputs s = ReLU(w·v + b).

    Args:
      s: [N, L] float32 head outputs; mask: [N, L] bool valid tokens.
      role: "query" (α^q) or "document" (α^d).

    Returns:
      [N, L] float32 u, 0 on padding.
    """
    if role not in ROLES:
      raise ValueError(f"role must be one of {ROLES}, got {role!r}")
    s = jnp.where(mask, s, 0.0)
    if self.variant in ("relu", "l1"):
      return s
    alpha = {"query": self.alpha_q, "document": self.alpha_d}[role]
    k = budget(alpha, jnp.sum(mask, axis=-1))
    if self.variant == "entropy_lp":
      return top_k.entropy_topk(s, mask, k, self.epsilon, self.num_iters) * s
    selected = top_k.top_mask(jax.lax.stop_gradient(s), mask, k.astype(jnp.int32), s.shape[-1])
    return jnp.where(selected, s, 0.0)


def budget(ratio: float, lengths) -> jax.Array:
  """⌈ratio·m⌉ (as floats) for texts of m valid tokens (an int or an array), robust to ratio·m
  landing just above an integer in floating point (0.7·10 = 7.000000000000001); at least one
  token of a text that has any, however small the ratio (β = 1e-5 kept nothing)."""
  lengths = jnp.asarray(lengths, jnp.float32)
  return jnp.maximum(jnp.ceil(ratio * lengths - 1e-4), jnp.minimum(lengths, 1.0))


def kept(u: np.ndarray, beta: float) -> np.ndarray:
  """The tokens a text keeps when pruned to β of its length (ALIGNER §3.2, β^q and β^d).

  Args:
    u: [m] saliences of the text's m valid tokens.
    beta: β in (0, 1].

  Returns:
    [m] bool: the ⌈β·m⌉ tokens of highest u (ties to the earlier token).
  """
  keep = int(budget(beta, len(u)))
  order = np.argsort(-np.asarray(u, np.float64), kind="stable")
  mask = np.zeros(len(u), bool)
  mask[order[:keep]] = True
  return mask
