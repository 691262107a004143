"""xtr/training/objective.py: the sharded in-batch loss against a global reference built from
xtr.scoring.functions (itself tested against loops), in-batch false negatives against a loop, and
per-device memory from XLA's memory analysis."""
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec
import numpy as np
import pytest

from xtr.scoring import alignment
from xtr.scoring import functions
from xtr.training import losses
from xtr.training import objective
from xtr.training import partitioning

B, N, K, M, DIM, LD = 8, 8, 2, 6, 8, 4  # queries, query tokens, docs per query, doc tokens, ...


def _batch(seed: int, duplicates: dict[int, int] | None = None):
  """Random unit token vectors and masks for B queries and C = B·K documents; `duplicates`
  {c: c'} makes document c a copy of document c' (vectors, mask and token ids)."""
  rng = np.random.default_rng(seed)
  unit = lambda x: (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)
  q, d = unit(rng.normal(size=(B, N, DIM))), unit(rng.normal(size=(B * K, M, DIM)))
  q_mask, d_mask = rng.random((B, N)) < 0.7, rng.random((B * K, M)) < 0.7
  q_mask[:, 0] = d_mask[:, 0] = True
  doc_tokens = rng.integers(1, 1000, size=(B * K, LD)).astype(np.int32)
  for c, original in (duplicates or {}).items():
    d[c], d_mask[c], doc_tokens[c] = d[original], d_mask[original], doc_tokens[original]
  return q, q_mask, d, d_mask, doc_tokens


def _false_negatives(doc_tokens: np.ndarray) -> np.ndarray:
  """[B, C] bool, by loops: documents other than query b's positive with its token ids."""
  mask = np.zeros((B, B * K), bool)
  for b in range(B):
    for c in range(B * K):
      mask[b, c] = c != b * K and list(doc_tokens[c]) == list(doc_tokens[b * K])
  return mask


def _saliences(seed: int, q_mask, d_mask):
  """Random saliences u >= 0 (some exactly 0, as a sparse gate makes them), 0 on padding."""
  rng = np.random.default_rng(seed)
  u = lambda mask: np.where(mask & (rng.random(mask.shape) < 0.8), rng.random(mask.shape), 0.0
                           ).astype(np.float32)
  return u(q_mask), u(d_mask)


def _reference(objective_, q, q_mask, d, d_mask, doc_tokens, u_q=None, u_d=None):
  """(loss, metrics) on the global arrays: xtr.scoring.functions or xtr.scoring.alignment (both
  tested against loops), then the masked mean cross-entropy."""
  positive_index = np.arange(B) * K
  scores = functions.token_scores(q, d)
  retrieved = functions.retrieval_mask(scores, q_mask, d_mask, objective_.k_train,
                                       _false_negatives(doc_tokens))
  if objective_.scoring == "xtr":
    f = functions.f_xtr_from_token_scores(scores, retrieved, d_mask)
  elif objective_.scoring == "colbert":
    f = functions.f_colbert_from_token_scores(scores, q_mask, d_mask)
  else:
    a = objective_.alignment
    f = alignment.sparse_alignment_scores(q, q_mask, d, d_mask, pairwise=a.pairwise, k=a.k, p=a.p,
                                          u_q=u_q, u_d=u_d, epsilon=a.epsilon)
  f = jnp.where(_false_negatives(doc_tokens), -jnp.inf, f / objective_.temperature)
  loss = jnp.mean(losses.in_batch_cross_entropy(f, positive_index))
  hits = losses.positive_token_hits(retrieved, q_mask, positive_index)
  metrics = {
      "loss": loss,
      "accuracy": jnp.mean(losses.in_batch_accuracy(f, positive_index)),
      "positive_token_hit_rate": jnp.sum(hits) / jnp.sum(q_mask)
  }
  if u_q is not None:
    metrics["query_salience"] = jnp.sum(u_q * q_mask) / jnp.sum(q_mask)
    metrics["document_salience"] = jnp.sum(u_d * d_mask) / jnp.sum(d_mask)
    metrics["loss"] = loss = loss + objective_.l1 * (metrics["query_salience"] +
                                                     metrics["document_salience"])
  return loss, metrics


