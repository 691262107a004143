"""Building the ScaNN searcher of an index over its token vectors, and serializing it.

The searcher is loaded back, without pickle or TensorFlow, by `xtr.index.scann_search`.

Identical inputs give byte-identical files: k-means is seeded with k-means++ initialisation
(`random_init=False`; ScaNN's random initialisation is not seeded and makes its serialized
partitioner, codebooks and hashed dataset differ from run to run), and ScaNN trains on one
thread (`ScannConfig.training_threads`): with several, a token at a near tie between two
partitions may land in either (measured: 1 of SciFact's 1,242,251 tokens, in one of three builds).
"""
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Iterator
import contextlib
import dataclasses
import math
import os
import sys
import tempfile
from typing import Any
from typing import BinaryIO

from absl import logging
import gin
import numpy as np
from scann.scann_ops.py import scann_builder
from scann.scann_ops.py import scann_ops_pybind

from xtr import io
from xtr import typecheck
from xtr.index import files
from xtr.index import scann_search

_AH_MIN_TOKENS = 16  # ScaNN's LUT16 asymmetric hashing trains 16 centers per block.
UPSERT_ROWS = 65536  # Tokens converted to float32 and added to ScaNN at a time.
SAMPLE_PER_LEAF = 128  # Least training sample per partition with ScannConfig.leaf_size.
_LEAST = {  # The least value of each integer field of ScannConfig.
    "num_leaves": 1,
    "leaf_size": 0,
    "num_leaves_to_search": 1,
    "training_sample_size": 1,
    "sample_seed": 0,
    "dims_per_block": 1,
    "reorder_k": 0,
    "training_threads": 0
}
_REORDER_TYPES = {
    "float32": scann_builder.ReorderType.FLOAT32,
    "bfloat16": scann_builder.ReorderType.BFLOAT16,
    "int8": scann_builder.ReorderType.INT8
}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class ScannConfig:
  """ScaNN tree + asymmetric hashing (AH) settings; the defaults are the released XTR code's.

  Released XTR: tree(num_leaves=min(2000, T), num_leaves_to_search=100,
  training_sample_size=min(250000, T)).score_ah(1, anisotropic_quantization_threshold=0.1), no
  reordering. Here the tree has min(num_leaves, ceil(leaves_factor·sqrt(T))) leaves for T tokens
  (the usual sqrt(T) k-means sizing, equal to the released 2000 from T = 4M tokens on), or
  min(num_leaves, ceil(T / leaf_size)) with `leaf_size`, and searches
  min(num_leaves_to_search, leaves) of them. Indexes of fewer than 16 tokens are too
  small to train AH codebooks and are scored exactly by ScaNN (no tree). `gin/scann/` holds the
  settings measured faster or smaller in docs/performance.md.

  Attributes:
    num_leaves: upper bound on the number of k-means partitions.
    leaves_factor: partitions per sqrt(T) tokens (more, smaller partitions: each searched leaf
      holds fewer tokens).
    leaf_size: if > 0, tokens per partition: ceil(T / leaf_size) partitions instead of
      leaves_factor·sqrt(T), so that partitions keep their size as the corpus grows and a query
      token scans about as many tokens at any T (with num_leaves raised above T / leaf_size; the
      sample then holds at least `SAMPLE_PER_LEAF` tokens per partition; docs/performance.md,
      "Leaves of a fixed size").
    num_leaves_to_search: partitions searched per query token.
    spherical: train the partitions by spherical k-means (unit-norm centers: leaves are ranked by
      the cosine of their center with the query token, not by a dot product that favours tight
      leaves, whose mean vectors are longer). The token vectors are unit-norm, as spherical
      k-means assumes (docs/performance.md, "Leaves ranked by cosine").
    training_sample_size: tokens sampled (seeded) to train the partitions and the AH codebooks;
      every token is then added to the trained searcher chunk by chunk (`build`).
    sample_seed: the seed of that sample. Each seed gives a reproducible build; builds from
      different seeds differ as independent k-means runs do (docs/performance.md, "Build noise,
      measured": how much nDCG@10 moves between them).
    dims_per_block: dimensions per AH block, one code (a byte on disk) per block: 1 (ScaNN codes
      of 128 bytes per 128-d token), 2, 3, 4, 6, ... (fewer bytes, faster and less accurate:
      docs/performance.md; `gin/scann/fastest_384.gin` has 3, `compact_384.gin` 6).
    hash_type: "lut16" (16 centers per block, searched with in-register lookup tables) or
      "lut256" (256 centers per block: more accurate codes of the same size, slower lookups).
    anisotropic_quantization_threshold: AH score-aware quantization threshold (ScaNN's eta).
    reorder_k: if > 0, rescore this many AH candidates per query token with the vectors that
      ScaNN keeps for it (`reorder_type`), and return the best k of them.
    reorder_type: how ScaNN keeps the vectors it rescores with: "float32" (4 bytes per dimension,
      exact), "bfloat16" (2) or "int8" (1, ScaNN's fixed point with a scale per dimension).
    training_threads: threads that train and assign the partitions; 1 (the default) makes the
      build byte-for-byte reproducible, so that a resumed or repaired export equals an
      uninterrupted one; 0 uses every core (SciFact's 1.24M tokens on 2 cores: 65 s against
      109 s on one, measured in one run) at the price of rare differences at near ties.
  """
  num_leaves: int = 2000
  leaves_factor: float = 1.0
  leaf_size: int = 0
  num_leaves_to_search: int = 100
  spherical: bool = False
  training_sample_size: int = 250_000
  sample_seed: int = 0
  dims_per_block: int = 1
  hash_type: str = "lut16"
  anisotropic_quantization_threshold: float = 0.1
  reorder_k: int = 0
  reorder_type: str = "float32"
  training_threads: int = 1

  def __post_init__(self):
    typecheck.arguments(ScannConfig.__init__, dataclasses.asdict(self))
    for name, least in _LEAST.items():
      if getattr(self, name) < least:
        raise ValueError(f"ScannConfig.{name} = {getattr(self, name)!r} is less than {least}")
    if not (math.isfinite(self.leaves_factor) and self.leaves_factor > 0):
      raise ValueError(f"ScannConfig.leaves_factor = {self.leaves_factor!r} is not a finite "
                       "number > 0")
    for name, allowed in (("hash_type", ("lut16", "lut256")), ("reorder_type", _REORDER_TYPES)):
      if getattr(self, name) not in allowed:
        raise ValueError(f"ScannConfig.{name} = {getattr(self, name)!r} is not one of "
                         f"{sorted(allowed)}")


