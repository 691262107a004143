"""Hugging Face safetensors checkpoints -> Flax parameter trees.

Supported: `T5EncoderModel` / `T5ForConditionalGeneration` (T5, T5 v1.1, mT5 naming) and
`BertModel` (also the sentence-transformers all-MiniLM-L6-v2 file, whose names have no `bert.`
prefix). Data flows one way: safetensors file -> {name: np.ndarray} -> nested Flax params.
"""
import pathlib

import numpy as np
from safetensors.numpy import load_file


def read_safetensors(path: str | pathlib.Path) -> dict[str, np.ndarray]:
  """Reads `model.safetensors` (or the file itself) into {name: array}."""
  path = pathlib.Path(path)
  if path.is_dir():
    path = path / "model.safetensors"
  if not path.exists():
    raise FileNotFoundError(f"No safetensors checkpoint at {path}.")
  return load_file(str(path))
