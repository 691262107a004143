"""The released XTR's torch files (pytorch_model.bin, a pickle) -> safetensors, once.

xtr reads safetensors only (`xtr.models.released`). torch, an optional extra (`pip install -e
.[convert]`), is imported here only, when a file is converted, and loads with
weights_only=True: tensors and containers only, no code. Kept apart from the CLI module
(`xtr.cli.convert_checkpoint`) so that importing it defines no command-line flags.
"""
import os
import zipfile

import numpy as np
import safetensors.numpy

from xtr import io
from xtr.models import released

# The dtypes converted (to float32): parameters', and the integer buffers of a state dict (BERT's
# position_ids, which `hf_weights` skips). A complex, boolean or quantized tensor is no parameter:
# cast to float32, a complex one lost its imaginary part (safetensors' reader refuses it).
_DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64")
# The most float32 bytes a torch file converts to, per byte of it: each name of a tensor is written
# out, T5 ties its embedding under 4 (shared, encoder and decoder embed_tokens, lm_head), and a
# half float doubles.
_MAX_EXPANSION = 8


def _import_torch():
  try:
    import torch  # pylint: disable=import-outside-toplevel
  except ImportError:
    raise ImportError("xtr-convert-checkpoint needs torch: pip install -e .[convert]") from None
  return torch


def _check_archive(torch_file: str) -> None:
  """Refuses a torch file (a zip archive) whose members inflate past the archive's own size:
  torch writes them stored, not compressed, and inflates a member before it checks its size (a
  1 MB archive of one 1 GiB member took 1.4 GB of memory to refuse)."""
  try:
    with io.open_binary(torch_file) as f, zipfile.ZipFile(f) as archive:
      inflated = sum(member.file_size for member in archive.infolist())
      size = os.fstat(f.fileno()).st_size
  except zipfile.BadZipFile:
    return  # torch's legacy format (before 1.6), not a zip: nothing compressed to inflate.
  if inflated > size:
    raise ValueError(f"{torch_file}: its members inflate to {inflated:,} bytes, more than the "
                     f"file's {size:,}: not a file that torch wrote.")


def _tensors(torch_file: str) -> dict[str, np.ndarray]:
  """{name: float32 array} of the state dict in `torch_file`, loaded with weights_only=True."""
  torch = _import_torch()
  _check_archive(torch_file)
  try:
    state = torch.load(torch_file, map_location="cpu", weights_only=True)
  except Exception as e:  # pylint: disable=broad-except  # torch raises by cause, no one type.
    raise ValueError(f"{torch_file} is not a state dict that torch loads with weights_only=True: "
                     f"{e}") from None
  if not isinstance(state, dict) or not all(
      isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()):
    raise ValueError(f"{torch_file} must hold a state dict ({{name: tensor}}).")
  for name, value in state.items():
    _check_tensor(torch_file, name, value)
  _check_total(torch_file, state)
  return {
      name: value.detach().to(torch.float32).contiguous().numpy() for name, value in state.items()
  }


def _check_tensor(torch_file: str, name: str, value) -> None:
  """Refuses a tensor that converts to other numbers (a dtype outside `_DTYPES`), or to more
  bytes than its storage holds: a sparse one, or a view whose elements overlap (a zero stride:
  `torch.ones(1).expand(2**28)`, 1.6 kB in the file, was written out as 1 GB)."""
  dtype = str(value.dtype).removeprefix("torch.")
  if dtype not in _DTYPES:
    raise ValueError(f"{torch_file}: tensor {name} is {dtype}, not one of {list(_DTYPES)}.")
  layout = str(value.layout).removeprefix("torch.")
  if layout != "strided":
    raise ValueError(f"{torch_file}: tensor {name} is {layout}, not a dense tensor.")
  size, stored = value.numel() * value.element_size(), value.untyped_storage().nbytes()
  if size > stored:
    raise ValueError(f"{torch_file}: tensor {name} of shape {tuple(value.shape)} lays out "
                     f"{size:,} bytes from a storage of {stored:,}: its elements overlap (a view "
                     "with a zero stride, as expand makes), which no saved parameter's do.")


def _check_total(torch_file: str, state: dict) -> None:
  """Refuses a state dict that names one tensor more often than ties do: each name is written
  out, and a file of 1 MB naming its 1 MB tensor 2,000 times was written out as 2 GB."""
  total, size = sum(4 * value.numel() for value in state.values()), os.path.getsize(torch_file)
  if total > _MAX_EXPANSION * size:
    raise ValueError(f"{torch_file}: its {len(state):,} tensors convert to {total:,} bytes, "
                     f"more than {_MAX_EXPANSION} times the file's {size:,} bytes: names repeat "
                     "a tensor more often than tied weights do.")


def convert(directory: str) -> list[str]:
  """Writes model.safetensors (float32) beside each pytorch_model.bin of `directory` and its
  2_Dense that lacks one, atomically; returns the files written."""
  written = []
  for folder in (directory, os.path.join(directory, "2_Dense")):
    torch_file = os.path.join(folder, released.TORCH_FILE)
    out = os.path.join(folder, "model.safetensors")
    if os.path.exists(torch_file) and not os.path.exists(out):
      tensors = _tensors(torch_file)
      with io.atomic_open(out, "wb") as f:
        f.write(safetensors.numpy.save(tensors))
      written.append(out)
  return written
