"""WiSE-FT (Wortsman et al., 2022): the fine-tuned model's weights interpolated with the weights it
started from, θ_α = (1 − α)·θ_0 + α·θ_1. α = 1 is the fine-tuned model, α = 0 the pretrained one;
in between, a model that keeps more of the pretrained model's generality out of domain.

  xtr-wise-ft --checkpoint=MODEL_DIR --alpha=0.5 --out=DIR

MODEL_DIR is an `xtr-train` run with `trainer.train.save_initial_params = True` (θ_0 in
MODEL_DIR/initial); its latest checkpoint is θ_1. DIR is a checkpoint every command takes as
--checkpoint (export it with the run's gin files, as the run itself).
"""
import os
from typing import Any, Sequence

from absl import app
from absl import flags
import jax
import jax.numpy as jnp

from xtr import checkpoints
from xtr import cli
from xtr import encoding

_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "xtr-train model_dir (with initial/).")
_ALPHA = flags.DEFINE_float("alpha", None, "Weight of the fine-tuned parameters, in [0, 1].")
_OUT = flags.DEFINE_string("out", None, "Directory of the interpolated checkpoint.")


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


def write(model_dir: str, alpha: float, out: str) -> None:
  """Writes θ_alpha of the run `model_dir` as a checkpoint in `out` (once: an existing one is
  kept)."""
  initial_dir = os.path.join(model_dir, checkpoints.INITIAL_PARAMS)
  if not os.path.isdir(os.path.join(initial_dir, "state")):
    raise FileNotFoundError(f"{initial_dir}: no initial parameters; train with "
                            "trainer.train.save_initial_params = True.")
  if os.path.isdir(os.path.join(out, "state")):
    return
  params = interpolate(encoding.load_params(initial_dir), encoding.load_params(model_dir), alpha)
  checkpoints.save_params(out, params)


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  cli.quiet_logging()
  if os.path.exists(_OUT.value):
    raise app.UsageError(f"--out={_OUT.value} exists; choose a new directory.")
  if not 0 <= _ALPHA.value <= 1:
    raise app.UsageError(f"--alpha={_ALPHA.value} is outside [0, 1].")
  write(_CHECKPOINT.value, _ALPHA.value, _OUT.value)
  print(f"Wrote θ_{_ALPHA.value} of {_CHECKPOINT.value} to {_OUT.value}")


def console_entry_point() -> None:
  cli.run(main, __name__, required=("checkpoint", "alpha", "out"))
