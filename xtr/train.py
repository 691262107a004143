"""`xtr-train`: gin-configured training of XTR or T5-ColBERT.

  xtr-train --gin_file=gin/runs/smoke.gin     # runs/smoke: the tiny T5 on the bundled SciFact
  xtr-train --gin_file=gin/runs/xtr_msmarco.gin \
    --gin_bindings="MODEL_DIR='/tmp/xtr'" --gin_bindings="TRIPLES_PATH='TRIPLES.tsv'"

With several processes (one per host), pass --multihost to every one of them: on TPU VMs (and
SLURM, Open MPI, ...) JAX finds the others by itself; elsewhere name the coordinator:

  xtr-train --multihost --coordinator_address=10.0.0.1:1234 --num_processes=2 --process_id=0 ...
"""
from typing import Sequence

import jax
from absl import app
from absl import flags

from xtr import cli
from xtr import trainer

_MULTIHOST = flags.DEFINE_bool(
    "multihost", False, "Call jax.distributed.initialize() (one process per host).")
_COORDINATOR_ADDRESS = flags.DEFINE_string(
    "coordinator_address", None, "With --multihost: host:port of process 0 (default: detected).")
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "With --multihost: number of processes (default: detected).")
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None, "With --multihost: this process's index (default: detected).")


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  cli.quiet_logging()
  cluster = {"coordinator_address": _COORDINATOR_ADDRESS.value,
             "num_processes": _NUM_PROCESSES.value, "process_id": _PROCESS_ID.value}
  if _MULTIHOST.value:
    jax.distributed.initialize(**cluster)
  elif any(value is not None for value in cluster.values()):
    raise app.UsageError("--coordinator_address, --num_processes and --process_id need "
                         "--multihost.")
  cli.parse_gin()
  trainer.train()


def console_entry_point() -> None:
  cli.run(main, __name__)


if __name__ == "__main__":
  console_entry_point()
