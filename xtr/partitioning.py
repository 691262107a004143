"""Device mesh, logical axis rules and shardings (t5x-style, on `jax.sharding`).

Parameters carry logical axis names (vocab, embed, mlp, heads, ...); the rules below map them
to the mesh axes `data` and `model`. Batches are split along `data`.
"""
from typing import Any, Sequence

import flax.linen as nn
import gin
import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

DATA_AXIS = "data"
MODEL_AXIS = "model"

# Logical axis name -> mesh axis (None = replicated). Model parallelism splits the MLP, the
# attention heads and the vocabulary, as t5x's standard rules do.
DEFAULT_RULES = (
    ("batch", DATA_AXIS),
    ("vocab", MODEL_AXIS),
    ("mlp", MODEL_AXIS),
    ("heads", MODEL_AXIS),
    ("joined_kv", MODEL_AXIS),
    ("embed", None),
    ("kv", None),
    ("length", None),
    ("relpos_buckets", None),
    ("position", None),
    ("token_type", None),
    ("token_vector", None),
)


@gin.configurable
def make_mesh(num_partitions: int = 1, devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A (data, model) mesh over `devices` (default: all), `num_partitions` wide on `model`."""
  devices = np.asarray(jax.devices() if devices is None else devices)
  if devices.size % num_partitions:
    raise ValueError(f"num_partitions={num_partitions} does not divide {devices.size} devices.")
  grid = devices.reshape(devices.size // num_partitions, num_partitions)
  return Mesh(grid, (DATA_AXIS, MODEL_AXIS))


def param_shardings(boxed_params: Any, mesh: Mesh, rules=DEFAULT_RULES) -> Any:
  """NamedShardings for a tree of `nn.LogicallyPartitioned` (boxed) parameters."""
  return nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed_params), mesh, rules)


def opt_state_shardings(opt_state: Any, params: Any, shardings: Any, mesh: Mesh) -> Any:
  """Shardings for an optimizer state: a leaf shaped like its parameter is sharded like it.

  Everything else (step counts, Adafactor's factored row/column statistics) is replicated.
  `opt_state` and `params` may hold arrays or `jax.ShapeDtypeStruct`s.
  """
  replicated = NamedSharding(mesh, PartitionSpec())
  params_def = jax.tree.structure(params)

  def is_params_tree(node) -> bool:
    return jax.tree.structure(node) == params_def

  def shard_like_params(node):
    if not is_params_tree(node):
      return replicated
    return jax.tree.map(lambda x, p, s: s if x.shape == p.shape else replicated,
                        node, params, shardings)

  return jax.tree.map(shard_like_params, opt_state, is_leaf=is_params_tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batches are split along their leading axis over `data`, replicated over `model`."""
  return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Assembles each host's slice of the batch into global arrays sharded over `data`."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, v) for k, v in local_batch.items()}
