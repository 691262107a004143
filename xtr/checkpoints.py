"""Orbax checkpoints of the train state and of the input pipeline's position.

A step directory holds two items: `state` (step, params, optimizer state; sharded arrays) and
`dataset` (each host's `tf.data` iterator, written with `tf.train.Checkpoint`), so a killed run
resumes exactly: same parameters, same optimizer state, same next batch. Orbax writes each step
to a temporary directory and renames it when complete, so a kill never leaves a half-written
checkpoint behind.
"""
import dataclasses
from typing import Any

import gin
import jax
import orbax.checkpoint as ocp
import tensorflow as tf
from etils import epath

from xtr import typecheck


class DatasetIteratorHandler(ocp.CheckpointHandler):
  """Saves and restores this host's `tf.data` iterator in a step directory."""

  def save(self, directory: epath.Path, args: "DatasetIteratorSave"):
    directory.mkdir(parents=True, exist_ok=True)
    tf.train.Checkpoint(iterator=args.iterator).write(str(_process_path(directory)))

  def restore(self, directory: epath.Path, args: "DatasetIteratorRestore"):
    checkpoint = tf.train.Checkpoint(iterator=args.iterator)
    checkpoint.read(str(_process_path(directory))).assert_consumed()
    return args.iterator


def _process_path(directory: epath.Path) -> epath.Path:
  return directory / f"process_{jax.process_index()}-of-{jax.process_count()}"


@ocp.args.register_with_handler(DatasetIteratorHandler, for_save=True)
@dataclasses.dataclass
class DatasetIteratorSave(ocp.args.CheckpointArgs):
  iterator: Any


@ocp.args.register_with_handler(DatasetIteratorHandler, for_restore=True)
@dataclasses.dataclass
class DatasetIteratorRestore(ocp.args.CheckpointArgs):
  iterator: Any


@gin.configurable
class Checkpointer:
  """Saves every `save_every_steps` steps (and at the end), keeping the last `keep` steps."""

  def __init__(self, model_dir: str, save_every_steps: int = 1000, keep: int = 3,
               async_save: bool = False):
    typecheck.arguments(Checkpointer.__init__, locals())
    directory = epath.Path(model_dir) / "checkpoints"
    options = ocp.CheckpointManagerOptions(max_to_keep=keep,
                                           enable_async_checkpointing=async_save)
    self.save_every_steps = save_every_steps
    self.manager = ocp.CheckpointManager(
        directory if directory.is_absolute() else directory.absolute(), options=options,
        item_names=("state", "dataset"))

  def maybe_save(self, step: int, state: Any, iterator: Any, force: bool = False) -> None:
    """Saves `state` and the dataset `iterator` at `step` if it is due (or `force`)."""
    if force or step % self.save_every_steps == 0:
      self.manager.save(step, force=True, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state), dataset=DatasetIteratorSave(iterator)))

  def latest_step(self) -> int | None:
    """The step of the latest saved checkpoint (None if there is none)."""
    return self.manager.latest_step()

  def restore_latest(self, abstract_state: Any, iterator: Any) -> Any | None:
    """The latest saved state (None if there is none); advances `iterator` in place.

    Args:
      abstract_state: the train state as `jax.ShapeDtypeStruct`s carrying target shardings.
    """
    step = self.latest_step()
    if step is None:
      return None
    restored = self.manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract_state),
        dataset=DatasetIteratorRestore(iterator)))
    return restored.state

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()

INITIAL_PARAMS = "initial"  # model_dir/initial: the parameters a run started from (WiSE-FT's θ_0)


def save_params(directory: str | epath.Path, params: Any) -> None:
  """Writes `params` alone as `directory/state` ({"params": ...}), which `encoding.load_params`
  and every command's --checkpoint read like a training step. Orbax writes to a temporary
  directory and renames it when complete. Every process calls it (multi-host)."""
  path = epath.Path(directory) / "state"
  ocp.PyTreeCheckpointer().save(path if path.is_absolute() else path.absolute(),
                                {"params": params})
