"""Gradient caching and dropout: the micro-batched gradient against autodiff of the same function
(each micro-batch encoded with its own dropout keys), and separate query / document keys."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xtr import grad_cache
from xtr import models
from xtr import objective
from xtr import partitioning
from xtr import t5
from xtr import trainer

DROPOUT = t5.T5Config(vocab_size=512, emb_dim=32, num_heads=4, num_layers=1, head_dim=8,
                      mlp_dim=64, dropout_rate=0.3)
B, K, LQ, LD = 4, 2, 6, 10


def _setup(seed: int = 0):
  model = models.XTREncoder(backbone=t5.T5Encoder(DROPOUT), embed_dim=16)
  params = model.init(jax.random.key(seed), jnp.ones((1, 8), jnp.int32))["params"]
  rng = np.random.default_rng(seed)
  batch = {"query_tokens": rng.integers(1, 512, (B, LQ)).astype(np.int32),
           "doc_tokens": rng.integers(1, 512, (B, K, LD)).astype(np.int32)}
  return model, nn.meta.unbox(params), batch


def test_micro_batched_gradient_with_dropout_equals_autodiff():
  """Micro-batch i encodes with fold_in(key, i) in both passes; autodiff of that function (all
  activations kept) is the reference."""
  model, params, batch = _setup()
  mesh = partitioning.make_mesh(devices=jax.devices()[:1])
  encode = trainer.encoder(model)
  rngs = trainer.dropout_rngs(0, jnp.int32(3))
  doc_tokens = batch["doc_tokens"].reshape(B * K, LD)
  objective_ = objective.Objective("xtr", 20)
  loss = lambda q, q_mask, d, d_mask: objective.loss_and_metrics(
      objective_, q, q_mask, d, d_mask, doc_tokens, mesh)
  micro = 2

  def reference(params):
    encoded = [(encode(params, batch["query_tokens"][i * micro:(i + 1) * micro],
                       jax.random.fold_in(rngs[0], i)),
                encode(params, doc_tokens[i * micro * K:(i + 1) * micro * K],
                       jax.random.fold_in(rngs[1], i)))
               for i in range(B // micro)]
    (q, q_mask), (d, d_mask) = [
        [jnp.concatenate(parts) for parts in zip(*side)] for side in zip(*encoded)]
    return loss(q, q_mask, d, d_mask)

  with jax.set_mesh(mesh):
    (value, metrics), grads = jax.jit(lambda p: grad_cache.value_and_grad(
        encode, loss, p, batch, micro, mesh, rngs))(params)
    (ref_value, ref_metrics), ref_grads = jax.jit(
        jax.value_and_grad(reference, has_aux=True))(params)
    whole_batch_masks, _ = jax.jit(lambda p: loss(*encode(p, batch["query_tokens"], rngs[0]),
                                                  *encode(p, doc_tokens, rngs[1])))(params)
  np.testing.assert_allclose(value, ref_value, rtol=1e-6)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), metrics, ref_metrics)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5),
               grads, ref_grads)
  assert abs(whole_batch_masks - value) > 1e-4  # the test sees which dropout masks are drawn


def test_queries_and_documents_draw_separate_dropout_keys():
  """The same ids encoded as a query and as a document get different dropout masks, and a
  step's keys are reproducible."""
  model, params, _ = _setup()
  encode = trainer.encoder(model)
  query_rng, doc_rng = trainer.dropout_rngs(0, jnp.int32(7))
  again = trainer.dropout_rngs(0, jnp.int32(7))
  assert all(jnp.array_equal(jax.random.key_data(a), jax.random.key_data(b))
             for a, b in zip((query_rng, doc_rng), again))
  tokens = np.random.default_rng(1).integers(1, 512, (4, LD)).astype(np.int32)
  as_query, _ = encode(params, tokens, query_rng)
  as_document, _ = encode(params, tokens, doc_rng)
  assert not np.allclose(as_query, as_document, atol=1e-3)
  np.testing.assert_array_equal(*[encode(params, tokens, None)[0]] * 2)
  same_key, _ = encode(params, tokens, query_rng)
  np.testing.assert_array_equal(same_key, as_query)


@pytest.mark.parametrize("micro_batch_size", [3, 1])
def test_micro_batch_size_must_fit_the_batch_and_mesh(micro_batch_size):
  model, params, batch = _setup()
  mesh = partitioning.make_mesh(devices=jax.devices()[:2])
  with pytest.raises(ValueError, match=f"micro_batch_size={micro_batch_size} must divide"):
    grad_cache.value_and_grad(trainer.encoder(model), None, params, batch, micro_batch_size,
                              mesh)
