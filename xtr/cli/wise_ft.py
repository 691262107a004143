"""xtr-wise-ft: writes the WiSE-FT interpolation θ_α of a fine-tuning run (`xtr.training.wise_ft`).

  xtr-wise-ft --checkpoint=MODEL_DIR --alpha=0.5 --out=DIR

MODEL_DIR is an `xtr-train` run with `initialization.Initialization.save_initial_params = True`
(θ_0 in MODEL_DIR/initial); its latest checkpoint is θ_1. DIR is a checkpoint every command takes
as --checkpoint (export it with the run's gin files, as the run itself).
"""
import os
from typing import Sequence

from absl import app
from absl import flags

from xtr import cli
from xtr.training import wise_ft

_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "xtr-train model_dir (with initial/).")
_ALPHA = cli.define_fraction("alpha", None, "Weight of the fine-tuned parameters.", closed=True)
_OUT = flags.DEFINE_string("out", None, "Directory of the interpolated checkpoint (new).")
_ORBAX_TEMPORARY = ".orbax-checkpoint-tmp"  # In the names orbax writes a checkpoint under.


def _check_out(out: str, run: str) -> None:
  """Refuses an --out inside the run's checkpoints (it became the run's latest step, or its θ_0)
  and an existing --out, unless all it holds is a killed run's orbax temporaries (the write
  starts again)."""
  cli.check_outside_run(out, run)
  interrupted = (os.path.isdir(out) and not os.path.islink(out) and os.listdir(out) and
                 all(_ORBAX_TEMPORARY in name for name in os.listdir(out)))
  if os.path.lexists(out) and not interrupted:
    raise app.UsageError(f"--out={out} exists; choose a new directory.")


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  _check_out(_OUT.value, _CHECKPOINT.value)
  wise_ft.write(_CHECKPOINT.value, _ALPHA.value, _OUT.value)
  print(f"Wrote θ_{_ALPHA.value} of {_CHECKPOINT.value} to {_OUT.value}")


def console_entry_point() -> None:
  cli.run(main, __name__, required=("checkpoint", "alpha", "out"))


if __name__ == "__main__":
  console_entry_point()