def _sharded(objective_, mesh, batch, query_chunk=None, saliences=(None, None)):
  """(loss, metrics), gradients of the loss with respect to (q, d, u_q, u_d) on `mesh`."""
  put = lambda x: jax.device_put(x, NamedSharding(mesh, PartitionSpec("data")))
  q, q_mask, d, d_mask, doc_tokens = map(put, batch)

  def loss(q, d, u_q, u_d):
    return objective.loss_and_metrics(objective_, (q, q_mask, u_q), (d, d_mask, u_d), doc_tokens,
                                      mesh, query_chunk)

  with jax.set_mesh(mesh):
    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3),
                                      has_aux=True))(q, d, *jax.tree.map(put, saliences))


# On (4, 2) and (2, 4) the model axis splits each query's N tokens.
MESHES = {
    "one device": dict(devices=jax.devices()[:1]),
    "(8, 1)": {},
    "(4, 2)": dict(num_partitions=2),
    "(2, 4)": dict(num_partitions=4)
}

ALIGNERS = {
    "top-1 + salience": (alignment.Alignment(), 0.0),
    "top_p + salience + l1": (alignment.Alignment("top_p", p=0.4), 0.1),
    "differentiable + salience": (alignment.Alignment("differentiable", k=2, epsilon=0.05), 0.0)
}


@pytest.mark.parametrize("mesh", MESHES)
@pytest.mark.parametrize("scoring,k_train,query_chunk",
                         [("xtr", 3, None), ("xtr", 40, 1),
                          ("colbert", 5, None), *[("aligner", name, 2) for name in ALIGNERS]])
def test_sharded_objective_equals_global_reference(mesh, scoring, k_train, query_chunk):
  """Values and gradients; query 1's positive is query 3's negative and query 5's positive."""
  batch = _batch(0, duplicates={3 * K + 1: 1 * K, 5 * K: 1 * K})
  saliences = (None, None)
  if scoring == "aligner":
    aligner, l1 = ALIGNERS[k_train]
    objective_ = objective.Objective(scoring, 4, temperature=0.5, token_hit_rate=True,
                                     alignment=aligner, l1=l1)
    saliences = _saliences(1, batch[1], batch[3])
  else:
    objective_ = objective.Objective(scoring, k_train, temperature=0.5, token_hit_rate=True)
  mesh = partitioning.make_mesh(**MESHES[mesh])
  if query_chunk is not None and B // mesh.shape["data"] == 1:
    query_chunk = None  # One query per device: nothing to chunk.
  (loss, metrics), grads = _sharded(objective_, mesh, batch, query_chunk, saliences)
  (ref_loss, ref_metrics), ref_grads = jax.value_and_grad(
      lambda q, d, u_q, u_d: _reference(objective_, q, batch[1], d, *batch[3:], u_q, u_d),
      argnums=(0, 1, 2, 3), has_aux=True)(batch[0], batch[2], *saliences)
  np.testing.assert_allclose(loss, ref_loss, rtol=1e-6)
  assert metrics.keys() == ref_metrics.keys()
  for key in metrics:
    np.testing.assert_allclose(metrics[key], ref_metrics[key], rtol=1e-6, err_msg=key)
  jax.tree.map(
      lambda grad, ref_grad: np.testing.assert_allclose(grad, ref_grad, atol=1e-6, rtol=1e-5),
      grads, ref_grads)


def test_aligner_top_1_without_salience_is_colbert():
  """ALIGNER's top-1 with u = 1 (Z = n) trains exactly like f_ColBERT: same loss, same
  gradients."""
  batch = _batch(3)
  mesh = partitioning.make_mesh(num_partitions=2)
  aligner = _sharded(objective.Objective("aligner", 4, temperature=0.1), mesh, batch)
  colbert = _sharded(objective.Objective("colbert", 4, temperature=0.1), mesh, batch)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7), aligner,
               colbert)


