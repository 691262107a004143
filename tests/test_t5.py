"""T5Encoder against transformers' T5EncoderModel, the HF converter, and the gin model files."""
import dataclasses
import json
import pathlib

from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from transformers.models.t5 import modeling_t5

from tests import retrieval_setup
from xtr.models import hf_weights
from xtr.models import t5

GIN_MODELS = pathlib.Path(__file__).resolve().parents[1] / "gin" / "models"
LENGTHS = (48, 31, 5)  # Longer than max_distance below, so log buckets and clipping are used.


def _save_hf_encoder(directory: pathlib.Path,
                     feed_forward_proj: str) -> transformers.T5EncoderModel:
  """Saves a random small T5EncoderModel (non-trivial norms and position biases) to directory."""
  config = transformers.T5Config(vocab_size=500, d_model=64, d_kv=16, d_ff=128, num_layers=3,
                                 num_heads=4, feed_forward_proj=feed_forward_proj,
                                 relative_attention_num_buckets=16,
                                 relative_attention_max_distance=20)
  torch.manual_seed(0)
  model = transformers.T5EncoderModel(config).eval()
  with torch.no_grad():
    for name, weight in model.named_parameters():
      if weight.ndim == 1:
        weight.uniform_(0.5, 1.5)
      elif "relative_attention_bias" in name:
        weight.normal_(0.0, 1.0)
  model.save_pretrained(directory)
  return model


def _load(directory: pathlib.Path) -> tuple[t5.T5Config, dict]:
  config = hf_weights.t5_config_from_hf(json.loads((directory / "config.json").read_text()))
  return config, hf_weights.t5_params_from_hf(hf_weights.read_safetensors(directory), config)


def _batch(vocab_size: int) -> tuple[np.ndarray, np.ndarray]:
  """ids: [3, 48] int32 with padding 0 after each row's length; mask: [3, 48] bool."""
  rng = np.random.default_rng(0)
  mask = np.arange(max(LENGTHS))[None, :] < np.array(LENGTHS)[:, None]
  ids = rng.integers(1, vocab_size, mask.shape).astype(np.int32)
  return ids * mask, mask


@pytest.fixture(scope="module", params=["gated-gelu", "relu"])
def hf_dir(request, tmp_path_factory) -> tuple[pathlib.Path, transformers.T5EncoderModel]:
  directory = tmp_path_factory.mktemp(request.param)
  return directory, _save_hf_encoder(directory, request.param)


