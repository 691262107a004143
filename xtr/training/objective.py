"""The in-batch training objective on a global batch sharded over the mesh.

Every query is scored (f_xtr, eq. 2, f_colbert, eq. 1, or ALIGNER's sparse alignment) against every
document of the *global* batch, and the loss is the softmax cross-entropy of its positive. XLA does
not partition `lax.top_k` along batch dimensions, so jitting `xtr.scoring.functions` over sharded
arrays would gather the whole [B, n, C, m] token score tensor onto every device. Here the split is
explicit (`jax.shard_map` over the `data` axis): each device keeps its B/S queries (S data shards),
gathers the document token vectors of the batch once (C·m·D values) and scores its queries against
all of them. Token retrieval is per query token, so each device's top-k_train is exactly the global
one; the per-query sums are then added up over the mesh. With a model axis of M shards that divides
the query length, each model shard takes n/M of every query's tokens: every score is a sum over
query tokens divided by a normalizer that is one too (f_xtr's Z, the valid tokens, ALIGNER's Σ A),
so the shards' numerators and normalizers are summed over `model` before the division. Per-device
memory is O(B/S · n/M · C · m), or O(chunk · n/M · C · m) with `query_chunk` (the chunks are
recomputed in the backward pass instead of being stored).

False negatives: a document whose token ids equal a query's positive (the same document, drawn
again as another query's positive or negative) is not a negative of that query: it is left out
of the query's top-k_train token retrieval (where its tokens would take other documents' slots)
and its score out of the softmax. Equal ids is what "the same document" means to the model; it
needs no document ids from the data (the MS MARCO triples have none).

Shapes: B queries of n tokens, C = B·K documents of m tokens (K per query: rows b·K … b·K+K-1
belong to query b and row b·K is its positive), D the token vector size, Ld document token ids.
Queries and documents come as `Tokens` (vectors, mask, salience or None: `xtr_encoder.XTREncoder`).
"""
import dataclasses
import functools

import gin
import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import PartitionSpec

from xtr import typecheck
from xtr.scoring import alignment as alignment_lib
from xtr.scoring import functions
from xtr.scoring import registry
from xtr.training import losses
from xtr.training import partitioning

# (vectors [N, L, D], mask [N, L] bool, salience u [N, L] float32 or None).
Tokens = tuple[jax.Array, jax.Array, jax.Array | None]


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Objective:
  """What the in-batch loss scores and reports; gin binds it to `trainer.train.objective`.

  Attributes:
    scoring: a training scoring of `xtr.scoring.registry`: "xtr" (f_xtr, top-`k_train`
      in-batch token retrieval), "colbert" (f_colbert) or "aligner" (sim of ALIGNER eq. 1 with
      `alignment`, weighted by the saliences if the model has them).
    k_train: document tokens each query token retrieves among the C·m of the global batch.
    temperature: the softmax runs over scores / temperature.
    token_hit_rate: report `positive_token_hit_rate`, the fraction of valid query tokens whose
      top-k_train holds a token of their positive. Free under "xtr" (its retrieval mask is
      computed anyway); otherwise it costs a top-k_train over the batch. None: only under "xtr".
    alignment: the pairwise alignment of "aligner" (None: top-1, ALIGNER's); refused under the
      other scorings, which would ignore it.
    l1: adds l1 × (mean query salience + mean document salience) over valid tokens to the loss
      (the trainer sets it from the model's `salience.Salience.l1`).
    distillation: adds distillation × the mean KL divergence from a teacher's in-batch score
      distribution (f_colbert of its token vectors, e.g. the untuned backbone's, over the same
      documents, same temperature and masked false negatives) to the student's.
  """
  scoring: str = "xtr"
  k_train: int = 128
  temperature: float = 1.0
  token_hit_rate: bool | None = None
  alignment: alignment_lib.Alignment | None = None
  l1: float = 0.0
  distillation: float = 0.0

  def __post_init__(self):
    """Refuses a binding of the wrong type or out of range, naming it, before any work (a
    temperature of 0 trained on NaN, a negative one toward the reverse ranking, k_train 0 on
    zero gradients)."""
    typecheck.arguments(Objective.__init__,
                        dataclasses.asdict(self) | {"alignment": self.alignment})
    ranges = (
        ("k_train", self.k_train >= 1, "a positive integer"),
        ("temperature", self.temperature > 0, "a positive number"),
        ("l1", self.l1 >= 0, "a number >= 0"),
        ("distillation", self.distillation >= 0, "a number >= 0"),
    )
    for name, fits, expected in ranges:
      typecheck.in_range(f"objective.Objective.{name}", getattr(self, name), fits, expected)
    registry.get(self.scoring, "train")
    if self.alignment is not None and self.scoring != "aligner":
      raise ValueError(f"objective.Objective.scoring={self.scoring!r} uses no alignment; train "
                       "the alignment with scoring='aligner'.")
    # Frozen: the defaults that depend on the scoring are filled in once, here.
    if self.token_hit_rate is None:
      object.__setattr__(self, "token_hit_rate", self.scoring == "xtr")
    if self.alignment is None:
      object.__setattr__(self, "alignment", alignment_lib.Alignment())


