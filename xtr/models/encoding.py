"""Inference-time encoding: texts -> L2-normalized token vectors with a trained XTREncoder.

Parameters come from an `xtr-train` checkpoint (a model directory or one of its step
directories) or from a directory of the released XTR weights (`xtr.models.released`); the encoder's
`fingerprint` (a hash of the parameters) ties an index to the exact weights that built it.
"""
import contextlib
import functools
import hashlib
import os
from typing import Any
from typing import Sequence

from etils import epath
import flax.linen as nn
import gin
import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from xtr import io
from xtr import typecheck
from xtr.models import released
from xtr.models import xtr_encoder
from xtr.text import tokenization


def latest_step_dir(checkpoint: str) -> epath.Path:
  """A model dir (with checkpoints/) or a step dir -> the (absolute) step dir to load, once
  nothing in it is a symbolic link, FIFO or device (`check_files`), nor, if it is the latest step
  of a run, the step dir itself (`check_step_dir`)."""
  path = epath.Path(checkpoint)
  path = path if path.is_absolute() else path.absolute()  # Orbax needs absolute paths.
  if (path / "state").exists():
    check_files(path)  # The user's own path (it may be a link), not a name the run lists.
    return path
  # Step dirs that hold a saved state: a stray numbered directory is not the run's latest step.
  steps = [
      p for p in (path / "checkpoints").glob("*") if p.name.isdigit() and (p / "state").is_dir()
  ]
  if not steps:
    raise FileNotFoundError(f"No complete xtr-train checkpoint under {path}, nor released XTR "
                            f"weights ({', '.join(released.FILES)}).")
  latest = max(steps, key=lambda p: int(p.name))
  check_step_dir(latest)
  return latest


def check_step_dir(step_dir: epath.Path) -> None:
  """Refuses (io.UnsafeFileError, naming it) a step dir of a run's checkpoints/ that is a
  symbolic link: planted there (e.g. to another run's step), another run's weights would load as
  this run's latest step. Then `check_files`."""
  if not io.is_remote(str(step_dir)):
    io.inside(str(step_dir.parent), step_dir.name)
  check_files(step_dir)


def check_files(directory: epath.Path | str) -> None:
  """Refuses (io.UnsafeFileError, naming it) any name under `directory` that is not a regular
  file or a directory, before orbax reads it: orbax follows a symbolic link (to another run's
  files) and waits forever on a FIFO. Links are not followed; remote directories not walked."""
  if io.is_remote(str(directory)):
    return
  for entry in os.scandir(directory):
    if entry.is_dir(follow_symlinks=False):
      check_files(entry.path)
    else:
      io.regular_size(entry.path)  # UnsafeFileError unless a regular file.


def load_params(checkpoint: str) -> Any:
  """The model parameters saved by `xtr-train` (optimizer state is not loaded), restored onto
  this process's first device (no host copy: a search process holds them once), or those of a
  released XTR directory (`released.FILES`), put there.

  Raises:
    ValueError: naming the checkpoint, if it cannot be read (`_restore`) or a parameter holds NaN
      or infinity (the first such).
    io.UnsafeFileError: naming a symbolic link, FIFO or device in it (`latest_step_dir`).
  """
  device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
  if released.is_released(checkpoint):
    params = jax.device_put(released.load_params(checkpoint), device)
  else:
    params = _restore(latest_step_dir(checkpoint), device)
  check_finite(params, checkpoint)
  return params


def _restore(step_dir: epath.Path, device: jax.sharding.Sharding) -> Any:
  """The params of an xtr-train checkpoint's step directory, restored onto `device`.

  Raises:
    ValueError: naming `step_dir`, if its metadata or a parameter's data cannot be read.
  """
  # Imported on first use (~0.3 s): --help and the importers of this module don't pay for it.
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  state_dir = step_dir / "state"
  metadata = ocp.PyTreeCheckpointer().metadata(state_dir).item_metadata
  if metadata is None:  # Orbax logs why (_METADATA missing or unreadable) and returns None.
    raise _damaged(step_dir, f"orbax cannot read the metadata of {state_dir}")
  abstract = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                          metadata["params"])
  with reading(step_dir):
    restored = ocp.PyTreeCheckpointer().restore(
        state_dir, args=ocp.args.PyTreeRestore(
            item={"params": abstract}, restore_args={
                "params": jax.tree.map(lambda _: ocp.ArrayRestoreArgs(sharding=device), abstract)
            }, partial_restore=True))
  return restored["params"]


_ANOTHER_STEP = "use another checkpoint (an earlier step of the run)"


