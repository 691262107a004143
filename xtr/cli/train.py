"""`xtr-train`: gin-configured training of XTR or T5-ColBERT.

  xtr-train --gin_file=gin/runs/smoke.gin     # runs/smoke: the tiny T5 on the bundled SciFact
  xtr-train --gin_file=gin/runs/xtr_msmarco.gin \
    --gin_bindings="MODEL_DIR='/tmp/xtr'" --gin_bindings="TRIPLES_PATH='TRIPLES.tsv'"

With several processes (one per host), pass --multihost to every one of them: on TPU VMs (and
SLURM, Open MPI, ...) JAX finds the others by itself; elsewhere name the coordinator:

  xtr-train --multihost --coordinator_address=10.0.0.1:1234 --num_processes=2 --process_id=0 ...
"""
from typing import Sequence

from absl import app
from absl import flags
import tensorflow as tf

from xtr import cli
from xtr.training import trainer

_MULTIHOST = cli.MultihostFlags()
_PROFILE_STEPS = flags.DEFINE_string(
    "profile_steps", None, "A:B: write a jax.profiler trace of steps A to B (inclusive) to "
    "MODEL_DIR/profile, for TensorBoard's profile plugin.")


def _profile_steps() -> tuple[int, int] | None:
  """--profile_steps as (A, B), refused unless 1 <= A <= B."""
  if _PROFILE_STEPS.value is None:
    return None
  first, _, last = _PROFILE_STEPS.value.partition(":")
  try:
    steps = int(first), int(last)
  except ValueError:
    steps = (0, -1)
  if not 1 <= steps[0] <= steps[1]:
    raise app.UsageError(f"--profile_steps={_PROFILE_STEPS.value}: expected A:B with "
                         "1 <= A <= B, e.g. 10:20.")
  return steps


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  profile_steps = _profile_steps()
  tf.config.set_visible_devices([], "GPU")  # TensorFlow only reads data: the GPUs are JAX's.
  _MULTIHOST.initialize()
  cli.parse_gin()
  trainer.train(**({} if profile_steps is None else {"profile_steps": profile_steps}))


def console_entry_point() -> None:
  cli.run(main, __name__)


if __name__ == "__main__":
  console_entry_point()
