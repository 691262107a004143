"""Optimizers and learning-rate schedules (optax), configured from gin."""
import gin
import optax

from xtr import typecheck

@gin.configurable
def warmup_constant(learning_rate: float = 1e-3, warmup_steps: int = 1000) -> optax.Schedule:
  """Linear warmup from 0 to `learning_rate`, then constant (the paper's schedule)."""
  typecheck.arguments(warmup_constant, locals())
  warmup = optax.linear_schedule(0.0, learning_rate, max(warmup_steps, 1))
  return optax.join_schedules([warmup, optax.constant_schedule(learning_rate)], [warmup_steps])


@gin.configurable
def make_optimizer(name: str = "adafactor",
                   schedule: optax.Schedule | None = None,
                   weight_decay: float = 0.0,
                   max_grad_norm: float | None = 1.0) -> optax.GradientTransformation:
  """Adafactor (t5x's default) or AdamW, after optional global-norm gradient clipping."""
  typecheck.arguments(make_optimizer, locals())
  schedule = schedule or warmup_constant()
  if name == "adafactor":
    optimizer = optax.adafactor(schedule, weight_decay_rate=weight_decay or None)
  elif name == "adamw":
    optimizer = optax.adamw(schedule, weight_decay=weight_decay)
  else:
    raise ValueError(f"Unknown optimizer {name!r}: expected 'adafactor' or 'adamw'.")
  if max_grad_norm is None:
    return optimizer
  return optax.chain(optax.clip_by_global_norm(max_grad_norm), optimizer)
