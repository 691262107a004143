"""The released XTR weights in the sentence-transformers layout of `google/xtr-base-en`, read and
written.

  DIR/config.json                the backbone's config (Hugging Face): T5, or BERT for a model
                                 trained here from MiniLM (`"model_type": "bert"`)
  DIR/model.safetensors          its weights: a T5 checkpoint's encoder (a decoder is never read)
                                 or a `BertModel`
  DIR/spiece.model               the SentencePiece vocabulary (T5); vocab.txt for BERT
  DIR/2_Dense/config.json        {"in_features": H, "out_features": D, "bias": false,
                                  "activation_function": "torch.nn.modules.linear.Identity"}
  DIR/2_Dense/model.safetensors  {"linear.weight": [D, H]}: the projection to token vectors

The release ships the projection as 2_Dense/pytorch_model.bin, a torch pickle, which xtr never
opens: `xtr-convert-checkpoint` writes 2_Dense/model.safetensors from it once. JSON files are
read as data, each key's type and range checked; a tool that loads the directory under a gin
model (`model_spec.gin_encoder`) refuses a config.json that differs from it (`check_config`). The
model is `xtr_encoder.XTREncoder` (backbone -> projection -> L2 normalization) as
`gin/models/xtr_base_en.gin` (or `minilm_l6.gin`, with MINILM_DIR the directory) configures it;
the release's preprocessing (lowercased text, EOS appended) is `xtr.text.tokenization`'s.

`write` puts a model trained here in the same layout (`xtr-export-model`), with the files
sentence-transformers and PyLate read besides: `modules.json` (Transformer -> 2_Dense; the
reader normalizes), `sentence_bert_config.json` and `tokenizer_config.json`.
"""
import json
import os
import shutil
from typing import Any

import gin
import numpy as np
import safetensors
from safetensors import numpy as safetensors_numpy

from xtr import io
from xtr import typecheck
from xtr.models import bert
from xtr.models import hf_weights
from xtr.models import t5
from xtr.models import xtr_encoder
from xtr.text import tokenization

FILES = ("config.json", "model.safetensors", "spiece.model", "2_Dense/config.json",
         "2_Dense/model.safetensors")
BERT_FILES = tuple("vocab.txt" if name == "spiece.model" else name for name in FILES)
TORCH_FILE = "pytorch_model.bin"  # Beside a model.safetensors: what the release ships instead.
_DENSE_KEYS = {"in_features": int, "out_features": int, "bias": bool, "activation_function": str}
_IDENTITY = "torch.nn.modules.linear.Identity"
_MAX_JSON_BYTES = 1 << 24  # A config.json is a few kB: more is not one (and is never read whole).


def is_released(path: str) -> bool:
  """Whether `path` is a local directory with a file of the layout (loading needs them all)."""
  return any(os.path.exists(os.path.join(path, name)) for name in FILES)


@gin.configurable
def spiece_path(checkpoint: str = gin.REQUIRED) -> str:
  """The vocabulary file of the released weights in the directory `checkpoint`."""
  return os.path.join(checkpoint, "spiece.model")


def load_params(directory: str) -> dict:
  """The float32 params of the `XTREncoder` in `directory`: {"backbone": T5 or BERT encoder
  params, "projection": {"kernel": [H, D]}}.

  Raises:
    FileNotFoundError: naming a missing file (and the conversion of a pytorch_model.bin).
    ValueError: naming the file and key of a malformed config or of weights that do not fit it;
      the JSON files and the projection are checked before the backbone's checkpoint is read.
  """
  config_path = os.path.join(directory, "config.json")
  hf_config = _read_json(config_path) if os.path.exists(config_path) else {}
  is_bert = hf_config.get("model_type") == "bert"
  _check_files(directory, BERT_FILES if is_bert else FILES)
  config = _backbone_config(config_path, hf_config)
  hidden = config.hidden_size if is_bert else config.emb_dim
  kernel = _projection(os.path.join(directory, "2_Dense"), hidden)
  load = hf_weights.load_bert_backbone if is_bert else hf_weights.load_t5_backbone
  return {"backbone": load(directory, config), "projection": {"kernel": kernel}}


