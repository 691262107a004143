"""A t5x-style trainer for XTR, T5-ColBERT and ALIGNER: the data, the checkpoints and the loop
around the jitted train step of `step` (sharded init, the in-batch loss of the global batch).

Each host feeds the rows of every global batch that its devices hold
(`partitioning.data_layout`); the run resumes from its latest checkpoint, saves one on SIGTERM,
logs tokens/s and MFU (`throughput`) and hands the parameters to an evaluator every step.
"""
import contextlib
import dataclasses
import os
import time
from typing import Any
from typing import Callable

from clu import metric_writers
from etils import epath
import flax.linen as nn
import gin
import jax
import numpy as np

from xtr import io
from xtr import typecheck
from xtr.data import pipeline
from xtr.models import xtr_encoder
from xtr.text import tokenization
from xtr.training import checkpoints
from xtr.training import initialization as initialization_lib
from xtr.training import objective as objective_lib
from xtr.training import optimizers
from xtr.training import partitioning
from xtr.training import step as step_lib
from xtr.training import throughput

TRAIN_LOCK = "train.lock"  # model_dir/train.lock: flock-ed while a run trains into model_dir.


@gin.configurable
def train(
    model_dir: str = gin.REQUIRED, model: nn.Module = gin.REQUIRED, vocabulary: Any = gin.REQUIRED,
    dataset: pipeline.DatasetConfig = pipeline.DatasetConfig(), num_steps: int = 50_000,
    objective: objective_lib.Objective = objective_lib.Objective(),
    initialization: initialization_lib.Initialization = initialization_lib.Initialization(),
    micro_batch_size: int | None = None, seed: int = 0, log_every_steps: int = 100,
    profile_steps: tuple[int, int] | None = None,
    evaluator: Callable[[int, nn.Module, Any, Any], dict[str, float]] | None = None
) -> step_lib.TrainState:
  """Trains `model` on `dataset` for `num_steps`, resuming from `model_dir` if possible; raises
  `Preempted` (a SystemExit of status 0) after saving the step a preemption notice stopped at.

  Args:
    model_dir: checkpoints (`model_dir/checkpoints`) and TensorBoard events go here; one run
      at a time (`model_dir/train.lock`: a second run is refused).
    model: an `xtr.models.xtr_encoder.XTREncoder` (from a gin/models/*.gin file).
    vocabulary: the model's vocabulary (tokenizes the task's text).
    dataset: the task, global batch size and lengths (`pipeline.DatasetConfig`, gin:
      `trainer.train.dataset = @pipeline.DatasetConfig()`).
    objective: the in-batch loss (`objective.Objective`, gin: `trainer.train.objective =
      @objective.Objective()`): its scoring ("xtr" trains with f_xtr, top-`k_train` in-batch
      token retrieval; "colbert" with f_colbert, T5-ColBERT's sum of max; "aligner" with
      ALIGNER's sparse alignment, weighted by the model's saliences if it has a salience gate),
      `k_train`, `temperature` (the paper's loss is the plain cross-entropy over f scores in
      [-1, 1], temperature 1; a smaller one sharpens it), `alignment`, and `distillation`: the
      weight of a KL term that keeps the in-batch score distribution near the untuned
      backbone's own (f_colbert over its raw token vectors), which needs a pretrained backbone
      (a resumed run loads it again).
    initialization: pretrained backbone, projection init and whether to save the initial
      parameters (`initialization.Initialization`, gin: `trainer.train.initialization =
      @initialization.Initialization()`).
    micro_batch_size: encode each step's batch in micro-batches of this many queries
      (gradient caching, `xtr.training.grad_cache`): the same step in the memory of a micro-batch,
      for an extra encoder forward pass. Divides the batch size; divisible by the data axis.
    seed: seeds the initialization, dropout and the order of the examples.
    profile_steps: (first, last): write a `jax.profiler` trace of these steps to
      `model_dir/profile` (TensorBoard's profile plugin reads it).
    evaluator: called after every step as `evaluator(step, model, params, vocabulary)`; the
      metrics it returns (none at most steps) are printed and logged to TensorBoard, e.g.
      `dev_eval.DevEvaluator` (nDCG@10 of a dev split).
  """
  typecheck.arguments(train, locals())
  _check_counts(num_steps, log_every_steps, micro_batch_size)
  # Built now, its bindings checked (e.g. the learning rate), before the mesh, data or model dir.
  optimizer = optimizers.make_optimizer()
  # Read and checked here, before TensorFlow reads it lazily (a FIFO hung it, damage was a
  # traceback hundreds of lines long).
  xtr_encoder.check_vocabulary(model, tokenization.of(vocabulary))
  objective = _for_model(objective, model)
  distillation = objective.distillation
  if distillation and initialization.pretrained_backbone is None:
    raise ValueError(f"objective.Objective.distillation={distillation} needs "
                     "initialization.Initialization.pretrained_backbone (the teacher).")
  batch_size = dataset.batch_size
  # The preemption notice from the start: SIGTERM may come at any time.
  with _model_dir_lock(model_dir), checkpoints.PreemptionNotice() as preemption:
    mesh = partitioning.make_mesh()
    num_data_shards = mesh.shape[partitioning.DATA_AXIS]
    if batch_size % num_data_shards:
      raise ValueError(
          f"pipeline.DatasetConfig.batch_size={batch_size} is not divisible by the data axis "
          f"({num_data_shards}).")
    if micro_batch_size is not None and (batch_size % micro_batch_size or
                                         micro_batch_size % num_data_shards):
      raise ValueError(f"trainer.train.micro_batch_size={micro_batch_size} must divide batch_size="
                       f"{batch_size} and be divisible by the data axis ({num_data_shards}).")
    layout = partitioning.data_layout(mesh)
    print(
        f"Mesh {dict(mesh.shape)}: process {jax.process_index()} of {jax.process_count()} feeds "
        f"block {layout.shard_id} of {layout.num_shards} of every batch "
        f"({batch_size // layout.num_shards} of {batch_size} queries).", flush=True)
    batches = pipeline.get_dataset(dataset.task_name, vocabulary, dataset.task_feature_lengths,
                                   batch_size // layout.num_shards, seed, shard_id=layout.shard_id,
                                   num_shards=layout.num_shards)
    iterator = iter(batches)
    first_batches = lambda task: pipeline.get_dataset(task or dataset.task_name, vocabulary, dataset
                                                      .task_feature_lengths, batch_size, seed
                                                     ).as_numpy_iterator()
    checkpointer = checkpoints.Checkpointer(
        model_dir, data_layout={
            "processes": jax.process_count(),
            "shard_id": layout.shard_id,
            "num_shards": layout.num_shards,
            "batch_size": batch_size // layout.num_shards
        })
    # A resumed run takes every parameter from its checkpoint: no pretrained weights to load.
    pretrained = ({} if checkpointer.latest_step() is not None else initialization.pretrained(
        model, first_batches, mesh))
    # The distillation teacher: the untuned backbone, loaded again by a resumed run.
    teacher = (pretrained.get("backbone") or
               initialization.backbone(model)) if distillation else None
    with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.axis_rules()):
      state, shardings = step_lib.init_state(model, optimizer, mesh, jax.random.key(seed),
                                             pretrained)
      restored = checkpointer.restore_latest(step_lib.abstract_state(model, optimizer, mesh),
                                             iterator)
      if restored is not None:
        state = restored
        print(f"Resumed from {model_dir} at step {int(state.step)}.", flush=True)
      teacher_params = (None if teacher is None else jax.device_put(teacher,
                                                                    shardings.params["backbone"]))
      step = step_lib.make_train_step(model, optimizer, mesh, shardings, objective,
                                      micro_batch_size, seed, teacher_params is not None)
      train_step = lambda state, batch: step(state, batch, teacher_params)
      initial_dir = epath.Path(model_dir) / checkpoints.INITIAL_PARAMS
      if initialization.save_initial_params and restored is None and not initial_dir.exists():
        checkpoints.save_params(initial_dir, state.params)
      if num_steps == 0 and restored is None:  # The initial (e.g. pretrained) model, to export.
        checkpointer.maybe_save(0, state, iterator, force=True)
      cost = _step_cost(model, state.params, batches.element_spec, batch_size)
      evaluate = None if evaluator is None else (
          lambda step, params: evaluator(step, model, params, vocabulary))
      state = _loop(state, train_step, iterator, mesh, layout, checkpointer, preemption, model_dir,
                    num_steps, log_every_steps, cost, profile_steps, evaluate)
    checkpointer.close()
  if int(state.step) < num_steps:
    raise Preempted(0)  # Exit status 0: the step is saved, the same command resumes.
  return state


