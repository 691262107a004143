"""Per-device memory of the compiled train step (encoder, in-batch loss, optimizer) by mesh.

XLA's `compiled.memory_analysis()` gives each device's temporary and argument bytes; nothing is
run or allocated, so the paper's shapes can be compiled on simulated CPU devices:

  .venv/bin/python benchmarks/loss_memory.py [--shapes=reduced,paper] [--meshes=1x1,8x1,4x2]
  NUM_CPU_DEVICES=64 .venv/bin/python benchmarks/loss_memory.py --shapes=paper --meshes=64x1,32x2 \
      [--out=RECORD_JSON]

MiB per device: "loss temporaries" of the in-batch loss and its gradient alone (token vectors
in, no encoder); "step temporaries" and "step arguments" (parameters, optimizer state, batch) of
the whole train step. Rows compare the in-batch objective of `xtr.training.objective` ("sharded":
queries sharded over `data`, documents gathered once) with the loss that the trainer jitted before
it ("global": `xtr.scoring.functions` on the global [B, n, C, m] token scores, left to XLA's SPMD
partitioner, which replicates the top-k), with gradient caching ("grad_cache": sharded, in
micro-batches of `trainer.train.micro_batch_size` queries), and with FSDP ("fsdp": sharded,
parameters and optimizer state split over `data` as well). A model axis splits each query's tokens
in the loss. --out writes the rows as a run record (`xtr.evaluation.run_record`: with the command
and git commit).
"""
import os

NUM_DEVICES = int(os.environ.get("NUM_CPU_DEVICES", "8"))
os.environ["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count={NUM_DEVICES} " +
                           os.environ.get("XLA_FLAGS", ""))

import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import time  # noqa: E402
from unittest import mock  # noqa: E402

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh  # noqa: E402

from xtr import io  # noqa: E402
from xtr.evaluation import run_record  # noqa: E402
from xtr.models import t5  # noqa: E402
from xtr.models import xtr_encoder  # noqa: E402
from xtr.scoring import functions  # noqa: E402
from xtr.training import losses  # noqa: E402
from xtr.training import objective  # noqa: E402
from xtr.training import optimizers  # noqa: E402
from xtr.training import partitioning  # noqa: E402
from xtr.training import step as step_lib  # noqa: E402

_SHAPES = flags.DEFINE_list("shapes", ["reduced", "paper"], "Shapes to compile (see SHAPES).")
_MESHES = flags.DEFINE_list(
    "meshes", ["1x1", "2x1", "4x1", "8x1", "4x2"],
    "(data)x(model) meshes; data * model <= NUM_CPU_DEVICES (the simulated devices, default 8).")
_VARIANTS = flags.DEFINE_list("variants", ["global", "sharded", "grad_cache", "fsdp"],
                              "Objectives and layouts (see step_memory).")
_OUT = flags.DEFINE_string("out", None, "Also write the rows to this JSON run record.")

MIB = 2**20


@dataclasses.dataclass(frozen=True)
class Shape:
  """A train step: `config` encoder, B queries of n ids, K documents of m ids each."""
  name: str
  config: t5.T5Config
  num_queries: int
  query_length: int
  docs_per_query: int
  doc_length: int
  k_train: int
  micro_batch_size: int


SHAPES = {
    # XTR-base (Lee et al. 2023): T5 v1.1 base in bfloat16, B = 320, C = 640 documents of 256.
    "paper":
        Shape(
            "paper",
            t5.T5Config(vocab_size=32128, emb_dim=768, num_heads=12, num_layers=12, head_dim=64,
                        mlp_dim=2048, dtype="bfloat16"), num_queries=320, query_length=32,
            docs_per_query=2, doc_length=256, k_train=320, micro_batch_size=32),
    # XTR-XXL: T5 v1.1 XXL (gin/models/t5_1_1_xxl.gin) in bfloat16, with XTR-base's batch.
    "xxl":
        Shape(
            "xxl",
            t5.T5Config(vocab_size=32128, emb_dim=4096, num_heads=64, num_layers=24, head_dim=64,
                        mlp_dim=10240, dtype="bfloat16"), num_queries=320, query_length=32,
            docs_per_query=2, doc_length=256, k_train=320, micro_batch_size=32),
    # gin/models/t5_1_1_tiny.gin at B = 128, C = 256, queries of 32 and documents of 64 ids.
    "reduced":
        Shape(
            "reduced",
            t5.T5Config(vocab_size=32128, emb_dim=64, num_heads=4, num_layers=2, head_dim=16,
                        mlp_dim=128), num_queries=128, query_length=32, docs_per_query=2,
            doc_length=64, k_train=128, micro_batch_size=16),
}


