"""The command-line tools: --help, errors that point at their cause, and hostile indexes."""
import io
import json
import os
import re
import shutil
import subprocess
import sys

from absl import app
import gin
import numpy as np
import pytest
import pytrec_eval

from tests.retrieval_setup import REPO
from tests.retrieval_setup import random_checkpoint
from tests.retrieval_setup import run_tool
from xtr import cli
from xtr.cli import eval_beir
from xtr.data import beir_files
from xtr.evaluation import beir_eval
from xtr.index import files
from xtr.index import reader
from xtr.models import encoding
from xtr.models import model_spec
from xtr.retrieval import ranker
from xtr.text import tokenization
from xtr.training import partitioning
from xtr.training import trainer


@pytest.mark.parametrize("module, own_flags", [
    ("xtr.cli.train", ["--multihost", "--process_id", "--gin_file"]),
    ("xtr.cli.export", [
        "--corpus", "--repair", "--docs_per_chunk", "--prune_doc", "--from_index", "--store_vectors"
    ]),
    ("xtr.search_main", [
        "--queries", "--format", "--k_prime", "--verify", "--vocabulary", "--alignment",
        "--prune_query", "--leaves_to_search"
    ]),
    ("xtr.cli.adapt_alignment", ["--shots", "--strategies", "--alignment", "--k_prime"]),
    ("xtr.cli.show_alignment", ["--query_id", "--doc_id", "--beta_q", "--num_aligned", "--verify"]),
    ("xtr.cli.eval_beir", ["--data_dir", "--run_file", "--impute", "--verify"]),
    ("xtr.cli.analyze_tokens", ["--compare", "--plot", "--verify"]),
    ("xtr.cli.demo", ["--gin_file", "--gin_bindings"]),
    ("xtr.cli.wise_ft", ["--checkpoint", "--alpha", "--out"]),
    ("xtr.cli.analyze_alignment", ["--checkpoint", "--compare", "--query_id", "--doc_id", "--out"]),
    ("xtr.cli.convert_checkpoint", ["--checkpoint"]),
])
def test_help_lists_the_tools_own_flags_and_exits_0(module, own_flags):
  process = run_tool(module, "--help")
  assert process.returncode == 0, process.stderr[-2000:]
  for flag in own_flags:
    assert re.search(rf"^  --(\[no\])?{flag[2:]}:", process.stdout, re.M), flag
  assert "(default: " in process.stdout
  assert "--jax_" not in process.stdout and "--xla_" not in process.stdout


def _hostile_gin(marker) -> str:
  """A gin config that, parsed and used by the encoder, runs `touch marker`."""
  return (
      "from __gin__ import dynamic_registration\nimport subprocess\nimport xtr.models.encoding\n"
      f"subprocess.run.args = ['touch', '{marker}']\n"
      "xtr.models.encoding.Encoder.batch_size = @subprocess.run()\n")


def _copy_index(exported, tmp_path, edit):
  index_dir = tmp_path / "index"
  shutil.copytree(exported[1], index_dir)
  manifest = json.loads((index_dir / files.MANIFEST).read_text())
  edit(manifest)
  (index_dir / files.MANIFEST).write_text(json.dumps(manifest))
  return index_dir


def test_stored_gin_config_is_never_run(exported, tmp_path):
  marker = tmp_path / "pwned"
  gin.clear_config()
  gin.parse_config(_hostile_gin(marker))  # The payload is live: parsed and used, it runs ...
  try:
    encoding.Encoder(None, model=None, vocabulary=None)
  except Exception:  # pylint: disable=broad-except
    pass  # (a CompletedProcess is no batch size)
  finally:
    gin.clear_config()
  assert marker.exists()
  marker.unlink()
  # ... but search never parses what an index stores: the hostile index searches normally,
  index_dir = _copy_index(exported, tmp_path, lambda m: m.update(gin_config=_hostile_gin(marker)))
  process = run_tool("xtr.search_main", f"--index={index_dir}", f"--checkpoint={exported[0]}",
                     "--top_k=3", stdin="vitamin c\n")
  assert process.returncode == 0, process.stderr[-2000:]
  assert len(json.loads(process.stdout)["results"]) == 3
  # an index of the old format (which did run its gin text) is refused,
  old = _copy_index(exported, tmp_path / "old",
                    lambda m: m.update(format=1, model={"gin_config": _hostile_gin(marker)}))
  process = run_tool("xtr.search_main", f"--index={old}", f"--checkpoint={exported[0]}",
                     stdin="q\n")
  assert process.returncode != 0 and "format 1" in process.stderr
  assert not marker.exists()
  # and a model description names only modules of a fixed table.
  token_index = reader.open_index(str(exported[1]))
  spec = token_index.manifest["model"] | {"backbone": "os.system"}
  with pytest.raises(ValueError, match=r"model.backbone must be one of \['bert', 't5'\]"):
    model_spec.encoder(spec, "manifest", None, "ckpt", token_index.vocabulary_file())