class Preempted(SystemExit):
  """Training stopped at a preemption notice (SIGTERM) after saving its step: the process ends
  (exit status 0) rather than go on to what needs the trained model."""


def _check_counts(num_steps: int, log_every_steps: int, micro_batch_size: int | None) -> None:
  """Refuses, naming the binding, num_steps < 0 (0 saves the initial model; below 0 a run did
  nothing and exited 0), log_every_steps < 1 (a ZeroDivisionError after the first step) and
  micro_batch_size < 1."""
  for name, value, least in (("num_steps", num_steps, 0), ("log_every_steps", log_every_steps, 1),
                             ("micro_batch_size",
                              1 if micro_batch_size is None else micro_batch_size, 1)):
    typecheck.in_range(f"trainer.train.{name}", value, value >= least, f"an integer >= {least}")


def _model_dir_lock(model_dir: str) -> contextlib.AbstractContextManager:
  """The lock of a local model dir, taken by process 0: a second run training into the same
  directory is refused while this one lives (`io.Lock`)."""
  if io.is_remote(model_dir) or jax.process_index() != 0:
    return contextlib.nullcontext()
  os.makedirs(model_dir, exist_ok=True)
  path = os.path.join(model_dir, TRAIN_LOCK)
  return io.Lock(
      path, "training", lambda holder:
      (f"{model_dir} is being trained by another run ({holder}, holding {path}); wait for it to "
       "finish or train into another model dir."))


