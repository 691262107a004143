"""xtr/models/layer_stack.py: scanned and rematerialized layers (T5 and BERT) against the plain
loop, outputs and gradients; the two parameter layouts and their logical axes; an index manifest of
a scanned encoder; the FLOPs and XLA's temporary memory of each policy."""
import dataclasses
import json

from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xtr.models import bert
from xtr.models import encoding
from xtr.models import layer_stack
from xtr.models import model_spec
from xtr.models import t5
from xtr.models import xtr_encoder
from xtr.text import tokenization
from xtr.training import partitioning
from xtr.training import throughput

T5_TINY = t5.T5Config(vocab_size=64, emb_dim=32, num_heads=4, num_layers=3, head_dim=8, mlp_dim=64,
                      relative_attention_num_buckets=8, relative_attention_max_distance=16)
BERT_TINY = bert.BertConfig(vocab_size=64, hidden_size=32, num_layers=3, num_heads=4,
                            intermediate_size=64, max_position_embeddings=32)
BACKBONES = {"t5": (t5.T5Encoder, T5_TINY), "bert": (bert.BertEncoder, BERT_TINY)}
SETTINGS = [(scan, policy)
            for scan in (False, True)
            for policy in layer_stack.REMAT_POLICIES
            if (scan, policy) != (False, "none")]  # All but the reference: the plain loop.


def _ids(vocab_size: int, lengths=(12, 7, 3)) -> np.ndarray:
  """[3, 12] random ids, padded with 0 after each row's length."""
  rng = np.random.default_rng(0)
  ids = rng.integers(1, vocab_size, (len(lengths), max(lengths)))
  return np.where(np.arange(max(lengths)) < np.array(lengths)[:, None], ids, 0).astype(np.int32)


def _forward_and_grads(module: nn.Module, params, ids: np.ndarray):
  """(hidden states [B, L, E], gradients of a fixed random projection of them)."""
  weights = np.random.default_rng(1).normal(size=(*ids.shape, 32)).astype(np.float32)
  apply = lambda p: module.apply({"params": p}, ids, ids != 0)
  loss = lambda p: jnp.sum(apply(p) * weights)
  return jax.jit(apply)(params), jax.jit(jax.grad(loss))(params)


@pytest.fixture(scope="module", params=sorted(BACKBONES))
def reference(request):
  """(backbone name, unscanned params, outputs and gradients of the plain loop)."""
  module, config = BACKBONES[request.param]
  ids = _ids(config.vocab_size)
  params = nn.meta.unbox(module(config).init(jax.random.key(0), ids, ids != 0)["params"])
  # Every parameter away from its init (norm scales of 1, zero biases), distinct per layer.
  noise = jax.tree.map(lambda x: 0.1 * np.random.default_rng(x.size).normal(size=x.shape), params)
  params = jax.tree.map(lambda x, n: np.asarray(x + n, np.float32), params, noise)
  return request.param, params, _forward_and_grads(module(config), params, ids)


@pytest.mark.parametrize("scan_layers,remat_policy", SETTINGS)
def test_outputs_and_gradients_equal_those_of_the_loop(reference, scan_layers, remat_policy):
  name, params, (expected, expected_grads) = reference
  module, config = BACKBONES[name]
  config = dataclasses.replace(config, scan_layers=scan_layers, remat_policy=remat_policy)
  ids = _ids(config.vocab_size)
  outputs, grads = _forward_and_grads(module(config), layer_stack.in_layout(params, scan_layers),
                                      ids)
  np.testing.assert_allclose(outputs, expected, rtol=1e-5, atol=1e-5)
  grads = layer_stack.in_layout(grads, False)
  assert jax.tree.structure(grads) == jax.tree.structure(expected_grads)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5), grads,
               expected_grads)


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_scanned_dropout_differs_by_layer_and_seed(name):
  """split_rngs: each layer draws its own dropout mask, as each unscanned layer does."""
  module, config = BACKBONES[name]
  config = dataclasses.replace(config, scan_layers=True, dropout_rate=0.3)
  ids = _ids(config.vocab_size)
  encoder = module(config)
  params = encoder.init(jax.random.key(0), ids, ids != 0)["params"]
  apply = lambda seed: encoder.apply({"params": params}, ids, ids != 0, deterministic=False, rngs=
                                     {"dropout": jax.random.key(seed)})
  np.testing.assert_array_equal(apply(0), apply(0))
  assert not np.allclose(apply(0), apply(1))
  np.testing.assert_array_equal(encoder.apply({"params": params}, ids, ids != 0),
                                encoder.apply({"params": params}, ids, ids != 0))


