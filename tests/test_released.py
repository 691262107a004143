"""The released XTR weights (`xtr.models.released`, `xtr-convert-checkpoint`): a directory in their
layout, built here by transformers and torch from a tiny random T5, against token vectors that
transformers and torch compute from it; export and eval of the SciFact slice; refusals."""
import io
import json
import os
import shutil
import sys
import zipfile

import jax
import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch
import transformers

from tests import retrieval_setup
from tests.retrieval_setup import run_tool
from xtr.data import beir_files
from xtr.evaluation import beir_eval
from xtr.models import encoding
from xtr.models import released
from xtr.models import torch_files
from xtr.text import tokenization

HIDDEN, DIM = 32, 16
IDENTITY = "torch.nn.modules.linear.Identity"
# gin/models/xtr_base_en.gin with the tiny T5 of the test's weights.
_TINY_GIN = f"""from __gin__ import dynamic_registration
from xtr.models import xtr_encoder
from xtr.models import t5
include 'gin/models/xtr_base_en.gin'
t5.T5Config:
  emb_dim = {HIDDEN}
  num_heads = 4
  num_layers = 2
  head_dim = 8
  mlp_dim = 64
xtr_encoder.XTREncoder.embed_dim = {DIM}
"""


@pytest.fixture(scope="module")
def release(tmp_path_factory, t5_spm_path):
  """(directory, T5 encoder, projection): a full T5 checkpoint (decoder included), its
  2_Dense as a torch pickle converted by xtr-convert-checkpoint, and the real T5 vocabulary."""
  directory = tmp_path_factory.mktemp("xtr-base-en")
  torch.manual_seed(0)
  model = transformers.T5ForConditionalGeneration(
      transformers.T5Config(vocab_size=32128, d_model=HIDDEN, d_kv=8, d_ff=64, num_layers=2,
                            num_decoder_layers=1, num_heads=4,
                            feed_forward_proj="gated-gelu")).eval()
  with torch.no_grad():
    for weight in model.parameters():
      if weight.ndim == 1:  # Layer norms other than 1, so that a missing one shows.
        weight.uniform_(0.5, 1.5)
  model.save_pretrained(directory)
  projection = torch.nn.Linear(HIDDEN, DIM, bias=False)
  (directory / "2_Dense").mkdir()  # sentence-transformers' Dense module: its state dict (the
  # Linear is its `linear`) as a torch pickle, and its config.
  torch.save({"linear.weight": projection.weight.detach()},
             directory / "2_Dense" / released.TORCH_FILE)
  (directory / "2_Dense" / "config.json").write_text(
      json.dumps({
          "in_features": HIDDEN,
          "out_features": DIM,
          "bias": False,
          "activation_function": IDENTITY
      }))
  shutil.copy(t5_spm_path, directory / "spiece.model")
  process = run_tool("xtr.cli.convert_checkpoint", f"--checkpoint={directory}")
  assert process.returncode == 0, process.stderr[-2000:]
  assert f"Wrote {directory / '2_Dense' / 'model.safetensors'}" in process.stdout
  return directory, model.get_encoder(), projection


@pytest.fixture(scope="module")
def tiny_gin(tmp_path_factory):
  path = tmp_path_factory.mktemp("gin") / "tiny_xtr.gin"
  path.write_text(_TINY_GIN)
  return path


@pytest.mark.parametrize("name, backbone, extra_ids", [("xtr_base_en", "t5_1_1_base", 100),
                                                       ("xtr_xxl_en", "t5_1_1_xxl", 100),
                                                       ("mxtr_base", "mt5_base", 0)])
def test_the_model_files_of_the_releases(name, backbone, extra_ids):
  """Each release: its backbone's model file, 128-d tokens, the vocabulary in CHECKPOINT,
  documents of 512 tokens."""
  model, vocabulary, lengths = retrieval_setup.parse_model_file(f"gin/models/{name}.gin",
                                                                "CHECKPOINT = '/weights/xtr'")
  expected, _, _ = retrieval_setup.parse_model_file(f"gin/models/{backbone}.gin")
  assert model.backbone.config == expected.backbone.config and model.embed_dim == 128
  assert vocabulary.sentencepiece_model_file == "/weights/xtr/spiece.model"
  assert vocabulary.extra_ids == extra_ids
  assert lengths == {"doc_max_length": 512, "query_max_length": 32}


