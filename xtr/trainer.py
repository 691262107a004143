"""A t5x-style trainer for XTR and T5-ColBERT: sharded init, a jitted train step, the loop.

Data flows one way: batches of token ids -> token vectors (the model) -> in-batch scores
(`f_xtr` or `f_colbert` over all documents of the *global* batch) -> cross-entropy.
Because the train step is jitted over global arrays sharded on the `data` mesh axis, the
in-batch top-`k_train` of `f_xtr` runs over every document token of the global batch.
"""
import itertools
import time
from typing import Any, Callable

import flax
import flax.linen as nn
import gin
import jax
import jax.numpy as jnp
import numpy as np
import optax
from clu import metric_writers
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from xtr import checkpoints
from xtr import data
from xtr import losses
from xtr import models
from xtr import optimizers
from xtr import partitioning


PCA_BATCHES = 4  # Training batches whose token vectors give the "pca" projection init.


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def loss_and_metrics(params: Any, batch: dict[str, jax.Array], model: nn.Module, scoring: str,
                     k_train: int, temperature: float = 1.0,
                     dropout_rng: jax.Array | None = None):
  """In-batch cross-entropy of every query against every document of the (global) batch.

  Args:
    batch: `query_tokens` [B, Lq] and `doc_tokens` [B, K, Ld]; document 0 of a row is the
      positive of that row's query, K = 1 + negatives, so C = B * K documents in all.
    scoring: "xtr" (f_xtr, top-`k_train` in-batch token retrieval) or "colbert" (f_colbert).
    temperature: the softmax runs over scores / temperature.
  Returns:
    (loss, metrics): loss, accuracy (positive ranked first) and the fraction of query tokens
    whose top-`k_train` holds a token of their positive document.
  """
  num_queries, docs_per_query, doc_length = batch["doc_tokens"].shape
  rngs = None if dropout_rng is None else {"dropout": dropout_rng}
  encode = lambda tokens: model.apply(
      {"params": params}, tokens, deterministic=dropout_rng is None, rngs=rngs)
  q, q_mask = encode(batch["query_tokens"])
  d, d_mask = encode(batch["doc_tokens"].reshape(num_queries * docs_per_query, doc_length))
  token_scores = losses.token_scores(q, d)  # [B, n, C, m]
  retrieved = losses.retrieval_mask(token_scores, q_mask, d_mask, k_train)
  if scoring == "xtr":
    scores = losses.f_xtr_from_token_scores(token_scores, retrieved, d_mask)
  elif scoring == "colbert":
    scores = losses.f_colbert_from_token_scores(token_scores, q_mask, d_mask)
  else:
    raise ValueError(f"Unknown scoring {scoring!r}: expected 'xtr' or 'colbert'.")
  positive_index = jnp.arange(num_queries) * docs_per_query
  loss = losses.in_batch_cross_entropy(scores / temperature, positive_index)
  metrics = {
      "loss": loss,
      "accuracy": losses.in_batch_accuracy(scores, positive_index),
      "positive_token_hit_rate": losses.positive_token_hit_rate(
          retrieved, q_mask, positive_index),
  }
  return loss, metrics


def init_state(model: nn.Module, optimizer: optax.GradientTransformation, mesh: Mesh,
               rng: jax.Array, pretrained: dict[str, Any] | None = None):
  """Initializes a sharded TrainState; returns (state, its shardings).

  Parameters are created directly in their shardings (logical axis rules); each entry of
  `pretrained` (e.g. {"backbone": tree, "projection": {"kernel": [H, D]}}) replaces the
  parameter subtree of that name.
  """
  init = lambda r: model.init(r, jnp.ones((1, 8), jnp.int32))["params"]
  boxed = jax.eval_shape(init, rng)
  param_shardings = partitioning.param_shardings(boxed, mesh)
  params = jax.jit(lambda r: nn.meta.unbox(init(r)), out_shardings=param_shardings)(rng)
  params = dict(params)
  for name, subtree in (pretrained or {}).items():
    params[name] = jax.device_put(
        _checked_like(name, subtree, params[name]), param_shardings[name])
  opt_shardings = partitioning.opt_state_shardings(
      jax.eval_shape(optimizer.init, params), params, param_shardings, mesh)
  opt_state = jax.jit(optimizer.init, out_shardings=opt_shardings)(params)
  replicated = NamedSharding(mesh, PartitionSpec())
  state = TrainState(step=jax.device_put(jnp.zeros((), jnp.int32), replicated),
                     params=params, opt_state=opt_state)
  shardings = TrainState(step=replicated, params=param_shardings, opt_state=opt_shardings)
  return state, shardings


