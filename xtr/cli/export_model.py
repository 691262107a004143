"""`xtr-export-model`: a model trained here, in the sentence-transformers layout of the released
XTR (`xtr.models.released`), for Hugging Face transformers, sentence-transformers and PyLate.

  # after `make demo`:
  xtr-export-model --gin_file=gin/runs/demo.gin --checkpoint=runs/demo/xtr/wise_ft_0.7 --out=DIR

--gin_file is the run's (its model and vocabulary). DIR must not exist. xtr reads DIR back as it
reads the released weights: --checkpoint=DIR with gin/models/xtr_base_en.gin (a T5 backbone) or
gin/models/minilm_l6.gin with MINILM_DIR = DIR (BERT), and the projection's embed_dim (a model
without a projection is written with an identity one: embed_dim = its hidden size). A model with
ALIGNER's salience heads is refused: the layout has no place for them.
"""
import os
from typing import Sequence

from absl import app
from absl import flags
import jax

from xtr import cli
from xtr.models import model_spec
from xtr.models import released

_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "xtr-train model dir or checkpoint step dir.")
_OUT = flags.DEFINE_string("out", None, "The directory to write (must not exist).")


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  cli.check_outside_run(_OUT.value, _CHECKPOINT.value)
  if os.path.lexists(_OUT.value):
    raise app.UsageError(f"--out={_OUT.value} exists; name a new directory.")
  if os.path.lexists(temporary := released.temporary_dir(_OUT.value)):
    raise app.UsageError(f"--out={_OUT.value}: {temporary} exists (left by a killed "
                         "xtr-export-model, or another one writing it); remove it and rerun.")
  cli.parse_gin(extra_bindings=[*cli.ENCODER_BINDINGS, f"CHECKPOINT = {_CHECKPOINT.value!r}"])
  encoder = model_spec.gin_encoder(_CHECKPOINT.value)
  written = released.write(_OUT.value, encoder.model, jax.device_get(encoder.params),
                           encoder.tokenizer, encoder.doc_max_length)
  print(f"Wrote {_OUT.value}: {', '.join(written)}")


def console_entry_point() -> None:
  cli.run(main, __name__, required=["checkpoint", "out"])
