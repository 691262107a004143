"""BertEncoder with the real all-MiniLM-L6-v2 weights against transformers' BertModel."""
import json
import pathlib

from flax import traverse_util
import flax.linen as nn
import gin
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from xtr.models import bert
from xtr.models import hf_weights
from xtr.text import vocabularies

MINILM_GIN = pathlib.Path(__file__).resolve().parents[1] / "gin" / "models" / "minilm_l6.gin"


@pytest.fixture(scope="module")
def minilm(minilm_dir):
  """(BertConfig, Flax params) converted from the checkpoint files."""
  config = hf_weights.bert_config_from_hf(json.loads((minilm_dir / "config.json").read_text()))
  tensors = hf_weights.read_safetensors(minilm_dir)
  return config, hf_weights.bert_params_from_hf(tensors, config)


def _sentences(scifact_dir, count: int = 6) -> list[str]:
  """Real SciFact queries and documents of very different lengths."""
  with open(scifact_dir / "queries.jsonl") as f:
    queries = [json.loads(line)["text"] for _, line in zip(range(count // 2), f)]
  with open(scifact_dir / "corpus.jsonl") as f:
    docs = [json.loads(line)["text"] for _, line in zip(range(count // 2), f)]
  return queries + [doc[:length] for doc, length in zip(docs, (40, 300, 2000))]


def test_config_from_hf_is_minilm(minilm):
  config, _ = minilm
  assert config == bert.BertConfig()


def test_converted_params_match_init_tree_and_every_param_has_logical_axes(minilm):
  config, params = minilm
  ids = jnp.ones((2, 5), jnp.int32)
  boxed = jax.eval_shape(lambda: bert.BertEncoder(config).init(jax.random.key(0), ids, ids > 0))
  flat_boxed = traverse_util.flatten_dict(boxed["params"])
  flat_params = traverse_util.flatten_dict(params)
  assert flat_boxed.keys() == flat_params.keys()
  for path, box in flat_boxed.items():
    assert isinstance(box, nn.LogicallyPartitioned), path
    assert len(box.names) == box.value.ndim, path
    assert box.value.shape == flat_params[path].shape, path
    assert flat_params[path].dtype == np.float32, path


@pytest.mark.parametrize("scan_layers,remat_policy", [(False, "none"), (True, "dots_saveable")])
def test_last_hidden_states_match_transformers(minilm_dir, scifact_dir, scan_layers, remat_policy):
  """Unscanned, and scanned (`xtr.models.layer_stack`) from the same file."""
  config = bert.BertConfig(scan_layers=scan_layers, remat_policy=remat_policy)
  params = hf_weights.load_bert_backbone(str(minilm_dir), config)
  assert ("layers" in params) == scan_layers
  tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
  batch = tokenizer(_sentences(scifact_dir), padding=True, truncation=True, max_length=256,
                    return_tensors="np")
  mask = batch["attention_mask"].astype(bool)
  assert mask.all(axis=1).sum() == 1 and (~mask).any()  # Only the longest row is unpadded.

  model = transformers.BertModel.from_pretrained(minilm_dir).eval()
  with torch.no_grad():
    expected = model(input_ids=torch.from_numpy(batch["input_ids"]),
                     attention_mask=torch.from_numpy(batch["attention_mask"])).last_hidden_state
  expected = expected.numpy()

  ids = jnp.asarray(batch["input_ids"], jnp.int32)
  actual = np.asarray(jax.jit(bert.BertEncoder(config).apply)({"params": params}, ids, ids != 0))
  assert actual.shape == expected.shape == (*ids.shape, 384)
  assert np.abs(actual - expected)[mask].max() < 1e-4
  # Padded positions agree too, a little less tightly: there both float32 implementations are
  # 5e-5 to 8e-5 away from a float64 run of BertModel.
  assert np.abs(actual - expected)[~mask].max() < 3e-4


def test_bert_prefix_names_give_the_same_params(minilm, minilm_dir):
  config, params = minilm
  tensors = hf_weights.read_safetensors(minilm_dir)
  prefixed = {f"bert.{name}": value for name, value in tensors.items()}
  prefixed["cls.predictions.bias"] = np.zeros(config.vocab_size, np.float32)  # A BertFor* head.
  converted = hf_weights.bert_params_from_hf(prefixed, config)
  jax.tree.map(np.testing.assert_array_equal, converted, params)


def test_config_mismatch_names_the_tensors(minilm_dir):
  tensors = hf_weights.read_safetensors(minilm_dir)
  with pytest.raises(ValueError) as error:
    hf_weights.bert_params_from_hf(tensors, bert.BertConfig(num_layers=4, intermediate_size=1024))
  message = str(error.value)
  assert "unexpected tensor encoder.layer.5.output.dense.weight" in message
  assert ("tensor encoder.layer.0.intermediate.dense.weight has shape (1536, 384), "
          "expected (1024, 384)") in message

  del tensors["encoder.layer.2.attention.self.key.bias"]
  with pytest.raises(ValueError, match="missing tensor encoder.layer.2.attention.self.key.bias"):
    hf_weights.bert_params_from_hf(tensors, bert.BertConfig())


def test_unsupported_hf_config_is_rejected(minilm_dir):
  config = json.loads((minilm_dir / "config.json").read_text())
  with pytest.raises(ValueError, match="hidden_act 'gelu_new'"):
    hf_weights.bert_config_from_hf(config | {"hidden_act": "gelu_new"})
  for edit, message in (({
      "vocab_size": "50"
  }, "vocab_size = '50': expected int, got str"), ({
      "num_hidden_layers": None
  }, "num_hidden_layers = None: expected int"), ({
      "num_hidden_layers": 10**9
  }, "expected a count from 1 to 1,024"), ({
      "num_attention_heads": 0
  }, "num_attention_heads = 0: expected a count")):
    with pytest.raises(ValueError, match=message):  # Before any shape is built from it.
      hf_weights.bert_config_from_hf(config | edit)


def test_dropout_uses_the_dropout_rng(minilm):
  config, params = minilm
  encoder = bert.BertEncoder(bert.BertConfig(dropout_rate=0.1))
  ids = jnp.array([[101, 7592, 2088, 102, 0]], jnp.int32)
  apply = lambda seed: encoder.apply({"params": params}, ids, ids != 0, deterministic=False, rngs=
                                     {"dropout": jax.random.key(seed)})
  np.testing.assert_array_equal(apply(0), apply(0))
  assert not np.allclose(apply(0), apply(1))


@gin.configurable
def _minilm_gin_objects(model=gin.REQUIRED, vocabulary=gin.REQUIRED):
  return model, vocabulary


def test_minilm_gin_file_builds_the_checkpoint_architecture(minilm, minilm_dir):
  gin.clear_config()
  try:
    gin.parse_config_files_and_bindings(
        [str(MINILM_GIN)],
        ["_minilm_gin_objects.model = %MODEL", "_minilm_gin_objects.vocabulary = %VOCABULARY"])
    model, vocabulary = _minilm_gin_objects()
  finally:
    gin.clear_config()
  config, _ = minilm
  assert model.backbone.config == config
  assert vocabulary == vocabularies.BertVocabulary(minilm_dir)
