"""Multi-vector retrieval as sparse alignment (ALIGNER, Qian et al., 2022).

  sim(Q, D) = (1/Z) sum_ij S_ij A_ij,   S_ij = q_i.d_j                         (ALIGNER eq. 1)
  A = Ã ⊙ (u^q ⊗ u^d)                                                          (eq. 2)

Ã is the pairwise alignment of each query token with the valid tokens of one document: its
top-k (`top_k`), its top max(⌊p·m⌋, 1) with m the document's valid length (`top_p`), or the
differentiable alignment of Appendix A.2 (`differentiable`: each row the entropy-regularized
top-k of `top_k.entropy_topk`, row sums k). u^q [B, n] and u^d [C, m] are unary saliences (1 when
not given). Z is sum_ij A_ij (`normalize="alignment"`, ALIGNER) or the number of valid query tokens
(`"query"`, ColBERT's mean), floored at Z_FLOOR: top-1 with u = 1 and Z = n is
`functions.f_colbert`.

Shapes follow `xtr.scoring.functions`: B queries of n tokens, C documents of m tokens, D the token
size; token scores are [B, n, C, m], so every query is aligned with every document of a batch.
"""
import dataclasses
import math

import gin
import jax
import jax.numpy as jnp

from xtr.models import top_k
from xtr.scoring import functions

PAIRWISE = ("top_k", "top_p", "differentiable")
NORMALIZE = ("alignment", "query")
# Z is floored here: with sparse saliences a pair's aligned tokens may all have u ≈ 1e-35, and
# sim = (Σ S·A) / Z is then a ratio of vanishing numbers whose gradient (∝ 1/Z²) overflows
# float32 (measured: NaN within 20 steps of ALIGNER training at ε = 0.002). Floored, such a pair
# scores ≈ 0, as a pair with Z = 0 does; ALIGNER does not say how it handles Z → 0.
Z_FLOOR = 1e-3
# The largest k: JAX holds the per-row budgets of top_k in int32 (a larger k was an OverflowError
# after the index was loaded and the queries encoded). The bound of the tools' count flags too
# (`xtr.cli.MAX_COUNT`), kept here because scoring does not import the command-line tools.
MAX_K = 2**31 - 1


def pairwise_alignment(s: jax.Array, d_mask: jax.Array, pairwise: str = "top_k", k: int = 1,
                       p: float | None = None, epsilon: float = 0.002,
                       num_iters: int = 100) -> jax.Array:
  """Ã of each query token over the valid tokens of each document.

  Args:
    s: [B, n, C, m] token scores.
    d_mask: [C, m] bool.
    pairwise: "top_k" (k), "top_p" (max(⌊p·m_c⌋, 1) tokens of document c, m_c its valid
      length) or "differentiable" (Appendix A.2: `top_k.entropy_topk` of each row with budget k).
    k, p: the sparsity of each strategy; epsilon, num_iters: of "differentiable".

  Returns:
    [B, n, C, m] float32 in [0, 1] (0/1 for top_k and top_p), 0 on padding.
  """
  d_mask = jnp.broadcast_to(d_mask[None, None], s.shape)
  lengths = jnp.sum(d_mask, axis=-1)  # [B, n, C]
  if pairwise == "top_k":
    _check_k(pairwise, k)
    return top_k.top_mask(s, d_mask, jnp.full(lengths.shape, k), k).astype(jnp.float32)
  if pairwise == "top_p":
    if p is None or not 0 < p <= 1:
      raise ValueError(f"top_p alignment needs 0 < p <= 1, got {p}")
    # ⌊p·m⌋, robust to p·m landing just below an integer in float32 (0.015·200).
    budget = jnp.maximum(jnp.floor(p * lengths + 1e-4), 1).astype(jnp.int32)
    max_budget = max(math.floor(p * s.shape[-1] + 1e-4), 1)  # m <= padded m: no budget exceeds it
    return top_k.top_mask(s, d_mask, budget, max_budget).astype(jnp.float32)
  if pairwise == "differentiable":
    _check_k(pairwise, k)
    return top_k.entropy_topk(s, d_mask, k, epsilon, num_iters)
  raise ValueError(f"pairwise must be one of {PAIRWISE}, got {pairwise!r}")