def loss_and_metrics(objective: Objective, queries: Tokens, docs: Tokens, doc_tokens: jax.Array,
                     mesh: Mesh, query_chunk: int | None = None,
                     teacher: tuple[Tokens, Tokens] | None = None):
  """The mean in-batch cross-entropy over the global batch, and its metrics.

  Args:
    queries: (q [B, n, D], q_mask [B, n], u_q [B, n] or None).
    docs: (d [C, m, D], d_mask [C, m], u_d [C, m] or None).
    doc_tokens: [C, Ld] int token ids of the documents (equal ids: the same document).
    mesh: the (data, model) mesh; B must be divisible by its `data` size S.
    query_chunk: queries per device scored at once; must divide B/S (default B/S: all of them).
    teacher: the teacher's (queries, docs) tokens of `objective.distillation` (any size D_t).

  Returns:
    (loss, metrics): scalars; metrics holds loss, accuracy (positive ranked strictly first),
    if `objective.token_hit_rate` positive_token_hit_rate, with saliences the mean salience
    of valid query and document tokens (query_salience, document_salience), and with a teacher
    the mean distillation_kl.
  """
  if (teacher is None) != (objective.distillation == 0):
    raise ValueError("A teacher's tokens go with objective.distillation > 0, and only with it.")
  shard = PartitionSpec(partitioning.DATA_AXIS)
  split_tokens = _splits_query_tokens(mesh, queries[0].shape[1])
  query_spec = (PartitionSpec(partitioning.DATA_AXIS, partitioning.MODEL_AXIS)
                if split_tokens else shard)
  sums = jax.shard_map(
      functools.partial(_shard_sums, objective, query_chunk=query_chunk, split_tokens=split_tokens),
      mesh=mesh, in_specs=(query_spec, shard, shard, shard),
      out_specs=PartitionSpec())(queries, docs, doc_tokens, teacher)
  num_queries = queries[0].shape[0]
  loss = sums["loss"] / num_queries
  metrics = {"loss": loss, "accuracy": sums["accuracy"] / num_queries}
  if teacher is not None:
    metrics["distillation_kl"] = sums["distillation_kl"] / num_queries
    loss = loss + objective.distillation * metrics["distillation_kl"]
    metrics["loss"] = loss
  if objective.token_hit_rate:
    metrics["positive_token_hit_rate"] = sums["token_hits"] / jnp.maximum(sums["query_tokens"], 1)
  if queries[2] is not None:
    metrics["query_salience"] = _masked_mean(queries[2], queries[1])
    metrics["document_salience"] = _masked_mean(docs[2], docs[1])
  if objective.l1:
    loss = loss + objective.l1 * (metrics["query_salience"] + metrics["document_salience"])
    metrics["loss"] = loss
  return loss, metrics


def _splits_query_tokens(mesh: Mesh, query_length: int) -> bool:
  """Whether the loss splits each query's tokens over `model`: with a model axis that divides
  them (else every model shard computes the whole loss of its data shard)."""
  model = mesh.shape[partitioning.MODEL_AXIS]
  return model > 1 and query_length % model == 0


def _masked_mean(u: jax.Array, mask: jax.Array) -> jax.Array:
  return jnp.sum(jnp.where(mask, u, 0.0)) / jnp.maximum(jnp.sum(mask), 1)


