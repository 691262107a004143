"""The XTR train step: the sharded train state, the in-batch loss of the global batch and its
gradients (at once or in micro-batches: `grad_cache`), and the jitted step that applies them.

Data flows one way: batches of token ids -> token vectors and saliences (the model) -> in-batch
scores (`f_xtr`, `f_colbert` or ALIGNER's sparse alignment of every query against every document
of the *global* batch: `objective`) -> cross-entropy -> gradients -> updated parameters. The step
is jitted over global arrays sharded on the `data` mesh axis. Nothing here reads data or writes
files (`trainer` does), so it runs where TensorFlow is not installed (benchmarks/train_step.py).
"""
import functools
from typing import Any

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import optax

from xtr.training import grad_cache
from xtr.training import objective as objective_lib
from xtr.training import partitioning


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def encoder(model: nn.Module) -> grad_cache.Encode:
  """`encode(params, token ids [N, L], dropout rng, role) -> (vectors [N, L, D], mask [N, L],
  salience [N, L] or None)`; a None rng encodes deterministically (no dropout)."""

  def encode(params, tokens, rng, role):
    return model.apply({"params": params}, tokens, deterministic=rng is None, role=role,
                       rngs=None if rng is None else {"dropout": rng})

  return encode


def loss_and_grads(params: Any, batch: dict[str, jax.Array], model: nn.Module,
                   objective: objective_lib.Objective, mesh: Mesh,
                   micro_batch_size: int | None = None,
                   dropout_rngs: tuple[jax.Array, jax.Array] | None = None,
                   teacher_params: Any = None):
  """((loss, metrics), parameter gradients) of the in-batch loss of the global batch.

  Args:
    batch: `query_tokens` [B, Lq] and `doc_tokens` [B, K, Ld]; document 0 of a row is the
      positive of that row's query, K = 1 + negatives, so C = B·K documents in all.
    micro_batch_size: None encodes the batch at once; otherwise in micro-batches of that many
      queries (`grad_cache`), and the loss scores the same number of queries at a time.
    dropout_rngs: keys of the query and of the document encodings (None: no dropout).
    teacher_params: backbone parameters of `objective.distillation`'s teacher: the model's
      backbone without projection (its raw token vectors), no dropout, no gradient.
  """
  encode = encoder(model)
  doc_tokens = batch["doc_tokens"].reshape(-1, batch["doc_tokens"].shape[-1])  # [C, Ld]
  query_chunk = None if micro_batch_size is None else (micro_batch_size //
                                                       mesh.shape[partitioning.DATA_AXIS])
  teacher = None
  if teacher_params is not None:
    encode_teacher = functools.partial(encoder(model.clone(embed_dim=None, salience=None)),
                                       {"backbone": teacher_params}, rng=None)
    encode_both = lambda queries, docs: (encode_teacher(tokens=queries, role="query"),
                                         encode_teacher(tokens=docs.reshape(-1, docs.shape[-1]),
                                                        role="document"))
    # With micro-batches, the teacher holds one micro-batch's activations at a time, as the
    # student does; its token vectors of the whole batch (which the loss reads) remain.
    teacher = jax.lax.stop_gradient(
        encode_both(batch["query_tokens"], batch["doc_tokens"]) if micro_batch_size is
        None else grad_cache.map_micro_batches(encode_both, batch, micro_batch_size, mesh))
  loss = lambda queries, docs: objective_lib.loss_and_metrics(objective, queries, docs, doc_tokens,
                                                              mesh, query_chunk, teacher)
  if micro_batch_size is not None:
    return grad_cache.value_and_grad(encode, loss, params, batch, micro_batch_size, mesh,
                                     dropout_rngs)

  def loss_of_params(params):
    rngs = (None, None) if dropout_rngs is None else dropout_rngs
    return loss(encode(params, batch["query_tokens"], rngs[0], "query"),
                encode(params, doc_tokens, rngs[1], "document"))

  return jax.value_and_grad(loss_of_params, has_aux=True)(params)