def settings(config: ScannConfig, num_tokens: int) -> dict[str, Any]:
  """What `build` makes of `config` for `num_tokens` tokens: `config` with num_leaves,
  num_leaves_to_search and training_sample_size replaced by the values used (see ScannConfig),
  plus the scoring ("asymmetric_hashing" or, below 16 tokens, "brute_force")."""
  if num_tokens < _AH_MIN_TOKENS:
    return dataclasses.asdict(config) | {
        "scoring": "brute_force",
        "num_leaves": 0,
        "num_leaves_to_search": 0,
        "reorder_k": 0
    }
  sample_size = config.training_sample_size
  if config.leaf_size:
    num_leaves = min(config.num_leaves, math.ceil(num_tokens / config.leaf_size))
    sample_size = max(sample_size, SAMPLE_PER_LEAF * num_leaves)
  else:
    num_leaves = min(config.num_leaves, math.ceil(config.leaves_factor * math.sqrt(num_tokens)))
  return dataclasses.asdict(config) | {
      "scoring": "asymmetric_hashing",
      "num_leaves": num_leaves,
      "num_leaves_to_search": min(config.num_leaves_to_search, num_leaves),
      "training_sample_size": min(sample_size, num_tokens)
  }


def build(chunks: Callable[[], Iterable[np.ndarray]], num_tokens: int,
          config: ScannConfig) -> tuple[scann_ops_pybind.ScannSearcher, dict[str, Any]]:
  """Builds a ScaNN dot-product searcher over token vectors streamed chunk by chunk.

  ScaNN is trained on a seeded sample of `training_sample_size` tokens (the k-means tree on all
  of it, AH codebooks on ScaNN's own sub-sample), then every token is upserted in blocks of
  `UPSERT_ROWS` in token order: row t of the searcher is token t. No float32 copy of the corpus
  is made (the sample and one block); what grows with the corpus is ScaNN's codes, the index
  itself, and, in `write`, the copies that ScaNN's serialization makes of them
  (docs/performance.md, "At corpus scale").

  Args:
    chunks: returns a new iterator over the tokens' vectors, [T_c, D] arrays (float16 or float32,
      e.g. memory-mapped) in token order; called twice (sample, then upserts).
    num_tokens: T, the total rows of the chunks.

  Returns:
    (searcher, its `settings` as built).
  """
  built = settings(config, num_tokens)
  sample_rows = _sample_rows(num_tokens, built["training_sample_size"], config.sample_seed)
  with _native_log_captured():
    searcher = _build(_gather_rows(chunks(), sample_rows), config, built)
    if len(sample_rows) < num_tokens:
      _upsert_all(searcher, chunks(), len(sample_rows), num_tokens)
  return searcher, built