def test_the_layouts_round_trip_and_the_stack_is_the_scanned_init(reference):
  name, params, _ = reference
  module, config = BACKBONES[name]
  stacked = layer_stack.stack(params)
  ids = jnp.ones((1, 4), jnp.int32)
  init = jax.eval_shape(lambda: nn.meta.unbox(
      module(dataclasses.replace(config, scan_layers=True)).init(jax.random.key(0), ids, ids > 0)))
  assert jax.tree.structure(stacked) == jax.tree.structure(init["params"])
  jax.tree.map(lambda a, b: np.testing.assert_equal(a.shape, b.shape), stacked, init["params"])
  for i in range(config.num_layers):
    jax.tree.map(lambda s, x, i=i: np.testing.assert_array_equal(s[i], x), stacked["layers"],
                 params[f"layers_{i}"])
  assert all(isinstance(x, np.ndarray) for x in jax.tree.leaves(stacked))  # Host stays host.
  on_device = layer_stack.stack(jax.device_put(params))
  assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(on_device))
  unstacked = layer_stack.unstack(stacked)
  assert jax.tree.structure(unstacked) == jax.tree.structure(params)
  jax.tree.map(np.testing.assert_array_equal, unstacked, params)
  assert layer_stack.in_layout(stacked, True) is stacked
  assert layer_stack.in_layout(params, False) is params


def test_ten_layers_stack_in_numeric_order():
  params = {f"layers_{i}": {"w": np.full(2, i)} for i in range(11)} | {"norm": np.ones(2)}
  stacked = layer_stack.stack(params)
  np.testing.assert_array_equal(stacked["layers"]["w"][:, 0], np.arange(11))
  assert sorted(layer_stack.unstack(stacked)) == sorted(params)


@pytest.mark.parametrize("name", sorted(BACKBONES))
def test_scanned_params_have_a_replicated_layers_axis(name):
  module, config = BACKBONES[name]
  ids = jnp.ones((1, 4), jnp.int32)
  specs = lambda scan: traverse_util.flatten_dict(
      nn.get_partition_spec(
          jax.eval_shape(
              module(dataclasses.replace(config, scan_layers=scan)).init, jax.random.key(0), ids,
              ids > 0))["params"])
  loop, scanned = specs(False), specs(True)
  expected = {
      ("layers", *path[1:]): ("layers", *spec)
      for path, spec in loop.items()
      if path[0] == "layers_0"
  }
  outside = {path: spec for path, spec in loop.items() if not path[0].startswith("layers_")}
  expected |= {path: tuple(spec) for path, spec in outside.items()}
  assert {path: tuple(spec) for path, spec in scanned.items()} == expected
  mesh = jax.sharding.Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
  boxed = jax.eval_shape(
      module(dataclasses.replace(config, scan_layers=True)).init, jax.random.key(0), ids, ids
      > 0)["params"]
  shardings = partitioning.param_shardings(boxed, mesh, partitioning.DEFAULT_RULES)
  kernel = shardings["layers"]["mlp"]["wi" if name == "bert" else "wi_0"]["kernel"]
  assert tuple(kernel.spec) == (None, None, "model")


def test_an_unknown_remat_policy_is_refused():
  with pytest.raises(ValueError, match=r"remat_policy='dots'.*'dots_saveable'"):
    dataclasses.replace(T5_TINY, remat_policy="dots")
  with pytest.raises(ValueError, match=r"remat_policy='all'"):
    bert.BertConfig(remat_policy="all")


@pytest.fixture(scope="module")
def released_like():
  """(XTREncoder with a T5 backbone of the real vocabulary's size, unscanned params)."""
  config = dataclasses.replace(T5_TINY, vocab_size=32128)
  model = xtr_encoder.XTREncoder(t5.T5Encoder(config), embed_dim=16)
  params = nn.meta.unbox(model.init(jax.random.key(0), jnp.ones((1, 4), jnp.int32))["params"])
  return model, jax.tree.map(np.asarray, params)