def abstract_state(model: nn.Module, optimizer: optax.GradientTransformation,
                   mesh: Mesh) -> TrainState:
  """The TrainState as `jax.ShapeDtypeStruct`s carrying their shardings (nothing allocated).

  Parameters are sharded by their logical axis rules; the optimizer state like its parameters
  (`partitioning.opt_state_shardings`); the step is replicated.
  """
  init = functools.partial(_init_params, model)
  boxed = jax.eval_shape(init, jax.random.key(0))
  with_sharding = lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s)
  param_shardings = partitioning.param_shardings(boxed, mesh)
  params = jax.tree.map(with_sharding,
                        jax.eval_shape(lambda r: nn.meta.unbox(init(r)), jax.random.key(0)),
                        param_shardings)
  opt_state = jax.eval_shape(optimizer.init, params)
  opt_shardings = partitioning.opt_state_shardings(opt_state, params, param_shardings, mesh)
  step = jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, PartitionSpec()))
  return TrainState(step=step, params=params, opt_state=jax.tree.map(with_sharding, opt_state,
                                                                     opt_shardings))


def init_state(model: nn.Module, optimizer: optax.GradientTransformation, mesh: Mesh,
               rng: jax.Array, pretrained: dict[str, Any] | None = None):
  """Initializes a sharded TrainState; returns (state, its shardings).

  Parameters are created directly in their shardings (logical axis rules); each entry of
  `pretrained` (e.g. {"backbone": tree, "projection": {"kernel": [H, D]}}) replaces the
  parameter subtree of that name.
  """
  shardings = jax.tree.map(lambda x: x.sharding, abstract_state(model, optimizer, mesh))
  params = jax.jit(lambda r: nn.meta.unbox(_init_params(model, r)),
                   out_shardings=shardings.params)(rng)
  params = dict(params)
  for name, subtree in (pretrained or {}).items():
    params[name] = jax.device_put(_checked_like(name, subtree, params[name]),
                                  shardings.params[name])
  opt_state = jax.jit(optimizer.init, out_shardings=shardings.opt_state)(params)
  state = TrainState(step=jax.device_put(jnp.zeros((), jnp.int32), shardings.step), params=params,
                     opt_state=opt_state)
  return state, shardings


def _init_params(model: nn.Module, rng: jax.Array) -> Any:
  """The model's (boxed) parameters."""
  return model.init(rng, jnp.ones((1, 8), jnp.int32))["params"]


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


def dropout_rngs(dropout_seed: int, step: jax.Array) -> tuple[jax.Array, jax.Array]:
  """The dropout keys of a step: one for the query encodings, one for the documents'."""
  return tuple(jax.random.split(jax.random.fold_in(jax.random.key(dropout_seed), step)))


def make_train_step(model: nn.Module, optimizer: optax.GradientTransformation, mesh: Mesh,
                    shardings: TrainState, objective: objective_lib.Objective,
                    micro_batch_size: int | None = None, dropout_seed: int = 0,
                    with_teacher: bool = False):
  """Returns the jitted `train_step(state, batch, teacher_params) -> (state, metrics)`;
  `teacher_params` (the distillation teacher's backbone, laid out like the model's, with
  `with_teacher`; else None) are an argument of every step."""

  def train_step(state: TrainState, batch: dict[str, jax.Array], teacher_params: Any):
    (_, metrics), grads = loss_and_grads(state.params, batch, model, objective,
                                         mesh, micro_batch_size,
                                         dropout_rngs(dropout_seed, state.step), teacher_params)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics["grad_norm"] = optax.tree.norm(grads)
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  replicated = NamedSharding(mesh, PartitionSpec())
  teacher_shardings = shardings.params["backbone"] if with_teacher else None
  return jax.jit(train_step,
                 in_shardings=(shardings, partitioning.batch_sharding(mesh), teacher_shardings),
                 out_shardings=(shardings, replicated), donate_argnums=0)