def _sample_rows(num_tokens: int, size: int, seed: int) -> np.ndarray:
  """[size] int64 increasing rows of a sample of the T tokens drawn with `seed` (all of them if
  T <= size, and then nothing is upserted)."""
  if size >= num_tokens:
    return np.arange(num_tokens)
  return np.sort(np.random.default_rng(seed).choice(num_tokens, size, replace=False))


def _gather_rows(chunks: Iterable[np.ndarray], rows: np.ndarray) -> np.ndarray:
  """rows [S] increasing -> [S, D] float32 vectors of those rows of the chunks' concatenation."""
  parts, start = [], 0
  for chunk in chunks:
    stop = start + len(chunk)
    parts.append(np.asarray(chunk[files.rows_between(rows, start, stop)], np.float32))
    start = stop
  return np.concatenate(parts)


def _upsert_all(searcher: scann_ops_pybind.ScannSearcher, chunks: Iterable[np.ndarray],
                num_sampled: int, num_tokens: int) -> None:
  """Overwrites the searcher's rows 0..S-1 (the sample) with tokens 0..S-1 and appends the
  others, in token order, UPSERT_ROWS at a time."""
  native = searcher.searcher
  native.reserve(num_tokens)
  start = 0
  for chunk in chunks:
    for offset in range(0, len(chunk), UPSERT_ROWS):
      block = np.asarray(chunk[offset:offset + UPSERT_ROWS], np.float32)
      first = start + offset
      overwritten = list(range(first, min(first + len(block), num_sampled)))
      native.upsert(overwritten + [None] * (len(block) - len(overwritten)), block, len(block))
    start += len(chunk)
  if native.size() != num_tokens:
    raise RuntimeError(f"ScaNN holds {native.size()} tokens after its upserts, not {num_tokens}.")


def _build(vectors: np.ndarray, config: ScannConfig,
           built: dict[str, Any]) -> scann_ops_pybind.ScannSearcher:
  builder = scann_ops_pybind.builder(vectors, 10,
                                     "dot_product").set_n_training_threads(config.training_threads)
  if built["scoring"] == "brute_force":
    return builder.score_brute_force().build()
  # k-means++ initialisation is seeded; ScaNN's random initialisation is not (non-deterministic).
  builder = builder.tree(built["num_leaves"], built["num_leaves_to_search"],
                         training_sample_size=len(vectors), spherical=config.spherical,
                         random_init=False)
  builder = builder.score_ah(
      config.dims_per_block,
      anisotropic_quantization_threshold=config.anisotropic_quantization_threshold,
      hash_type=config.hash_type)
  if config.reorder_k:
    builder = builder.reorder(config.reorder_k, _REORDER_TYPES[config.reorder_type])
  return builder.build()


