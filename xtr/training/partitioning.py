"""Device mesh, logical axis rules and shardings (t5x-style, on `jax.sharding`).

Parameters carry logical axis names (vocab, embed, mlp, heads, ...); the rules below map them
to the mesh axes `data` and `model`. Batches are split along `data`; each host feeds the rows
its devices hold (`data_layout`).
"""
import collections
import dataclasses
import itertools
import math
from typing import Any
from typing import Sequence

from absl import logging
import flax.linen as nn
import gin
import jax
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import numpy as np

from xtr import typecheck

DATA_AXIS = "data"
MODEL_AXIS = "model"

# Logical axis name -> mesh axis (None = replicated), in order of precedence: an array takes the
# first rule of each of its axes whose mesh axis it does not use yet. Model parallelism splits the
# MLP, the attention heads and the vocabulary, as t5x's standard rules do; the stacked layers of a
# scanned encoder (`layer_stack`) are replicated.
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
    ("layers", None),
)
# FSDP (ZeRO-3, t5x's 2-D parameter partitioning, MaxText's `fsdp` axis on the data axis):
# parameters' `embed` axis is split over `data` too, so parameters and optimizer state are not
# replicated over the data shards; XLA gathers each layer's weights where the step uses them.
# Activations keep `embed` whole: their `batch` axis takes `data` first (the rule before).
FSDP_RULES = (DEFAULT_RULES[0], ("embed", DATA_AXIS), *DEFAULT_RULES[1:])


@gin.configurable
def axis_rules(fsdp: bool = False) -> tuple[tuple[str, str | None], ...]:
  """The logical axis rules of training: `FSDP_RULES` with `fsdp`, else `DEFAULT_RULES`."""
  return FSDP_RULES if fsdp else DEFAULT_RULES