def _reference(release, texts: list[str], max_length: int) -> tuple[np.ndarray, np.ndarray]:
  """(ids [N, L], vectors [N, L, D]) by transformers and torch: the texts lowercased, encoded
  with EOS appended in at most max_length tokens; encoder -> projection -> L2 normalization,
  0 on padding."""
  directory, encoder, projection = release
  tokenizer = transformers.T5Tokenizer.from_pretrained(directory)
  batch = tokenizer([text.lower() for text in texts], max_length=max_length, truncation=True,
                    padding="max_length", return_tensors="pt")
  with torch.no_grad():
    hidden = encoder(**batch).last_hidden_state
    vectors = torch.nn.functional.normalize(projection(hidden), dim=-1)
  return batch["input_ids"].numpy(), (vectors * batch["attention_mask"][..., None]).numpy()


def test_token_vectors_equal_those_of_transformers_and_torch(release, tiny_gin, scifact_dir):
  encoder = retrieval_setup.tool_encoder(tiny_gin, release[0], f"CHECKPOINT = '{release[0]}'")
  assert (encoder.query_max_length, encoder.doc_max_length) == (32, 512)
  assert encoder.tokenizer.path == str(release[0] / "spiece.model")
  with open(scifact_dir / "corpus.jsonl", "rb") as f:
    docs = [beir_files.document_text(json.loads(next(f))) for _ in range(6)]
  docs += [" ".join(docs), "Vitamin C AND Scurvy: ÉTUDE"]  # Over 512 tokens; upper case.
  queries = ["What causes SCURVY?", "0-dimensional biomaterials show inductive properties."]
  for texts, length in ((queries, 32), (docs, 512)):
    ids, expected = _reference(release, texts, length)
    np.testing.assert_array_equal(tokenization.encode_batch(encoder.tokenizer, texts, length), ids)
    vectors, mask, _ = encoder.encode(texts, length)
    np.testing.assert_array_equal(mask, ids != 0)
    np.testing.assert_allclose(vectors, expected, atol=1e-4, rtol=0)
  assert (ids[-2] != 0).all() and ids[-2, -1] == 1  # The long document: 511 tokens and EOS.


def _exact_maxsim(release, data: beir_eval.BeirData, top_k: int) -> dict[str, dict[str, float]]:
  """Each query's top_k documents by MaxSim (averaged over the query's tokens) over the
  vectors of `_reference`."""
  doc_ids, docs = _reference(release, data.docs, 512)
  query_ids, queries = _reference(release, data.queries, 32)
  run = {}
  for query_id, q, q_ids in zip(data.query_ids, queries, query_ids):
    sims = np.where(doc_ids[:, :, None] != 0, docs @ q[q_ids != 0].T, -np.inf)  # [N, 512, n]
    scores = sims.max(axis=1).mean(axis=1)
    top = np.argsort(-scores)[:top_k]
    run[query_id] = {data.doc_ids[i]: float(scores[i]) for i in top}
  return run


def test_export_eval_and_search_rank_the_scifact_slice_as_exact_maxsim_by_torch(
    release, tiny_gin, scifact_slice, tmp_path):
  directory, index = release[0], tmp_path / "index"
  process = run_tool("xtr.cli.export", f"--gin_file={tiny_gin}", f"--checkpoint={directory}",
                     f"--corpus={scifact_slice / 'corpus.jsonl'}", f"--out={index}",
                     "--store_vectors=float32")
  assert process.returncode == 0, process.stderr[-2000:]
  model = json.loads((index / "manifest.json").read_text())["model"]
  assert (model["query_max_length"], model["doc_max_length"]) == (32, 512)
  assert model["vocabulary"]["path"] == "vocabulary/spiece.model"  # copied into the index
  assert (index / "vocabulary" / "spiece.model").read_bytes() == (directory /
                                                                  "spiece.model").read_bytes()
  process = run_tool("xtr.cli.eval_beir", f"--data_dir={scifact_slice}", f"--index={index}",
                     f"--checkpoint={directory}", f"--out={tmp_path / 'r.json'}",
                     "--scoring=exhaustive", f"--run_file={tmp_path / 'run.trec'}")
  assert process.returncode == 0, process.stderr[-2000:]
  data = beir_eval.load_beir(str(scifact_slice), "test")
  expected = _exact_maxsim(release, data, 10)
  run = beir_eval.read_trec_run(str(tmp_path / "run.trec"))
  assert run.keys() == expected.keys()
  for query_id, ranking in expected.items():  # The top 10 of the run's 100 (--top_k's default).
    assert list(run[query_id])[:10] == list(ranking)
    np.testing.assert_allclose(list(run[query_id].values())[:10], list(ranking.values()), atol=1e-4)
  report = json.loads((tmp_path / "r.json").read_text())
  assert report["ndcg@10"] == pytest.approx(beir_eval.evaluate(data.qrels, expected)["ndcg@10"])
  # xtr-search of the same index and weights, a query on stdin: the same ranking.
  process = run_tool("xtr.search_main", f"--index={index}", f"--checkpoint={directory}",
                     "--top_k=10", "--scoring=exhaustive", stdin=data.queries[0] + "\n")
  assert process.returncode == 0, process.stderr[-2000:]
  found = json.loads(process.stdout)["results"]
  want = expected[data.query_ids[0]]
  assert [r["doc_id"] for r in found] == list(want)
  np.testing.assert_allclose([r["score"] for r in found], list(want.values()), atol=1e-4)