def test_a_checkpoint_of_another_token_dim_is_named(exported, tmp_path, t5_spm_path):
  random_checkpoint(tmp_path / "model64", 0, t5_spm_path, "xtr_encoder.XTREncoder.embed_dim = 64")
  token_index = reader.open_index(str(exported[1]))
  with pytest.raises(
      ValueError, match=r"does not fit the model of the index \(manifest\): token "
      r"dim 128 \(model\) vs 64 \(checkpoint\)"):
    model_spec.encoder(token_index.manifest["model"], "manifest",
                       encoding.load_params(str(tmp_path / "model64")), "model64",
                       token_index.vocabulary_file())


def test_eval_warns_when_the_corpus_is_not_the_indexed_one(exported, scifact_slice, tmp_path):
  data_dir = tmp_path / "data"
  shutil.copytree(scifact_slice, data_dir)
  lines = (data_dir / "corpus.jsonl").read_text().splitlines(keepends=True)
  (data_dir / "corpus.jsonl").write_text("".join(lines[:-1]))  # one unjudged document fewer
  process = run_tool("xtr.cli.eval_beir", f"--data_dir={data_dir}", f"--index={exported[1]}",
                     f"--checkpoint={exported[0]}", f"--out={tmp_path / 'r.json'}", "--k_prime=50")
  assert process.returncode == 0, process.stderr[-2000:]
  assert f"Warning: {data_dir / 'corpus.jsonl'} is not the corpus file" in process.stderr
  assert json.loads((tmp_path / "r.json").read_text())["corpus_matches_index"] is False


def test_export_refuses_an_empty_corpus_before_writing_anything(tmp_path):
  (tmp_path / "corpus.jsonl").write_text("")
  process = run_tool("xtr.cli.export", "--gin_file=gin/models/t5_1_1_tiny.gin",
                     f"--corpus={tmp_path / 'corpus.jsonl'}", f"--out={tmp_path / 'index'}",
                     "--checkpoint=/no/such/checkpoint")
  assert process.returncode != 0
  assert "has 0 documents: nothing for shard 0 of 1 to export" in process.stderr
  assert not (tmp_path / "index").exists()


def test_export_refuses_a_corpus_in_a_pipe_before_reading_it(tmp_path):
  """A corpus is read twice (its sha256 is recorded): from a pipe the second read would wait
  forever."""
  os.mkfifo(tmp_path / "corpus.jsonl")
  process = run_tool("xtr.cli.export", "--gin_file=gin/models/t5_1_1_tiny.gin",
                     f"--corpus={tmp_path / 'corpus.jsonl'}", f"--out={tmp_path / 'index'}",
                     "--checkpoint=/no/such/checkpoint", timeout=120)
  assert process.returncode == 2 and process.stderr.strip().endswith(
      f"--corpus={tmp_path / 'corpus.jsonl'} is not a regular file: xtr reads it twice (once for "
      "its sha256, which the index records); write it to a file first."), process.stderr
  assert not (tmp_path / "index").exists()


@pytest.mark.parametrize(
    "binding, error", [("ScannConfig.reorder_type = 'int4'", "reorder_type = 'int4' is not one of"),
                       ("ScannConfig.dims_per_block = 0", "dims_per_block = 0 is less than 1")])
def test_export_refuses_a_bad_scann_binding_before_encoding(exported, t5_spm_path, tmp_path,
                                                            binding, error):
  (tmp_path / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "a"}\n')
  process = run_tool("xtr.cli.export", "--gin_file=gin/models/t5_1_1_tiny.gin",
                     f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'", f"--gin_bindings={binding}",
                     f"--corpus={tmp_path / 'corpus.jsonl'}", f"--out={tmp_path / 'index'}",
                     f"--checkpoint={exported[0]}")
  assert process.returncode == 2
  assert f"ScannConfig.{error}" in process.stderr
  assert not (tmp_path / "index").exists()


