"""`xtr-export-model` (`xtr.models.released.write`): models trained here, written in the
sentence-transformers layout of the released XTR, read back by xtr to the same token vectors and
by transformers and torch to token vectors within 1e-4; refusals."""
import json
import re
import shutil

import gin
import jax
import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch
import transformers

from tests import retrieval_setup
from tests.retrieval_setup import run_tool
from xtr import cli
from xtr.models import encoding
from xtr.models import released

TEXTS = [
    "What causes SCURVY?", "0-dimensional biomaterials show inductive properties.",
    "Vitamin C AND Scurvy: ÉTUDE of naïve café-goers, 1742–1753."
]
# name: (model file, bindings of a small random model, the model file's vocabulary binding)
MODELS = {
    "t5": ("gin/models/t5_1_1_tiny.gin", ["xtr_encoder.XTREncoder.embed_dim = 16"], "T5_SPM_PATH"),
    "minilm": ("gin/models/minilm_l6.gin",
               ["bert.BertConfig.num_layers = 2",
                "xtr_encoder.XTREncoder.embed_dim = 16"], "MINILM_DIR"),
    "minilm_no_projection":
        ("gin/models/minilm_l6.gin",
         ["bert.BertConfig.num_layers = 2",
          "xtr_encoder.XTREncoder.embed_dim = None"], "MINILM_DIR"),
}


def _vocabulary(name, t5_spm_path, minilm_dir, directory=None) -> str:
  """The binding of the model file's vocabulary: the training one, or the exported `directory`'s."""
  model_file, _, macro = MODELS[name]
  if macro == "T5_SPM_PATH":
    return f"T5_SPM_PATH = '{directory / 'spiece.model' if directory else t5_spm_path}'"
  return f"MINILM_DIR = '{directory or minilm_dir}'"


@pytest.fixture(scope="module", params=list(MODELS))
def exported(request, tmp_path_factory, t5_spm_path, minilm_dir):
  """(name, the trained model's encoder, the exported directory)."""
  name = request.param
  model_file, bindings, _ = MODELS[name]
  root = tmp_path_factory.mktemp(name)
  vocabulary = _vocabulary(name, t5_spm_path, minilm_dir)
  retrieval_setup.random_checkpoint(root / "model", 0, t5_spm_path, vocabulary, *bindings,
                                    model_file=model_file)
  gin.clear_config()
  result = run_tool("xtr.cli.export_model", f"--gin_file={model_file}",
                    f"--gin_bindings={vocabulary}", *[f"--gin_bindings={b}" for b in bindings],
                    f"--checkpoint={root / 'model'}", f"--out={root / 'out'}")
  assert result.returncode == 0, result.stderr
  return name, retrieval_setup.tool_encoder(model_file, root / "model", vocabulary,
                                            *bindings), root / "out"


def test_the_layout_is_the_releases(exported):
  name, encoder, directory = exported
  vocabulary = "spiece.model" if name == "t5" else "vocab.txt"
  assert sorted(str(p.relative_to(directory)) for p in directory.rglob("*")) == sorted([
      "2_Dense", "2_Dense/config.json", "2_Dense/model.safetensors", "config.json",
      "model.safetensors", "modules.json", "sentence_bert_config.json", "tokenizer_config.json",
      vocabulary
  ])
  dense = json.loads((directory / "2_Dense" / "config.json").read_text())
  config = encoder.model.backbone.config
  hidden = config.emb_dim if name == "t5" else config.hidden_size
  assert dense == {
      "in_features": hidden,
      "out_features": 16 if name != "minilm_no_projection" else hidden,
      "bias": False,
      "activation_function": "torch.nn.modules.linear.Identity"
  }
  modules = json.loads((directory / "modules.json").read_text())
  assert [m["path"] for m in modules] == ["", "2_Dense"]


def test_xtr_reads_it_back_to_the_same_vectors(exported, t5_spm_path, minilm_dir):
  name, encoder, directory = exported
  model_file, bindings, _ = MODELS[name]
  if name == "minilm_no_projection":  # read back with the identity projection it was given
    bindings = [*bindings[:-1], "xtr_encoder.XTREncoder.embed_dim = 384"]
  read_back = retrieval_setup.tool_encoder(model_file, directory,
                                           _vocabulary(name, t5_spm_path, minilm_dir, directory),
                                           *bindings)
  ids = encoder.tokenize(TEXTS, 32)
  np.testing.assert_array_equal(read_back.tokenize(TEXTS, 32), ids)
  expected, mask, _ = encoder.encode_ids(ids)
  vectors, read_mask, _ = read_back.encode_ids(ids)
  np.testing.assert_array_equal(read_mask, mask)
  np.testing.assert_allclose(vectors, expected, atol=1e-6, rtol=0)


