"""xtr/training/throughput.py: model FLOPs of a train step against the matmul count of the
transformer, peak FLOP/s by device kind, and tokens/s and MFU in the trainer's log."""
import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from xtr.models import bert
from xtr.models import xtr_encoder
from xtr.training import partitioning
from xtr.training import throughput

B, N, C, M = 4, 32, 8, 128  # queries of N tokens, documents of M tokens


def _encoder_matmul_flops(config: bert.BertConfig, embed_dim: int, length: int) -> int:
  """Forward FLOPs of a BERT encoder's matmuls on one text of `length` tokens, by hand: per
  layer Q, K, V and output projections, QKᵀ and AV over the text, the two FFN layers; then the
  projection to `embed_dim`."""
  d, f = config.hidden_size, config.intermediate_size
  per_layer = 2 * length * (4 * d * d + 2 * d * f) + 2 * 2 * length * length * d
  return config.num_layers * per_layer + 2 * length * d * embed_dim


def test_step_flops_are_three_forward_passes_and_the_scoring():
  config = bert.BertConfig(vocab_size=100, hidden_size=256, num_layers=2, num_heads=4,
                           intermediate_size=1024, max_position_embeddings=128)
  model = xtr_encoder.XTREncoder(bert.BertEncoder(config), 16)
  params = nn.meta.unbox(
      jax.eval_shape(model.init, jax.random.key(0), jnp.ones((1, 1), jnp.int32))["params"])
  cost = throughput.step_cost(model, params, (B, N), (C, M))
  matmuls = 3 * (B * _encoder_matmul_flops(config, 16, N) +
                 C * _encoder_matmul_flops(config, 16, M) + 2 * B * N * C * M * 16)
  # XLA also counts the elementwise work (softmax, layer norm, GELU): a few percent more at this
  # width (5 %; 3 % at MiniLM's), nothing for the abstract parameters' initialization.
  assert matmuls <= cost.flops <= 1.1 * matmuls
  assert cost.tokens == B * N + C * M


def test_step_flops_inside_the_trainers_mesh_equal_those_outside():
  """The trainer counts the FLOPs under its mesh and logical axis rules: its 8 devices here, or a
  pod's data × model layout (an abstract 64 × 4 mesh: no devices needed). The program is traced
  outside the mesh and lowered for the CPU: the same count inside as outside."""
  model = xtr_encoder.XTREncoder(
      bert.BertEncoder(
          bert.BertConfig(vocab_size=100, hidden_size=64, num_layers=2, num_heads=4,
                          intermediate_size=128, max_position_embeddings=128)), 16)
  params = nn.meta.unbox(
      jax.eval_shape(model.init, jax.random.key(0), jnp.ones((1, 1), jnp.int32))["params"])
  outside = throughput.step_cost(model, params, (B, N), (C, M))
  mesh = partitioning.make_mesh(num_partitions=2)
  pod = jax.sharding.AbstractMesh((64, 4), (partitioning.DATA_AXIS, partitioning.MODEL_AXIS))
  for context in (jax.set_mesh(mesh), jax.sharding.use_abstract_mesh(pod)):
    with context, nn.logical_axis_rules(partitioning.axis_rules()):
      inside = throughput.step_cost(model, params, (B, N), (C, M))
    assert inside == outside
  assert mesh.devices.size == 8


def test_peak_flops_by_device_kind():

  @dataclasses.dataclass
  class Device:
    device_kind: str

  assert throughput.peak_flops([Device("TPU v5 lite")] * 4) == 4 * 197e12  # v5e, not v5p
  assert throughput.peak_flops([Device("TPU v5")] * 2) == 2 * 459e12
  assert throughput.peak_flops([Device("TPU v4")]) == 275e12
  assert throughput.peak_flops([Device("NVIDIA H100 80GB HBM3")]) == 989e12
  assert throughput.peak_flops([Device("cpu")]) is None


def test_rates():
  cost = throughput.StepCost(tokens=1000, flops=2e12)
  assert cost.rates(2.0, None) == {"tokens_per_sec": 2000.0}
  assert cost.rates(2.0, 8e12) == pytest.approx({"tokens_per_sec": 2000.0, "mfu": 0.5})
