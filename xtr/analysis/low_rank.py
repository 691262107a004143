"""Low rank of alignments (Wu et al., 2024, §5.2.4 and §7.4): the singular values of A for each
query–document pair, normalized to unit Frobenius norm, and the relative error of the best
rank-1 approximation R (Eckart–Young: R = σ_1 u_1 v_1ᵀ), computed from them:

  ‖A − R‖_F / ‖A‖_F = sqrt(Σ_{k≥2} σ_k²) / sqrt(Σ_k σ_k²) = sqrt(Σ_{k≥2} σ̂_k²)

(the tail's sum, not sqrt(1 − σ̂_1²), which loses everything to rounding when A is near rank 1).
"""
import jax.numpy as jnp


def normalized_spectrum(a: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
  """a [..., n, m] -> (σ̂ [..., min(n, m)] descending with Σ σ̂² = 1, nonzero [...] bool);
  σ̂ = 0 where A = 0 (padding rows and columns of zeros do not change the spectrum)."""
  sigma = jnp.linalg.svd(a, compute_uv=False)
  norm = jnp.sqrt(jnp.sum(sigma**2, axis=-1, keepdims=True))
  nonzero = norm[..., 0] > 0
  return jnp.where(nonzero[..., None], sigma / jnp.where(norm > 0, norm, 1.0), 0.0), nonzero


def rank1_error(spectrum: jnp.ndarray) -> jnp.ndarray:
  """‖A − R‖_F / ‖A‖_F of the best rank-1 R, from a normalized spectrum [..., r] -> [...]."""
  return jnp.sqrt(jnp.sum(spectrum[..., 1:]**2, axis=-1))