def _backbone_config(path: str, hf_config: dict) -> t5.T5Config | bert.BertConfig:
  """The backbone's config of `hf_config`, read from the config.json at `path` (BERT's if its
  model_type is "bert", else T5's); a ValueError names `path`, the key and its value."""
  try:
    if hf_config.get("model_type") == "bert":
      return hf_weights.bert_config_from_hf(hf_config)
    return hf_weights.t5_config_from_hf(hf_config)
  except KeyError as e:  # bert_config_from_hf reads the keys BertConfig needs
    raise ValueError(f"{path}: missing key {e}") from None
  except ValueError as e:
    raise ValueError(f"{path}: {e}") from None


def check_config(directory: str, backbone: t5.T5Config | bert.BertConfig) -> None:
  """Refuses a model whose `backbone` config (the gin files') differs from `directory`'s
  config.json in a key that the weights' converted config has: `load_params` fits the weights to
  config.json, but the model computes with its own config (a layer_norm_epsilon of 0.5 there was
  ignored, where transformers used it). dtype, dropout and the layers' layout are no keys there."""
  path = os.path.join(directory, "config.json")
  found = hf_weights.config_to_hf(_backbone_config(path, _read_json(path)))
  try:
    expected = hf_weights.config_to_hf(backbone)
  except ValueError as e:
    raise ValueError(f"{path} cannot hold the gin model: {e}") from None
  for key, value in found.items():
    if expected.get(key) != value:
      raise ValueError(f"{path}: {key} = {value!r}, but the gin model has "
                       f"{expected.get(key)!r}; give the gin files that match it.")


def _check_files(directory: str, files: tuple[str, ...]) -> None:
  for name in files:
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
                            f"{', '.join(files)}.")


def _read_json(path: str) -> dict:
  """The JSON object in `path`; a ValueError naming the file if it is not one (json raises a
  ValueError of its own for bad syntax, bytes that are not UTF-8 and integers of over 4,300
  digits)."""
  try:
    value = json.loads(io.read_bytes(path, _MAX_JSON_BYTES))
  except (ValueError, RecursionError) as e:
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


def write(directory: str, model: xtr_encoder.XTREncoder, params: Any,
          tokenizer: tokenization.Tokenizer, max_seq_length: int) -> list[str]:
  """Writes `model` with `params` (an xtr-train checkpoint's) and its `tokenizer`'s vocabulary
  (spiece.model for T5, vocab.txt for BERT) to the new directory `directory` in the layout above;
  returns the files written.

  A model without a projection (`embed_dim=None`) gets an identity 2_Dense: the same vectors.

  Raises:
    ValueError: a salience gate (no place in the layout), a backbone other than T5 or BERT, or
      non-finite parameters; FileExistsError: `directory` or `temporary_dir(directory)` exists
      (nothing is written over).
  """
  if model.salience is not None:
    raise ValueError("The model has ALIGNER's salience heads, which the sentence-transformers "
                     "layout has no place for; export a model without them.")
  config = model.backbone.config
  hf_config = hf_weights.config_to_hf(config)
  is_t5 = isinstance(config, t5.T5Config)
  tensors = hf_weights.backbone_to_hf(params["backbone"], config)
  hidden = config.emb_dim if is_t5 else config.hidden_size
  kernel = (np.eye(hidden, dtype=np.float32) if model.embed_dim is None else np.asarray(
      params["projection"]["kernel"], np.float32))
  if not all(np.isfinite(t).all() for t in [*tensors.values(), kernel]):
    raise ValueError("The parameters are not all finite; nothing was written.")
  temporary = temporary_dir(directory)
  for path in (directory, temporary):
    if os.path.lexists(path):
      raise FileExistsError(f"{path} exists; nothing was written over it.")
  os.makedirs(os.path.dirname(os.path.abspath(directory)), exist_ok=True)
  # Written whole under a temporary name, then renamed: a failed write leaves no `directory`
  # half-written (a rerun was refused, `directory` existing), a killed one `temporary`.
  os.mkdir(temporary)
  try:
    files = _write_files(temporary, hf_config, hidden, kernel, tensors, tokenizer, is_t5,
                         max_seq_length)
    os.rename(temporary, directory)
  except BaseException:
    shutil.rmtree(temporary, ignore_errors=True)
    raise
  return files