def test_query_chunks_equal_all_queries_at_once():
  batch = _batch(1)
  objective_ = objective.Objective("xtr", 7)
  mesh = partitioning.make_mesh(devices=jax.devices()[:2])
  (loss, metrics), grads = _sharded(objective_, mesh, batch)
  for chunk in (1, 2):
    (chunked_loss, chunked_metrics), chunked_grads = _sharded(objective_, mesh, batch, chunk)
    np.testing.assert_allclose(chunked_loss, loss, rtol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                 (chunked_metrics, chunked_grads), (metrics, grads))
  with pytest.raises(ValueError, match="query_chunk=3 does not divide the 4 queries"):
    _sharded(objective_, mesh, batch, 3)


def test_false_negatives_leave_the_softmax():
  """A copy of query 0's positive among the batch: f_ColBERT scores it like the positive, so it
  would take half the probability; masked, the loss is the cross-entropy over the other
  documents, computed here by a loop."""
  batch = _batch(2, duplicates={2 * K + 1: 0})  # query 2's negative is query 0's positive
  q, q_mask, d, d_mask, doc_tokens = batch
  mesh = partitioning.make_mesh()
  (_, metrics), _ = _sharded(objective.Objective("colbert", 1, token_hit_rate=False), mesh, batch)
  assert set(metrics) == {"loss", "accuracy"}  # no hit rate unless asked
  scores = np.asarray(functions.f_colbert(q, q_mask, d, d_mask), np.float64)
  assert scores[0, 0] == scores[0, 2 * K + 1]
  expected, correct = [], 0
  for b in range(B):
    negatives = [
        c for c in range(B * K) if c != b * K and list(doc_tokens[c]) != list(doc_tokens[b * K])
    ]
    assert len(negatives) == B * K - 1 - (b in (0,))
    expected.append(np.log(np.exp(scores[b, [b * K, *negatives]]).sum()) - scores[b, b * K])
    correct += all(scores[b, b * K] > scores[b, c] for c in negatives)
  np.testing.assert_allclose(metrics["loss"], np.mean(expected), rtol=1e-5)
  np.testing.assert_allclose(metrics["accuracy"], correct / B, rtol=1e-6)
  # Query 2 still counts the copy as its negative: only the positive's own query masks it.
  query_2 = np.log(np.exp(scores[2]).sum()) - scores[2, 2 * K]
  np.testing.assert_allclose(expected[2], query_2, rtol=1e-6)


def _loss_temp_bytes(data: int, model: int) -> int:
  """Per-device temporaries of the loss and its gradient on a (data, model) mesh (XLA's memory
  analysis, deterministic)."""
  b, n, k, m, dim = 64, 16, 2, 32, 16
  objective_ = objective.Objective("xtr", 32)
  mesh = partitioning.make_mesh(model, devices=jax.devices()[:data * model])
  spec = lambda *shape, dtype=jnp.float32: jax.ShapeDtypeStruct(
      shape, dtype, sharding=NamedSharding(mesh, PartitionSpec("data")))
  args = (spec(b, n, dim), spec(b, n, dtype=bool), spec(b * k, m, dim), spec(b * k, m, dtype=bool),
          spec(b * k, m, dtype=jnp.int32))

  def loss_and_grads(q, q_mask, d, d_mask, doc_tokens):
    return jax.grad(
        lambda q, d: objective.loss_and_metrics(objective_, (q, q_mask, None),
                                                (d, d_mask, None), doc_tokens, mesh)[0],
        argnums=(0, 1))(q, d)

  with jax.set_mesh(mesh):
    compiled = jax.jit(loss_and_grads).lower(*args).compile()
  return compiled.memory_analysis().temp_size_in_bytes