def _check_k(pairwise: str, k: int) -> None:
  """Refuses a k of top_k or differentiable alignment outside [1, MAX_K]."""
  if k < 1:
    raise ValueError(f"{pairwise} alignment needs k >= 1, got {k}")
  if k > MAX_K:
    raise ValueError(f"{pairwise} alignment needs k <= {MAX_K:,} (the int32 bound of JAX's "
                     f"top-k), got {k}")


def sparse_alignment_scores(q: jax.Array, q_mask: jax.Array, d: jax.Array, d_mask: jax.Array, *,
                            pairwise: str = "top_k", k: int = 1, p: float | None = None,
                            u_q: jax.Array | None = None, u_d: jax.Array | None = None,
                            normalize: str = "alignment", epsilon: float = 0.002,
                            num_iters: int = 100) -> jax.Array:
  """sim(Q, D) of ALIGNER eq. 1–2 for every query and document of a batch.

  Args:
    q: [B, n, D] query token vectors; q_mask: [B, n] bool.
    d: [C, m, D] document token vectors; d_mask: [C, m] bool.
    pairwise, k, p, epsilon, num_iters: Ã (`pairwise_alignment`).
    u_q: [B, n] query token saliences; u_d: [C, m] document token saliences (None: 1).
    normalize: Z = Σ A ("alignment") or the number of valid query tokens ("query").

  Returns:
    [B, C] float32: Σ S·A / max(Z, Z_FLOOR); a pair whose alignment is all zero scores 0.
  """
  return scores_from_token_scores(functions.token_scores(q, d), q_mask, d_mask, u_q, u_d, pairwise,
                                  k, p, normalize, epsilon, num_iters)


def alignment_matrix(s: jax.Array, q_mask: jax.Array, d_mask: jax.Array, u_q: jax.Array | None,
                     u_d: jax.Array | None, pairwise: str, k: int, p: float | None, epsilon: float,
                     num_iters: int) -> jax.Array:
  """A = Ã ⊙ (u^q ⊗ u^d) of eq. 2 from the token scores s [B, n, C, m] -> [B, n, C, m] float32,
  0 on padding (arguments as `sparse_alignment_scores`)."""
  a = pairwise_alignment(s, d_mask, pairwise, k, p, epsilon, num_iters)
  a = a * q_mask[:, :, None, None]
  if u_q is not None:
    a = a * u_q.astype(jnp.float32)[:, :, None, None]
  if u_d is not None:
    a = a * u_d.astype(jnp.float32)[None, None]
  return a


def scores_from_token_scores(s: jax.Array, q_mask: jax.Array, d_mask: jax.Array,
                             u_q: jax.Array | None, u_d: jax.Array | None, pairwise: str, k: int,
                             p: float | None, normalize: str, epsilon: float,
                             num_iters: int) -> jax.Array:
  """`sparse_alignment_scores` from the token scores s [B, n, C, m] -> [B, C]."""
  if normalize not in NORMALIZE:
    raise ValueError(f"normalize must be one of {NORMALIZE}, got {normalize!r}")
  a = alignment_matrix(s, q_mask, d_mask, u_q, u_d, pairwise, k, p, epsilon, num_iters)
  return normalized_sum(s, a, q_mask, normalize)


def normalized_sum(s: jax.Array, a: jax.Array, q_mask: jax.Array, normalize: str) -> jax.Array:
  """sim [B, C] = Σ_ij S_ij A_ij / max(Z, Z_FLOOR) from s and a [B, n, C, m]; Z = Σ A
  ("alignment") or the number of valid query tokens ("query")."""
  total, z = normalized_parts(s, a, q_mask, normalize)
  return total / jnp.maximum(z, Z_FLOOR)


