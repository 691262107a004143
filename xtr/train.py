"""`xtr-train`: gin-configured training of XTR or T5-ColBERT.

  xtr-train --gin_file=gin/runs/xtr_msmarco.gin \
    --gin_bindings="MODEL_DIR='/tmp/xtr'" --gin_bindings="TRIPLES_PATH='triples.train.tsv'"

Gin file paths are relative to the current directory or to the repository root, so run files
`include 'gin/models/t5_1_1_base.gin'` and work from anywhere.
"""
import pathlib
from typing import Sequence

import gin
import jax
from absl import app
from absl import flags
from absl import logging

from xtr import trainer

REPO_DIR = pathlib.Path(__file__).resolve().parents[1]

_GIN_FILES = flags.DEFINE_multi_string("gin_file", [], "Gin config files, in order.")
_GIN_BINDINGS = flags.DEFINE_multi_string("gin_bindings", [], "Gin bindings, after the files.")
_MULTIHOST = flags.DEFINE_bool(
    "multihost", False, "Call jax.distributed.initialize() (one process per TPU VM host).")


def parse_gin(gin_files: Sequence[str], gin_bindings: Sequence[str]) -> None:
  """Parses gin files (paths relative to . or to the repository) and bindings."""
  gin.add_config_file_search_path(str(REPO_DIR))
  gin.parse_config_files_and_bindings(gin_files, gin_bindings)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if not flags.FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)  # Orbax logs every save; --verbosity=0 shows it.
  if _MULTIHOST.value:
    jax.distributed.initialize()
  parse_gin(_GIN_FILES.value, _GIN_BINDINGS.value)
  trainer.train()


def console_entry_point() -> None:
  app.run(main)


if __name__ == "__main__":
  console_entry_point()