@pytest.mark.parametrize("scan_layers,remat_policy", [(False, "none"), (True, "full")])
def test_matches_transformers(hf_dir, scan_layers, remat_policy):
  """Unscanned, and scanned (`xtr.models.layer_stack`) from the same file."""
  directory, hf_model = hf_dir
  config, _ = _load(directory)
  config = dataclasses.replace(config, scan_layers=scan_layers, remat_policy=remat_policy)
  params = hf_weights.load_t5_backbone(str(directory), config)
  assert ("layers" in params) == scan_layers
  ids, mask = _batch(config.vocab_size)
  with torch.no_grad():
    expected = hf_model(input_ids=torch.tensor(ids, dtype=torch.long),
                        attention_mask=torch.tensor(mask, dtype=torch.long)).last_hidden_state
  ours = t5.T5Encoder(config).apply({"params": params}, jnp.asarray(ids), jnp.asarray(mask))
  assert ours.shape == (len(LENGTHS), max(LENGTHS), 64) and ours.dtype == jnp.float32
  # Padded positions attend to the real tokens in both implementations, so all positions match.
  np.testing.assert_allclose(np.asarray(ours), expected.numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("num_buckets,max_distance", [(32, 128), (16, 20)])
def test_relative_position_buckets_match_transformers(num_buckets, max_distance):
  length = 300
  relative_position = torch.arange(length)[None, :] - torch.arange(length)[:, None]
  expected = modeling_t5.T5Attention._relative_position_bucket(relative_position,
                                                               bidirectional=True,
                                                               num_buckets=num_buckets,
                                                               max_distance=max_distance)
  np.testing.assert_array_equal(
      t5.relative_position_buckets(length, length, num_buckets, max_distance), expected.numpy())


def test_converted_tree_equals_init_tree(hf_dir):
  directory, _ = hf_dir
  config, params = _load(directory)
  ids, mask = _batch(config.vocab_size)
  init = nn.meta.unbox(t5.T5Encoder(config).init(jax.random.key(0), ids, mask)["params"])
  assert jax.tree.structure(init) == jax.tree.structure(params)
  jax.tree.map(lambda a, b: np.testing.assert_equal(a.shape, b.shape), init, params)
  assert all(leaf.dtype == np.float32 for leaf in jax.tree.leaves(params))


def test_config_from_hf(hf_dir):
  directory, hf_model = hf_dir
  config, _ = _load(directory)
  gated = hf_model.config.is_gated_act
  assert config == t5.T5Config(vocab_size=500, emb_dim=64, num_heads=4, num_layers=3, head_dim=16,
                               mlp_dim=128, mlp_activations=("gelu", "linear") if gated else
                               ("relu",), relative_attention_num_buckets=16,
                               relative_attention_max_distance=20)


def test_unsupported_feed_forward_proj_is_refused():
  with pytest.raises(ValueError, match="gated-silu"):
    hf_weights.t5_config_from_hf({
        "vocab_size": 8,
        "d_model": 4,
        "num_heads": 1,
        "num_layers": 1,
        "d_kv": 4,
        "d_ff": 8,
        "feed_forward_proj": "gated-silu"
    })


def test_mismatched_config_is_refused(hf_dir):
  directory, hf_model = hf_dir
  config, _ = _load(directory)
  tensors = hf_weights.read_safetensors(directory)
  with pytest.raises(ValueError,
                     match=r"missing tensor encoder\.block\.3\.layer\.0\.SelfAttention\.q"):
    hf_weights.t5_params_from_hf(tensors, dataclasses.replace(config, num_layers=4))
  with pytest.raises(ValueError, match=r"tensor shared\.weight has shape \(500, 64\), "
                     r"expected \(512, 64\)"):
    hf_weights.t5_params_from_hf(tensors, dataclasses.replace(config, vocab_size=512))
  other = ("relu",) if hf_model.config.is_gated_act else ("gelu", "linear")
  with pytest.raises(ValueError, match=r"unexpected tensor encoder\.block\.0\.layer\.1\."
                     r"DenseReluDense\.wi"):
    hf_weights.t5_params_from_hf(tensors, dataclasses.replace(config, mlp_activations=other))


def test_decoder_tensors_are_ignored_and_embed_tokens_accepted(hf_dir):
  directory, _ = hf_dir
  config, params = _load(directory)
  tensors = hf_weights.read_safetensors(directory)
  tensors["encoder.embed_tokens.weight"] = tensors.pop("shared.weight")
  tensors["decoder.final_layer_norm.weight"] = tensors["encoder.final_layer_norm.weight"]
  tensors["lm_head.weight"] = tensors["encoder.embed_tokens.weight"]
  converted = hf_weights.t5_params_from_hf(tensors, config)
  jax.tree.map(np.testing.assert_array_equal, converted, params)


def test_logical_axes():
  config = t5.T5Config(vocab_size=50, emb_dim=8, num_heads=2, num_layers=1, head_dim=4, mlp_dim=16)
  ids = jnp.ones((1, 3), jnp.int32)
  specs = nn.get_partition_spec(t5.T5Encoder(config).init(jax.random.key(0), ids, ids > 0))
  axes = {
      "/".join(path): tuple(spec)
      for path, spec in traverse_util.flatten_dict(specs["params"]).items()
  }
  assert axes == {
      "token_embedder/embedding": ("vocab", "embed"),
      "relpos_bias/rel_embedding": ("relpos_buckets", "heads"),
      "layers_0/pre_attention_layer_norm/scale": ("embed",),
      "layers_0/attention/query/kernel": ("embed", "joined_kv"),
      "layers_0/attention/key/kernel": ("embed", "joined_kv"),
      "layers_0/attention/value/kernel": ("embed", "joined_kv"),
      "layers_0/attention/out/kernel": ("joined_kv", "embed"),
      "layers_0/pre_mlp_layer_norm/scale": ("embed",),
      "layers_0/mlp/wi_0/kernel": ("embed", "mlp"),
      "layers_0/mlp/wi_1/kernel": ("embed", "mlp"),
      "layers_0/mlp/wo/kernel": ("mlp", "embed"),
      "encoder_norm/scale": ("embed",),
  }


def test_bfloat16_and_dropout():
  config = t5.T5Config(vocab_size=50, emb_dim=32, num_heads=2, num_layers=2, head_dim=8, mlp_dim=64)
  ids, mask = _batch(config.vocab_size)
  params = t5.T5Encoder(config).init(jax.random.key(0), ids, mask)["params"]
  full = t5.T5Encoder(config).apply({"params": params}, ids, mask)
  half_config = dataclasses.replace(config, dtype=jnp.bfloat16)
  half = t5.T5Encoder(half_config).apply({"params": params}, ids, mask)
  assert half.dtype == jnp.bfloat16
  np.testing.assert_allclose(np.asarray(half, np.float32), full, atol=0.1)
  dropped = t5.T5Encoder(dataclasses.replace(config, dropout_rate=0.5))
  a, b = (dropped.apply({"params": params}, ids, mask, deterministic=False,
                        rngs={"dropout": jax.random.key(seed)}) for seed in (1, 2))
  assert not np.allclose(a, b)
  np.testing.assert_array_equal(dropped.apply({"params": params}, ids, mask), full)


_PUBLISHED_SIZES = {  # name: (vocab_size, emb_dim, num_heads, num_layers, mlp_dim, mlp_activations)
    "t5_1_1_tiny": (32128, 64, 4, 2, 128, ("gelu", "linear")),
    "t5_1_1_small": (32128, 512, 6, 8, 1024, ("gelu", "linear")),
    "t5_1_1_base": (32128, 768, 12, 12, 2048, ("gelu", "linear")),
    "t5_1_1_large": (32128, 1024, 16, 24, 2816, ("gelu", "linear")),
    "t5_1_1_xl": (32128, 2048, 32, 24, 5120, ("gelu", "linear")),
    "t5_1_1_xxl": (32128, 4096, 64, 24, 10240, ("gelu", "linear")),
    "t5_base": (32128, 768, 12, 12, 3072, ("relu",)),
    "mt5_base": (250112, 768, 12, 12, 2048, ("gelu", "linear")),
}


def test_gin_model_files_cover_published_sizes():
  assert sorted(p.stem for p in GIN_MODELS.glob("*t5*.gin")) == sorted(_PUBLISHED_SIZES)


@pytest.mark.parametrize("name", sorted(_PUBLISHED_SIZES))
def test_gin_model_file(name):
  model, vocabulary, _ = retrieval_setup.parse_model_file(GIN_MODELS / f"{name}.gin")
  vocab_size, emb_dim, num_heads, num_layers, mlp_dim, activations = _PUBLISHED_SIZES[name]
  head_dim = 16 if name == "t5_1_1_tiny" else 64
  assert model.backbone.config == t5.T5Config(vocab_size=vocab_size, emb_dim=emb_dim,
                                              num_heads=num_heads, num_layers=num_layers,
                                              head_dim=head_dim, mlp_dim=mlp_dim,
                                              mlp_activations=activations)
  multilingual = name.startswith("mt5")
  assert vocabulary.extra_ids == (0 if multilingual else 100)
  assert vocabulary.sentencepiece_model_file.endswith(
      "mc4.250000.100extra/sentencepiece.model"
      if multilingual else "cc_all.32000/sentencepiece.model")
