"""ALIGNER's sparse alignment (xtr/scoring/alignment.py) against naive loops, scipy and
f_ColBERT."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

from xtr import cli
from xtr.models import top_k
from xtr.scoring import alignment
from xtr.scoring import functions

B, N, C, M, DIM = 2, 4, 3, 6, 8


def _batch(seed: int = 0):
  """Random unit token vectors with padding on both sides (query 1 has 2 valid tokens, document
  2 has 3), and positive saliences with a few zeros."""
  rng = np.random.default_rng(seed)
  unit = lambda *shape: (lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True))(rng.normal(
      size=shape)).astype(np.float32)
  q, d = unit(B, N, DIM), unit(C, M, DIM)
  q_mask = np.arange(N)[None] < np.array([[N], [2]])
  d_mask = np.arange(M)[None] < np.array([[M], [M], [3]])
  u_q = rng.uniform(0.1, 1.0, (B, N)).astype(np.float32) * (rng.uniform(size=(B, N)) > 0.2)
  u_d = rng.uniform(0.1, 1.0, (C, M)).astype(np.float32) * (rng.uniform(size=(C, M)) > 0.2)
  return q, q_mask, d, d_mask, u_q, u_d


def _dual_optimum(s: np.ndarray, k: float, epsilon: float) -> float:
  """max s·λ + ε H(λ) s.t. Σλ = k, 0 ≤ λ ≤ 1, as min over a of the Lagrangian dual
  g(a) = a k + Σ_i max_{0≤λ≤1} ((s_i − a) λ − ε λ log λ), by scipy."""

  def h(t):  # the inner max: λ = min(1, exp(t/ε − 1))
    inside = t / epsilon - 1 < 0
    return np.where(inside, epsilon * np.exp(np.minimum(t / epsilon - 1, 0)), t)

  dual = lambda a: a * k + np.sum(h(s - a))
  result = scipy.optimize.minimize_scalar(dual, bounds=(s.min() - 50, s.max() + 50),
                                          method="bounded", options={"xatol": 1e-12})
  return result.fun


@pytest.mark.parametrize("epsilon", [0.002, 0.05, 0.5])
def test_entropy_topk_meets_its_constraints_and_the_dual_optimum(epsilon):
  rng = np.random.default_rng(1)
  s = rng.uniform(0, 1, (5, 30))
  mask = np.arange(30)[None] < np.array([[30], [30], [17], [5], [1]])
  k = np.ceil(0.4 * mask.sum(-1))
  with jax.enable_x64(True):
    lam = np.asarray(top_k.entropy_topk(jnp.asarray(s), mask, jnp.asarray(k), epsilon))
  np.testing.assert_allclose(lam.sum(-1), k, atol=1e-3)
  assert lam.min() >= 0 and lam.max() <= 1 + 1e-9 and np.all(lam[~mask] == 0)
  for row, row_mask, row_k, row_lam in zip(s, mask, k, lam):
    valid = row_lam[row_mask]
    entropy = -np.sum(valid * np.log(np.maximum(valid, 1e-300)))
    primal = row[row_mask] @ valid + epsilon * entropy
    assert primal == pytest.approx(_dual_optimum(row[row_mask], row_k, epsilon), abs=1e-4)


@pytest.mark.parametrize("epsilon", [0.002, 0.05])
def test_entropy_topk_converges_linearly_in_its_iterations(epsilon):
  """The docstring's case: 30 uniform scores, k = 12; |Σλ − k| by iterations in float64 (five
  draws), and within 1e-4 after the default 100 in float32, as training runs it."""
  scores = np.random.default_rng(0).uniform(0, 1, (5, 30))
  mask = np.ones_like(scores, bool)
  error = lambda s, iters: np.abs(
      np.asarray(top_k.entropy_topk(jnp.asarray(s), mask, 12, epsilon, iters)).sum(-1) - 12).max()
  with jax.enable_x64(True):
    errors = [error(scores, iters) for iters in (50, 100, 200)]
  assert errors[0] < 1e-2 and errors[1] < 1e-4 and errors[2] < 1e-7, errors
  assert error(scores.astype(np.float32), 100) < 1e-4


def test_entropy_topk_tends_to_the_top_k_mask():
  rng = np.random.default_rng(2)
  s = rng.permutation(np.linspace(0, 1, 40)).reshape(2, 20).astype(np.float32)  # gaps ≥ 0.025
  mask = np.ones_like(s, bool)
  lam = top_k.entropy_topk(s, mask, 5, epsilon=1e-4)
  top = np.argsort(-s, axis=-1)[:, :5]
  expected = np.zeros_like(s)
  np.put_along_axis(expected, top, 1.0, axis=-1)
  np.testing.assert_allclose(lam, expected, atol=1e-3)


def test_entropy_topk_gradients_match_finite_differences():
  rng = np.random.default_rng(3)
  s = rng.uniform(0, 1, (3, 9))
  mask = np.arange(9)[None] < np.array([[9], [6], [4]])
  weights = rng.normal(size=(3, 9))
  with jax.enable_x64(True):
    f = jax.jit(lambda x: jnp.sum(top_k.entropy_topk(x, mask, 3, epsilon=0.1) * weights))
    grad = np.asarray(jax.grad(f)(jnp.asarray(s)))
    h = 1e-6
    for index in np.ndindex(s.shape):
      step = np.zeros_like(s)
      step[index] = h
      numeric = (float(f(jnp.asarray(s + step))) - float(f(jnp.asarray(s - step)))) / (2 * h)
      assert grad[index] == pytest.approx(numeric, abs=1e-6), index
  assert np.all(grad[~mask] == 0) and np.abs(grad[mask]).max() > 0.1


def _naive_alignment(s: np.ndarray, d_mask: np.ndarray, pairwise: str, k: int, p) -> np.ndarray:
  """Ã by loops: the valid tokens of each (query token, document) row sorted by score."""
  a = np.zeros_like(s)
  for b, i, c in np.ndindex(s.shape[0], s.shape[1], s.shape[2]):
    valid = [j for j in range(s.shape[3]) if d_mask[c, j]]
    ranked = sorted(valid, key=lambda j: (-s[b, i, c, j], j))
    budget = k if pairwise == "top_k" else max(int(np.floor(p * len(valid))), 1)
    for j in ranked[:budget]:
      a[b, i, c, j] = 1.0
  return a


def _naive_scores(q, q_mask, d, d_mask, a, u_q, u_d, normalize):
  """sim(Q, D) of eq. 1–2 by loops over a fixed Ã (differentiable in q, d, u_q, u_d)."""
  rows = []
  for b in range(q.shape[0]):
    row = []
    for c in range(d.shape[0]):
      total, z = 0.0, 0.0
      for i in range(q.shape[1]):
        for j in range(d.shape[1]):
          if q_mask[b, i] and d_mask[c, j] and a[b, i, c, j] != 0:
            weight = a[b, i, c, j] * u_q[b, i] * u_d[c, j]
            total += jnp.dot(q[b, i], d[c, j]) * weight
            z += weight
      z = z if normalize == "alignment" else float(q_mask[b].sum())
      row.append(total / jnp.maximum(z, alignment.Z_FLOOR))
    rows.append(jnp.stack([jnp.asarray(x, jnp.float32) for x in row]))
  return jnp.stack(rows)


@pytest.mark.parametrize("pairwise, k, p", [("top_k", 1, None), ("top_k", 3, None),
                                            ("top_p", 1, 0.34), ("top_p", 1, 1.0)])
@pytest.mark.parametrize("normalize", ["alignment", "query"])
@pytest.mark.parametrize("salience", [False, True])
def test_hard_alignments_equal_naive_loops(pairwise, k, p, normalize, salience):
  q, q_mask, d, d_mask, u_q, u_d = _batch()
  if not salience:
    u_q, u_d = np.ones_like(u_q), np.ones_like(u_d)
  s = np.asarray(functions.token_scores(q, d))
  expected_a = _naive_alignment(s, d_mask, pairwise, k, p)
  np.testing.assert_array_equal(
      alignment.pairwise_alignment(s, d_mask, pairwise, k, p) * q_mask[:, :, None, None],
      expected_a * q_mask[:, :, None, None])
  args = dict(pairwise=pairwise, k=k, p=p, normalize=normalize, u_q=u_q if salience else None,
              u_d=u_d if salience else None)
  scores = lambda q, d, u_q, u_d: alignment.sparse_alignment_scores(
      q, q_mask, d, d_mask, **(args | ({
          "u_q": u_q,
          "u_d": u_d
      } if salience else {})))
  naive = lambda q, d, u_q, u_d: _naive_scores(q, q_mask, d, d_mask, expected_a, u_q, u_d, normalize
                                              )
  np.testing.assert_allclose(scores(q, d, u_q, u_d), naive(q, d, u_q, u_d), atol=1e-5)
  weights = np.random.default_rng(4).normal(size=(B, C)).astype(np.float32)
  argnums = (0, 1, 2, 3) if salience else (0, 1)
  grads = jax.grad(lambda *x: jnp.sum(scores(*x) * weights), argnums)(q, d, u_q, u_d)
  naive_grads = jax.grad(lambda *x: jnp.sum(naive(*x) * weights), argnums)(q, d, u_q, u_d)
  for got, want in zip(grads, naive_grads):
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_differentiable_alignment_equals_rowwise_entropy_topk_by_loops():
  q, q_mask, d, d_mask, u_q, u_d = _batch(5)
  s = functions.token_scores(q, d)

  def naive_a(s):
    return jnp.stack([
        jnp.stack([
            jnp.stack([top_k.entropy_topk(s[b, i, c], d_mask[c], 2, 0.05)
                       for c in range(C)])
            for i in range(N)
        ])
        for b in range(B)
    ])

  np.testing.assert_allclose(
      alignment.pairwise_alignment(s, d_mask, "differentiable", 2, epsilon=0.05), naive_a(s),
      atol=1e-6)
  scores = lambda q, d: alignment.sparse_alignment_scores(
      q, q_mask, d, d_mask, pairwise="differentiable", k=2, epsilon=0.05, u_q=u_q, u_d=u_d)
  naive = lambda q, d: _naive_scores(q, q_mask, d, d_mask, naive_a(functions.token_scores(q, d)),
                                     u_q, u_d, "alignment")
  np.testing.assert_allclose(scores(q, d), naive(q, d), atol=1e-5)
  for got, want in zip(
      jax.grad(lambda *x: jnp.sum(scores(*x)), argnums=(0, 1))(q, d),
      jax.grad(lambda *x: jnp.sum(naive(*x)), argnums=(0, 1))(q, d)):
    np.testing.assert_allclose(got, want, atol=1e-5)


@pytest.mark.parametrize("normalize", ["query", "alignment"])
def test_top_1_without_salience_is_f_colbert(normalize):
  q, q_mask, d, d_mask, _, _ = _batch(6)
  np.testing.assert_allclose(
      alignment.sparse_alignment_scores(q, q_mask, d, d_mask, normalize=normalize),
      functions.f_colbert(q, q_mask, d, d_mask), atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({
        "pairwise": "top_k",
        "k": 0
    }, "k >= 1, got 0"),
    ({
        "pairwise": "top_p",
        "p": 0.0
    }, r"0 < p <= 1, got 0.0"),
    ({
        "pairwise": "top_p",
        "p": 1.5
    }, r"0 < p <= 1, got 1.5"),
    ({
        "pairwise": "top_p"
    }, r"0 < p <= 1, got None"),
    ({
        "pairwise": "top_3"
    }, "pairwise must be one of"),
    ({
        "normalize": "mean"
    }, "normalize must be one of"),
    ({
        "pairwise": "top_k",
        "k": 2**31
    }, "top_k alignment needs k <= 2,147,483,647 .*, got 2147483648"),
    ({
        "pairwise": "differentiable",
        "k": 10**20
    }, f"differentiable alignment needs k <= 2,147,483,647 .*, got {10**20}"),
])
def test_bad_settings_are_named(kwargs, message):
  q, q_mask, d, d_mask, _, _ = _batch()
  with pytest.raises(ValueError, match=message):
    alignment.sparse_alignment_scores(q, q_mask, d, d_mask, **kwargs)


@pytest.mark.parametrize("text", [
    "top_k:1", "top_k:16", "differentiable:4", "top_p:0.3", "top_p:0.015", "top_p:1",
    "top_p:0.3000001", "top_p:1e-07"
])
def test_an_alignment_prints_as_the_text_it_parses_from(text):
  """Its text names it in results and flags: `top_p:0.3000001` printed as `top_p:0.3`, another
  alignment's name."""
  parsed = alignment.Alignment.parse(text)
  assert str(parsed) == text
  assert alignment.Alignment.parse(str(parsed)) == parsed


