"""`xtr-convert-checkpoint`: the released XTR's torch weights -> safetensors, once.

  pip install -e .[convert]   # torch, for this command only
  xtr-convert-checkpoint --checkpoint=DIR

The release ships the projection as DIR/2_Dense/pytorch_model.bin, a torch pickle; xtr reads
safetensors only (`xtr.models.released`). This writes 2_Dense/model.safetensors beside it
(float32), and DIR/model.safetensors where only DIR/pytorch_model.bin is there
(`xtr.models.torch_files`): torch loads them with weights_only=True, tensors only. A
model.safetensors that exists is kept. A tensor that is no float parameter (complex, boolean,
sparse) or converts to more bytes than the file holds (a zero-stride view, a tensor under more
names than tied weights have) is refused.
"""
import os
from typing import Sequence

from absl import app
from absl import flags

from xtr import cli
from xtr.models import released
from xtr.models import torch_files

_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "Directory of the released XTR weights.")


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  if not os.path.isdir(_CHECKPOINT.value):
    raise app.UsageError(f"--checkpoint={_CHECKPOINT.value} is not a directory.")
  written = torch_files.convert(_CHECKPOINT.value)
  for path in written:
    print(f"Wrote {path}")
  if not written:
    print(f"Nothing to convert: neither {_CHECKPOINT.value} nor its 2_Dense/ holds a "
          f"{released.TORCH_FILE} without a model.safetensors.")


def console_entry_point() -> None:
  cli.run(main, __name__, required=["checkpoint"])


if __name__ == "__main__":
  console_entry_point()