def _checked_like(name: str, loaded: Any, reference: Any) -> Any:
  """Checks that a loaded parameter tree has the structure and shapes of `reference`."""
  if jax.tree.structure(loaded) != jax.tree.structure(reference):
    raise ValueError(f"The pretrained {name!r} parameter tree does not match the model's: "
                     f"{jax.tree.structure(loaded)} vs {jax.tree.structure(reference)}.")
  flat = jax.tree_util.tree_flatten_with_path(loaded)[0]
  for (path, x), ref in zip(flat, jax.tree.leaves(reference)):
    if x.shape != ref.shape:
      raise ValueError(f"Pretrained parameter {name}{jax.tree_util.keystr(path)} has shape "
                       f"{x.shape}; the model expects {ref.shape}.")
  return loaded


def make_train_step(model: nn.Module, optimizer: optax.GradientTransformation, mesh: Mesh,
                    shardings: TrainState, scoring: str, k_train: int,
                    temperature: float = 1.0, dropout_seed: int = 0):
  """Returns the jitted `train_step(state, batch) -> (state, metrics)`."""
  base_rng = jax.random.key(dropout_seed)

  def train_step(state: TrainState, batch: dict[str, jax.Array]):
    dropout_rng = jax.random.fold_in(base_rng, state.step)
    grad_fn = jax.value_and_grad(loss_and_metrics, has_aux=True)
    (_, metrics), grads = grad_fn(state.params, batch, model, scoring, k_train, temperature,
                                  dropout_rng)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics["grad_norm"] = optax.tree.norm(grads)
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  replicated = NamedSharding(mesh, PartitionSpec())
  return jax.jit(train_step,
                 in_shardings=(shardings, partitioning.batch_sharding(mesh)),
                 out_shardings=(shardings, replicated),
                 donate_argnums=0)


@gin.configurable
def train(model_dir: str = gin.REQUIRED,
          model: nn.Module = gin.REQUIRED,
          vocabulary: Any = gin.REQUIRED,
          task_name: str = "msmarco_triples",
          num_steps: int = 50_000,
          batch_size: int = 128,
          task_feature_lengths: dict[str, int] | None = None,
          scoring: str = "xtr",
          k_train: int = 128,
          temperature: float = 1.0,
          seed: int = 0,
          log_every_steps: int = 100,
          pretrained_backbone: Callable[[], Any] | None = None,
          projection_init: str = "random") -> TrainState:
  """Trains `model` on `task_name` for `num_steps`, resuming from `model_dir` if possible.

  Args:
    model_dir: checkpoints (`model_dir/checkpoints`) and TensorBoard events go here.
    model: an `xtr.models.XTREncoder` (from a gin/models/*.gin file).
    vocabulary: the model's vocabulary (tokenizes the task's text).
    batch_size: the *global* number of queries per step; each host reads its share.
    task_feature_lengths: max tokens of {"query", "positive", "negative"}.
    scoring: "xtr" trains with f_xtr (top-`k_train` in-batch token retrieval), "colbert" with
      f_colbert (sum of max, T5-ColBERT).
    k_train: in-batch retrieval depth of f_xtr (also used by the hit-rate metric).
    temperature: divides the scores before the softmax. The paper's loss is the plain
      cross-entropy over f scores in [-1, 1] (temperature 1); a smaller one sharpens it.
    pretrained_backbone: returns backbone params (e.g. `xtr.hf_weights.load_backbone`).
    projection_init: "random" (the model's initializer) or "pca": the projection starts as
      the top principal directions of the pretrained backbone's token vectors on the first
      training examples (`models.pca_projection`), which keeps the pretrained MaxSim geometry.
  """
  lengths = task_feature_lengths or {"query": 32, "positive": 256, "negative": 256}
  mesh = partitioning.make_mesh()
  if batch_size % mesh.shape[partitioning.DATA_AXIS]:
    raise ValueError(f"batch_size={batch_size} is not divisible by the data axis "
                     f"({mesh.shape[partitioning.DATA_AXIS]}).")
  iterator = iter(data.get_dataset(
      task_name, vocabulary, lengths, batch_size // jax.process_count(), seed,
      shard_id=jax.process_index(), num_shards=jax.process_count()))
  optimizer = optimizers.make_optimizer()
  first_batches = lambda: data.get_dataset(task_name, vocabulary, lengths, batch_size, seed)
  checkpointer = checkpoints.Checkpointer(model_dir)
  # A resumed run takes every parameter from its checkpoint: no pretrained weights to load.
  pretrained = ({} if checkpointer.latest_step() is not None else
                _pretrained(model, pretrained_backbone, projection_init, first_batches))
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.DEFAULT_RULES):
    state, shardings = init_state(model, optimizer, mesh, jax.random.key(seed), pretrained)
    abstract = jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, shardings)
    restored = checkpointer.restore_latest(abstract, iterator)
    if restored is not None:
      state = restored
      print(f"Resumed from {model_dir} at step {int(state.step)}.", flush=True)
    train_step = make_train_step(model, optimizer, mesh, shardings, scoring, k_train,
                                 temperature, seed)
    if num_steps == 0:  # Saves the initial (e.g. pretrained, untuned) model, to export it.
      checkpointer.maybe_save(0, state, iterator, force=True)
    state = _loop(state, train_step, iterator, mesh, checkpointer, model_dir, num_steps,
                  log_every_steps)
  checkpointer.close()
  return state


