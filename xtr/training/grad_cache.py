"""Gradient caching (GradCache, Gao et al. 2021): an in-batch loss over a large global batch with
the encoder memory of one micro-batch.

1. Encode the batch micro-batch by micro-batch, keeping only the token vectors (no activations).
2. Compute the in-batch loss over all of them and its gradient with respect to the vectors.
3. Re-encode each micro-batch and back-propagate its slice of that gradient into the parameters;
   the parameter gradient is the sum over micro-batches.

This is the gradient of the loss with the whole batch encoded at once: the encoder treats rows
independently, and a micro-batch draws the same dropout masks in steps 1 and 3. Micro-batch i
takes rows i·u … (i+1)·u - 1 of every data shard's B/S rows (u = micro_batch_size / S), so each
micro-batch stays spread over the whole mesh and no rows move between devices.

Shapes: B queries of Lq ids, K documents of Ld ids per query, M = B / micro_batch_size.
"""
from typing import Any
from typing import Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec

from xtr.training import partitioning

# (params, token ids [N, L], dropout rng or None, role) -> (vectors [N, L, D], mask [N, L],
# salience [N, L] or None): `step.encoder`.
Encode = Callable[[Any, jax.Array, jax.Array | None, str], Any]
# ((q [B, n, D], q_mask [B, n], u_q), (d [C, m, D], d_mask [C, m], u_d)) -> (loss, metrics).
Loss = Callable[[Any, Any], tuple[jax.Array, Any]]


def value_and_grad(encode: Encode, loss: Loss, params: Any, batch: dict[str, jax.Array],
                   micro_batch_size: int, mesh: Mesh,
                   dropout_rngs: tuple[jax.Array, jax.Array] | None = None):
  """((loss, metrics), gradient of the loss with respect to `params`), in micro-batches.

  Args:
    encode: the token encoder; loss: the in-batch loss over the encoded global batch.
    batch: `query_tokens` [B, Lq] and `doc_tokens` [B, K, Ld], sharded over `data`.
    micro_batch_size: queries encoded at once (with their K documents each); divides B and is
      divisible by the mesh's data size S.
    dropout_rngs: keys of the query and of the document encodings (None: no dropout).
  """
  num_queries, docs_per_query, doc_length = batch["doc_tokens"].shape
  num_micro = _num_micro(num_queries, micro_batch_size, mesh)
  split = lambda x: _split(x, num_micro, mesh)
  merge = lambda x: _merge(x, mesh)
  tokens = (jnp.arange(num_micro), split(batch["query_tokens"]), split(batch["doc_tokens"]))

  def encode_micro(params, index, query_tokens, doc_tokens):
    """[u, Lq], [u, K, Ld] ids -> ((q, d, u_q, u_d), (q_mask, d_mask)): vectors and saliences
    (the differentiable outputs), then masks; documents as [u, K, m, ...]."""
    rng = lambda i: None if dropout_rngs is None else jax.random.fold_in(dropout_rngs[i], index)
    q, q_mask, u_q = encode(params, query_tokens, rng(0), "query")
    d, d_mask, u_d = encode(params, doc_tokens.reshape(-1, doc_length), rng(1), "document")
    per_query = lambda x: x.reshape(*doc_tokens.shape[:2], *x.shape[1:])
    return (q, per_query(d), u_q, jax.tree.map(per_query, u_d)), (q_mask, per_query(d_mask))

  encoded, (q_mask, d_mask) = jax.lax.map(lambda args: encode_micro(params, *args), tokens)
  docs = lambda x: merge(x).reshape(-1, *x.shape[3:])  # [M, u, K, m, ...] -> [C, m, ...]

  q, d, u_q, u_d = encoded
  (value, metrics), cotangents = jax.value_and_grad(
      lambda q, d, u_q, u_d: loss((q, merge(q_mask), u_q), (d, docs(d_mask), u_d)),
      argnums=(0, 1, 2, 3), has_aux=True)(merge(q), docs(d), jax.tree.map(merge, u_q),
                                          jax.tree.map(docs, u_d))
  per_query = lambda x: x.reshape(num_queries, docs_per_query, *x.shape[1:])
  grad_q, grad_d, grad_u_q, grad_u_d = cotangents
  cotangents = (grad_q, per_query(grad_d), grad_u_q, jax.tree.map(per_query, grad_u_d))

  def backward(total: Any, args) -> tuple[Any, None]:
    *micro, micro_cotangents = args
    _, vjp = jax.vjp(lambda p: encode_micro(p, *micro)[0], params)
    (grads,) = vjp(micro_cotangents)
    return jax.tree.map(jnp.add, total, grads), None

  grads, _ = jax.lax.scan(backward, jax.tree.map(jnp.zeros_like, params),
                          (*tokens, jax.tree.map(split, cotangents)))
  return (value, metrics), grads


def map_micro_batches(fn: Callable[[jax.Array, jax.Array], tuple[Any, Any]], batch: dict[str,
                                                                                         jax.Array],
                      micro_batch_size: int, mesh: Mesh) -> tuple[Any, Any]:
  """`fn(query_tokens [u, Lq], doc_tokens [u, K, Ld])` -> (per query [u, ...], per document
  [u·K, ...]) over the batch's micro-batches one at a time (`lax.map`), merged back into (per
  query [B, ...], per document [C, ...]): what a forward pass without gradients (the
  distillation teacher's) needs to hold only a micro-batch's activations."""
  num_micro = _num_micro(batch["query_tokens"].shape[0], micro_batch_size, mesh)
  queries, docs = jax.lax.map(lambda tokens: fn(*tokens), (_split(
      batch["query_tokens"], num_micro, mesh), _split(batch["doc_tokens"], num_micro, mesh)))
  merge = lambda x: _merge(x, mesh)
  return jax.tree.map(merge, queries), jax.tree.map(merge, docs)


def _num_micro(num_queries: int, micro_batch_size: int, mesh: Mesh) -> int:
  """The number of micro-batches of `micro_batch_size` queries, which must divide the batch and
  be divisible by the mesh's data size."""
  num_shards = mesh.shape[partitioning.DATA_AXIS]
  if num_queries % micro_batch_size or micro_batch_size % num_shards:
    raise ValueError(f"micro_batch_size={micro_batch_size} must divide the batch ({num_queries}) "
                     f"and be divisible by the data axis ({num_shards}).")
  return num_queries // micro_batch_size


def _split(x: jax.Array, num_micro: int, mesh: Mesh) -> jax.Array:
  """[B, ...] -> [M, B/M, ...]: micro-batch i holds rows i·u … (i+1)·u - 1 of every shard."""
  num_shards = mesh.shape[partitioning.DATA_AXIS]
  rows = x.reshape(num_shards, num_micro, -1, *x.shape[1:]).swapaxes(0, 1)
  return _on_data(rows.reshape(num_micro, -1, *x.shape[1:]), mesh, axis=1)


def _merge(x: jax.Array, mesh: Mesh) -> jax.Array:
  """The inverse of `_split`: [M, B/M, ...] -> [B, ...]."""
  num_shards = mesh.shape[partitioning.DATA_AXIS]
  rows = x.reshape(x.shape[0], num_shards, -1, *x.shape[2:]).swapaxes(0, 1)
  return _on_data(rows.reshape(-1, *x.shape[2:]), mesh, axis=0)


def _on_data(x: jax.Array, mesh: Mesh, axis: int) -> jax.Array:
  """`x` with dimension `axis` sharded over `data` (the rest replicated)."""
  spec = PartitionSpec(*[None] * axis, partitioning.DATA_AXIS)
  return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))
