"""Step time, tokens/s, MFU and peak device memory of the XTR train step on this host's devices.

  python benchmarks/train_step.py --gin_file=gin/models/t5_1_1_base.gin --batch=320 \
      --micro_batch=32 [--query_length=32 --doc_length=256 --docs_per_query=2] [--steps=10] \
      [--gin_bindings="t5.T5Config.remat_policy = 'dots_saveable'"] --out=OUT_JSON

The step is the trainer's (`xtr.training.step`: mesh, shardings, in-batch f_XTR loss with
top-`k_train` retrieval, Adafactor) on random parameters and random token ids of the given
shapes: speed and memory do not depend on the values, and no data or TensorFlow is needed.
Defaults are XTR-base's (gin/runs/xtr_msmarco.gin: 320 queries of 32 tokens, a positive and a
negative of 256 tokens each, k_train 320, bfloat16 compute). After 2 steps that compile, `--steps`
steps are timed; MFU counts the model FLOPs of `xtr.training.throughput` against the devices'
peak; the peak memory is the first device's `memory_stats()["peak_bytes_in_use"]` (GPU and TPU;
none on CPU). Run each setting in a process of its own: the peak is the process's. --out writes
the row as a run record (`xtr.evaluation.run_record`: with the command and git commit).
"""
import json
import time
from typing import Sequence

from absl import app
from absl import flags
import flax.linen as nn
import gin
import jax
import numpy as np

from xtr import io
from xtr.evaluation import run_record
from xtr.training import objective
from xtr.training import optimizers
from xtr.training import partitioning
from xtr.training import step as step_lib
from xtr.training import throughput

_GIN_FILE = flags.DEFINE_multi_string("gin_file", ["gin/models/t5_1_1_base.gin"], "Model gin.")
_GIN_BINDINGS = flags.DEFINE_multi_string("gin_bindings", [], "Extra gin bindings.")
_BATCH = flags.DEFINE_integer("batch", 320, "Queries per global batch.")
_MICRO_BATCH = flags.DEFINE_integer("micro_batch", None, "Gradient caching's micro-batch.")
_QUERY_LENGTH = flags.DEFINE_integer("query_length", 32, "Query tokens.")
_DOC_LENGTH = flags.DEFINE_integer("doc_length", 256, "Document tokens.")
_DOCS_PER_QUERY = flags.DEFINE_integer("docs_per_query", 2, "A positive and its negatives.")
_K_TRAIN = flags.DEFINE_integer("k_train", 320, "In-batch token retrieval's k.")
_STEPS = flags.DEFINE_integer("steps", 10, "Timed steps (after 2 that compile).")
_OUT = flags.DEFINE_string("out", None, "JSON file to write the row to.")


def _batch(mesh: jax.sharding.Mesh) -> dict[str, jax.Array]:
  """Random token ids: query_tokens [B, Lq], doc_tokens [B, K, Ld], sharded over `data`."""
  rng = np.random.default_rng(0)
  shapes = {
      "query_tokens": (_BATCH.value, _QUERY_LENGTH.value),
      "doc_tokens": (_BATCH.value, _DOCS_PER_QUERY.value, _DOC_LENGTH.value)
  }
  return {
      name:
          jax.device_put(rng.integers(2, 1000, shape, np.int32), partitioning.batch_sharding(mesh))
      for name, shape in shapes.items()
  }


@gin.configurable
def _model(model: nn.Module = gin.REQUIRED) -> nn.Module:
  """The gin file's %MODEL."""
  return model


def main(argv: Sequence[str]) -> None:
  del argv
  run_record.mark_start()
  gin.parse_config_files_and_bindings(_GIN_FILE.value,
                                      [*_GIN_BINDINGS.value, "_model.model = %MODEL"])
  model = _model()
  mesh = partitioning.make_mesh()
  optimizer = optimizers.make_optimizer("adafactor")
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.axis_rules()):
    state, shardings = step_lib.init_state(model, optimizer, mesh, jax.random.key(0))
    train_step = step_lib.make_train_step(model, optimizer, mesh, shardings,
                                          objective.Objective("xtr", _K_TRAIN.value),
                                          _MICRO_BATCH.value)
    batch = _batch(mesh)
    start = time.perf_counter()
    for _ in range(2):
      state, metrics = train_step(state, batch, None)
    jax.block_until_ready(metrics)
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(_STEPS.value):
      state, metrics = train_step(state, batch, None)
    jax.block_until_ready(metrics)
    step_s = (time.perf_counter() - start) / _STEPS.value
  cost = throughput.step_cost(model, state.params, (_BATCH.value, _QUERY_LENGTH.value),
                              (_BATCH.value * _DOCS_PER_QUERY.value, _DOC_LENGTH.value))
  devices = list(mesh.devices.flat)
  stats = devices[0].memory_stats() or {}
  row = {
      "device":
          devices[0].device_kind,
      "devices":
          len(devices),
      "batch":
          _BATCH.value,
      "micro_batch":
          _MICRO_BATCH.value,
      "gin_bindings":
          _GIN_BINDINGS.value,
      "compile_and_2_steps_s":
          compile_s,
      "step_s":
          step_s,
      **cost.rates(1 / step_s, throughput.peak_flops(devices)),
      "peak_gib":
          stats.get("peak_bytes_in_use", 0) / 2**30 or None,
      "loss":
          float(metrics["loss"]),
  }
  print(json.dumps(row), flush=True)
  if _OUT.value:
    io.write_results(_OUT.value, run_record.record(row, [], "test"))


if __name__ == "__main__":
  app.run(main)