def test_transformers_and_torch_compute_the_same_token_vectors(exported):
  name, encoder, directory = exported
  tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
  batch = tokenizer([text.lower() for text in TEXTS], max_length=32, truncation=True,
                    padding="max_length", return_tensors="pt")
  ids = encoder.tokenize(TEXTS, 32)
  np.testing.assert_array_equal(batch["input_ids"].numpy(), ids)
  backbone = (transformers.T5EncoderModel
              if name == "t5" else transformers.BertModel).from_pretrained(directory).eval()
  weight = safetensors.torch.load_file(directory / "2_Dense" / "model.safetensors")
  with torch.no_grad():
    hidden = backbone(input_ids=batch["input_ids"],
                      attention_mask=batch["attention_mask"]).last_hidden_state
    vectors = torch.nn.functional.normalize(hidden @ weight["linear.weight"].T, dim=-1)
  expected, mask, _ = encoder.encode_ids(ids)
  np.testing.assert_array_equal(mask, batch["attention_mask"].numpy().astype(bool))
  np.testing.assert_allclose(vectors.numpy() * mask[..., None], expected, atol=1e-4, rtol=0)


def test_an_existing_out_its_temporary_or_a_salience_model_is_refused(tmp_path, t5_spm_path):
  spm = f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'"
  tiny = "--gin_file=gin/models/t5_1_1_tiny.gin"
  (tmp_path / "out").mkdir()
  (tmp_path / "out" / "keep").write_text("mine")
  result = run_tool("xtr.cli.export_model", tiny, spm, f"--checkpoint={tmp_path / 'missing'}",
                    f"--out={tmp_path / 'out'}")
  assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (
      2, f"xtr-tool: --out={tmp_path / 'out'} exists; name a new directory.")
  assert (tmp_path / "out" / "keep").read_text() == "mine"
  # A killed export's temporary (or another export's, under way) is neither removed nor reused.
  (tmp_path / "new.tmp").mkdir()
  (tmp_path / "new.tmp" / "config.json").write_text("{}")
  result = run_tool("xtr.cli.export_model", tiny, spm, f"--checkpoint={tmp_path / 'missing'}",
                    f"--out={tmp_path / 'new'}")
  assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (
      2, f"xtr-tool: --out={tmp_path / 'new'}: {tmp_path / 'new.tmp'} exists (left by a killed "
      "xtr-export-model, or another one writing it); remove it and rerun.")
  assert (tmp_path / "new.tmp" / "config.json").read_text() == "{}"
  assert not (tmp_path / "new").exists()
  salience = ["salience.Salience.variant = 'relu'"]
  retrieval_setup.random_checkpoint(
      tmp_path / "aligner", 0, t5_spm_path, *[
          "from xtr.models import salience",
          "xtr_encoder.XTREncoder.salience = @salience.Salience()", *salience
      ])
  gin.clear_config()
  result = run_tool("xtr.cli.export_model", tiny, spm,
                    "--gin_bindings=from xtr.models import salience",
                    "--gin_bindings=xtr_encoder.XTREncoder.salience = @salience.Salience()",
                    f"--checkpoint={tmp_path / 'aligner'}", f"--out={tmp_path / 'aligner_out'}")
  assert result.returncode == 2 and "salience heads" in result.stderr, result.stderr
  assert not (tmp_path / "aligner_out").exists()