def _damaged(step_dir: epath.Path | str, why: str, remedy: str = _ANOTHER_STEP) -> ValueError:
  """The error of a checkpoint that cannot be read: one line naming it, why, and what to do."""
  return ValueError(f"The checkpoint {step_dir} is damaged and cannot be read ({why}): restore "
                    f"it from a copy, or {remedy}.")


@contextlib.contextmanager
def reading(step_dir: epath.Path | str, remedy: str = _ANOTHER_STEP):
  """Turns the error orbax raises when a parameter's data cannot be read (a truncated or
  corrupted file: a bare `Exception` of many lines, TensorStore's ValueError as its cause) into
  `_damaged(step_dir, the first line of TensorStore's message, remedy)`; others pass."""
  try:
    yield
  except Exception as e:  # pylint: disable=broad-exception-caught
    if type(e) is not Exception or not isinstance(e.__cause__, ValueError):
      raise  # Not orbax's wrapper of a read error (a bug, or an interrupted read).
    raise _damaged(step_dir, str(e.__cause__).strip().split("\n")[0], remedy) from e


def check_finite(params: Any, checkpoint: str) -> None:
  """Refuses parameters with a NaN or infinite value (a damaged checkpoint or a diverged run),
  naming the checkpoint and the parameter, before they encode anything."""
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    # On the host, as `fingerprint` reads them: no program to compile per shape in a cold start.
    if not np.isfinite(np.asarray(leaf)).all():
      raise ValueError(f"The checkpoint {checkpoint} is damaged or diverged: its parameter "
                       f"{jax.tree_util.keystr(path)} holds NaN or infinite values. Use "
                       "another checkpoint (an earlier step of the run).")


def fingerprint(params: Any) -> str:
  """A short sha256 of every parameter's path, dtype, shape and bytes."""
  digest = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    leaf = np.asarray(leaf)
    digest.update(f"{jax.tree_util.keystr(path)}:{leaf.dtype}:{leaf.shape}".encode())
    digest.update(np.ascontiguousarray(leaf).tobytes())
  return digest.hexdigest()[:16]


