"""The encoder as data: what an index stores to rebuild its query encoder, without running code.

An index used to store the exporting run's gin config and search parsed it, which let a
downloaded index import modules and bind any callable. It now stores `describe(...)`: the
backbone's name, its config fields, the projection size, the vocabulary (kind, path and sha256)
and the encoder's lengths, all plain JSON; `encoder` rebuilds the modules from a fixed table
after checking every field's type. `describe` records the vocabulary file's path as the user
named it; the export copies the file into the index and records its copy's path there
(`vocabulary/<name>`, relative to the index), which search reads.

  {"backbone": "t5" | "bert", "config": {T5Config | BertConfig fields}, "embed_dim": 128 | null,
   "salience": {salience.Salience fields} | null,
   "vocabulary": {"kind": "sentencepiece", "path", "sha256", "extra_ids"}
               | {"kind": "wordpiece", "path", "sha256"},
   "query_max_length": 32, "doc_max_length": 256}
"""
import dataclasses
import typing
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from xtr import io
from xtr.models import bert
from xtr.models import encoding
from xtr.models import released
from xtr.models import salience as salience_lib
from xtr.models import t5
from xtr.models import xtr_encoder
from xtr.text import tokenization

_BACKBONES = {"t5": (t5.T5Encoder, t5.T5Config), "bert": (bert.BertEncoder, bert.BertConfig)}
_DTYPES = ("float32", "bfloat16", "float16")


def describe(encoder: encoding.Encoder) -> dict[str, Any]:
  """The JSON description of `encoder`'s model, vocabulary and lengths (module docstring)."""
  model = encoder.model
  name = next(
      (name for name, (module, _) in _BACKBONES.items() if isinstance(model.backbone, module)),
      None)
  if name is None:
    raise TypeError(f"Cannot describe the backbone {type(model.backbone).__name__}: an index "
                    f"can store {sorted(_BACKBONES)}.")
  config = dataclasses.asdict(model.backbone.config)
  config["dtype"] = jnp.dtype(config["dtype"]).name
  vocab = encoder.tokenizer.describe()
  vocab["sha256"] = io.sha256(vocab["path"])
  salience = None if model.salience is None else dataclasses.asdict(model.salience)
  return {
      "backbone": name,
      "config": config,
      "embed_dim": model.embed_dim,
      "salience": salience,
      "vocabulary": vocab,
      "query_max_length": encoder.query_max_length,
      "doc_max_length": encoder.doc_max_length
  }


def _check_type(value: Any, annotation: Any, where: str) -> Any:
  """`value` read from JSON, checked against a config field's annotation (lists -> tuples)."""
  if annotation is int and isinstance(value, int) and not isinstance(value, bool):
    return value
  if annotation is str and isinstance(value, str):
    return value
  if annotation is bool and isinstance(value, bool):
    return value
  if annotation is float and isinstance(value, (int, float)) and not isinstance(value, bool):
    return float(value)
  if typing.get_origin(annotation) is tuple and isinstance(value, list) and all(
      isinstance(v, str) for v in value):
    return tuple(value)
  name = getattr(annotation, "__name__", annotation)
  raise ValueError(f"{where} = {value!r} is not a valid {name}")


def encoder(spec: Any, where: str, params: Any, checkpoint: str, vocabulary_path: str,
            fingerprint: str | None = None) -> encoding.Encoder:
  """The encoder of a `describe` dict read from `where` (a file, for errors), with `params`.

  Args:
    checkpoint: where `params` come from, for errors.
    vocabulary_path: the vocabulary file (the index's copy, `TokenIndex.vocabulary_file`, or
      one the user named; never the path that `spec` records); its sha256 must equal the
      recorded one.
    fingerprint: that of the parameters the index was exported with: parameters that have it
      fit the model (they encoded the index), so only others are checked against the model's
      shapes, which traces its init (~0.2 s of a cold search).

  Raises:
    ValueError: naming `where` and the field, for anything `describe` does not write, or
      naming the checkpoint if its parameters do not fit the model.
  """
  model = _model(spec, where)
  params = xtr_encoder.in_layout(model, params)
  lengths = {
      name: _check_type(spec.get(name), int, f"{where}: model.{name}")
      for name in ("query_max_length", "doc_max_length")
  }
  built = encoding.Encoder(params, model=model,
                           vocabulary=_vocabulary(spec.get("vocabulary"), where,
                                                  vocabulary_path), **lengths)
  if built.fingerprint != fingerprint:
    check_params(model, params, checkpoint, f"the model of the index ({where})",
                 "Search with the checkpoint the index was exported with.")
  return built


def gin_encoder(checkpoint: str) -> encoding.Encoder:
  """The gin-configured `encoding.Encoder` (the run's gin files: its model and vocabulary) with
  `checkpoint`'s parameters, refused unless they fit its model (a trained projection under a
  model without one was ignored, silently) and, from a released directory, unless its
  config.json is the model's (`released.check_config`)."""
  params = encoding.load_params(checkpoint)
  encoder = encoding.Encoder(params)
  if released.is_released(checkpoint):
    released.check_config(checkpoint, encoder.model.backbone.config)
  check_params(encoder.model, xtr_encoder.in_layout(encoder.model, params), checkpoint,
               "the model of the gin files", "Give the gin files of the run that trained it.")
  return encoder


