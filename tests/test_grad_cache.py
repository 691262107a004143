"""Gradient caching and dropout: the micro-batched gradient against autodiff of the same function
(each micro-batch encoded with its own dropout keys), and separate query / document keys."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xtr.models import salience
from xtr.models import t5
from xtr.models import xtr_encoder
from xtr.training import grad_cache
from xtr.training import objective
from xtr.training import partitioning
from xtr.training import step as step_lib

DROPOUT = t5.T5Config(vocab_size=512, emb_dim=32, num_heads=4, num_layers=1, head_dim=8, mlp_dim=64,
                      dropout_rate=0.3)
B, K, LQ, LD = 4, 2, 6, 10


def _setup(seed: int = 0, gate: salience.Salience | None = None):
  model = xtr_encoder.XTREncoder(backbone=t5.T5Encoder(DROPOUT), embed_dim=16, salience=gate)
  params = model.init(jax.random.key(seed), jnp.ones((1, 8), jnp.int32))["params"]
  rng = np.random.default_rng(seed)
  batch = {
      "query_tokens": rng.integers(1, 512, (B, LQ)).astype(np.int32),
      "doc_tokens": rng.integers(1, 512, (B, K, LD)).astype(np.int32)
  }
  return model, nn.meta.unbox(params), batch


@pytest.mark.parametrize("scoring", ["xtr", "aligner"])
def test_micro_batched_gradient_with_dropout_equals_autodiff(scoring):
  """Micro-batch i encodes with fold_in(key, i) in both passes; autodiff of that function (all
  activations kept) is the reference. Under "aligner" the gradient also flows through the
  saliences into the salience heads."""
  model, params, batch = _setup(gate=salience.Salience(
      epsilon=0.05) if scoring == "aligner" else None)
  mesh = partitioning.make_mesh(devices=jax.devices()[:1])
  encode = step_lib.encoder(model)
  rngs = step_lib.dropout_rngs(0, jnp.int32(3))
  doc_tokens = batch["doc_tokens"].reshape(B * K, LD)
  objective_ = objective.Objective(scoring, 20)
  loss = lambda queries, docs: objective.loss_and_metrics(objective_, queries, docs, doc_tokens,
                                                          mesh)
  micro = 2

  def reference(params):
    encoded = [(encode(params, batch["query_tokens"][i * micro:(i + 1) * micro],
                       jax.random.fold_in(rngs[0], i), "query"),
                encode(params, doc_tokens[i * micro * K:(i + 1) * micro * K],
                       jax.random.fold_in(rngs[1], i), "document")) for i in range(B // micro)]
    queries, docs = [
        jax.tree.map(lambda *parts: jnp.concatenate(parts), *side) for side in zip(*encoded)
    ]
    return loss(queries, docs)

  with jax.set_mesh(mesh):
    (value, metrics), grads = jax.jit(
        lambda p: grad_cache.value_and_grad(encode, loss, p, batch, micro, mesh, rngs))(params)
    (ref_value, ref_metrics), ref_grads = jax.jit(jax.value_and_grad(reference,
                                                                     has_aux=True))(params)
    whole_batch_masks, _ = jax.jit(
        lambda p: loss(encode(p, batch["query_tokens"], rngs[0], "query"),
                       encode(p, doc_tokens, rngs[1], "document")))(params)
  np.testing.assert_allclose(value, ref_value, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), metrics, ref_metrics)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5), grads,
               ref_grads)
  assert abs(whole_batch_masks - value) > 1e-4  # the test sees which dropout masks are drawn
  if scoring == "aligner":  # the salience heads learn
    assert np.abs(grads["document_salience"]["kernel"]).max() > 1e-4
    assert np.abs(grads["query_salience"]["kernel"]).max() > 1e-4


def test_queries_and_documents_draw_separate_dropout_keys():
  """The same ids encoded as a query and as a document get different dropout masks, and a
  step's keys are reproducible."""
  model, params, _ = _setup()
  encode = step_lib.encoder(model)
  query_rng, doc_rng = step_lib.dropout_rngs(0, jnp.int32(7))
  again = step_lib.dropout_rngs(0, jnp.int32(7))
  assert all(
      jnp.array_equal(jax.random.key_data(a), jax.random.key_data(b))
      for a, b in zip((query_rng, doc_rng), again))
  tokens = np.random.default_rng(1).integers(1, 512, (4, LD)).astype(np.int32)
  as_query = encode(params, tokens, query_rng, "query")[0]
  as_document = encode(params, tokens, doc_rng, "document")[0]
  assert not np.allclose(as_query, as_document, atol=1e-3)
  np.testing.assert_array_equal(*[encode(params, tokens, None, "query")[0]] * 2)
  same_key = encode(params, tokens, query_rng, "query")[0]
  np.testing.assert_array_equal(same_key, as_query)