def test_search_refuses_a_directory_as_output_before_searching(tmp_path):
  process = run_tool("xtr.search_main", f"--index={tmp_path / 'none'}", "--checkpoint=none",
                     f"--out={tmp_path}", stdin="q\n")
  assert process.returncode != 0 and f"--out={tmp_path} is a directory" in process.stderr
  with pytest.raises(app.UsageError, match="the directory .*/missing does not exist"):
    cli.check_output_file("run_file", str(tmp_path / "missing" / "run.trec"))


def test_trec_output_refuses_ids_with_whitespace():
  beir_eval.check_trec_ids(["q1"], ["d1", "d2"])
  with pytest.raises(
      ValueError, match="doc id 'doc 7' is empty or contains whitespace, which a "
      "TREC run file cannot hold"):
    beir_eval.check_trec_ids(["q1"], ["d1", "doc 7"])


@pytest.mark.parametrize("content, name", [("", "file"), (" \n\t\n", "file"), ("", "-")])
def test_empty_query_input_is_a_message(tmp_path, monkeypatch, content, name):
  path = tmp_path / "queries.txt"
  path.write_text(content)
  monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(content.encode())))
  with pytest.raises(ValueError, match="holds no query"):
    beir_files.read_queries(str(path) if name == "file" else "-")


def test_invalid_utf8_queries_name_file_line_and_byte(tmp_path):
  path = tmp_path / "queries.tsv"
  path.write_bytes(b"q1\tfine\nq2\tbad \xc3\n")
  with pytest.raises(ValueError, match=f"{path}:2: invalid UTF-8 at byte 8 of the line"):
    beir_files.read_queries(str(path))


@pytest.mark.parametrize("run_file", sorted(p.name for p in (REPO / "gin/runs").glob("*.gin")))
def test_every_run_config_parses(run_file):
  """Includes resolve and every binding names a known configurable and parameter (the paths
  that MS MARCO runs require are given as their usage lines say)."""
  gin.clear_config()
  gin.add_config_file_search_path(str(REPO))
  paths = [f"{macro} = '/path'" for macro in ("MODEL_DIR", "TRIPLES_PATH", "PRETRAINED_PATH")]
  try:
    gin.parse_config_files_and_bindings([str(REPO / "gin/runs" / run_file)], paths)
  finally:
    gin.clear_config()


@pytest.mark.parametrize("binding, message", [
    ("trainer.train.num_steps = 'five'", "trainer.train.num_steps = 'five': expected int, got str"),
    ("pipeline.DatasetConfig.batch_size = 16.0",
     "pipeline.DatasetConfig.batch_size = 16.0: expected int, got float"),
    ("objective.Objective.temperature = '1'",
     "objective.Objective.temperature = '1': expected float, got str"),
])
def test_a_gin_binding_of_the_wrong_type_is_refused_first(monkeypatch, binding, message):
  monkeypatch.setattr(partitioning, "make_mesh", lambda *a: pytest.fail("the mesh was built"))
  gin.clear_config()
  gin.parse_config_files_and_bindings([str(REPO / "gin/runs/smoke.gin")], [binding])
  try:
    with pytest.raises(TypeError, match=message):
      trainer.train()
  finally:
    gin.clear_config()


def test_unknown_queries_are_warned_of_and_counted(exported, scifact_slice, capsys, monkeypatch):
  token_index = reader.open_index(str(exported[1]))
  encoder = model_spec.encoder(token_index.manifest["model"], "manifest",
                               encoding.load_params(str(exported[0])), "model",
                               token_index.vocabulary_file())
  data = beir_eval.load_beir(str(scifact_slice), "test")
  queries = list(data.queries)
  queries[2] = "😀😀"
  tokenized = []
  encode_batch = tokenization.encode_batch
  monkeypatch.setattr(tokenization, "encode_batch",
                      lambda *args: tokenized.append(args[1]) or encode_batch(*args))
  for encode_alone in (False, True):
    tokenized.clear()
    results = ranker.search(encoder, token_index, queries, ranker.SearchConfig(k_prime=50),
                            encode_alone=encode_alone)
    assert tokenized == [queries]  # Once, and the warning reads the same ids.
  assert results.unknown_only == [2]
  assert "query 3 ('😀😀') has only tokens that the vocabulary does not know" in (
      capsys.readouterr().err)
  report, _ = eval_beir.evaluate_split(data, results, ranker.SearchConfig(k_prime=50))
  assert report["unknown_only_queries"] == {"count": 1, "query_ids": [data.query_ids[2]]}