def _pretrained(model: nn.Module, pretrained_backbone: Callable[[], Any] | None,
                projection_init: str, dataset: Callable[[], Any]) -> dict[str, Any]:
  """The pretrained parameter subtrees that replace the model's random initialization."""
  if pretrained_backbone is None:
    if projection_init != "random":
      raise ValueError(f"projection_init={projection_init!r} needs a pretrained_backbone.")
    return {}
  pretrained = {"backbone": pretrained_backbone()}
  if projection_init == "pca":
    batches = itertools.islice(dataset().as_numpy_iterator(), PCA_BATCHES)
    token_ids = [ids for batch in batches
                 for ids in (batch["query_tokens"], batch["doc_tokens"].reshape(
                     -1, batch["doc_tokens"].shape[-1]))]
    pretrained["projection"] = {
        "kernel": models.pca_projection(model, pretrained["backbone"], token_ids)}
  elif projection_init != "random":
    raise ValueError(f"Unknown projection_init {projection_init!r}: expected 'random' or 'pca'.")
  return pretrained


def _loop(state, train_step, iterator, mesh, checkpointer, model_dir, num_steps, log_every_steps):
  """Runs steps until `num_steps`, logging and checkpointing; returns the final state."""
  writer = metric_writers.SummaryWriter(model_dir) if jax.process_index() == 0 else None
  start_step = int(state.step)
  start_time = time.time()
  for step in range(start_step + 1, num_steps + 1):
    batch = partitioning.global_batch(
        jax.tree.map(np.asarray, next(iterator)), mesh)
    state, metrics = train_step(state, batch)
    if step % log_every_steps == 0 or step in (start_step + 1, num_steps):
      metrics = jax.tree.map(float, jax.device_get(metrics))
      _report(step, num_steps, start_step, start_time, metrics, writer)
    checkpointer.maybe_save(step, state, iterator, force=step == num_steps)
  if writer is not None:
    writer.flush()
  return state


def _report(step, num_steps, start_step, start_time, metrics, writer) -> None:
  """Prints a progress line and writes the metrics to TensorBoard."""
  steps_per_sec = (step - start_step) / max(time.time() - start_time, 1e-9)
  eta = (num_steps - step) / max(steps_per_sec, 1e-9)
  shown = " | ".join(f"{k} {v:.4f}" for k, v in sorted(metrics.items()))
  print(f"step {step}/{num_steps} | {shown} | {steps_per_sec:.2f} steps/s | eta {eta:.0f}s",
        flush=True)
  if writer is not None:
    writer.write_scalars(step, {**metrics, "steps_per_sec": steps_per_sec})
