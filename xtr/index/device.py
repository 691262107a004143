"""Token retrieval on the accelerator (`--searcher=device`): the index's token vectors resident in
device memory, sharded over the local devices along the token dimension.

Each device scores the query tokens against its share of the tokens block by block, keeping a
running top-k (`jax.lax.top_k`); the devices' top-k lists are then gathered and merged. With a
recall target, each block's scores are first reduced to the best of each strided bin of w
tokens, so that the top-k sorts w times fewer scores: the partial reduction of TPU-KNN (Chern et
al. 2022), which `jax.lax.approx_max_k` runs on TPUs only; written here in jnp, it is
approximate, and tested, on every platform. The vectors are stored as bfloat16 (2 bytes per
dimension), int8 with a float32 scale per token (1 byte per dimension + 4 per token) or float32
(exact; as `--searcher=bruteforce`). A table of each token's document is kept beside them, so
that f_XTR' can run on the device without a round trip to the host
(`xtr.scoring.search_scores.f_xtr_prime_top`), with each token's position in its document.
"""
import dataclasses
import functools
from typing import Sequence

import gin
import jax
import jax.numpy as jnp
import numpy as np

AXIS = "tokens"
DTYPES = ("bfloat16", "int8", "float32")
# A device's share of tokens, when it is its block, is padded to a multiple of this: a block of a
# prime number of tokens would leave the partial reduction no bin width but 1 (`bin_width`).
BLOCK_MULTIPLE = 1024


@gin.configurable
@dataclasses.dataclass(frozen=True)
class DeviceConfig:
  """How `--searcher=device` holds and searches the token vectors.

  Attributes:
    dtype: the resident vectors' type: "bfloat16", "int8" (a float32 scale per token) or
      "float32" (exact scores). On the CPU, XLA computes a bfloat16 dot in float32 and converts
      a device's whole share once per search (temporary memory twice the share's): there,
      "int8" or "float32" (whose temporaries do not grow with the tokens).
    recall_target: None: exact top-k; else the expected recall of the exact top-k, in (0, 1],
      that the partial reduction may give up for speed (`bin_width`; 1 is exact).
    token_block: tokens each device scores per step (the [Q, block] scores are its temporary
      memory); at least k' is used. Exact search's top-k of a block takes several times that
      on a GPU (an H200 ran out of memory with 48 GiB asked for 2,048 query tokens and blocks
      of 1,048,576; docs/performance.md): larger blocks pay off with a recall_target.
  """
  dtype: str = "bfloat16"
  recall_target: float | None = None
  token_block: int = 65536

  def __post_init__(self):
    if self.dtype not in DTYPES:
      raise ValueError(f"DeviceConfig.dtype must be one of {DTYPES}, got {self.dtype!r}")
    if self.recall_target is not None and not 0 < self.recall_target <= 1:
      raise ValueError(f"DeviceConfig.recall_target must be in (0, 1], got {self.recall_target}")
    if self.token_block < 1:
      raise ValueError(f"DeviceConfig.token_block must be positive, got {self.token_block}")