@pytest.mark.parametrize("micro_batch_size", [3, 1])
def test_micro_batch_size_must_fit_the_batch_and_mesh(micro_batch_size):
  model, params, batch = _setup()
  mesh = partitioning.make_mesh(devices=jax.devices()[:2])
  with pytest.raises(ValueError, match=f"micro_batch_size={micro_batch_size} must divide"):
    grad_cache.value_and_grad(step_lib.encoder(model), None, params, batch, micro_batch_size, mesh)


def _distillation_step(model, mesh, micro_batch_size, num_queries, doc_length=128):
  """The compiled loss-and-gradient function of distillation on a (4, 2) mesh."""
  objective_ = objective.Objective("xtr", 16, distillation=0.5)
  spec = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=partitioning.batch_sharding(
      mesh))
  batch = {"query_tokens": spec(num_queries, 8), "doc_tokens": spec(num_queries, 2, doc_length)}
  step = jax.jit(lambda p, b, t: step_lib.loss_and_grads(p, b, model, objective_, mesh,
                                                         micro_batch_size, None, t))
  return step, batch


def test_the_distillation_teacher_encodes_a_micro_batch_at_a_time():
  """With micro-batches, the teacher's forward pass held the whole batch's activations: the
  step's temporaries grew with the batch (14.2, 42.0 and 83.7 MiB at 32, 64 and 128 queries),
  where without a teacher they stay flat. Its values and gradients equal the whole-batch step's."""
  config = t5.T5Config(vocab_size=512, emb_dim=64, num_heads=4, num_layers=2, head_dim=16,
                       mlp_dim=256)
  model = xtr_encoder.XTREncoder(backbone=t5.T5Encoder(config), embed_dim=16)
  params = nn.meta.unbox(model.init(jax.random.key(0), jnp.ones((1, 8), jnp.int32))["params"])
  teacher = jax.tree.map(lambda x: x * 1.01, params["backbone"])
  mesh = partitioning.make_mesh(2)
  with jax.set_mesh(mesh), nn.logical_axis_rules(partitioning.axis_rules()):
    temporaries = []
    for num_queries in (32, 128):
      step, batch = _distillation_step(model, mesh, 8, num_queries)
      compiled = step.lower(params, batch, teacher).compile()
      temporaries.append(compiled.memory_analysis().temp_size_in_bytes)
    rng = np.random.default_rng(0)
    host = {
        "query_tokens": rng.integers(1, 512, (16, 8)).astype(np.int32),
        "doc_tokens": rng.integers(1, 512, (16, 2, 12)).astype(np.int32)
    }
    batch = partitioning.global_batch(host, mesh, partitioning.data_layout(mesh))
    (whole, whole_metrics), whole_grads = _distillation_step(model, mesh, None, 16,
                                                             12)[0](params, batch, teacher)
    (micro, micro_metrics), micro_grads = _distillation_step(model, mesh, 8, 16,
                                                             12)[0](params, batch, teacher)
  # What still grows is the teacher's token vectors of the whole batch (64-d float32), which the
  # loss reads whole as it reads the student's: written by `lax.map`, then merged (two copies).
  vectors = (128 - 32) * (8 + 2 * 128) * 64 * 4
  assert temporaries[1] - temporaries[0] < 3 * vectors, temporaries  # Before: 10.9 × vectors.
  np.testing.assert_allclose(micro, whole, rtol=1e-5)
  np.testing.assert_allclose(micro_metrics["distillation_kl"], whole_metrics["distillation_kl"],
                             rtol=1e-4, atol=1e-7)
  assert float(whole_metrics["distillation_kl"]) > 1e-6  # The teacher differs from the student.
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-4), micro_grads,
               whole_grads)