def _broken_copy(release, tmp_path, edit):
  directory = tmp_path / "release"
  shutil.copytree(release[0], directory)
  edit(directory)
  return str(directory)


def _fifo(path) -> None:
  path.unlink()
  os.mkfifo(path)


def _write_weight(path, weight: np.ndarray) -> None:
  path.write_bytes(safetensors.numpy.save({"linear.weight": weight}))


@pytest.mark.parametrize(
    "edit, error, message", [
        *[(lambda d, name=name: (d / name).unlink(), FileNotFoundError,
           f"release/{name} is missing: a released XTR directory holds")
          for name in released.FILES[:-1]],
        (lambda d: [(d / "2_Dense" / name).unlink()
                    for name in ("model.safetensors", released.TORCH_FILE)], FileNotFoundError,
         "release/2_Dense/model.safetensors is missing: a released"),
        (lambda d: (d / "2_Dense/model.safetensors").unlink(), FileNotFoundError,
         r"release/2_Dense/pytorch_model.bin holds these weights as a torch pickle, which xtr "
         r"never "
         r"opens. Convert it once: xtr-convert-checkpoint --checkpoint=\S+/release \(torch comes "
         r"with `pip install -e .\[convert\]`\)"),
        (lambda d: _write_weight(d / "2_Dense/model.safetensors", np.zeros(
            (HIDDEN, DIM), "f4")), ValueError,
         r"release/2_Dense/model.safetensors: expected one tensor linear.weight of shape "
         r"\(16, 32\) .*found \{'linear.weight': \(32, 16\)\}"),
        (lambda d: (d / "2_Dense/config.json").write_text(
            json.dumps({
                "in_features": 64,
                "out_features": DIM,
                "bias": False,
                "activation_function": IDENTITY
            })), ValueError,
         r"release/2_Dense/config.json: in_features = 64, but the encoder's d_model is 32"),
        (lambda d: (d / "2_Dense/config.json").write_text(
            json.dumps({
                "in_features": HIDDEN,
                "out_features": DIM,
                "bias": True,
                "activation_function": IDENTITY
            })), ValueError, r"release/2_Dense/config.json: XTR's projection is linear"),
        (lambda d: (d / "2_Dense/config.json").write_text(
            json.dumps({
                "in_features": HIDDEN,
                "out_features": DIM,
                "bias": False,
                "activation_function": "torch.nn.modules.activation.Tanh"
            })), ValueError, r"release/2_Dense/config.json: XTR's projection is linear .*Tanh"),
        (lambda d:
         (d / "2_Dense/config.json").write_text(json.dumps({"in_features": HIDDEN})), ValueError,
         r"release/2_Dense/config.json: out_features = None: expected int, got NoneType"),
        (lambda d: (d / "config.json").write_text(
            json.dumps(json.loads((d / "config.json").read_text()) | {"d_model": "32"})),
         ValueError, r"release/config.json: d_model = '32': expected int, got str"),
        (lambda d: (d / "config.json").write_text("[1, 2]"), ValueError,
         r"release/config.json must hold a JSON object, not list"),
        (lambda d: (d / "config.json").write_text(
            json.dumps(json.loads((d / "config.json").read_text()) | {"num_layers": 3})),
         ValueError, r"release/model.safetensors: Checkpoint does not fit T5Config\(.*num_layers=3"
         r"[\s\S]*missing tensor encoder\.block\.2\."),
        (lambda d: (d / "model.safetensors").write_bytes(b"forged" * 10), ValueError,
         r"release/model.safetensors is not a safetensors checkpoint xtr can read \(Error while "
         r"deserializing header: header too large\); download or convert it again."),
        (lambda d: (d / "2_Dense/model.safetensors").write_bytes(
            (d / "2_Dense/model.safetensors").read_bytes()[:-8]), ValueError,
         r"release/2_Dense/model.safetensors is not a safetensors checkpoint xtr can read"),
        (lambda d: _write_weight(d / "2_Dense/model.safetensors",
                                 np.full((DIM, HIDDEN), np.nan, "f4")), ValueError,
         r"The checkpoint \S+/release is damaged or diverged: its parameter "
         r"\['projection'\]\['kernel'\] holds NaN or infinite values."),
        *[(lambda d, name=name: _fifo(d / name), OSError,
           rf"release/{name} is a FIFO, not a regular file")
          for name in ("config.json", "model.safetensors")],
        *[(lambda d, key=key, value=value: (d / "config.json").write_text(
            json.dumps(json.loads((d / "config.json").read_text()) | {key: value})), ValueError,
           rf"release/config.json: {key} = {value}: expected a count from 1 to")
          for key, value in (("num_layers", 10**5), ("num_heads", 0), ("vocab_size", -5))],
        (lambda d: _write_weight(d / "2_Dense/model.safetensors", np.zeros(
            (DIM, HIDDEN), "c8")), ValueError,
         r"release/2_Dense/model.safetensors is not a safetensors checkpoint xtr can read "
         r"\(tensor linear.weight is C64, not one of"),
    ], ids=[
        *[f"missing {name}" for name in released.FILES[:-1]], "missing 2_Dense weights",
        "only pytorch_model.bin", "projection transposed", "projection from 64",
        "projection with bias", "projection with tanh", "dense config without out_features",
        "d_model a str", "config not an object", "config of another T5", "forged model.safetensors",
        "truncated projection", "NaN projection", "config.json a FIFO", "model.safetensors a FIFO",
        "100,000 layers", "no heads", "negative vocabulary", "complex projection"
    ])
