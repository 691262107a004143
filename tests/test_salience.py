"""xtr/models/salience.py and the salience heads of xtr_encoder.XTREncoder: each gate variant
against an independent reference (bisection for the entropy LP, sorting loops for hard top-k and
pruning)."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xtr.models import salience
from xtr.models import t5
from xtr.models import xtr_encoder

TINY = t5.T5Config(vocab_size=512, emb_dim=32, num_heads=4, num_layers=1, head_dim=8, mlp_dim=64)


def _heads_output(seed: int, shape=(4, 12)):
  """Head outputs s >= 0 (some exactly 0, as ReLU makes them) and masks with padding at the end."""
  rng = np.random.default_rng(seed)
  s = np.maximum(rng.normal(0.8, 0.5, shape), 0).astype(np.float32)
  lengths = rng.integers(1, shape[1] + 1, shape[0])
  lengths[0] = shape[1]
  return s, np.arange(shape[1])[None] < lengths[:, None]


def _lp_by_bisection(s: np.ndarray, k: float, epsilon: float) -> np.ndarray:
  """λ_i = min(1, exp((s_i + a)/ε)) with Σλ = k, a found by bisection (float64)."""
  lo, hi = -s.max() - 50 * epsilon - 1, -s.min() + 50 * epsilon + 1
  lam = lambda a: np.minimum(1.0, np.exp((s + a) / epsilon))
  for _ in range(200):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if lam(mid).sum() < k else (lo, mid)
  return lam((lo + hi) / 2)


@pytest.mark.parametrize("role,alpha", [("query", 0.5), ("document", 0.4)])
def test_entropy_lp_gate_matches_an_independent_solver(role, alpha):
  s, mask = _heads_output(0)
  gate = salience.Salience(alpha_q=0.5, alpha_d=0.4, epsilon=0.05)
  u = np.asarray(gate.gate(jnp.asarray(s), jnp.asarray(mask), role))
  for row in range(len(s)):
    m = mask[row].sum()
    k = np.ceil(alpha * m - 1e-9)
    expected = _lp_by_bisection(s[row, :m].astype(np.float64), k, 0.05) * s[row, :m]
    np.testing.assert_allclose(u[row, :m], expected, atol=1e-4)
    assert np.all(u[row, m:] == 0)


def test_hard_gate_keeps_the_top_k_and_stops_the_selection_gradient():
  s, mask = _heads_output(1)
  gate = salience.Salience(variant="hard", alpha_d=0.4)
  u, vjp = jax.vjp(lambda s: gate.gate(s, jnp.asarray(mask), "document"), jnp.asarray(s))
  (grad,) = vjp(jnp.ones_like(u))
  for row in range(len(s)):
    m = mask[row].sum()
    top = sorted(range(m), key=lambda j: (-s[row, j], j))[:int(np.ceil(0.4 * m - 1e-9))]
    expected = np.zeros(s.shape[1], np.float32)
    expected[top] = s[row, top]
    np.testing.assert_array_equal(u[row], expected)
    # d u / d s: 1 on the selected tokens, 0 elsewhere (the selection itself is a constant).
    np.testing.assert_array_equal(grad[row], np.isin(np.arange(s.shape[1]), top))


@pytest.mark.parametrize("variant,l1", [("relu", 0.0), ("l1", 0.01)])
def test_relu_and_l1_gates_keep_every_valid_token(variant, l1):
  s, mask = _heads_output(2)
  u = salience.Salience(variant=variant, l1=l1).gate(jnp.asarray(s), jnp.asarray(mask), "query")
  np.testing.assert_array_equal(u, np.where(mask, s, 0))


@pytest.mark.parametrize("settings,message", [
    (dict(variant="soft"), "variant must be one of"),
    (dict(alpha_d=0.0), r"alpha_d must be in \(0, 1\]"),
    (dict(alpha_q=1.5), r"alpha_q must be in \(0, 1\]"),
    (dict(epsilon=0.0), "epsilon > 0"),
    (dict(variant="l1"), "a positive coefficient goes with variant 'l1'"),
    (dict(l1=0.1), "a positive coefficient goes with variant 'l1'"),
])
def test_bad_settings_are_refused(settings, message):
  with pytest.raises(ValueError, match=message):
    salience.Salience(**settings)


def test_kept_tokens_by_a_loop():
  rng = np.random.default_rng(3)
  for m in (1, 5, 10, 37):
    u = rng.choice([0.0, 0.5, 1.0, 2.0], size=m)  # many ties
    for beta in (1e-5, 0.05, 0.2, 0.4, 0.7, 1.0):
      keep = int(np.ceil(round(beta * m, 9)))
      top = sorted(range(m), key=lambda j: (-u[j], j))[:keep]
      np.testing.assert_array_equal(salience.kept(u, beta), np.isin(np.arange(m), top))
  assert salience.kept(np.ones(10), 0.7).sum() == 7  # 0.7 * 10 = 7.000000000000001
  assert salience.kept(np.zeros(0), 0.5).sum() == 0


def test_model_has_a_salience_head_per_role():
  """Both heads are parameters with logical axes whichever role initializes; each role uses its
  own; a model without a gate has no heads (checkpoints of XTR models are unchanged)."""
  model = xtr_encoder.XTREncoder(t5.T5Encoder(TINY), 16, salience.Salience(variant="relu"))
  ids = np.random.default_rng(4).integers(1, 512, (3, 9)).astype(np.int32)
  ids[1, 5:] = 0
  boxed = model.init(jax.random.key(0), ids, role="query")["params"]
  specs = nn.get_partition_spec(boxed)
  for role in salience.ROLES:
    assert specs[f"{role}_salience"] == {
        "kernel": jax.sharding.PartitionSpec("token_vector", "salience"),
        "bias": jax.sharding.PartitionSpec("salience")
    }
  params = nn.meta.unbox(boxed)
  vectors, mask, u_q = model.apply({"params": params}, ids, role="query")
  _, _, u_d = model.apply({"params": params}, ids, role="document")
  for role, u in (("query", u_q), ("document", u_d)):
    head = params[f"{role}_salience"]
    expected = np.maximum(np.asarray(vectors) @ head["kernel"][:, 0] + head["bias"][0], 0)
    np.testing.assert_allclose(u, np.where(mask, expected, 0), atol=1e-6)
  assert not np.allclose(u_q, u_d)
  plain = xtr_encoder.XTREncoder(t5.T5Encoder(TINY), 16)
  assert set(plain.init(jax.random.key(0), ids)["params"]) == {"backbone", "projection"}
