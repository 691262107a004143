"""WiSE-FT (Wortsman et al., 2022): the fine-tuned model's weights interpolated with the weights it
started from, θ_α = (1 − α)·θ_0 + α·θ_1. α = 1 is the fine-tuned model, α = 0 the pretrained one;
in between, a model that keeps more of the pretrained model's generality out of domain.

θ_0 is a run's `model_dir/initial` (written by
`initialization.Initialization.save_initial_params = True`), θ_1 its latest checkpoint;
`xtr-wise-ft` (`xtr.cli.wise_ft`) writes θ_α as a checkpoint.
"""
import os
from typing import Any

import jax
import jax.numpy as jnp

from xtr import io
from xtr.models import encoding
from xtr.training import checkpoints


def interpolate(initial: Any, fine_tuned: Any, alpha: float) -> Any:
  """(1 − alpha)·initial + alpha·fine_tuned, leaf by leaf (computed in float32, stored in each
  leaf's dtype).

  Raises:
    ValueError: if alpha is outside [0, 1] or the trees differ in structure or shapes.
  """
  if not 0 <= alpha <= 1:
    raise ValueError(f"alpha must be in [0, 1], got {alpha}")
  if jax.tree.structure(initial) != jax.tree.structure(fine_tuned):
    raise ValueError("The initial and fine-tuned parameters differ in structure: "
                     f"{jax.tree.structure(initial)} vs {jax.tree.structure(fine_tuned)}.")

  def mix(path, a, b):
    if a.shape != b.shape:
      raise ValueError(f"Parameter {jax.tree_util.keystr(path)}: initial shape {a.shape}, "
                       f"fine-tuned {b.shape}.")
    mixed = (1 - alpha) * jnp.asarray(a, jnp.float32) + alpha * jnp.asarray(b, jnp.float32)
    return mixed.astype(b.dtype)

  return jax.tree_util.tree_map_with_path(mix, initial, fine_tuned)


def write(model_dir: str, alpha: float, out: str) -> bool:
  """Writes θ_alpha of the run `model_dir` (its latest step) as a checkpoint in `out`, unless
  `out` holds a checkpoint already; returns whether `out` now holds θ_alpha (False: another
  checkpoint, e.g. θ_alpha of an earlier step, which is left as it is). An `initial` that is a
  symbolic link (planted: another run's θ_0) is refused (io.UnsafeFileError)."""
  initial_dir = io.inside(model_dir, checkpoints.INITIAL_PARAMS)
  if not os.path.isdir(os.path.join(initial_dir, "state")):
    raise FileNotFoundError(f"{initial_dir}: no initial parameters; train with "
                            "initialization.Initialization.save_initial_params = True.")
  params = interpolate(encoding.load_params(initial_dir), encoding.load_params(model_dir), alpha)
  if os.path.isdir(os.path.join(out, "state")):
    return encoding.fingerprint(encoding.load_params(out)) == encoding.fingerprint(params)
  checkpoints.save_params(out, params)
  return True