@contextlib.contextmanager
def _native_log_captured() -> Iterator[None]:
  """Keeps what ScaNN's C++ code logs on stderr while it trains (sample sizes, timings, warnings
  of empty k-means partitions) off the terminal: it goes to absl's debug log (--verbosity=1), or
  to stderr if the block raises."""
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as log:
    os.dup2(log.fileno(), 2)
    try:
      yield
    finally:
      os.dup2(saved, 2)
      os.close(saved)
      log.seek(0)
      text = log.read().decode("utf-8", "replace").strip()
      if text and sys.exc_info()[0] is not None:
        print(text, file=sys.stderr)
      elif text:
        logging.debug("ScaNN: %s", text)


def write(searcher: Any, index_dir: str,
          name: str = files.SCANN_DIR) -> tuple[dict[str, Any], np.ndarray | None]:
  """Serializes `searcher` (built, or loaded by `scann_search`) into index_dir/name (through
  name.tmp and a rename), its rows in partition order when it rescores (`_in_partition_order`).

  Returns:
    {relative path: {"sha256", "size"}} of the files written, for the manifest, and the order
    [R] int64 of the rows written (row r of the files is the searcher's row order[r]; None: the
    searcher's own order).
  """
  final = os.path.join(index_dir, name)
  tmp = final + ".tmp"
  io.remove_stale(tmp)
  os.mkdir(tmp)
  try:
    searcher.serialize(tmp, True)  # Paths relative to the directory.
    order = _in_partition_order(tmp)
  except (OSError, RuntimeError) as e:  # A full disk: "RuntimeError: ... I/O error".
    error = io.write_error(tmp, e)  # Before the removal frees what was written.
    io.remove_stale(tmp)
    raise error from e
  io.replace_dir(tmp, final)
  return {
      f"{name}/{entry}": files.record(os.path.join(final, entry))
      for entry in sorted(os.listdir(final))
  }, order


def _in_partition_order(scann_dir: str) -> np.ndarray | None:
  """Rewrites the serialized searcher in `scann_dir` with the rows of each partition next to one
  another, if it rescores candidates with its own copy of their vectors (`reorder_k`): a query
  token's candidates then lie in the few partitions it searched rather than across the whole
  copy, and rescoring them reads less scattered memory (11-15 % less time in ScaNN on NFCorpus
  and SciFact: docs/performance.md, "Rows in partition order"). A searcher without that copy
  already keeps each partition's codes together in memory and is left as it is, as is one whose
  rows already lie partition by partition (one leaf).

  Returns:
    [R] int64: row r of the rewritten files is the searcher's row order[r]; None if left as is.
  """
  assets = scann_search.written_assets(scann_dir)
  rescoring = {"DATASET_NPY", "BF16_DATASET_NPY", "INT8_DATASET_NPY"}
  if not rescoring & assets.keys() or "TOKENIZATION_NPY" not in assets or (
      "AH_DATASET_SOAR_NPY" in assets):  # Spilled codes (xtr builds none): left as they are.
    return None
  partitions = np.load(os.path.join(scann_dir, assets["TOKENIZATION_NPY"]))
  if np.all(partitions[1:] >= partitions[:-1]):
    return None
  order = np.argsort(partitions, kind="stable")
  for kind, name in assets.items():
    if scann_search.per_row(kind):
      rewrite_rows(os.path.join(scann_dir, name), order)
  return order


def rewrite_rows(path: str, order: np.ndarray) -> None:
  """Rewrites the .npy file `path` (R rows, or none) with its rows in `order` [R], UPSERT_ROWS at
  a time, each block's rows mapped only while they are gathered (memory bounded by a block)."""
  with io.open_regular(path) as f:
    shape, _, _ = files.npy_header(f, path)
    header = f.tell()
  if not shape[0]:
    return

  def rows_in_order(out: BinaryIO) -> None:
    with io.open_regular(path) as f:
      out.write(f.read(header))
    for start in range(0, len(order), UPSERT_ROWS):
      source = np.load(path, mmap_mode="r")
      out.write(np.ascontiguousarray(source[order[start:start + UPSERT_ROWS]]).tobytes())
      del source

  io.atomic_write(path, rows_in_order)