@pytest.mark.parametrize("scan_index,scan_checkpoint", [(True, False), (False, True), (True, True)])
def test_an_index_describes_and_rebuilds_a_scanned_encoder(released_like, t5_spm_path, scan_index,
                                                           scan_checkpoint):
  """Export (a model of the gin files) -> manifest (JSON) -> search's model, with checkpoints of
  either layout: the same model, weights, fingerprint and token vectors."""
  model, params = released_like
  backbone = dataclasses.replace(model.backbone.config, scan_layers=scan_index,
                                 remat_policy="dots_saveable")
  exported = xtr_encoder.XTREncoder(t5.T5Encoder(backbone), embed_dim=16)
  checkpoint = {**params, "backbone": layer_stack.in_layout(params["backbone"], scan_checkpoint)}
  vocabulary = tokenization.SentencePiece(str(t5_spm_path))
  encoder = encoding.Encoder(checkpoint, model=exported, vocabulary=vocabulary)
  spec = json.loads(json.dumps(model_spec.describe(encoder)))
  assert spec["config"]["scan_layers"] is scan_index
  assert spec["config"]["remat_policy"] == "dots_saveable"
  rebuilt = model_spec.encoder(spec, "manifest", checkpoint, "ckpt", str(t5_spm_path))
  assert rebuilt.model.backbone.config == dataclasses.replace(backbone, dtype="float32")
  assert rebuilt.fingerprint == encoder.fingerprint
  texts = ["what causes scurvy", "vitamin c deficiency"]
  unscanned = encoding.Encoder(params, model=model, vocabulary=vocabulary)
  for search_encoder in (encoder, rebuilt):
    np.testing.assert_allclose(
        search_encoder.encode_queries(texts)[0],
        unscanned.encode_queries(texts)[0], atol=1e-6)


def test_a_manifest_of_a_mistyped_scan_or_policy_is_refused(released_like, t5_spm_path):
  model, params = released_like
  vocabulary = tokenization.SentencePiece(str(t5_spm_path))
  spec = json.loads(
      json.dumps(model_spec.describe(encoding.Encoder(params, model=model, vocabulary=vocabulary))))
  for field, value, message in (("scan_layers", "yes", r"scan_layers = 'yes' is not a valid bool"),
                                ("scan_layers", 1, r"scan_layers = 1 is not a valid bool"),
                                ("remat_policy", "dots", r"model.config: remat_policy='dots'")):
    bad = {**spec, "config": {**spec["config"], field: value}}
    with pytest.raises(ValueError, match=f"manifest: .*{message}"):
      model_spec.encoder(bad, "manifest", params, "ckpt", str(t5_spm_path))


def test_the_flops_of_scanned_layers_are_those_of_the_loop(released_like):
  """XLA counts a loop's body once; `throughput` counts every layer."""
  model, params = released_like
  scanned = xtr_encoder.with_scan_layers(model, True)
  costs = [
      throughput.step_cost(m, xtr_encoder.in_layout(m, params), (4, 8), (8, 16))
      for m in (model, scanned)
  ]
  assert costs[0] == costs[1]


def _temp_bytes(config: t5.T5Config) -> int:
  """XLA's temporary bytes of the compiled gradient of a T5 encoder on [8, 64] ids."""
  encoder = t5.T5Encoder(config)
  ids = jnp.ones((8, 64), jnp.int32)
  params = jax.eval_shape(
      lambda: nn.meta.unbox(encoder.init(jax.random.key(0), ids, ids > 0)["params"]))
  loss = lambda p: jnp.sum(jnp.square(encoder.apply({"params": p}, ids, ids > 0)))
  return jax.jit(jax.grad(loss)).lower(params).compile().memory_analysis().temp_size_in_bytes


def test_remat_lowers_the_activation_memory_of_scanned_layers():
  """Scanned, "full" keeps one [B, L, E] input per layer where "none" keeps every activation;
  the dots policies keep the projections' outputs. Unscanned, XLA:CPU's scheduler recomputes
  the layers early in the backward pass (nothing orders the recomputation after the next layer's
  gradient), so there remat saves little: it must not cost memory."""
  config = t5.T5Config(vocab_size=128, emb_dim=64, num_heads=4, num_layers=4, head_dim=16,
                       mlp_dim=256)
  temp = {
      (scan, policy):
          _temp_bytes(dataclasses.replace(config, scan_layers=scan, remat_policy=policy))
      for scan in (False, True) for policy in ("none", "full", "dots_saveable")
  }
  assert temp[True, "full"] < temp[True, "dots_saveable"] < temp[True, "none"]
  assert temp[True, "full"] < 0.4 * temp[True, "none"]
  assert temp[False, "full"] <= temp[False, "none"]
