"""Tests for xtr/training/optimizers.py: frozen parameters, against the optimizer run on the others
alone."""
import jax
import numpy as np
import optax
import pytest

from xtr.training import optimizers


def _params():
  rng = np.random.default_rng(0)
  return {
      "backbone": {
          "layers_0": {
              "kernel": rng.normal(size=(3, 2)).astype(np.float32)
          },
          "layers_1": {
              "kernel": rng.normal(size=(3, 2)).astype(np.float32)
          }
      },
      "projection": {
          "kernel": rng.normal(size=(2, 2)).astype(np.float32)
      }
  }


def _run(optimizer, params, grads):
  state = optimizer.init(params)
  for g in grads:
    updates, state = optimizer.update(g, state, params)
    params = optax.apply_updates(params, updates)
  return params


def test_frozen_parameters_stay_and_the_others_train_as_without_them():
  """AdamW with weight decay and clipping: the frozen layer never moves, and the rest moves
  exactly as AdamW would on the unfrozen parameters alone (clipped by their own norm)."""
  params = _params()
  rng = np.random.default_rng(1)
  grads = [
      jax.tree.map(lambda p: 10 * rng.normal(size=p.shape).astype(np.float32), params)
      for _ in range(3)
  ]
  make = lambda frozen=(): optimizers.make_optimizer("adamw", optimizers.warmup_constant(
      1e-1, 0), weight_decay=0.1, max_grad_norm=1.0, frozen=frozen)
  trained = _run(make(["backbone/layers_0/"]), params, grads)
  np.testing.assert_array_equal(trained["backbone"]["layers_0"]["kernel"],
                                params["backbone"]["layers_0"]["kernel"])
  rest = lambda tree: {"layers_1": tree["backbone"]["layers_1"], "projection": tree["projection"]}
  reference = _run(make(), rest(params), [rest(g) for g in grads])
  jax.tree.map(np.testing.assert_allclose, rest(trained), reference)
  assert not np.allclose(reference["projection"]["kernel"], params["projection"]["kernel"])


def test_a_frozen_pattern_that_matches_nothing_is_refused():
  optimizer = optimizers.make_optimizer("adamw", frozen=["backbone/layer_0"])
  with pytest.raises(ValueError, match="'backbone/layer_0' matches no parameter .*'backbone/"):
    optimizer.init(_params())
