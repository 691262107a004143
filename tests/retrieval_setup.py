"""What the retrieval tests share: an untrained tiny T5 checkpoint and the SciFact slice's size.

conftest.py builds the `scifact_slice` and `exported` fixtures from them.
"""
import os
import pathlib
import subprocess
import sys

import flax.linen as nn
import gin
import jax
import numpy as np

from xtr import cli
from xtr.models import encoding
from xtr.training import checkpoints

REPO = pathlib.Path(__file__).resolve().parents[1]
SLICE_QUERIES = 12  # the SciFact slice: its first test queries ...
SLICE_DOCS = 150  # ... their judged documents and other documents


@gin.configurable
def _gin_model(model=gin.REQUIRED):
  return model


@gin.configurable
def _gin_objects(model=gin.REQUIRED, vocabulary=gin.REQUIRED):
  return model, vocabulary


def parse_model_file(path, *bindings: str) -> tuple:
  """(%MODEL, %VOCABULARY, the bindings of `encoding.Encoder`) of a gin model file (relative
  to the repository or absolute) parsed alone with `bindings`; gin is cleared before and after."""
  gin.clear_config()
  gin.add_config_file_search_path(str(REPO))
  try:
    gin.parse_config_files_and_bindings(
        [str(REPO / path)],
        ["_gin_objects.model = %MODEL", "_gin_objects.vocabulary = %VOCABULARY", *bindings])
    return (*_gin_objects(), gin.get_bindings(encoding.Encoder))
  finally:
    gin.clear_config()


def random_checkpoint(model_dir: pathlib.Path, seed: int, t5_spm_path, *bindings: str,
                      edit=lambda params: params,
                      model_file: str = "gin/models/t5_1_1_tiny.gin") -> None:
  """Saves an untrained XTR encoder (by default the tiny T5) as an xtr-train checkpoint would (its
  params passed through `edit` first). The model file and `bindings` stay parsed (locked):
  callers may build an `encoding.Encoder` from them, then clear gin."""
  gin.clear_config()
  gin.parse_config_files_and_bindings(
      [str(REPO / model_file)],
      [f"T5_SPM_PATH = '{t5_spm_path}'", "_gin_model.model = %MODEL", *bindings])
  model = _gin_model()
  params = nn.meta.unbox(model.init(jax.random.key(seed), np.ones((1, 8), np.int32))["params"])
  params = edit(params)
  checkpointer = checkpoints.Checkpointer(str(model_dir))
  checkpointer.manager.save(
      1, args=checkpoints.ocp.args.Composite(
          state=checkpoints.ocp.args.StandardSave({"params": jax.tree.map(np.asarray, params)})))
  checkpointer.close()


def run_tool(module: str, *args: str, stdin: str = "",
             timeout: float | None = None) -> subprocess.CompletedProcess:
  """Runs the console script of `module` as installed (argv[0] is not the module), on one CPU
  device, with the log settings of a user's shell (not conftest's TF_CPP_MIN_LOG_LEVEL); a tool
  that outlives `timeout` seconds is killed and fails the test."""
  code = (f"import sys; sys.argv = ['xtr-tool', *sys.argv[1:]]; import {module}; "
          f"{module}.console_entry_point()")
  env = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
  return subprocess.run([sys.executable, "-c", code, *args], input=stdin, capture_output=True,
                        text=True, cwd=REPO, timeout=timeout, env={
                            **env, "XLA_FLAGS": ""
                        })


def tool_encoder(model_file: str, checkpoint, *bindings: str) -> encoding.Encoder:
  """The encoder of `checkpoint` as the tools build it from `model_file` (a gin file) and
  `bindings`; gin is cleared afterwards."""
  gin.clear_config()
  gin.add_config_file_search_path(str(REPO))
  gin.parse_config_files_and_bindings([str(model_file)], [*cli.ENCODER_BINDINGS, *bindings])
  try:
    return encoding.Encoder(encoding.load_params(str(checkpoint)))
  finally:
    gin.clear_config()
