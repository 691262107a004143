"""The released XTR weights in the sentence-transformers layout of `google/xtr-base-en`.

  DIR/config.json                the T5 config (Hugging Face)
  DIR/model.safetensors          a T5 checkpoint: its encoder (a decoder is never read)
  DIR/spiece.model               the SentencePiece vocabulary
  DIR/2_Dense/config.json        {"in_features": H, "out_features": D, "bias": false,
                                  "activation_function": "torch.nn.modules.linear.Identity"}
  DIR/2_Dense/model.safetensors  {"linear.weight": [D, H]}: the projection to token vectors

The release ships the projection as 2_Dense/pytorch_model.bin, a torch pickle, which xtr never
opens: `xtr-convert-checkpoint` writes 2_Dense/model.safetensors from it once. JSON files are
read as data, each key's type checked. The model is `xtr_encoder.XTREncoder` (T5 encoder ->
projection -> L2 normalization) as `gin/models/xtr_base_en.gin` configures it; the release's
preprocessing (lowercased text, EOS appended) is `xtr.text.tokenization`'s.
"""
import json
import os

import gin
import numpy as np

from xtr import typecheck
from xtr.models import hf_weights

FILES = ("config.json", "model.safetensors", "spiece.model", "2_Dense/config.json",
         "2_Dense/model.safetensors")
TORCH_FILE = "pytorch_model.bin"  # Beside a model.safetensors: what the release ships instead.
_DENSE_KEYS = {"in_features": int, "out_features": int, "bias": bool, "activation_function": str}
_IDENTITY = "torch.nn.modules.linear.Identity"


def is_released(path: str) -> bool:
  """Whether `path` is a local directory with a file of the layout (loading needs them all)."""
  return any(os.path.exists(os.path.join(path, name)) for name in FILES)


@gin.configurable
def spiece_path(checkpoint: str = gin.REQUIRED) -> str:
  """The vocabulary file of the released weights in the directory `checkpoint`."""
  return os.path.join(checkpoint, "spiece.model")


def load_params(directory: str) -> dict:
  """The float32 params of the `XTREncoder` in `directory`: {"backbone": T5 encoder params,
  "projection": {"kernel": [H, D]}}.

  Raises:
    FileNotFoundError: naming a missing file (and the conversion of a pytorch_model.bin).
    ValueError: naming the file and key of a malformed config or of weights that do not fit it;
      the JSON files and the projection are checked before the T5 checkpoint is read.
  """
  _check_files(directory)
  config_path = os.path.join(directory, "config.json")
  try:
    config = hf_weights.t5_config_from_hf(_read_json(config_path))
  except ValueError as e:
    raise ValueError(f"{config_path}: {e}") from None
  kernel = _projection(os.path.join(directory, "2_Dense"), config.emb_dim)
  backbone = hf_weights.load_t5_backbone(directory, config)
  return {"backbone": backbone, "projection": {"kernel": kernel}}


def _check_files(directory: str) -> None:
  for name in FILES:
    path = os.path.join(directory, name)
    if os.path.exists(path):
      continue
    torch_file = os.path.join(os.path.dirname(path), TORCH_FILE)
    if name.endswith("model.safetensors") and os.path.exists(torch_file):
      raise FileNotFoundError(
          f"{path} is missing: {torch_file} holds these weights as a torch pickle, which xtr "
          f"never opens. Convert it once: xtr-convert-checkpoint --checkpoint={directory} "
          "(torch comes with `pip install -e .[convert]`).")
    raise FileNotFoundError(f"{path} is missing: a released XTR directory holds "
                            f"{', '.join(FILES)}.")


def _read_json(path: str) -> dict:
  """The JSON object in `path`; a ValueError naming the file if it is not one."""
  try:
    with open(path, "rb") as f:
      value = json.load(f)
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{path} is not valid JSON ({e}).") from None
  if not isinstance(value, dict):
    raise ValueError(f"{path} must hold a JSON object, not {type(value).__name__}.")
  return value


def _projection(dense_dir: str, hidden: int) -> np.ndarray:
  """The kernel [hidden, D] of the linear layer in `dense_dir` (2_Dense), checked."""
  path = os.path.join(dense_dir, "config.json")
  config = _read_json(path)
  for key, kind in _DENSE_KEYS.items():
    if not typecheck.matches(config.get(key), kind):
      raise ValueError(f"{path}: {key} = {config.get(key)!r}: expected {kind.__name__}, got "
                       f"{type(config.get(key)).__name__}.")
  if config["bias"] or config["activation_function"] != _IDENTITY:
    raise ValueError(f"{path}: XTR's projection is linear (bias false, activation_function "
                     f"{_IDENTITY}), not bias {config['bias']}, activation_function "
                     f"{config['activation_function']}.")
  if config["in_features"] != hidden:
    raise ValueError(f"{path}: in_features = {config['in_features']}, but the encoder's d_model "
                     f"is {hidden} (config.json).")
  weights_path = os.path.join(dense_dir, "model.safetensors")
  tensors = hf_weights.read_safetensors(weights_path)
  shape = (config["out_features"], config["in_features"])
  if set(tensors) != {"linear.weight"} or tensors["linear.weight"].shape != shape:
    found = {name: tuple(value.shape) for name, value in tensors.items()}
    raise ValueError(f"{weights_path}: expected one tensor linear.weight of shape {shape} "
                     f"(out_features, in_features of {path}), found {found}.")
  return np.asarray(tensors["linear.weight"].T, np.float32)