@pytest.mark.parametrize("text", ["top_k:2147483648", f"differentiable:{10**20}"])
def test_a_k_beyond_int32_is_refused_when_parsed(text):
  """Before: an OverflowError traceback from JAX at the first scoring, after the index was loaded
  and the queries encoded."""
  with pytest.raises(ValueError, match=f"alignment '{text}': .* needs k <= 2,147,483,647"):
    alignment.Alignment.parse(text)


def test_the_largest_k_is_the_bound_of_the_tools_count_flags_and_scores():
  assert alignment.MAX_K == cli.MAX_COUNT
  q, q_mask, d, d_mask, _, _ = _batch()
  for pairwise in ("top_k", "differentiable"):  # k above the document length: every token.
    np.testing.assert_allclose(
        alignment.sparse_alignment_scores(q, q_mask, d, d_mask, pairwise=pairwise,
                                          k=alignment.MAX_K),
        alignment.sparse_alignment_scores(q, q_mask, d, d_mask, pairwise=pairwise, k=d.shape[1]),
        atol=1e-5)


def test_top_mask_breaks_ties_to_the_lower_index_and_skips_padding():
  rng = np.random.default_rng(7)
  s = rng.choice([0.0, 0.5, 1.0], size=(6, 9)).astype(np.float32)  # many ties
  mask = rng.random((6, 9)) < 0.8
  k = rng.integers(0, 6, size=6)
  got = np.asarray(top_k.top_mask(jnp.asarray(s), jnp.asarray(mask), jnp.asarray(k), 5))
  for row in range(6):
    valid = [j for j in range(9) if mask[row, j]]
    top = sorted(valid, key=lambda j: (-s[row, j], j))[:k[row]]
    np.testing.assert_array_equal(got[row], np.isin(np.arange(9), top))
