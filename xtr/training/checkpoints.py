"""Orbax checkpoints of the train state and of the input pipeline's position.

A step directory holds two items: `state` (step, params, optimizer state; sharded arrays) and
`dataset` (each host's `tf.data` iterator, written with `tf.train.Checkpoint`, and the data
layout it fed), so a killed run resumes exactly: same parameters, same optimizer state, same
next batch. A run resumed on another number of hosts or another data layout (a resized pod)
restores the state, warns, and starts its input pipeline afresh: another layout's iterators
cannot be restored. Orbax writes each step to a temporary directory and renames it when
complete, so a kill never leaves a half-written checkpoint behind. Saves are asynchronous by
default: the step's arrays are copied to the host, then written while training goes on.

Preemption: a TPU VM gets SIGTERM about 30 s before it is taken away. `PreemptionNotice` turns
it into a flag that the train loop polls at step boundaries: it saves that step, waits for the
save and exits 0, so a preempted run loses only the step in flight.
"""
import contextlib
import dataclasses
import json
import signal
import sys
import time
from typing import Any

from etils import epath
import gin
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp
import tensorflow as tf

from xtr import io
from xtr import typecheck
from xtr.models import encoding


class DatasetIteratorHandler(ocp.CheckpointHandler):
  """Saves and restores this host's `tf.data` iterator, and the data layout it fed, in a step
  directory."""

  def save(self, directory: epath.Path, args: "DatasetIteratorSave"):
    directory.mkdir(parents=True, exist_ok=True)
    path = _process_path(directory)
    tf.train.Checkpoint(iterator=args.iterator).write(str(path))
    path.with_suffix(".json").write_text(json.dumps(args.layout))

  def restore(self, directory: epath.Path, args: "DatasetIteratorRestore") -> str | None:
    """Restores the iterator; returns None, or (leaving it as it is) why it cannot."""
    path = _process_path(directory)
    if not (path.parent / f"{path.name}.index").exists():
      saved = sorted(p.name.removesuffix(".index") for p in directory.glob("process_*.index"))
      return f"it was saved by other processes ({', '.join(saved)})"
    layout_path = path.with_suffix(".json")
    if layout_path.exists():  # (Checkpoints of earlier versions record no layout.)
      try:  # A regular file only (`io.read_bytes`): a FIFO planted there is never waited on.
        layout = json.loads(io.read_bytes(str(layout_path), 1 << 16))
      except (OSError, ValueError, RecursionError):
        layout = f"unreadable ({layout_path})"
      if layout != args.layout:
        return f"it fed the data layout {layout}, this run feeds {args.layout}"
    tf.train.Checkpoint(iterator=args.iterator).read(str(path)).assert_consumed()
    return None


def _process_path(directory: epath.Path) -> epath.Path:
  return directory / f"process_{jax.process_index()}-of-{jax.process_count()}"


@ocp.args.register_with_handler(DatasetIteratorHandler, for_save=True)
@dataclasses.dataclass
class DatasetIteratorSave(ocp.args.CheckpointArgs):
  iterator: Any
  layout: dict[str, int]


@ocp.args.register_with_handler(DatasetIteratorHandler, for_restore=True)
@dataclasses.dataclass
class DatasetIteratorRestore(ocp.args.CheckpointArgs):
  iterator: Any
  layout: dict[str, int]


_RESUME_EARLIER = "remove it and rerun to resume from the run's previous step"