def _for_model(objective: objective_lib.Objective, model: nn.Module) -> objective_lib.Objective:
  """`objective` with the l1 of `model`'s salience gate; refuses a gate that the objective's
  scoring would ignore."""
  salience = getattr(model, "salience", None)
  if salience is None:
    return objective
  if objective.scoring != "aligner":
    raise ValueError(f"objective.Objective.scoring={objective.scoring!r} does not use the "
                     "model's salience gate; train it with scoring='aligner'.")
  return dataclasses.replace(objective, l1=salience.l1)


def _step_cost(model: nn.Module, params: Any, batch_spec: dict[str, Any],
               batch_size: int) -> throughput.StepCost:
  """The `throughput.StepCost` of a global batch of `batch_size` queries, shaped as a host's
  batches (`batch_spec`: query_tokens [b, Lq], doc_tokens [b, K, Ld]) are."""
  _, length = batch_spec["query_tokens"].shape
  _, docs_per_query, doc_length = batch_spec["doc_tokens"].shape
  return throughput.step_cost(model, params, (batch_size, length),
                              (batch_size * docs_per_query, doc_length))


def _loop(state, train_step, iterator, mesh, layout, checkpointer, preemption, model_dir, num_steps,
          log_every_steps, cost, profile_steps, evaluate):
  """Runs steps until `num_steps` or a preemption notice, logging, evaluating and checkpointing;
  returns the final state."""
  writer = metric_writers.SummaryWriter(model_dir) if jax.process_index() == 0 else None
  start_step = int(state.step)
  reported = (start_step, time.time())  # The last report's (step, time).
  peak = throughput.peak_flops(list(mesh.devices.flat))
  tracing = False
  for step in range(start_step + 1, num_steps + 1):
    host_batch = jax.tree.map(np.asarray, pipeline.next_batch(iterator))
    batch = partitioning.global_batch(host_batch, mesh, layout)
    if profile_steps is not None and step == profile_steps[0]:
      jax.profiler.start_trace(os.path.join(model_dir, "profile"))
      tracing = True
    state, metrics = train_step(state, batch)
    if tracing and step == profile_steps[1]:
      tracing = _stop_trace(state, model_dir)
    logged = step % log_every_steps == 0 or step in (start_step + 1, num_steps)
    if logged:
      metrics = jax.tree.map(float, jax.device_get(metrics))
      _report(step, num_steps, reported, metrics, cost, peak, writer)
      reported = (step, time.time())
    evaluated = {} if evaluate is None else evaluate(step, state.params)
    if evaluated:
      _log_evaluation(step, evaluated, writer)
      reported = (step, time.time())  # The evaluation's time is not the steps'.
    preempted = preemption.reached(step)
    checkpointer.maybe_save(step, state, iterator, force=step == num_steps or preempted,
                            check_time=logged)
    if preempted:
      print(
          f"Preempted (SIGTERM) after step {step}: saved it; rerun the same command to "
          "resume.", flush=True)
      break
  if tracing:  # The run ended (or was preempted) inside the profiled steps.
    _stop_trace(state, model_dir)
  if writer is not None:
    writer.flush()
  return state


def _stop_trace(state: step_lib.TrainState, model_dir: str) -> bool:
  """Stops the profiler trace once the steps so far have run; returns False (not tracing)."""
  jax.block_until_ready(state)
  jax.profiler.stop_trace()
  print(f"Wrote a profiler trace to {os.path.join(model_dir, 'profile')}.", flush=True)
  return False


def _log_evaluation(step: int, metrics: dict[str, float], writer) -> None:
  print(f"step {step} | " + " | ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items())),
        flush=True)
  if writer is not None:
    writer.write_scalars(step, metrics)


def _report(step, num_steps, reported, metrics, cost, peak, writer) -> None:
  """Prints a progress line and writes the metrics to TensorBoard: the step's metrics, and
  steps/s, tokens/s and (on a device with a known peak) MFU since the last report (`reported`:
  its step and time; the first step's include compiling it)."""
  steps_per_sec = (step - reported[0]) / max(time.time() - reported[1], 1e-9)
  eta = (num_steps - step) / max(steps_per_sec, 1e-9)
  rates = cost.rates(steps_per_sec, peak)
  shown = " | ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))
  speed = f"{steps_per_sec:.2f} steps/s | {rates['tokens_per_sec']:.0f} tokens/s"
  if "mfu" in rates:
    speed += f" | MFU {100 * rates['mfu']:.1f} %"
  print(f"step {step}/{num_steps} | {shown} | {speed} | eta {eta:.0f}s", flush=True)
  if writer is not None:
    writer.write_scalars(step, {**metrics, "steps_per_sec": steps_per_sec, **rates})