def test_loss_memory_falls_with_data_and_model_shards():
  """With 8 data shards, at most 1/4 of one shard's temporaries (1/8 plus the gathered
  documents); with 4 model shards (each query's tokens split over them), at most 1/3."""
  one = _loss_temp_bytes(1, 1)
  assert one > 64 * 16 * 64 * 2 * 32 * 4  # at least the [B, n, C, m] float32 token scores
  assert _loss_temp_bytes(8, 1) <= one / 4
  assert _loss_temp_bytes(1, 4) <= one / 3


def test_unknown_scoring_is_refused():
  with pytest.raises(
      ValueError, match=r"scoring 'sparse' cannot train: expected one of \('xtr', "
      r"'colbert', 'aligner'\)"):
    objective.Objective("sparse", 8)


@pytest.mark.parametrize("mesh,query_chunk", [("one device", None), ("(4, 2)", 1)])
def test_distillation_term_equals_a_loop(mesh, query_chunk):
  """loss = cross-entropy + w · mean KL(teacher ‖ student): the teacher's f_ColBERT over its own
  (wider) token vectors and the student's f_XTR, each softmaxed at the temperature over the
  documents that are not false negatives, by loops; the teacher gets no gradient."""
  batch = _batch(4, duplicates={3 * K + 1: 1 * K})
  q, q_mask, d, d_mask, doc_tokens = batch
  rng = np.random.default_rng(5)
  unit = lambda x: (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)
  t_q, t_d = unit(rng.normal(size=(B, N, 12))), unit(rng.normal(size=(B * K, M, 12)))
  objective_ = objective.Objective("xtr", 3, temperature=0.5, distillation=0.7)
  mesh = partitioning.make_mesh(**MESHES[mesh])
  put = lambda x: jax.device_put(x, NamedSharding(mesh, PartitionSpec("data")))

  def loss(q, d, t_q, t_d):
    teacher = ((t_q, put(q_mask), None), (t_d, put(d_mask), None))
    return objective.loss_and_metrics(objective_, (q, put(q_mask), None), (d, put(d_mask), None),
                                      put(doc_tokens), mesh, query_chunk, teacher)

  with jax.set_mesh(mesh):
    (value, metrics), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3),
                                                         has_aux=True))(*map(put, (q, d, t_q, t_d)))
  false_negative = _false_negatives(doc_tokens)
  scores = functions.token_scores(q, d)  # f_XTR whose retrieval leaves the false negatives out
  retrieved = functions.retrieval_mask(scores, q_mask, d_mask, 3, false_negative)
  student = np.asarray(functions.f_xtr_from_token_scores(scores, retrieved, d_mask),
                       np.float64) / 0.5
  kl, cross_entropy = [], []
  for b in range(B):
    docs = [c for c in range(B * K) if not false_negative[b, c]]
    teacher = np.array([
        np.mean([
            max(t_q[b, i] @ t_d[c, j]
                for j in range(M)
                if d_mask[c, j])
            for i in range(N)
            if q_mask[b, i]
        ])
        for c in docs
    ]) / 0.5
    p_t = np.exp(teacher - teacher.max()) / np.exp(teacher - teacher.max()).sum()
    log_p_s = student[b, docs] - np.log(np.exp(student[b, docs]).sum())
    kl.append(np.sum(p_t * (np.log(p_t) - log_p_s)))
    cross_entropy.append(-log_p_s[docs.index(b * K)])
  np.testing.assert_allclose(metrics["distillation_kl"], np.mean(kl), rtol=1e-5)
  np.testing.assert_allclose(value, np.mean(cross_entropy) + 0.7 * np.mean(kl), rtol=1e-5)
  assert np.abs(grads[0]).max() > 0 and not np.any(grads[2]) and not np.any(grads[3])
  with pytest.raises(ValueError, match="teacher's tokens go with objective.distillation > 0"):
    objective.loss_and_metrics(objective.Objective("xtr", 3), (q, q_mask, None), (d, d_mask, None),
                               doc_tokens, mesh, None, ((t_q, q_mask, None), (t_d, d_mask, None)))
