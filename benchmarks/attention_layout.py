"""Times `xtr.models.attention.dot_product_attention` (heads-major batched matmuls) against the same
attention written as einsums over [B, L, H, D], in one run, on MiniLM's export shapes.

  .venv/bin/python benchmarks/attention_layout.py [--record=PATH]   (PATH: a run record)
"""
import argparse
import math
import time

import jax
import jax.numpy as jnp
import numpy as np

from xtr import io
from xtr.evaluation import run_record
from xtr.models import attention

BATCH, LENGTH, HEADS, HEAD_DIM = 32, 256, 12, 32  # all-MiniLM-L6-v2 on a [32, 256] batch.


def einsum_attention(q, k, v, bias):
  """[B, L, H, D] operands -> [B, L, H * D], without changing the layout."""
  logits = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=jnp.float32)
  weights = jax.nn.softmax(logits + bias, axis=-1)
  return jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(BATCH, LENGTH, -1)


def best_of(fn, *args, repeats=10) -> float:
  """Fastest of `repeats` timed calls, in ms (after one compiling call)."""
  jax.block_until_ready(fn(*args))
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    times.append(time.perf_counter() - start)
  return 1000 * min(times)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--record", help="write the times to this run record (JSON)")
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.standard_normal((BATCH, LENGTH, HEADS, HEAD_DIM)), jnp.float32)
             for _ in range(3))
  q = q / math.sqrt(HEAD_DIM)
  bias = jnp.zeros((BATCH, 1, 1, LENGTH), jnp.float32)
  heads_major = jax.jit(lambda *a: attention.dot_product_attention(*a, dropout=lambda w: w))
  einsum = jax.jit(einsum_attention)
  np.testing.assert_allclose(heads_major(q, k, v, bias), einsum(q, k, v, bias), atol=1e-5)
  new, old = best_of(heads_major, q, k, v, bias), best_of(einsum, q, k, v, bias)
  print(f"{jax.devices()[0].platform}, [B={BATCH}, L={LENGTH}, H={HEADS}, D={HEAD_DIM}]: "
        f"heads-major {new:.1f} ms, einsum {old:.1f} ms, ratio {old / new:.2f}x")
  if args.record:
    io.write_results(
        args.record,
        run_record.record(
            {
                "platform": jax.devices()[0].platform,
                "shape": {
                    "batch": BATCH,
                    "length": LENGTH,
                    "heads": HEADS,
                    "head_dim": HEAD_DIM
                },
                "heads_major_ms": new,
                "einsum_ms": old
            }, [], "test"))


if __name__ == "__main__":
  main()
