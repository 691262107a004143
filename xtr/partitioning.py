"""Device mesh, logical axis rules and shardings (t5x-style, on `jax.sharding`).

Parameters carry logical axis names (vocab, embed, mlp, heads, ...); the rules below map them
to the mesh axes `data` and `model`. Batches are split along `data`; each host feeds the rows
its devices hold (`data_layout`).
"""
import collections
import dataclasses
from typing import Any, Sequence

import flax.linen as nn
import gin
import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from xtr import typecheck

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
    ("salience", None),
)


@gin.configurable
def make_mesh(num_partitions: int = 1, dcn_mesh_shape: tuple[int, int] = (1, 1),
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A (data, model) mesh over `devices` (default: all), `num_partitions` wide on `model`.

  Devices are placed by `mesh_utils.create_device_mesh`, so that on a TPU slice the model axis
  (the most communication) runs over the fastest links. `dcn_mesh_shape` = (d, p) splits the mesh
  over d·p granules joined by the slower data-center network: the TPU slices of a multi-slice
  job, or the hosts (processes) when all devices are in one slice (or have none: GPU, CPU).
  (k, 1) is the usual multi-slice layout (data parallelism across slices); (1, p) puts the model
  axis across hosts. `mesh_utils.create_hybrid_device_mesh` builds the mesh from per-granule
  (ICI) meshes of shape (data / d, num_partitions / p).
  """
  typecheck.arguments(make_mesh, locals())
  devices = list(jax.devices() if devices is None else devices)
  if len(devices) % num_partitions:
    raise ValueError(f"num_partitions={num_partitions} does not divide {len(devices)} devices.")
  shape = (len(devices) // num_partitions, num_partitions)
  if tuple(dcn_mesh_shape) == (1, 1):
    return Mesh(mesh_utils.create_device_mesh(shape, devices), (DATA_AXIS, MODEL_AXIS))
  if any(n % g for n, g in zip(shape, dcn_mesh_shape)):
    raise ValueError(f"dcn_mesh_shape={tuple(dcn_mesh_shape)} does not divide the (data, model) "
                     f"mesh {shape}.")
  ici_shape = [n // g for n, g in zip(shape, dcn_mesh_shape)]
  one_slice = len({getattr(d, "slice_index", 0) for d in devices}) == 1
  grid = mesh_utils.create_hybrid_device_mesh(ici_shape, dcn_mesh_shape, devices,
                                              process_is_granule=one_slice)
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


@dataclasses.dataclass(frozen=True)
class DataLayout:
  """Which rows of every global batch this host feeds (t5x's data layout).

  The global batch is split into `num_shards` equal blocks of consecutive rows; this host feeds
  block `shard_id`. Hosts whose devices hold the same rows (a model axis across hosts) get the
  same block and read the same input shard, so they feed identical rows.
  """
  shard_id: int
  num_shards: int


def data_layout(mesh: Mesh) -> DataLayout:
  """This host's `DataLayout` under `batch_sharding(mesh)`.

  Raises:
    ValueError: if hosts hold overlapping, uneven or non-consecutive blocks of rows (a mesh whose
      data axis interleaves hosts); `make_mesh` never builds one.
  """
  rows = mesh.shape[DATA_AXIS]  # One row per data shard: every batch splits like this.
  held = collections.defaultdict(set)
  for device, index in batch_sharding(mesh).devices_indices_map((rows,)).items():
    held[device.process_index].update(range(*index[0].indices(rows)))
  blocks = sorted({tuple(sorted(r)) for r in held.values()})
  consecutive = all(b == tuple(range(b[0], b[0] + len(b))) for b in blocks)
  if not consecutive or sum(map(len, blocks)) != rows or len({len(b) for b in blocks}) != 1:
    raise ValueError(f"The hosts of mesh {dict(mesh.shape)} hold the data shards {blocks}: "
                     "each host must hold a block of consecutive data shards, equal in size and "
                     "either disjoint from or equal to every other host's.")
  return DataLayout(shard_id=blocks.index(tuple(sorted(held[jax.process_index()]))),
                    num_shards=len(blocks))


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh,
                 layout: DataLayout) -> dict[str, jax.Array]:
  """Assembles each host's block of rows (`layout`) into global arrays sharded over `data`."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(
              sharding, v, (v.shape[0] * layout.num_shards, *v.shape[1:]))
          for k, v in local_batch.items()}