def test_a_broken_directory_is_refused_naming_the_file(release, tmp_path, edit, error, message):
  with pytest.raises(error, match=message):
    encoding.load_params(_broken_copy(release, tmp_path, edit))


def test_the_torch_files_are_refused_then_converted_to_the_same_weights(release, tmp_path):
  """Both weight files as torch pickles (a state dict written by torch): refused with the
  command, converted once, then loaded as the safetensors release."""
  directory = tmp_path / "release"
  shutil.copytree(release[0], directory)
  torch.save(safetensors.torch.load_file(directory / "model.safetensors"),
             directory / released.TORCH_FILE)
  for folder in (directory, directory / "2_Dense"):
    (folder / "model.safetensors").unlink()
  with pytest.raises(
      FileNotFoundError, match=r"release/model.safetensors is missing: .* "
      r"xtr-convert-checkpoint --checkpoint="):
    encoding.load_params(str(directory))
  assert torch_files.convert(str(directory)) == [
      str(folder / "model.safetensors") for folder in (directory, directory / "2_Dense")
  ]
  assert torch_files.convert(str(directory)) == []
  jax.tree.map(np.testing.assert_array_equal, encoding.load_params(str(directory)),
               encoding.load_params(str(release[0])))


class _Payload:
  """Unpickled, it would run `touch MARKER`."""

  def __init__(self, marker):
    self.marker = marker

  def __reduce__(self):
    return os.system, (f"touch {self.marker}",)


def test_the_converter_never_runs_a_pickled_payload(tmp_path):
  marker = tmp_path / "pwned"
  torch.save({
      "linear.weight": torch.zeros(DIM, HIDDEN),
      "x": _Payload(marker)
  }, tmp_path / released.TORCH_FILE)
  with pytest.raises(
      ValueError, match=r"pytorch_model.bin is not a state dict that torch loads "
      r"with weights_only=True"):
    torch_files.convert(str(tmp_path))
  assert not marker.exists() and not (tmp_path / "model.safetensors").exists()