def bin_width(num_tokens: int, k: int, block: int, recall_target: float | None) -> int:
  """Tokens per bin w of the partial reduction: a true top-k token is lost only when a better one
  shares its bin, about k·w/(2T) of them with the k spread over T/w bins, so w = 2T(1 - r)/k;
  at most block/k (each block still yields k candidates) and a divisor of the block; 1 (exact)
  without a recall target."""
  if recall_target is None:
    return 1
  width = max(1, min(int(2 * num_tokens * (1 - recall_target) / k), block // k))
  while block % width:
    width -= 1
  return width


def _quantized(vectors: np.ndarray | jax.Array, dtype: str) -> tuple[np.ndarray, np.ndarray]:
  """[T, D] float -> (stored [T, D], scale [T] float32): int8 rounds each token to 127 steps of
  its largest |value| (scale = that / 127); the other types keep the values (scale 1). A
  `jax.Array` is quantized on its device, numpy on the host."""
  xp = jnp if isinstance(vectors, jax.Array) else np
  vectors = xp.asarray(vectors, xp.float32)
  if dtype != "int8":
    return vectors.astype(jnp.dtype(dtype)), xp.ones(len(vectors), xp.float32)
  scale = xp.abs(vectors).max(axis=1) / 127
  safe = xp.where(scale > 0, scale, 1)
  return xp.round(vectors / safe[:, None]).astype(xp.int8), scale.astype(xp.float32)


@functools.partial(jax.jit, donate_argnums=(0, 1))
def _placed(vectors: jax.Array, scales: jax.Array, chunk: jax.Array, chunk_scales: jax.Array,
            start: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Writes a quantized chunk [T_c, D] (and its scales [T_c]) into vectors [R, D] and scales [R]
  at row `start`, in place on the device."""
  return (jax.lax.dynamic_update_slice(vectors, chunk, (start, 0)),
          jax.lax.dynamic_update_slice(scales, chunk_scales, (start,)))


def _padded_locations(docs: np.ndarray, positions: np.ndarray, rows: int) -> np.ndarray:
  """[T'] docs and positions -> [rows, 2] int32, -1 past T'."""
  locations = np.full((rows, 2), -1, np.int32)
  locations[:len(docs), 0], locations[:len(docs), 1] = docs, positions
  return locations


def _share(chunks: Sequence[np.ndarray | jax.Array], starts: np.ndarray, first: int, rows: int,
           dtype: str) -> tuple[np.ndarray | jax.Array, np.ndarray | jax.Array]:
  """Rows [first, first + rows) of the chunks' concatenation (chunk c starts at row starts[c]),
  quantized: (stored [rows, D], scales [rows]), zeros past the last token. Assembled where the
  chunks are (numpy on the host, `jax.Array`s on their device), one chunk at a time."""
  xp = jnp if isinstance(chunks[0], jax.Array) else np
  vectors = xp.zeros((rows, chunks[0].shape[1]), jnp.dtype(dtype))
  scales = xp.zeros(rows, np.float32)
  for chunk, start in zip(chunks, starts):
    begin, end = max(first, start), min(first + rows, start + len(chunk))
    if begin >= end:
      continue
    quantized = _quantized(chunk[begin - start:end - start], dtype)
    if xp is jnp:
      vectors, scales = _placed(vectors, scales, *quantized, begin - first)
    else:
      vectors[begin - first:end - first], scales[begin - first:end - first] = quantized
  return vectors, scales


class DeviceTokens:
  """The token vectors of an index (and each token's document) resident on the local devices."""

  def __init__(self, chunks: Sequence[np.ndarray], doc_of_token: np.ndarray,
               position_of_token: np.ndarray, config: DeviceConfig,
               devices: Sequence[jax.Device] | None = None):
    """
    Args:
      chunks: token vectors [T_c, D] in token order (T tokens in all): numpy arrays
        (memory-mapped is fine) are assembled on the host, `jax.Array`s (vectors made on an
        accelerator) on their device, one device's share at a time, and copied to that device
        (so neither the host nor any device ever holds more than one share).
      doc_of_token: [T] int32 document of each token.
      position_of_token: [T] int32 position of each token in its document.
      config: the stored type and search settings.
      devices: the devices to shard over (default: `jax.local_devices()`).
    """
    devices = list(devices or jax.local_devices())
    self.config = config
    self.num_tokens = int(sum(len(c) for c in chunks))
    self.dim = chunks[0].shape[1]
    self._mesh = jax.sharding.Mesh(np.array(devices), (AXIS,))
    per_device = -(-max(self.num_tokens, 1) // len(devices))
    self._block = min(config.token_block, -(-per_device // BLOCK_MULTIPLE) * BLOCK_MULTIPLE)
    self._per_device = -(-per_device // self._block) * self._block
    starts = np.cumsum([0] + [len(c) for c in chunks[:-1]])
    shares = []
    for i, device in enumerate(devices):
      first = i * self._per_device
      locations = _padded_locations(doc_of_token[first:first + self._per_device],
                                    position_of_token[first:first + self._per_device],
                                    self._per_device)
      shares.append(
          jax.device_put(
              (*_share(chunks, starts, first, self._per_device, config.dtype), locations), device))
    sharding = jax.sharding.NamedSharding(self._mesh, jax.sharding.PartitionSpec(AXIS))
    rows = self._per_device * len(devices)
    self._vectors, self._scales, self._locations = (jax.make_array_from_single_device_arrays(
        (rows, *part[0].shape[1:]), sharding, list(part)) for part in zip(*shares))

  @property
  def nbytes(self) -> int:
    """Device memory of the resident arrays, over all devices."""
    return sum(a.nbytes for a in (self._vectors, self._scales, self._locations))

  def search(self, queries: jax.Array | np.ndarray,
             k: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The top-k tokens of each query token, on the devices.

    Args:
      queries: [Q, D] float32 query token vectors.
      k: tokens to keep per query token (more than T pads with -1).

    Returns:
      scores [Q, k] float32 descending (-inf = none), document [Q, k] int32 and position in it
      [Q, k] int32 of each token (-1 = none); ties keep the lower token index. Replicated
      arrays.
    """
    return _search(self._mesh, jnp.asarray(queries, jnp.float32), self._vectors, self._scales,
                   self._locations, k=k, block=self._block, num_tokens=self.num_tokens,
                   width=bin_width(self.num_tokens, k, self._block, self.config.recall_target))


def _binned_top_k(scores: jax.Array, k: int, width: int) -> tuple[jax.Array, jax.Array]:
  """scores [Q, B] -> the top k of the best of each bin (scores [Q, k], their columns [Q, k]);
  bin j of the B/width holds the columns j, j + B/width, ... (far apart: other documents)."""
  if width == 1:
    return jax.lax.top_k(scores, k)
  binned = scores.reshape(scores.shape[0], width, -1)
  best, bins = jax.lax.top_k(binned.max(axis=1), k)
  return best, jnp.take_along_axis(binned.argmax(axis=1), bins, axis=1) * binned.shape[2] + bins


@functools.partial(jax.jit, static_argnums=0, static_argnames=("k", "block", "num_tokens", "width"))
def _search(mesh: jax.sharding.Mesh, queries: jax.Array, vectors: jax.Array, scales: jax.Array,
            locations: jax.Array, *, k: int, block: int, num_tokens: int,
            width: int) -> tuple[jax.Array, jax.Array, jax.Array]:
  """`DeviceTokens.search`: per-device running top-k over blocks (each block's scores first
  reduced to the best of each bin of `width` tokens), then a merge of the devices' lists.
  vectors [P·T_p, D], scales [P·T_p] and locations [P·T_p, 2], sharded over AXIS."""
  spec = jax.sharding.PartitionSpec(AXIS)

  def local(queries, vectors, scales, locations):
    """One device's T_p tokens -> its top-k: scores [Q, k_p] and their locations [Q, k_p, 2]."""
    per_device = vectors.shape[0]
    num_blocks = per_device // block
    first = jax.lax.axis_index(AXIS) * per_device + block * jnp.arange(num_blocks)
    steps = (vectors.reshape(num_blocks, block, -1), scales.reshape(num_blocks, block),
             locations.reshape(num_blocks, block, 2), first)
    compute = jnp.bfloat16 if vectors.dtype == jnp.bfloat16 else jnp.float32

    def step(top, xs):
      """Merges one block into the running top-k; on ties the running (earlier) tokens win."""
      block_vectors, block_scales, block_locations, start = xs
      scores = jnp.dot(queries.astype(compute),
                       block_vectors.astype(compute).T, preferred_element_type=jnp.float32,
                       precision=jax.lax.Precision.HIGHEST) * block_scales
      scores = jnp.where(start + jnp.arange(block) < num_tokens, scores, -jnp.inf)
      block_scores, where = _binned_top_k(scores, min(k, block // width), width)
      scores = jnp.concatenate([top[0], block_scores], axis=1)
      found = jnp.concatenate([top[1], block_locations[where]], axis=1)
      top_scores, positions = jax.lax.top_k(scores, top[0].shape[1])
      return (top_scores, jnp.take_along_axis(found, positions[..., None], axis=1)), None

    shape = (queries.shape[0], min(k, per_device))
    top, _ = jax.lax.scan(step, (jnp.full(shape, -jnp.inf), jnp.full((*shape, 2), -1, jnp.int32)),
                          steps)
    # Device order is token order: concatenated, earlier devices' tokens come first on ties.
    return tuple(jax.lax.all_gather(t, AXIS, axis=1, tiled=True) for t in top)

  replicated = jax.sharding.PartitionSpec()
  scores, found = jax.shard_map(local, mesh=mesh, in_specs=(replicated, spec, spec, spec),
                                out_specs=(replicated, replicated),
                                check_vma=False)(queries, vectors, scales, locations)
  scores, positions = jax.lax.top_k(scores, min(k, scores.shape[1]))
  found = jnp.take_along_axis(found, positions[..., None], axis=1)
  missing = k - scores.shape[1]
  scores = jnp.pad(scores, ((0, 0), (0, missing)), constant_values=-jnp.inf)
  found = jnp.where((scores > -jnp.inf)[..., None], jnp.pad(found, ((0, 0), (0, missing), (0, 0))),
                    -1)
  return scores, found[..., 0], found[..., 1]