def test_negative_relevance_counts_as_non_relevant_as_in_beir():
  run = {"q": {"a": 3.0, "b": 2.0, "c": 1.0}}
  with_negative = beir_eval.evaluate({"q": {"a": -2, "b": 1, "c": 2}}, run)
  with_zero = beir_eval.evaluate({"q": {"a": 0, "b": 1, "c": 2}}, run)
  assert with_negative == with_zero
  assert with_negative["mrr@10"] == 0.5


def test_eval_refuses_an_index_that_lacks_judged_documents():
  cli.check_index_covers_qrels(["d1", "d2"], {"q": {"d1": 1, "d2": 0}}, "index")
  with pytest.raises(
      ValueError, match=r"The index at index lacks 1 judged documents \(e.g. "
      r"\['d2'\]\): was it exported from this dataset's corpus"):
    cli.check_index_covers_qrels(["d1"], {"q": {"d1": 1, "d2": 0}}, "index")


def test_copies_under_one_id_count_at_their_best_rank():
  ranking = [("a", 5.0), ("b", 4.0), ("a", 3.0), ("c", 2.0), ("b", 1.0)]
  assert beir_eval.best_scores(ranking) == {"a": 5.0, "b": 4.0, "c": 2.0}
  assert beir_eval.best_scores(reversed(ranking)) == {"a": 5.0, "b": 4.0, "c": 2.0}


@pytest.mark.parametrize("ignore_identical_ids", [True, False])
def test_the_run_file_holds_the_run_the_metrics_were_computed_on(tmp_path, ignore_identical_ids):
  """Before: the report dropped documents whose id is the query id (as BEIR does, for ArguAna
  and Quora), --run_file kept them: trec_eval on the run file disagreed with the report."""
  qrels = {"q1": {"d1": 1}, "q2": {"d2": 1, "q2": 1}}
  data = beir_eval.BeirData(doc_ids=("q1", "d1", "q2", "d2"), docs=("a",) * 4,
                            query_ids=("q1", "q2"), queries=("x", "y"), qrels=qrels,
                            num_queries_without_qrels=0, corpus_path="-")
  results = ranker.Results([[("q1", 0.9), ("d1", 0.8)], [("q2", 0.9), ("d2", 0.8)]],
                           np.array([1.0, 1.0]))
  gin.clear_config()
  gin.bind_parameter("xtr.evaluation.beir_eval.evaluate.ignore_identical_ids", ignore_identical_ids)
  try:
    report, run = eval_beir.evaluate_split(data, results, ranker.SearchConfig())
  finally:
    gin.clear_config()
  beir_eval.write_trec_run(run, tmp_path / "run.trec", tag="xtr-xtr")
  direct = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100", "recip_rank"})
  assert report["per_query"] == {
      q: {
          "ndcg@10": values["ndcg_cut_10"],
          "recall@100": values["recall_100"],
          "mrr@10": values["recip_rank"]
      } for q, values in direct.evaluate(beir_eval.read_trec_run(tmp_path / "run.trec")).items()
  }
  assert report["mrr@10"] == (1.0 if ignore_identical_ids else 0.75)
  assert ("q1" in run["q1"]) == (not ignore_identical_ids)


def test_search_ranks_tied_documents_alike_in_jsonl_and_trec(tmp_path):
  """Before: JSON lines listed documents in the ranker's order, the TREC format in trec_eval's
  (ties broken by doc id, descending): tied documents swapped ranks."""
  ranking = [("a", 2.0), ("b", 1.0), ("c", 1.0), ("d", 0.5)]
  code = ("import sys; from xtr.cli import search; "
          f"sys.stdout.write(search._jsonl({{'q': 'x'}}, [{ranking!r}]))")
  process = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
  assert process.returncode == 0, process.stderr[-2000:]
  jsonl = [(r["doc_id"], r["rank"]) for r in json.loads(process.stdout)["results"]]
  beir_eval.write_trec_run({"q": dict(ranking)}, tmp_path / "run.trec", tag="t")
  trec = [line.split() for line in (tmp_path / "run.trec").read_text().splitlines()]
  assert jsonl == [(doc, int(rank)) for _, _, doc, rank, _, _ in trec]
  assert jsonl == [("a", 1), ("c", 2), ("b", 3), ("d", 4)]