def test_the_converter_refuses_a_zip_bomb_before_torch_inflates_it(tmp_path):
  """A torch file whose tensor's member is deflated from 64 MiB of zeros (~64 kB): refused by its
  members' sizes, before torch.load inflates a byte of it."""
  written = io.BytesIO()
  torch.save({"linear.weight": torch.zeros(1)}, written)
  source = zipfile.ZipFile(written)
  with zipfile.ZipFile(tmp_path / released.TORCH_FILE, "w") as bomb:
    for info in source.infolist():
      if info.filename.endswith("/data/0"):
        member = zipfile.ZipInfo(info.filename)
        member.compress_type = zipfile.ZIP_DEFLATED
        with bomb.open(member, "w", force_zip64=True) as f:
          for _ in range(4):
            f.write(bytes(1 << 24))
      else:
        bomb.writestr(info, source.read(info.filename))
  with pytest.raises(
      ValueError, match=r"pytorch_model.bin: its members inflate to 67,10\d,\d{3} "
      r"bytes, more than the file's"):
    torch_files.convert(str(tmp_path))
  assert not (tmp_path / "model.safetensors").exists()


def test_the_converter_says_how_to_install_torch(tmp_path, monkeypatch):
  torch.save({"linear.weight": torch.zeros(DIM, HIDDEN)}, tmp_path / released.TORCH_FILE)
  monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
  with pytest.raises(ImportError, match=r"pip install -e \.\[convert\]"):
    torch_files.convert(str(tmp_path))


@pytest.mark.parametrize("tensor, message", [
    (torch.ones(1).expand(1 << 20), r"tensor linear.weight of shape \(1048576,\) lays out "
     r"4,194,304 bytes from a storage of 4: its elements overlap"),
    (torch.complex(torch.ones(DIM, HIDDEN), torch.ones(
        DIM, HIDDEN)), r"tensor linear.weight is complex64, not one of \['float16'"),
    (torch.ones(DIM, HIDDEN, dtype=torch.bool), r"tensor linear.weight is bool, not one of"),
    (torch.sparse_coo_tensor(torch.tensor([[0], [0]]), torch.tensor([1.0]),
                             (DIM, HIDDEN), check_invariants=True),
     r"tensor linear.weight is sparse_coo, not a dense tensor"),
], ids=["zero stride", "complex", "bool", "sparse"])
def test_the_converter_refuses_a_tensor_it_would_blow_up_or_change(tmp_path, tensor, message):
  """A 1.6 kB file of torch.ones(1).expand(2**28) was written out as 1 GB (3.5 GB of memory; at
  10**12 elements a traceback); a complex projection lost its imaginary part (exit 0)."""
  torch.save({"linear.weight": tensor}, tmp_path / released.TORCH_FILE)
  with pytest.raises(ValueError, match=r"/pytorch_model.bin: " + message):
    torch_files.convert(str(tmp_path))
  assert not (tmp_path / "model.safetensors").exists()


def test_the_converter_takes_every_float_dtype_integer_buffers_and_views(tmp_path):
  """What torch state dicts hold: half and double floats, BERT's int64 position_ids, and views
  into a larger storage (a row of a matrix): float32, as they were."""
  matrix = torch.arange(12.0).reshape(3, 4)
  state = {
      "half": torch.ones(2, dtype=torch.float16),
      "bfloat16": torch.ones(2, dtype=torch.bfloat16),
      "double": torch.ones(2, dtype=torch.float64),
      "embeddings.position_ids": torch.arange(4)[None],
      "row": matrix[1],
      "column": matrix[:, 2],
  }
  torch.save(state, tmp_path / released.TORCH_FILE)
  assert torch_files.convert(str(tmp_path)) == [str(tmp_path / "model.safetensors")]
  converted = safetensors.numpy.load_file(tmp_path / "model.safetensors")
  assert converted.keys() == state.keys()
  for name, value in state.items():
    assert converted[name].dtype == np.float32
    np.testing.assert_array_equal(converted[name], value.to(torch.float32).numpy())


def test_the_converter_takes_a_half_float_t5_whose_embedding_has_four_names(tmp_path):
  """The most a torch file legitimately converts to: T5's embedding tied under 4 names (shared,
  encoder and decoder embed_tokens, lm_head), each written out, from half floats (7.7 times the
  file in a tiny T5, where the embedding is most of the weights)."""
  model = transformers.T5ForConditionalGeneration(
      transformers.T5Config(vocab_size=32128, d_model=HIDDEN, d_kv=8, d_ff=64, num_layers=1,
                            num_heads=4, feed_forward_proj="gated-gelu")).half()
  torch.save(model.state_dict(), tmp_path / released.TORCH_FILE)
  torch_files.convert(str(tmp_path))
  converted = safetensors.numpy.load_file(tmp_path / "model.safetensors")
  assert converted.keys() == model.state_dict().keys()
  np.testing.assert_array_equal(converted["lm_head.weight"],
                                model.shared.weight.detach().float().numpy())