@gin.configurable
def make_mesh(num_partitions: int = 1, dcn_mesh_shape: tuple[int, int] = (1, 1),
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A (data, model) mesh over `devices` (default: all), `num_partitions` wide on `model`.

  The mesh is host-major: every host's devices hold a block of consecutive data shards, so each
  host feeds consecutive rows of every batch (`data_layout`). On a TPU slice each model group is
  a box of chips (`_tpu_grid`), spanning as few hosts as possible and ordered so that
  consecutive devices of the model axis are ICI neighbours; elsewhere (GPU, CPU) devices go in
  (process, id) order. `dcn_mesh_shape` = (d, p) splits the mesh over d·p granules joined by the
  slower data-center network: the TPU slices of a multi-slice job, or the processes when all
  devices are in one slice (GPU nodes). (k, 1) is the usual multi-slice layout (data parallelism
  across slices); (1, p) puts the model axis across granules. Each granule gets a mesh of shape
  (data / d, num_partitions / p), and the granules are laid out on a (d, p) grid in order.
  """
  typecheck.arguments(make_mesh, locals())
  devices = list(jax.devices() if devices is None else devices)
  if len(devices) % num_partitions:
    raise ValueError(f"num_partitions={num_partitions} does not divide {len(devices)} devices.")
  shape = (len(devices) // num_partitions, num_partitions)
  if any(n % g for n, g in zip(shape, dcn_mesh_shape)):
    raise ValueError(f"dcn_mesh_shape={tuple(dcn_mesh_shape)} does not divide the (data, model) "
                     f"mesh {shape}.")
  granules = _granules(devices, math.prod(dcn_mesh_shape))
  ici_shape = tuple(n // g for n, g in zip(shape, dcn_mesh_shape))
  grids = [_granule_grid(granule, ici_shape) for granule in granules]
  rows = [
      np.concatenate(grids[i * dcn_mesh_shape[1]:(i + 1) * dcn_mesh_shape[1]], axis=1)
      for i in range(dcn_mesh_shape[0])
  ]
  return Mesh(np.concatenate(rows, axis=0), (DATA_AXIS, MODEL_AXIS))


def _granules(devices: Sequence[Any], count: int) -> list[list[Any]]:
  """`devices` split into `count` granules: slices if there are several, else processes."""
  if count == 1:
    return [list(devices)]
  key = ("slice_index"
         if len({getattr(d, "slice_index", 0) for d in devices}) > 1 else "process_index")
  groups = collections.defaultdict(list)
  for device in devices:
    groups[getattr(device, key, 0)].append(device)
  if len(groups) != count or len({len(g) for g in groups.values()}) != 1:
    raise ValueError(f"dcn_mesh_shape asks for {count} granules, but the devices form "
                     f"{len(groups)} groups by {key} of sizes "
                     f"{sorted(len(g) for g in groups.values())}.")
  return [groups[k] for k in sorted(groups)]


def _granule_grid(devices: Sequence[Any], shape: tuple[int, int]) -> np.ndarray:
  """[data, model] devices of one granule (one ICI domain)."""
  if all(getattr(d, "platform", None) == "tpu" and hasattr(d, "coords") for d in devices):
    grid = _tpu_grid(devices, shape[1])
    if grid is not None:
      return grid
    logging.warning(
        "No box of %d TPU chips tiles the slice of %d chips host by host: the model "
        "axis takes the devices in (process, id) order, which may not be ICI "
        "neighbours.", shape[1], len(devices))
  ordered = sorted(devices, key=lambda d: (d.process_index, d.id))
  return np.array(ordered, dtype=object).reshape(shape)


def _tpu_grid(devices: Sequence[Any], num_partitions: int) -> np.ndarray | None:
  """[data, model] TPU devices: model groups are boxes of chips, in snake order; None if no box
  shape tiles both the hosts and the slice.

  Physical axes are the chips' coordinates and the core on the chip. A host holds a box of them
  (on TPU v4/v5, 2×2×1 chips); the model box is cut from the host box, or made of whole host
  boxes where it is larger, so that each host's devices hold whole model groups (or a host
  group shares them).
  """
  physical = _physical_mesh(devices)
  if physical is None:
    return None
  host_box = _host_box(physical)
  if host_box is None:
    return None
  box = _model_box(physical.shape, host_box, num_partitions)
  if box is None:
    return None
  tiles = [n // b for n, b in zip(physical.shape, box)]
  # [tile_0, box_0, tile_1, box_1, ...] -> [tiles..., box...]: one row per model box.
  split = physical.reshape([x for t, b in zip(tiles, box) for x in (t, b)])
  ndim = physical.ndim
  blocks = split.transpose([*range(0, 2 * ndim, 2), *range(1, 2 * ndim, 2)])
  blocks = blocks.reshape(math.prod(tiles), *box)
  path = _snake(box)
  rows = [blocks[i][tuple(np.array(path).T)] for i in range(len(blocks))]
  rows.sort(key=lambda row: min(d.process_index for d in row))  # stable: tile order in a host
  return np.array(rows, dtype=object)


def _physical_mesh(devices: Sequence[Any]) -> np.ndarray | None:
  """Devices at [x, y, z, core] (offsets from the smallest coordinates); None if they do not
  fill a box."""
  points = [(*d.coords, getattr(d, "core_on_chip", 0)) for d in devices]
  low = np.min(points, axis=0)
  extent = np.max(points, axis=0) - low + 1
  if math.prod(extent) != len(devices):
    return None
  physical = np.empty(tuple(extent), dtype=object)
  for device, point in zip(devices, points):
    physical[tuple(np.array(point) - low)] = device
  return None if any(d is None for d in physical.flat) else physical


def _host_box(physical: np.ndarray) -> tuple[int, ...] | None:
  """The shape of every host's box of devices; None unless the hosts tile `physical` with
  aligned boxes of one shape."""
  where = collections.defaultdict(list)
  for index, device in np.ndenumerate(physical):
    where[device.process_index].append(index)
  boxes = set()
  for indices in where.values():
    low, high = np.min(indices, axis=0), np.max(indices, axis=0)
    box = tuple(high - low + 1)
    if math.prod(box) != len(indices) or any(start % b for start, b in zip(low, box)):
      return None
    boxes.add(box)
  return boxes.pop() if len(boxes) == 1 else None


def _model_box(mesh_shape: Sequence[int], host_box: Sequence[int],
               size: int) -> tuple[int, ...] | None:
  """The box of `size` devices that model groups fill: on each axis it divides the mesh, and
  either divides the host box or is a multiple of it. Among those, the one over the fewest hosts,
  then the most compact (smallest longest side), then the first in axis order."""

  def sides(n, host):
    return [s for s in range(1, n + 1) if n % s == 0 and (host % s == 0 or s % host == 0)]

  boxes = [
      box for box in itertools.product(*map(sides, mesh_shape, host_box)) if math.prod(box) == size
  ]
  if not boxes:
    return None
  hosts = lambda box: math.prod(max(1, s // h) for s, h in zip(box, host_box))
  return min(boxes, key=lambda box: (hosts(box), max(box), [-s for s in box]))


def _snake(box: Sequence[int]) -> list[tuple[int, ...]]:
  """The cells of a box in boustrophedon order: consecutive cells differ by 1 on one axis."""
  if len(box) == 1:
    return [(i,) for i in range(box[0])]
  inner = _snake(box[1:])
  return [(i, *cell) for i in range(box[0]) for cell in (inner if i % 2 == 0 else inner[::-1])]


def param_shardings(boxed_params: Any, mesh: Mesh, rules=None) -> Any:
  """NamedShardings for a tree of `nn.LogicallyPartitioned` (boxed) parameters, by `rules`
  (default: the active `nn.logical_axis_rules`, `axis_rules()` in the trainer); an axis that
  its mesh axes do not divide stays whole."""
  shardings = nn.logical_to_mesh_sharding(nn.get_partition_spec(boxed_params), mesh, rules)
  boxed = lambda x: isinstance(x, nn.meta.AxisMetadata)
  values = jax.tree.map(lambda x: x.value if boxed(x) else x, boxed_params, is_leaf=boxed)
  return jax.tree.map(lambda x, s: _divisible(x.shape, s), values, shardings)


def _divisible(shape: tuple[int, ...], sharding: NamedSharding) -> NamedSharding:
  """`sharding` without the splits that do not divide their axis of `shape`."""

  def fits(size, axes):
    axes = (axes,) if isinstance(axes, str) else axes or ()
    return size % math.prod(sharding.mesh.shape[a] for a in axes) == 0

  spec = [
      axes if fits(size, axes) else None
      for size, axes in zip(shape, (*sharding.spec, *[None] * len(shape)))
  ]
  return NamedSharding(sharding.mesh, PartitionSpec(*spec))


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
    return jax.tree.map(lambda x, p, s: s
                        if x.shape == p.shape else replicated, node, params, shardings)

  return jax.tree.map(shard_like_params, opt_state, is_leaf=is_params_tree)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batches are split along their leading axis over `data`, replicated over `model`."""
  return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