@gin.configurable
class Encoder:
  """Encodes texts into token vectors in batches of at most `batch_size` rows, each padded to a
  power of two (1, 2, 4, ..., batch_size) and cut to a multiple of `length_bucket` tokens: one
  compilation per (rows, length) bucket, and a lone query runs one row, not batch_size. Texts are
  tokenized in Python (`xtr.text.tokenization`)."""

  def __init__(self, params: Any, model: nn.Module = gin.REQUIRED, vocabulary: Any = gin.REQUIRED,
               query_max_length: int = 32, doc_max_length: int = 256, batch_size: int = 32,
               length_bucket: int | None = 32, data_parallel: bool | None = None):
    """params: the model's, its backbone's layers in either layout (`xtr_encoder.in_layout`).
    vocabulary: the model's training vocabulary or its `tokenization` tokenizer.
    length_bucket: texts are encoded longest first, each batch cut to its longest text rounded
      up to a multiple of this many tokens (None: every batch at the full length). Vectors equal
      the full length's within float rounding (~3e-7; identical at powers of two).
    data_parallel: split each batch's rows over this process's devices, the parameters
      replicated (None: on accelerators; simulated CPU devices share the same cores).

    Raises:
      ValueError: naming a length or batch size (a gin binding) that is not a positive integer.
    """
    for name, value in (("query_max_length", query_max_length), ("doc_max_length", doc_max_length),
                        ("batch_size", batch_size),
                        ("length_bucket", 1 if length_bucket is None else length_bucket)):
      typecheck.in_range(f"xtr.models.encoding.Encoder.{name}", value,
                         typecheck.matches(value, int) and value >= 1, "a positive integer")
    devices = jax.local_devices()
    if data_parallel is False or (data_parallel is None and devices[0].platform == "cpu"):
      devices = devices[:1]
    mesh = jax.sharding.Mesh(np.array(devices), ("data",))
    self._rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec("data"))
    # Host arrays would be copied at every call.
    self.params = jax.device_put(xtr_encoder.in_layout(model, params),
                                 jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
    self.length_bucket = length_bucket
    self.model = model
    self.tokenizer = tokenization.of(vocabulary)
    xtr_encoder.check_vocabulary(model, self.tokenizer)
    self.query_max_length = query_max_length
    self.doc_max_length = doc_max_length
    self.batch_size = batch_size
    self.fingerprint = fingerprint(self.params)
    self._apply = jax.jit(lambda p, ids, role: model.apply({"params": p}, ids, role=role),
                          static_argnums=2)

  @functools.cached_property
  def dim(self) -> int:
    """The token dim D, found by tracing the model at the shape of one short query, the trace
    that encoding a lone query then reuses (a cold search traces the model once)."""
    ids = jax.ShapeDtypeStruct((self._rows.mesh.size, self._bucket(1, self.query_max_length)),
                               jnp.int32, sharding=self._rows)
    return jax.eval_shape(self._apply, self.params, ids, "query")[0].shape[-1]

  @property
  def has_salience(self) -> bool:
    """Whether the model has ALIGNER's salience heads (`xtr_encoder.XTREncoder.salience`)."""
    return getattr(self.model, "salience", None) is not None

  def tokenize(self, texts: Sequence[str], max_length: int) -> np.ndarray:
    """texts -> token ids [N, max_length] int32, padded with 0 (what `encode_ids` takes)."""
    return tokenization.encode_batch(self.tokenizer, texts, max_length)

  def encode(self, texts: Sequence[str], max_length: int, role: str = "document",
             progress: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """texts -> `encode_ids` of their `tokenize(texts, max_length)`."""
    return self.encode_ids(self.tokenize(texts, max_length), role, progress)

  def encode_ids(self, token_ids: np.ndarray, role: str = "document",
                 progress: str | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """token ids [N, L] -> (vectors [N, L, D] float32, mask [N, L] bool, salience).

    Args:
      role: "query" or "document": which salience head scores the tokens.
      progress: a label for a progress bar (None: no bar).

    Returns:
      salience: [N, L] float32 u of each token (0 on padding), or None if the model has no
        salience heads.
    """
    num_texts, max_length = token_ids.shape
    vectors = np.zeros((num_texts, max_length, self.dim), np.float32)
    mask = np.zeros((num_texts, max_length), bool)
    salience = np.zeros((num_texts, max_length), np.float32) if self.has_salience else None
    lengths = np.sum(token_ids != xtr_encoder.PAD_ID, axis=1)
    order = (np.argsort(-lengths, kind="stable") if self.length_bucket else np.arange(num_texts))
    starts = range(0, num_texts, self.batch_size)
    for start in tqdm.tqdm(starts, desc=progress, unit="batch", disable=progress is None):
      rows = order[start:start + self.batch_size]
      length = self._bucket(int(lengths[rows].max()), max_length)
      batch_vectors, batch_mask, batch_salience = self._encode_batch(token_ids[rows, :length], role)
      vectors[rows, :length] = batch_vectors
      mask[rows, :length] = batch_mask
      if salience is not None:
        salience[rows, :length] = batch_salience
    return vectors, mask, salience

  def _bucket(self, longest: int, max_length: int) -> int:
    """The length a batch whose longest text has `longest` tokens is cut to."""
    if not self.length_bucket:
      return max_length
    return min(max_length, max(1, -(-longest // self.length_bucket) * self.length_bucket))

  def _encode_batch(self, ids: np.ndarray, role: str) -> tuple[np.ndarray, ...]:
    """ids [R, L] -> the model's (vectors [R, L, D], mask [R, L], salience [R, L] or None), the
    rows padded to a power of two (at most batch_size) that the devices divide."""
    devices = self._rows.mesh.size
    rows = min(self.batch_size, 1 << (len(ids) - 1).bit_length())
    rows = -(-rows // devices) * devices
    padded = np.zeros((rows, ids.shape[1]), np.int32)
    padded[:len(ids)] = ids
    outputs = jax.device_get(self._apply(self.params, jax.device_put(padded, self._rows), role))
    return tuple(None if x is None else x[:len(ids)] for x in outputs)

  def unknown_only(self, token_ids: np.ndarray) -> list[int]:
    """Indices of the rows of `token_ids` [N, L] (`tokenize`) whose tokens are all unknown to
    the vocabulary (or that hold none at all)."""
    return np.flatnonzero(tokenization.unknown_only(self.tokenizer, token_ids)).tolist()

  def encode_queries(self,
                     texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """texts -> ([N, n, D], [N, n], salience [N, n] or None), n = query_max_length."""
    return self.encode(texts, self.query_max_length, "query")

  def encode_documents(
      self, texts: Sequence[str],
      progress: str | None = None) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """texts -> (each document's valid token vectors [len_i, D] (padding dropped), their
    saliences [len_i] or None)."""
    vectors, mask, salience = self.encode(texts, self.doc_max_length, "document", progress)
    return ([v[m] for v, m in zip(vectors, mask)],
            None if salience is None else [u[m] for u, m in zip(salience, mask)])
