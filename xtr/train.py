"""`xtr-train`: gin-configured training of XTR or T5-ColBERT.

  xtr-train --gin_file=gin/runs/xtr_msmarco.gin \
    --gin_bindings="MODEL_DIR='/tmp/xtr'" --gin_bindings="TRIPLES_PATH='triples.train.tsv'"
"""
from typing import Sequence

import jax
from absl import app
from absl import flags

from xtr import cli
from xtr import trainer

_MULTIHOST = flags.DEFINE_bool(
    "multihost", False, "Call jax.distributed.initialize() (one process per TPU VM host).")


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  cli.quiet_logging()
  if _MULTIHOST.value:
    jax.distributed.initialize()
  cli.parse_gin()
  trainer.train()


def console_entry_point() -> None:
  app.run(main)


if __name__ == "__main__":
  console_entry_point()