@dataclasses.dataclass(frozen=True)
class DataLayout:
  """Which rows of every global batch this host feeds (t5x's data layout).

  The data shards of the global batch (one per position on `data`) fall into `num_shards`
  groups of equal size, the shards each host's devices hold; this host feeds group `shard_id`,
  its rows in the order of the shards (consecutive on a mesh from `make_mesh`, but any order
  works). Hosts whose devices hold the same shards (a model axis across hosts) get the same
  group and read the same input shard, so they feed identical rows.
  """
  shard_id: int
  num_shards: int


def data_layout(mesh: Mesh) -> DataLayout:
  """This host's `DataLayout` under `batch_sharding(mesh)`: data shard i is held by the devices
  `mesh.devices[i, :]` (read from the mesh alone, so it works for any device objects).

  Raises:
    ValueError: if hosts hold overlapping (but not equal) or uneven groups of data shards.
  """
  held = collections.defaultdict(set)
  for shard, devices in enumerate(mesh.devices.reshape(mesh.shape[DATA_AXIS], -1)):
    for device in devices:
      held[device.process_index].add(shard)
  groups = sorted({tuple(sorted(shards)) for shards in held.values()})
  if sum(map(len, groups)) != mesh.shape[DATA_AXIS] or len({len(g) for g in groups}) != 1:
    raise ValueError(f"The hosts of mesh {dict(mesh.shape)} hold the data shards {groups}: "
                     "each host must hold a group of data shards, equal in size and either "
                     "disjoint from or equal to every other host's.")
  return DataLayout(shard_id=groups.index(tuple(sorted(held[jax.process_index()]))),
                    num_shards=len(groups))


def global_batch(local_batch: dict[str, np.ndarray], mesh: Mesh,
                 layout: DataLayout) -> dict[str, jax.Array]:
  """Assembles each host's block of rows (`layout`) into global arrays sharded over `data`."""
  sharding = batch_sharding(mesh)
  return {
      k:
          jax.make_array_from_process_local_data(sharding, v,
                                                 (v.shape[0] * layout.num_shards, *v.shape[1:]))
      for k, v in local_batch.items()
  }