def normalized_parts(s: jax.Array, a: jax.Array, q_mask: jax.Array,
                     normalize: str) -> tuple[jax.Array, jax.Array]:
  """(Σ_ij S_ij A_ij [B, C], Z [B, C]) of `normalized_sum`: sums over any split of the query
  tokens add up to the whole's (A_ij depends on query token i's row alone)."""
  total = jnp.sum(s * a, axis=(1, 3))
  if normalize == "alignment":
    return total, jnp.sum(a, axis=(1, 3))
  return total, jnp.broadcast_to(jnp.sum(q_mask, axis=1, dtype=jnp.float32)[:, None], total.shape)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Alignment:
  """A sparse alignment strategy: what the trainer's "aligner" scoring and search use.

  Attributes: as `sparse_alignment_scores`. Written as text (`--alignment`, `parse`):
  "top_k:K", "top_p:P" or "differentiable:K".
  """
  pairwise: str = "top_k"
  k: int = 1
  p: float | None = None
  normalize: str = "alignment"
  epsilon: float = 0.002
  num_iters: int = 100

  def __post_init__(self):
    if self.pairwise not in PAIRWISE:
      raise ValueError(f"pairwise must be one of {PAIRWISE}, got {self.pairwise!r}")
    if self.pairwise == "top_p":
      if self.p is None or not 0 < self.p <= 1:
        raise ValueError(f"top_p alignment needs 0 < p <= 1, got {self.p}")
    else:
      _check_k(self.pairwise, self.k)
    if self.normalize not in NORMALIZE:
      raise ValueError(f"normalize must be one of {NORMALIZE}, got {self.normalize!r}")

  @classmethod
  def parse(cls, text: str, **settings) -> "Alignment":
    """"top_k:4", "top_p:0.015" or "differentiable:1", K in [1, MAX_K] (ValueError naming the
    text otherwise)."""
    name, _, value = text.partition(":")
    try:
      if name == "top_p":
        return cls("top_p", p=float(value), **settings)
      if name in ("top_k", "differentiable") and value.isdigit():
        return cls(name, k=int(value), **settings)
    except ValueError as e:  # gin appends "In call to configurable ..." lines: the first says it.
      raise ValueError(f"alignment {text!r}: {str(e).splitlines()[0]}") from None
    raise ValueError(f"alignment {text!r} does not parse: expected top_k:K (K >= 1), top_p:P "
                     "(0 < P <= 1) or differentiable:K")

  def __str__(self) -> str:
    """The text `parse` reads back to this alignment ("top_p:0.3", "top_p:0.3000001")."""
    if self.pairwise != "top_p":
      return f"{self.pairwise}:{self.k}"
    short = f"{self.p:g}"
    return f"top_p:{short if float(short) == self.p else repr(self.p)}"

  def from_token_scores(self, s: jax.Array, q_mask: jax.Array, d_mask: jax.Array,
                        u_q: jax.Array | None = None, u_d: jax.Array | None = None) -> jax.Array:
    """sim [B, C] from token scores s [B, n, C, m] (`scores_from_token_scores`)."""
    return scores_from_token_scores(s, q_mask, d_mask, u_q, u_d, self.pairwise, self.k, self.p,
                                    self.normalize, self.epsilon, self.num_iters)

  def parts_from_token_scores(self, s: jax.Array, q_mask: jax.Array, d_mask: jax.Array,
                              u_q: jax.Array | None = None,
                              u_d: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """(numerator [B, C], Z [B, C]) of `from_token_scores` (`normalized_parts`)."""
    return normalized_parts(s, self.matrix(s, q_mask, d_mask, u_q, u_d), q_mask, self.normalize)

  def matrix(self, s: jax.Array, q_mask: jax.Array, d_mask: jax.Array, u_q: jax.Array | None = None,
             u_d: jax.Array | None = None) -> jax.Array:
    """A [B, n, C, m] from token scores s [B, n, C, m] (`alignment_matrix`)."""
    return alignment_matrix(s, q_mask, d_mask, u_q, u_d, self.pairwise, self.k, self.p,
                            self.epsilon, self.num_iters)