def _model(spec: Any, where: str) -> xtr_encoder.XTREncoder:
  if not isinstance(spec, dict) or spec.get("backbone") not in _BACKBONES:
    raise ValueError(f"{where}: model.backbone must be one of {sorted(_BACKBONES)}, got "
                     f"{spec.get('backbone') if isinstance(spec, dict) else spec!r}.")
  module, config_class = _BACKBONES[spec["backbone"]]
  fields = {f.name for f in dataclasses.fields(config_class)}
  hints = typing.get_type_hints(config_class)
  config = spec.get("config")
  if not isinstance(config, dict) or set(config) - fields:
    raise ValueError(f"{where}: model.config must hold only {config_class.__name__} fields, got "
                     f"{sorted(config) if isinstance(config, dict) else config!r}.")
  if config.get("dtype", "float32") not in _DTYPES:
    raise ValueError(f"{where}: model.config.dtype must be one of {_DTYPES}, got "
                     f"{config['dtype']!r}.")
  config = {
      name:
          value
          if name == "dtype" else _check_type(value, hints[name], f"{where}: model.config.{name}")
      for name, value in config.items()
  }
  try:
    config = config_class(**config)
  except ValueError as e:
    raise ValueError(f"{where}: model.config: {e}") from None
  embed_dim = spec.get("embed_dim")
  if embed_dim is not None:
    embed_dim = _check_type(embed_dim, int, f"{where}: model.embed_dim")
  return xtr_encoder.XTREncoder(module(config=config), embed_dim,
                                _salience(spec.get("salience"), where))


def _salience(spec: Any, where: str) -> salience_lib.Salience | None:
  if spec is None:
    return None
  hints = typing.get_type_hints(salience_lib.Salience)
  if not isinstance(spec, dict) or set(spec) != set(hints):
    raise ValueError(f"{where}: model.salience must hold exactly the fields {sorted(hints)}.")
  fields = {
      name: _check_type(value, hints[name], f"{where}: model.salience.{name}")
      for name, value in spec.items()
  }
  try:
    return salience_lib.Salience(**fields)
  except ValueError as e:
    raise ValueError(f"{where}: model.salience: {e}") from None


def check_params(model: xtr_encoder.XTREncoder, params: Any, checkpoint: str, model_name: str,
                 hint: str) -> None:
  """Refuses parameters (in `model`'s layout) whose names or shapes differ from the model's,
  naming the token dims if they do, `model_name` and, to say what to do, `hint`."""
  abstract = jax.eval_shape(model.init, jax.random.key(0), jnp.ones((1, 1), jnp.int32))
  shapes = lambda tree: {
      jax.tree_util.keystr(path): tuple(leaf.shape)
      for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
  }
  expected, got = shapes(nn.meta.unbox(abstract["params"])), shapes(params)
  if expected == got:
    return
  projection = "['projection']['kernel']"
  if projection in expected and projection in got and expected[projection] != got[projection]:
    problem = (f"token dim {expected[projection][-1]} (model) vs {got[projection][-1]} "
               "(checkpoint)")
  else:
    path = min(set(expected) ^ set(got) or {p for p in expected if expected[p] != got[p]})
    problem = f"parameter {path}: {expected.get(path)} (model) vs {got.get(path)} (checkpoint)"
  raise ValueError(f"The checkpoint {checkpoint} does not fit {model_name}: {problem}. {hint}")


def _vocabulary(spec: Any, where: str, path: str | None) -> tokenization.Tokenizer:
  kinds = {"sentencepiece", "wordpiece"}
  if (not isinstance(spec, dict) or spec.get("kind") not in kinds or
      not isinstance(spec.get("path"), str) or not isinstance(spec.get("sha256"), str)):
    raise ValueError(f"{where}: model.vocabulary needs a kind in {sorted(kinds)}, a path and a "
                     "sha256.")
  if not io.exists(path):
    raise FileNotFoundError(f"--vocabulary={path} does not exist.")
  if io.sha256(path) != spec["sha256"]:
    raise ValueError(f"{where}: the vocabulary {path} is not the one the index was built with "
                     f"(sha256 {spec['sha256']}).")
  if spec["kind"] == "wordpiece":
    return tokenization.WordPiece(path)
  extra_ids = _check_type(spec.get("extra_ids"), int, f"{where}: model.vocabulary.extra_ids")
  if not 0 <= extra_ids <= tokenization.MAX_EXTRA_IDS:  # Each one is a piece appended.
    raise ValueError(f"{where}: model.vocabulary.extra_ids = {extra_ids}: expected 0 to "
                     f"{tokenization.MAX_EXTRA_IDS:,} (T5's vocabularies have 100).")
  return tokenization.SentencePiece(path, extra_ids)
