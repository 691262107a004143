"""Compile time and activation memory of a T5 encoder's gradient, scanned or not, by remat policy.

Each row lowers and compiles (nothing runs, parameters are abstract) the gradient of a loss on
the token vectors of an `XTREncoder` over a batch of documents, with `t5.T5Config.scan_layers`
and `remat_policy` (`xtr.models.layer_stack`); it prints the seconds to lower and compile, and XLA's
`memory_analysis()` temporaries (activations kept for the backward pass and scratch):

  .venv/bin/python benchmarks/scan_remat.py [--models=tiny,base] [--batch=8] [--length=256]
"""
import dataclasses
import time

from absl import app
from absl import flags
import flax.linen as nn
import jax
import jax.numpy as jnp

from xtr.models import t5
from xtr.models import xtr_encoder

_MODELS = flags.DEFINE_list("models", ["tiny", "base"], "Encoder shapes (of _SHAPES).")
_BATCH = flags.DEFINE_integer("batch", 8, "Documents per batch.")
_LENGTH = flags.DEFINE_integer("length", 256, "Tokens per document.")
_POLICIES = flags.DEFINE_list("policies", ["none", "full", "dots_saveable"], "Remat policies.")

_SHAPES = {  # gin/models/t5_1_1_tiny.gin, t5_1_1_base.gin and t5_1_1_large.gin
    "tiny": t5.T5Config(vocab_size=32128, emb_dim=64, num_heads=4, num_layers=2, head_dim=16,
                        mlp_dim=128),
    "base": t5.T5Config(vocab_size=32128, emb_dim=768, num_heads=12, num_layers=12, head_dim=64,
                        mlp_dim=2048),
    "large": t5.T5Config(vocab_size=32128, emb_dim=1024, num_heads=16, num_layers=24,
                         head_dim=64, mlp_dim=2816),
}


def measure(config: t5.T5Config, batch: int, length: int) -> tuple[float, int]:
  """(seconds to lower and compile, temporary bytes) of the gradient on [batch, length] ids."""
  model = xtr_encoder.XTREncoder(t5.T5Encoder(config))
  ids = jax.ShapeDtypeStruct((batch, length), jnp.int32)
  params = jax.eval_shape(
      lambda: nn.meta.unbox(model.init(jax.random.key(0), jnp.ones((1, 8), jnp.int32))["params"]))

  def loss(params, ids):
    vectors, _, _ = model.apply({"params": params}, ids)
    return jnp.sum(vectors[:, :, 0] * vectors[:, :, 1])

  start = time.perf_counter()
  compiled = jax.jit(jax.grad(loss)).lower(params, ids).compile()
  return time.perf_counter() - start, compiled.memory_analysis().temp_size_in_bytes


def main(argv):
  del argv
  print(f"{jax.devices()[0].device_kind}, batch {_BATCH.value} x {_LENGTH.value} tokens")
  print("model | layers | remat | compile s | temp MiB")
  for name in _MODELS.value:
    for scan_layers in (False, True):
      for policy in _POLICIES.value:
        config = dataclasses.replace(_SHAPES[name], scan_layers=scan_layers, remat_policy=policy)
        seconds, temp = measure(config, _BATCH.value, _LENGTH.value)
        layers = "scan" if scan_layers else "loop"
        print(f"{name} | {layers} | {policy} | {seconds:.1f} | {temp / 2**20:.1f}", flush=True)


if __name__ == "__main__":
  app.run(main)