def test_an_out_in_the_runs_checkpoints_is_refused(tmp_path, t5_spm_path):
  """xtr-export-model and xtr-export wrote --out=RUN/checkpoints/7 (exit 0), which then passed for
  the run's latest step: no tool could load the run, nor xtr-train resume it. Refused, as
  xtr-wise-ft refuses it; and a stray numbered directory there is not taken for a step."""
  run = tmp_path / "run"
  retrieval_setup.random_checkpoint(run, 0, t5_spm_path)
  gin.clear_config()
  model = ["--gin_file=gin/models/t5_1_1_tiny.gin", f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'"]
  (tmp_path / "corpus.jsonl").write_text('{"_id": "d", "text": "a document"}\n')
  for tool, flags in (("xtr.cli.export_model", []), ("xtr.cli.export",
                                                     [f"--corpus={tmp_path / 'corpus.jsonl'}"])):
    for out in (run / "checkpoints" / "7", run / "initial" / "x", run / "checkpoints" / "0" / "x"):
      result = run_tool(tool, *model, f"--checkpoint={run}", *flags, f"--out={out}")
      assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (
          2, f"xtr-tool: --out={out} lies in the checkpoints of --checkpoint={run}, where it "
          "would become one of them; choose a directory outside them."), (tool, out)
      assert not out.exists()
  before = encoding.load_params(str(run))
  (run / "checkpoints" / "7").mkdir()
  jax.tree.map(np.testing.assert_array_equal, encoding.load_params(str(run)), before)


@pytest.mark.parametrize("binding, problem", [
    ("xtr_encoder.XTREncoder.embed_dim = None",
     r"parameter \['projection'\]\['kernel'\]: None \(model\) vs \(64, 128\) \(checkpoint\)"),
    ("t5.T5Config.mlp_dim = 256", r"parameter \[.*\]: \(.*256.*\) \(model\) vs"),
])
def test_a_checkpoint_the_gin_model_does_not_fit_is_refused(tmp_path, t5_spm_path, binding,
                                                            problem):
  """Exported under a model without a projection, a trained one was replaced by an identity;
  with another MLP width, config.json said 256 over weights of 128; both exit 0."""
  retrieval_setup.random_checkpoint(tmp_path / "model", 0, t5_spm_path)
  gin.clear_config()
  result = run_tool("xtr.cli.export_model", "--gin_file=gin/models/t5_1_1_tiny.gin",
                    f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'", f"--gin_bindings={binding}",
                    f"--checkpoint={tmp_path / 'model'}", f"--out={tmp_path / 'out'}")
  assert result.returncode == 2
  assert re.search(f"does not fit the model of the gin files: {problem}", result.stderr)
  assert not (tmp_path / "out").exists()


def test_a_failed_write_leaves_no_out(tmp_path, t5_spm_path, monkeypatch):
  """A full disk left --out with its json files and no weights (a rerun refused: --out exists)
  and a safetensors traceback; now nothing is left, and the error names the file."""
  retrieval_setup.random_checkpoint(tmp_path / "model", 0, t5_spm_path, *cli.ENCODER_BINDINGS)
  try:
    encoder = encoding.Encoder(encoding.load_params(str(tmp_path / "model")))
  finally:
    gin.clear_config()

  def full(tensors, path):
    raise safetensors.SafetensorError("Error while serializing: I/O error: No space left on "
                                      "device (os error 28)")

  monkeypatch.setattr(released.safetensors_numpy, "save_file", full)
  with pytest.raises(
      OSError, match=r"cannot write .*/out.tmp/model.safetensors: .*No space "
      r"left on device.*; free space \(or write elsewhere\) and rerun"):
    released.write(str(tmp_path / "out"), encoder.model, jax.device_get(encoder.params),
                   encoder.tokenizer, 64)
  assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_bert_config_without_a_key_is_refused_naming_the_file(exported, tmp_path):
  name, _, directory = exported
  copy = tmp_path / "copy"
  shutil.copytree(directory, copy)
  config = json.loads((copy / "config.json").read_text())
  key = "d_model" if name == "t5" else "hidden_size"
  del config[key]
  (copy / "config.json").write_text(json.dumps(config))
  with pytest.raises(ValueError, match=rf"{copy / 'config.json'}: missing key '{key}'"):
    released.load_params(str(copy))


def test_a_config_the_model_cannot_compute_with_is_refused_naming_the_file(exported, tmp_path):
  """BERT heads that do not divide hidden_size failed in a reshape (a TypeError naming no file);
  T5's 2 buckets divided by zero."""
  name, _, directory = exported
  copy = tmp_path / "copy"
  shutil.copytree(directory, copy)
  key, value, problem = (("relative_attention_num_buckets", 2,
                          "expected at least 4") if name == "t5" else
                         ("num_attention_heads", 5, "expected a divisor of hidden_size = 384"))
  config = json.loads((copy / "config.json").read_text())
  (copy / "config.json").write_text(json.dumps(config | {key: value}))
  with pytest.raises(ValueError, match=rf"^{copy / 'config.json'}: {key} = {value}: {problem}$"):
    released.load_params(str(copy))


def test_the_export_reads_back_under_its_gin_model_only(exported, tmp_path, t5_spm_path,
                                                        minilm_dir):
  """xtr-export-model of the exported directory under the model it was exported with writes the
  same config.json; a config.json epsilon other than the gin model's was ignored (exit 0)."""
  name, _, directory = exported
  model_file, bindings, _ = MODELS[name]
  if name == "minilm_no_projection":  # read back with the identity projection it was given
    bindings = [*bindings[:-1], "xtr_encoder.XTREncoder.embed_dim = 384"]
  flags = [
      f"--gin_file={model_file}",
      f"--gin_bindings={_vocabulary(name, t5_spm_path, minilm_dir, directory)}",
      *[f"--gin_bindings={b}" for b in bindings]
  ]
  result = run_tool("xtr.cli.export_model", *flags, f"--checkpoint={directory}",
                    f"--out={tmp_path / 'again'}")
  assert result.returncode == 0, result.stderr
  assert (tmp_path / "again" / "config.json").read_text() == (directory / "config.json").read_text()
  key = "layer_norm_epsilon" if name == "t5" else "layer_norm_eps"
  shutil.copytree(directory, tmp_path / "copy")
  config = json.loads((tmp_path / "copy" / "config.json").read_text())
  (tmp_path / "copy" / "config.json").write_text(json.dumps(config | {key: 1e-3}))
  result = run_tool("xtr.cli.export_model", *flags, f"--checkpoint={tmp_path / 'copy'}",
                    f"--out={tmp_path / 'out'}")
  assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (
      2, f"xtr-tool: {tmp_path / 'copy' / 'config.json'}: {key} = 0.001, but the gin model has "
      f"{config[key]}; give the gin files that match it.")
