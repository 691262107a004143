"""Meshes of real pod layouts, from mock devices laid out as a TPU runtime reports them.

As JAX's own tests/mesh_utils_test.py does: a host is a 2×2×1 block of chips; device ids,
coordinates, process_index and slice_index follow the runtime's numbering, and `jax.devices()`
comes in physical order (hosts interleaved along x), not process order. For every layout, the
mesh holds exactly the devices, consecutive devices on the model axis are ICI neighbours, and
the hosts' rows of a global batch (`data_layout`, with `jax.process_index` patched per host)
cover it exactly once, consecutively.
"""
import dataclasses
import itertools
import math

import jax
import numpy as np
import pytest

from xtr.training import partitioning


@dataclasses.dataclass(frozen=True)
class MockDevice:
  id: int
  process_index: int
  platform: str = "tpu"
  device_kind: str = "TPU v4"
  coords: tuple[int, int, int] = (0, 0, 0)
  core_on_chip: int = 0
  slice_index: int = 0


def tpu_devices(x: int, y: int, z: int, kind: str, num_slices: int = 1) -> list[MockDevice]:
  """The devices of `num_slices` x×y×z slices in the runtime's order: by z, y, x of the chip."""
  host = (min(x, 2), min(y, 2), 1)
  hosts = (x // host[0], y // host[1], z)
  per_slice = math.prod(hosts)
  devices = []
  for s, cz, cy, cx in itertools.product(range(num_slices), range(z), range(y), range(x)):
    hx, hy, hz = cx // host[0], cy // host[1], cz
    process = s * per_slice + hx + hosts[0] * (hy + hosts[1] * hz)
    devices.append(
        MockDevice(id=len(devices), process_index=process, device_kind=kind, coords=(cx, cy, cz),
                   slice_index=s))
  return devices


def gpu_devices(num_hosts: int, per_host: int) -> list[MockDevice]:
  """GPU nodes: ids numbered host by host, listed in id order (no coordinates)."""
  return [
      MockDevice(id=i, process_index=i // per_host, platform="gpu", device_kind="NVIDIA H100")
      for i in range(num_hosts * per_host)
  ]


PODS = {
    "v4-32": (2, 2, 4, "TPU v4"),
    "v4-128": (4, 4, 4, "TPU v4"),
    "v4-256": (4, 4, 8, "TPU v4"),
    "v5p-128": (4, 4, 4, "TPU v5"),
    "v5e-256": (16, 16, 1, "TPU v5 lite")
}
LAYOUTS = [(pod, model, 1) for pod in PODS for model in (1, 2, 4, 8)]
LAYOUTS += [("v5e-256", model, 2) for model in (1, 4)]  # two slices, dcn_mesh_shape (2, 1)


def _check_rows(mesh, devices, monkeypatch) -> None:
  """Every host's rows: its devices' data shards, one group per host (shared by the hosts of a
  model group), the groups covering the global batch exactly once, each group consecutive."""
  data = mesh.shape["data"]
  fed = {}
  for process in sorted({d.process_index for d in devices}):
    monkeypatch.setattr(jax, "process_index", lambda p=process: p)
    layout = partitioning.data_layout(mesh)
    rows = [i for i in range(data) if any(d.process_index == process for d in mesh.devices[i])]
    assert len(rows) * layout.num_shards == data
    assert rows == list(range(rows[0], rows[0] + len(rows)))  # host-major: consecutive
    assert fed.setdefault(layout.shard_id, rows) == rows
  assert sorted(r for rows in fed.values() for r in rows) == list(range(data))


def _neighbours(a: MockDevice, b: MockDevice) -> bool:
  return sum(abs(i - j) for i, j in zip(a.coords, b.coords)) == 1


@pytest.mark.parametrize("pod,model,slices", LAYOUTS,
                         ids=[f"{p}-model{m}-slices{s}" for p, m, s in LAYOUTS])
def test_pod_layouts(pod, model, slices, monkeypatch):
  devices = tpu_devices(*PODS[pod], num_slices=slices)
  mesh = partitioning.make_mesh(model, (slices, 1), devices=devices)
  assert mesh.shape == {"data": len(devices) // model, "model": model}
  assert sorted(d.id for d in mesh.devices.flat) == list(range(len(devices)))
  for group in mesh.devices:
    assert len({d.slice_index for d in group}) == 1
    assert all(_neighbours(a, b) for a, b in zip(group[:-1], group[1:])), group
    hosts = {d.process_index for d in group}
    assert len(hosts) == max(1, model // 4)  # within a host where it fits, else whole hosts
  _check_rows(mesh, devices, monkeypatch)


def test_devices_come_in_physical_order():
  """The mock's premise: a host's chips are not consecutive in `jax.devices()` order."""
  processes = [d.process_index for d in tpu_devices(4, 4, 4, "TPU v4")]
  assert processes[:4] == [0, 0, 1, 1]


@pytest.mark.parametrize("model,dcn", [(1, (1, 1)), (8, (1, 1)), (4, (4, 1)), (16, (2, 2))])
def test_gpu_nodes(model, dcn, monkeypatch):
  devices = gpu_devices(4, 8)
  mesh = partitioning.make_mesh(model, dcn, devices=devices)
  assert sorted(d.id for d in mesh.devices.flat) == list(range(32))
  for group in mesh.devices:
    assert len({d.process_index for d in group}) == max(1, model // 8)
  _check_rows(mesh, devices, monkeypatch)


def test_no_box_falls_back_with_a_warning(monkeypatch):
  """Chips that do not fill a box (a slice's chips with holes between them): the mesh is still
  built, in (process, id) order, with a warning."""
  devices = [d for d in tpu_devices(2, 2, 4, "TPU v4") if d.coords[2] != 1]
  warnings = []
  monkeypatch.setattr(partitioning.logging, "warning", lambda *a: warnings.append(a))
  mesh = partitioning.make_mesh(2, devices=devices)
  assert mesh.shape == {"data": 6, "model": 2} and warnings
  assert [d.id for d in mesh.devices.flat] == sorted(d.id for d in devices)
  _check_rows(mesh, devices, monkeypatch)


def test_interleaved_hosts_are_fed_their_own_rows(monkeypatch):
  """A mesh built by hand whose data axis alternates between two hosts: each host feeds its
  own, non-consecutive rows."""
  devices = gpu_devices(2, 4)
  order = [devices[i] for i in (0, 4, 1, 5, 2, 6, 3, 7)]
  mesh = jax.sharding.Mesh(np.array(order, dtype=object).reshape(8, 1), ("data", "model"))
  layouts = []
  for process in (0, 1):
    monkeypatch.setattr(jax, "process_index", lambda p=process: p)
    layouts.append(partitioning.data_layout(mesh))
  assert layouts == [partitioning.DataLayout(0, 2), partitioning.DataLayout(1, 2)]


def test_overlapping_hosts_are_refused():
  devices = gpu_devices(3, 2)
  order = [devices[i] for i in (0, 2, 1, 4, 3, 5)]  # rows {0,2}, {0,1}, {1,2}: overlapping
  mesh = jax.sharding.Mesh(np.array(order, dtype=object).reshape(3, 2), ("data", "model"))
  with pytest.raises(ValueError, match="equal in size and either disjoint"):
    partitioning.data_layout(mesh)
