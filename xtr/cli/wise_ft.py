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


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  if os.path.exists(_OUT.value):
    raise app.UsageError(f"--out={_OUT.value} exists; choose a new directory.")
  wise_ft.write(_CHECKPOINT.value, _ALPHA.value, _OUT.value)
  print(f"Wrote θ_{_ALPHA.value} of {_CHECKPOINT.value} to {_OUT.value}")


def console_entry_point() -> None:
  cli.run(main, __name__, required=("checkpoint", "alpha", "out"))


if __name__ == "__main__":
  console_entry_point()