def test_the_converter_refuses_a_tensor_named_more_often_than_ties_do(tmp_path):
  """A file of 1 MB that names its 1 MB tensor 2,000 times was written out as 2 GB."""
  tensor = torch.zeros(1024)
  torch.save({f"copy{i}": tensor for i in range(100)}, tmp_path / released.TORCH_FILE)
  with pytest.raises(
      ValueError, match=r"/pytorch_model.bin: its 100 tensors convert to 409,600 bytes, more than "
      r"8 times the file's [\d,]+ bytes: names repeat a tensor more often than tied weights do."):
    torch_files.convert(str(tmp_path))
  assert not (tmp_path / "model.safetensors").exists()


def test_the_converter_tool_refuses_a_zero_stride_tensor_in_one_line(tmp_path):
  torch.save({"linear.weight": torch.ones(1).expand(1 << 20)}, tmp_path / released.TORCH_FILE)
  process = run_tool("xtr.cli.convert_checkpoint", f"--checkpoint={tmp_path}")
  assert (process.returncode, process.stderr.strip().splitlines()[-1]) == (
      2, f"xtr-tool: {tmp_path / released.TORCH_FILE}: tensor linear.weight of shape (1048576,) "
      "lays out 4,194,304 bytes from a storage of 4: its elements overlap (a view with a zero "
      "stride, as expand makes), which no saved parameter's do.")
  assert not (tmp_path / "model.safetensors").exists()


def _edit_config(directory, **values) -> None:
  (directory / "config.json").write_text(
      json.dumps(json.loads((directory / "config.json").read_text()) | values))


@pytest.mark.parametrize(
    "edit, message", [
        (lambda d: _edit_config(d, relative_attention_num_buckets=2),
         r": relative_attention_num_buckets = 2: expected at least 4"),
        (lambda d: _edit_config(d, relative_attention_max_distance=8),
         r": relative_attention_max_distance = 8: expected more than "
         r"relative_attention_num_buckets // 4 = 8"),
        *[(lambda d, value=value: _edit_config(d, layer_norm_epsilon=value),
           rf": layer_norm_epsilon = {value}: expected a number between 0 and 1")
          for value in (float("nan"), -1e-06, float("inf"), 10**400)],
        (lambda d: (d / "config.json").write_text(
            (d / "config.json").read_text().rstrip()[:-1] + ', "n": ' + "9" * 5000 + "}"),
         r" is not valid JSON \(Exceeds the limit \(4300 digits\) for integer string conversion"),
    ], ids=[
        "2 buckets", "max distance of exact ones", "NaN epsilon", "negative epsilon",
        "infinite epsilon", "epsilon of 400 digits", "integer of 5000 digits"
    ])
def test_a_config_value_the_model_cannot_compute_with_is_refused_naming_it(
    release, tmp_path, edit, message):
  """2 buckets raised ZeroDivisionError; an epsilon of NaN or below 0 was taken (NaN vectors); an
  integer of 5000 digits raised a ValueError that named no file."""
  directory = _broken_copy(release, tmp_path, edit)
  with pytest.raises(ValueError, match=r"release/config.json" + message):
    encoding.load_params(directory)


@pytest.mark.parametrize("key, value, gin_value", [("layer_norm_epsilon", 0.5, 1e-06),
                                                   ("relative_attention_max_distance", 20, 128)])
def test_a_config_json_the_gin_model_differs_from_is_refused(release, tiny_gin, tmp_path, key,
                                                             value, gin_value):
  """config.json's epsilon or max distance was read, then ignored: xtr encoded with the gin
  file's values (the vectors unchanged), transformers with config.json's (0.38 apart)."""
  directory = _broken_copy(release, tmp_path, lambda d: _edit_config(d, **{key: value}))
  process = run_tool("xtr.cli.export_model", f"--gin_file={tiny_gin}",
                     f"--gin_bindings=CHECKPOINT = '{directory}'", f"--checkpoint={directory}",
                     f"--out={tmp_path / 'out'}")
  assert (process.returncode, process.stderr.strip().splitlines()[-1]) == (
      2, f"xtr-tool: {directory}/config.json: {key} = {value}, but the gin model has {gin_value}; "
      "give the gin files that match it.")
  assert not (tmp_path / "out").exists()
