"""Optimizers and learning-rate schedules (optax), configured from gin."""
from collections.abc import Sequence
import re

import gin
import jax
import jax.numpy as jnp
import optax

from xtr import typecheck


@gin.configurable
def warmup_constant(learning_rate: float = 1e-3, warmup_steps: int = 1000) -> optax.Schedule:
  """Linear warmup from 0 to `learning_rate`, then constant (the paper's schedule); refuses a
  learning rate that is not a positive number (a negative one ascends the loss) and negative
  warmup steps, naming the binding."""
  typecheck.arguments(warmup_constant, locals())
  typecheck.in_range("optimizers.warmup_constant.learning_rate", learning_rate, learning_rate > 0,
                     "a positive number")
  typecheck.in_range("optimizers.warmup_constant.warmup_steps", warmup_steps, warmup_steps >= 0,
                     "an integer >= 0")
  warmup = optax.linear_schedule(0.0, learning_rate, max(warmup_steps, 1))
  return optax.join_schedules([warmup, optax.constant_schedule(learning_rate)], [warmup_steps])


@gin.configurable
def make_optimizer(
    name: str = "adafactor", schedule: optax.Schedule | None = None, weight_decay: float = 0.0,
    max_grad_norm: float | None = 1.0, frozen: Sequence[str] = ()) -> optax.GradientTransformation:
  """Adafactor (t5x's default) or AdamW, after optional global-norm gradient clipping.

  frozen: regular expressions over parameter paths ("backbone/layers_0/attention/query/kernel");
    a parameter one of them matches (`re.search`) is never updated, and its gradient counts
    neither in the clipping norm nor in weight decay. E.g. ("backbone/embeddings",
    "backbone/layers_[0-2]/") freezes a 6-layer BERT's lower half.
  max_grad_norm: clips the global gradient norm to this positive number (None: no clipping).

  Raises:
    ValueError: naming a binding out of range (weight_decay < 0, max_grad_norm <= 0).
  """
  typecheck.arguments(make_optimizer, locals())
  typecheck.in_range("optimizers.make_optimizer.weight_decay", weight_decay, weight_decay >= 0,
                     "a number >= 0")
  if max_grad_norm is not None:
    typecheck.in_range("optimizers.make_optimizer.max_grad_norm", max_grad_norm, max_grad_norm > 0,
                       "a positive number or None")
  schedule = schedule or warmup_constant()
  if name == "adafactor":
    optimizer = optax.adafactor(schedule, weight_decay_rate=weight_decay or None)
  elif name == "adamw":
    optimizer = optax.adamw(schedule, weight_decay=weight_decay)
  else:
    raise ValueError(f"Unknown optimizer {name!r}: expected 'adafactor' or 'adamw'.")
  if max_grad_norm is not None:
    optimizer = optax.chain(optax.clip_by_global_norm(max_grad_norm), optimizer)
  if not frozen:
    return optimizer
  freeze = _zero_matching(frozen)
  return optax.chain(freeze, optimizer, freeze)


def _zero_matching(patterns: Sequence[str]) -> optax.GradientTransformation:
  """Zeroes the updates of the parameters whose "/"-joined path one of `patterns` matches;
  stateless, so the optimizer state keeps the parameters' tree (and their shardings)."""
  compiled = [re.compile(pattern) for pattern in patterns]
  matches = lambda path: any(c.search(_path(path)) for c in compiled)

  def init(params):
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    for pattern in compiled:
      if not any(pattern.search(_path(path)) for path in paths):
        raise ValueError(f"optimizers.make_optimizer.frozen: {pattern.pattern!r} matches no "
                         f"parameter (paths look like {_path(paths[0])!r}).")
    return optax.EmptyState()

  def update(updates, state, params=None):
    del params
    zero = lambda path, u: jnp.zeros_like(u) if matches(path) else u
    return jax.tree_util.tree_map_with_path(zero, updates), state

  return optax.GradientTransformation(init, update)


def _path(path: tuple) -> str:
  return "/".join(str(getattr(key, "key", getattr(key, "name", key))) for key in path)