def _shard_sums(objective: Objective, queries: Tokens, docs: Tokens, doc_tokens, teacher,
                query_chunk, split_tokens):
  """One data shard: sums over its b queries [b, ...] of their losses and metrics against the
  documents of the whole batch (its own [b·K, ...] documents gathered from every shard); with
  `split_tokens`, this model shard holds n/M of each query's tokens ([b, n/M, ...])."""
  num_queries = queries[0].shape[0]
  docs_per_query = docs[0].shape[0] // num_queries
  gather = functools.partial(jax.lax.all_gather, axis_name=partitioning.DATA_AXIS, tiled=True)
  teacher_queries, teacher_docs = (None, None) if teacher is None else teacher
  batch_docs = (jax.tree.map(gather, docs), gather(doc_tokens), jax.tree.map(gather, teacher_docs))
  first_query = jax.lax.axis_index(partitioning.DATA_AXIS) * num_queries
  positive_index = (first_query + jnp.arange(num_queries)) * docs_per_query  # [b], in [0, C)
  queries = (queries, positive_index, doc_tokens[::docs_per_query], teacher_queries)
  chunk = query_chunk or num_queries
  if num_queries % chunk:
    raise ValueError(f"query_chunk={chunk} does not divide the {num_queries} queries per device.")
  sums_of = functools.partial(_query_sums, objective, batch_docs, split_tokens=split_tokens)
  if chunk == num_queries:
    sums = sums_of(queries)
  else:
    chunks = jax.tree.map(lambda x: x.reshape(num_queries // chunk, chunk, *x.shape[1:]), queries)
    sums = jax.tree.map(lambda x: jnp.sum(x, axis=0), jax.lax.map(jax.checkpoint(sums_of), chunks))
  return jax.tree.map(lambda x: jax.lax.psum(x, partitioning.DATA_AXIS), sums)


def _query_sums(objective: Objective, batch_docs, queries,
                split_tokens: bool) -> dict[str, jax.Array]:
  """Sums over a chunk of queries.

  Args:
    batch_docs: ((d [C, m, D], d_mask [C, m], u_d), doc_tokens [C, Ld], the teacher's document
      Tokens or None) of the global batch.
    queries: ((q [c, n, D], q_mask [c, n], u_q), positive_index [c], positive_tokens [c, Ld],
      the teacher's query Tokens or None).
    split_tokens: q holds this model shard's n of each query's tokens: the scores' numerators
      and normalizers, and the token counts, are summed over `model`.

  Returns:
    {"loss", "accuracy"} summed over the c queries; with the hit rate, {"token_hits",
    "query_tokens"} summed over their valid tokens; with a teacher, "distillation_kl".
  """
  (d, d_mask, u_d), doc_tokens, teacher_docs = batch_docs
  (q, q_mask, u_q), positive_index, positive_tokens, teacher_queries = queries
  token_scores = functions.token_scores(q, d)  # [c, n, C, m]
  same_document = jnp.all(positive_tokens[:, None, :] == doc_tokens[None], axis=-1)  # [c, C]
  false_negative = same_document & (jnp.arange(d.shape[0]) != positive_index[:, None])
  retrieved = None
  if objective.scoring == "xtr" or objective.token_hit_rate:
    retrieved = functions.retrieval_mask(token_scores, q_mask, d_mask, objective.k_train,
                                         false_negative)
  over_model = ((lambda x: jax.lax.psum(x, partitioning.MODEL_AXIS)) if split_tokens else
                (lambda x: x))
  if objective.scoring == "xtr":
    total, z = functions.f_xtr_parts(token_scores, retrieved, d_mask)
  elif objective.scoring == "colbert":
    total, z = functions.f_colbert_parts(token_scores, q_mask, d_mask)
  else:
    total, z = objective.alignment.parts_from_token_scores(token_scores, q_mask, d_mask, u_q, u_d)
  floor = alignment_lib.Z_FLOOR if objective.scoring == "aligner" else 1
  scores = over_model(total) / jnp.maximum(over_model(z), floor)  # [c, C]
  scores = jnp.where(false_negative, -jnp.inf, scores / objective.temperature)
  sums = {
      "loss": jnp.sum(losses.in_batch_cross_entropy(scores, positive_index)),
      "accuracy": jnp.sum(losses.in_batch_accuracy(scores, positive_index))
  }
  if teacher_queries is not None:
    (t_q, t_q_mask, _), (t_d, t_d_mask, _) = teacher_queries, teacher_docs
    teacher_scores = functions.f_colbert_from_token_scores(functions.token_scores(t_q, t_d),
                                                           t_q_mask, t_d_mask)
    teacher_scores = jnp.where(false_negative, -jnp.inf, teacher_scores / objective.temperature)
    sums["distillation_kl"] = jnp.sum(losses.distillation_kl(scores, teacher_scores))
  if objective.token_hit_rate:
    sums["token_hits"] = over_model(
        jnp.sum(losses.positive_token_hits(retrieved, q_mask, positive_index)))
    sums["query_tokens"] = over_model(jnp.sum(q_mask))
  return sums
