"""How fast training runs against the hardware: tokens/s and MFU (model FLOPs utilization).

Model FLOPs are those of the computation the paper's model defines, not of how it is run: 3× the
forward FLOPs (forward, and a backward pass of twice its cost) of encoding a batch's queries and
documents, plus 3× its in-batch token scoring. The forward FLOPs are XLA's count of the lowered
(unoptimized, unsharded) encoder, so every backbone is counted from its own shapes; gradient
caching's extra forward pass and rematerialization are not model FLOPs. MFU divides them by the
step time and the peak dense bf16 FLOP/s of the devices (`PEAK_TFLOPS`); on CPU it is omitted.
"""
import dataclasses
import functools
from typing import Any
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from xtr.models import xtr_encoder

# Peak dense bf16 TFLOP/s per device, by `device_kind` (the longest matching prefix wins).
PEAK_TFLOPS = {
    "TPU v4": 275.0,
    "TPU v5 lite": 197.0,
    "TPU v5e": 197.0,
    "TPU v5": 459.0,
    "TPU v5p": 459.0,
    "TPU v6 lite": 918.0,
    "TPU v6e": 918.0,
    "NVIDIA H100": 989.0,
    "NVIDIA H200": 989.0
}


def peak_flops(devices: Sequence[Any]) -> float | None:
  """Peak bf16 FLOP/s of `devices` together; None if their kind is not in PEAK_TFLOPS (CPU)."""
  kind = devices[0].device_kind
  matches = [prefix for prefix in PEAK_TFLOPS if kind.startswith(prefix)]
  if not matches:
    return None
  return 1e12 * PEAK_TFLOPS[max(matches, key=len)] * len(devices)


@dataclasses.dataclass(frozen=True)
class StepCost:
  """What one train step processes: `tokens` (padding included) and `flops` (model FLOPs)."""
  tokens: int
  flops: float

  def rates(self, steps_per_sec: float, peak: float | None) -> dict[str, float]:
    """{"tokens_per_sec", "mfu" (with a known peak)} at `steps_per_sec`."""
    rates = {"tokens_per_sec": self.tokens * steps_per_sec}
    if peak:
      rates["mfu"] = self.flops * steps_per_sec / peak
    return rates


def step_cost(model: nn.Module, params: Any, query_shape: tuple[int, int],
              doc_shape: tuple[int, int]) -> StepCost:
  """The `StepCost` of a step over queries [B, n] and documents [C, m] (token ids).

  Args:
    model: an `xtr.models.xtr_encoder.XTREncoder`.
    params: the model's parameters (arrays or `jax.ShapeDtypeStruct`s: nothing is computed).
  """
  # XLA counts the body of a loop once: the FLOPs of scanned layers are those of the unscanned.
  model = xtr_encoder.with_scan_layers(model, False)
  params = jax.eval_shape(functools.partial(xtr_encoder.in_layout, model), params)

  def forward_flops(shape, role):
    encode = lambda p, tokens: model.apply({"params": p}, tokens, role=role)
    abstract = (jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype),
                             params), jax.ShapeDtypeStruct(shape, jnp.int32))
    # Lowered for the CPU on any devices: XLA:GPU gives no analysis of a lowered program, and
    # in the compiled one its matmuls are library calls that it does not count (on an H200,
    # 2–4 % of the FLOPs); XLA:CPU counts every dot of the program as written. Traced outside
    # the caller's mesh (the trainer's, of TPU or GPU devices): no sharding constraint of it in
    # a program lowered for the CPU, and none changes the FLOPs.
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), ())):
      lowered = jax.jit(encode).trace(*abstract).lower(lowering_platforms=("cpu",))
    return lowered.cost_analysis()["flops"]

  dim = jax.eval_shape(
      lambda p: model.apply({"params": p}, jnp.ones((1, 1), jnp.int32), role="query"),
      params)[0].shape[-1]
  scoring = 2 * query_shape[0] * query_shape[1] * doc_shape[0] * doc_shape[1] * dim
  forward = forward_flops(query_shape, "query") + forward_flops(doc_shape, "document")
  return StepCost(tokens=query_shape[0] * query_shape[1] + doc_shape[0] * doc_shape[1],
                  flops=3 * (forward + scoring))