def global_loss_and_metrics(objective_, queries, docs, doc_tokens, mesh, query_chunk=None,
                            teacher=None):
  """The in-batch loss as the trainer computed it before `xtr.training.objective`:
  `xtr.scoring.functions` on the
  global [B, n, C, m] token scores, partitioned by XLA (same signature as the objective's)."""
  del doc_tokens, mesh, query_chunk, teacher
  (q, q_mask, _), (d, d_mask, _) = queries, docs
  scores = functions.token_scores(q, d)
  retrieved = functions.retrieval_mask(scores, q_mask, d_mask, objective_.k_train)
  if objective_.scoring == "xtr":
    f = functions.f_xtr_from_token_scores(scores, retrieved, d_mask)
  else:
    f = functions.f_colbert_from_token_scores(scores, q_mask, d_mask)
  positive_index = jnp.arange(q.shape[0]) * (d.shape[0] // q.shape[0])
  loss = jnp.mean(losses.in_batch_cross_entropy(f / objective_.temperature, positive_index))
  hits = losses.positive_token_hits(retrieved, q_mask, positive_index)
  return loss, {"loss": loss, "positive_token_hit_rate": jnp.sum(hits) / jnp.sum(q_mask)}


def step_memory(shape: Shape, mesh: Mesh, variant: str) -> tuple[float, float]:
  """(temporary, argument) MiB per device of the train step compiled for `shape` on `mesh`.

  variant: "global" (the loss before `xtr.training.objective`), "sharded", "grad_cache" (sharded, in
  micro-batches of `shape.micro_batch_size` queries) or "fsdp" (sharded, with parameters and
  optimizer state split over `data` too: `partitioning.FSDP_RULES`).
  """
  model = xtr_encoder.XTREncoder(backbone=t5.T5Encoder(shape.config))
  optimizer = optimizers.make_optimizer("adafactor")
  batch = {
      "query_tokens":
          _input((shape.num_queries, shape.query_length), jnp.int32, mesh),
      "doc_tokens":
          _input((shape.num_queries, shape.docs_per_query, shape.doc_length), jnp.int32, mesh)
  }
  micro_batch_size = shape.micro_batch_size if variant == "grad_cache" else None
  rules = partitioning.axis_rules(fsdp=variant == "fsdp")
  with _objective(variant), jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    state = step_lib.abstract_state(model, optimizer, mesh)
    step = step_lib.make_train_step(model, optimizer, mesh,
                                    jax.tree.map(lambda x: x.sharding, state),
                                    objective.Objective("xtr", shape.k_train), micro_batch_size)
    return _mib(step.lower(state, batch, None).compile())


def loss_memory(shape: Shape, mesh: Mesh, variant: str) -> tuple[float, float]:
  """(temporary, argument) MiB per device of the in-batch loss and its gradient with respect to
  the token vectors (no encoder), compiled for `shape` on `mesh`."""
  num_docs = shape.num_queries * shape.docs_per_query
  embed_dim = xtr_encoder.XTREncoder.embed_dim
  args = (_input((shape.num_queries, shape.query_length, embed_dim), jnp.float32,
                 mesh), _input((shape.num_queries, shape.query_length), jnp.bool_, mesh),
          _input((num_docs, shape.doc_length, embed_dim), jnp.float32,
                 mesh), _input((num_docs, shape.doc_length), jnp.bool_,
                               mesh), _input((num_docs, shape.doc_length), jnp.int32, mesh))
  objective_ = objective.Objective("xtr", shape.k_train)
  query_chunk = (shape.micro_batch_size //
                 mesh.shape[partitioning.DATA_AXIS] if variant == "grad_cache" else None)

  def loss_and_grads(q, q_mask, d, d_mask, doc_tokens):
    loss = lambda q, d: objective.loss_and_metrics(objective_, (q, q_mask, None), (d, d_mask, None),
                                                   doc_tokens, mesh, query_chunk)[0]
    return jax.value_and_grad(loss, argnums=(0, 1))(q, d)

  with _objective(variant), jax.set_mesh(mesh):
    return _mib(jax.jit(loss_and_grads).lower(*args).compile())


def _objective(variant: str):
  """Replaces the trainer's objective by the global one for variant "global"."""
  if variant == "global":
    return mock.patch.object(objective, "loss_and_metrics", global_loss_and_metrics)
  return contextlib.nullcontext()


def _input(shape: tuple[int, ...], dtype, mesh: Mesh) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct(shape, dtype, sharding=partitioning.batch_sharding(mesh))


def _mib(compiled) -> tuple[float, float]:
  analysis = compiled.memory_analysis()
  return analysis.temp_size_in_bytes / MIB, analysis.argument_size_in_bytes / MIB


def main(argv) -> None:
  del argv
  run_record.mark_start()
  print(
      "| shape | objective | mesh (data, model) | loss temporaries | step temporaries | "
      "step arguments |\n|---|---|---|---|---|---|", flush=True)
  rows = []
  for name in _SHAPES.value:
    shape = SHAPES[name]
    meshes = [tuple(int(n) for n in m.split("x")) for m in _MESHES.value]
    runs = [(variant, m)
            for variant in _VARIANTS.value
            for m in meshes
            if variant != "grad_cache" or shape.micro_batch_size % m[0] == 0]
    for variant, (data, model_parallel) in runs:
      start = time.time()
      mesh = partitioning.make_mesh(model_parallel, devices=jax.devices()[:data * model_parallel])
      loss_temp, _ = loss_memory(shape, mesh, variant)
      step_temp, step_args = step_memory(shape, mesh, variant)
      rows.append({
          "shape": name,
          "objective": variant,
          "mesh": [data, model_parallel],
          "loss_temporaries_mib": loss_temp,
          "step_temporaries_mib": step_temp,
          "step_arguments_mib": step_args
      })
      print(
          f"| {name} | {variant} | ({data}, {model_parallel}) | {loss_temp:,.0f} | "
          f"{step_temp:,.0f} | {step_args:,.0f} | ({time.time() - start:.0f} s)", flush=True)
  if _OUT.value:
    io.write_results(_OUT.value, run_record.record(rows, [], "test"))


if __name__ == "__main__":
  app.run(main)