@gin.configurable
class Checkpointer:
  """Saves every `save_every_steps` steps, at logging steps once `save_every_minutes` have passed
  since the last save, and at the end; keeps the last `keep` steps. `data_layout` describes what
  this host's iterator feeds (e.g. its block of the batch): a resumed run restores the iterator
  only where it matches. A symbolic link, FIFO or device in checkpoints/ (a step planted as a link
  to another run's) is refused before orbax reads the steps (`encoding.check_files`)."""

  def __init__(self, model_dir: str, save_every_steps: int = 1000, save_every_minutes: float = 10.0,
               keep: int = 3, async_save: bool = True, data_layout: dict[str, int] | None = None):
    typecheck.arguments(Checkpointer.__init__, locals())
    self.data_layout = data_layout or {}
    if save_every_steps < 1 or save_every_minutes <= 0 or keep < 1:
      raise ValueError(f"checkpoints.Checkpointer: save_every_steps={save_every_steps} and "
                       f"keep={keep} must be positive, save_every_minutes={save_every_minutes} "
                       "too.")
    directory = epath.Path(model_dir) / "checkpoints"
    self.directory = str(directory)
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, enable_async_checkpointing=async_save)
    self.save_every_steps = save_every_steps
    self.save_every_seconds = 60 * save_every_minutes
    self._last_save = time.monotonic()
    if directory.exists():  # Before orbax lists and reads the steps (`encoding.check_files`).
      encoding.check_files(directory)
    self.manager = ocp.CheckpointManager(
        directory if directory.is_absolute() else directory.absolute(), options=options,
        item_names=("state", "dataset"))

  def maybe_save(self, step: int, state: Any, iterator: Any, force: bool = False,
                 check_time: bool = False) -> None:
    """Saves `state` and the dataset `iterator` at `step` if it is due (or `force`).

    Args:
      check_time: also save if `save_every_minutes` have passed (every host agrees: process 0's
        clock decides, through a collective, so pass it only at steps that sync anyway).
    """
    if force or step % self.save_every_steps == 0 or (check_time and self._time_due()):
      with self._naming():
        self.manager.save(
            step, force=True,
            args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                    dataset=DatasetIteratorSave(iterator, self.data_layout)))
      self._last_save = time.monotonic()

  @contextlib.contextmanager
  def _naming(self):
    """A failed write (a full disk: OSError, TensorFlow's ResourceExhaustedError from the
    dataset's save, or an error of an earlier asynchronous save) as an OSError naming the
    checkpoint directory."""
    try:
      yield
    except (OSError, RuntimeError, tf.errors.OpError) as e:
      raise io.write_error(self.directory, e) from e

  def _time_due(self) -> bool:
    due = time.monotonic() - self._last_save >= self.save_every_seconds
    if jax.process_count() > 1:
      due = bool(multihost_utils.broadcast_one_to_all(np.int32(due)))
    return due

  def latest_step(self) -> int | None:
    """The step of the latest saved checkpoint (None if there is none)."""
    return self.manager.latest_step()

  def restore_latest(self, abstract_state: Any, iterator: Any) -> Any | None:
    """The latest saved state (None if there is none); advances `iterator` in place, unless the
    checkpoint's iterator fed another data layout (warned of on stderr).

    Args:
      abstract_state: the train state as `jax.ShapeDtypeStruct`s carrying target shardings.
    """
    step = self.latest_step()
    if step is None:
      return None
    with encoding.reading(f"{self.directory}/{step}", remedy=_RESUME_EARLIER):
      restored = self.manager.restore(
          step, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract_state),
                                        dataset=DatasetIteratorRestore(iterator, self.data_layout)))
    if restored.dataset is not None:
      print(
          f"Warning: the input pipeline of {self.directory}/{step} is not restored: "
          f"{restored.dataset}. The parameters and optimizer state are; this host's data starts "
          "afresh (its examples may repeat ones seen before the resize).", file=sys.stderr,
          flush=True)
    return restored.state

  def close(self) -> None:
    with self._naming():
      self.manager.wait_until_finished()
    self.manager.close()


class PreemptionNotice:
  """SIGTERM as a flag polled at step boundaries (`reached`), while in a `with` block.

  With one process, this process's SIGTERM handler sets it. With several, JAX's preemption
  service (started by `jax.distributed.initialize`, which catches SIGTERM itself) picks one step
  at which every process stops, so that all of them save the same step.
  """

  def __init__(self):
    self._received = False
    self._previous = None
    if jax.process_count() == 1:
      self._previous = signal.signal(signal.SIGTERM, self._receive)

  def _receive(self, signum, frame) -> None:
    del signum, frame
    self._received = True

  def reached(self, step: int) -> bool:
    """Whether to stop after `step`: a preemption notice has arrived."""
    if jax.process_count() == 1:
      return self._received
    try:
      return multihost_utils.reached_preemption_sync_point(step)
    except RuntimeError:  # The preemption service is off (jax_enable_preemption_service).
      return False

  def __enter__(self) -> "PreemptionNotice":
    return self

  def __exit__(self, *exc_info) -> None:
    """Gives SIGTERM back to the handler it had before."""
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)


INITIAL_PARAMS = "initial"  # model_dir/initial: the parameters a run started from (WiSE-FT's θ_0)


def save_params(directory: str | epath.Path, params: Any) -> None:
  """Writes `params` alone as `directory/state` ({"params": ...}), which `encoding.load_params`
  and every command's --checkpoint read like a training step. Orbax writes to a temporary
  directory and renames it when complete. Every process calls it (multi-host)."""
  path = epath.Path(directory) / "state"
  ocp.PyTreeCheckpointer().save(path if path.is_absolute() else path.absolute(), {"params": params})