def temporary_dir(directory: str) -> str:
  """The name `write` writes `directory` under before renaming it: left by a killed write, it is
  refused rather than removed (it may be what someone else is writing)."""
  return f"{directory}.tmp"


def _write_files(directory: str, hf_config: dict[str, Any], hidden: int, kernel: np.ndarray,
                 tensors: dict[str, np.ndarray], tokenizer: tokenization.Tokenizer, is_t5: bool,
                 max_seq_length: int) -> list[str]:
  """Writes `write`'s files into the new, empty `directory`; returns their names."""
  dense = os.path.join(directory, "2_Dense")
  os.mkdir(dense)
  tokenizer_config = (dict(tokenizer_class="T5Tokenizer") if is_t5 else dict(
      tokenizer_class="BertTokenizer", do_lower_case=True))
  files = {
      "config.json":
          hf_config,
      "2_Dense/config.json":
          dict(in_features=hidden, out_features=kernel.shape[1], bias=False,
               activation_function=_IDENTITY),
      "modules.json":
          _MODULES,
      "sentence_bert_config.json":
          dict(max_seq_length=max_seq_length, do_lower_case=False),
      "tokenizer_config.json":
          tokenizer_config | dict(model_max_length=max_seq_length),
  }
  for name, value in files.items():
    io.write_json(os.path.join(directory, name), value)
  _save(tensors, os.path.join(directory, "model.safetensors"))
  _save({"linear.weight": np.ascontiguousarray(kernel.T)}, os.path.join(dense, "model.safetensors"))
  vocabulary = _write_vocabulary(directory, tokenizer)
  return sorted([*files, "model.safetensors", "2_Dense/model.safetensors", vocabulary])


def _save(tensors: dict[str, np.ndarray], path: str) -> None:
  """safetensors' save_file, its error (a full disk's too) named as `io.write_error` names it."""
  try:
    safetensors_numpy.save_file(tensors, path)
  except safetensors.SafetensorError as e:
    raise io.write_error(path, e) from e


# sentence-transformers' modules: token vectors = Dense(Transformer(ids)), L2-normalized by the
# reader (xtr, PyLate's ColBERT); a Normalize module would break PyLate, which takes every module
# after the first for a Dense layer.
_MODULES = [
    dict(idx=0, name="0", path="", type="sentence_transformers.models.Transformer"),
    dict(idx=1, name="1", path="2_Dense", type="sentence_transformers.models.Dense"),
]


def _write_vocabulary(directory: str, tokenizer: tokenization.Tokenizer) -> str:
  """Writes the vocabulary of `tokenizer` into `directory`; returns its file name."""
  if isinstance(tokenizer, tokenization.WordPiece):
    io.atomic_write(os.path.join(directory, "vocab.txt"),
                    lambda f: f.write("".join(f"{token}\n" for token in tokenizer.tokens).encode()))
    return "vocab.txt"
  # The file as it is: T5's extra ids are not in it.
  model_proto = io.read_bytes(tokenizer.path, tokenization.MAX_VOCABULARY_BYTES)
  io.atomic_write(os.path.join(directory, "spiece.model"), lambda f: f.write(model_proto))
  return "spiece.model"
