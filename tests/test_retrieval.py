"""End to end: checkpoint -> xtr-export of a SciFact slice -> search -> xtr-eval-beir."""
import dataclasses
import gc
import json
import os
import shutil
import subprocess
import sys

import gin
import numpy as np
import pytest

from tests.retrieval_setup import REPO
from tests.retrieval_setup import SLICE_DOCS as NUM_DOCS
from tests.retrieval_setup import SLICE_QUERIES as NUM_QUERIES
import xtr
from xtr import io as xtr_io
from xtr import search_main
from xtr.evaluation import beir_eval
from xtr.evaluation import run_record
from xtr.index import build
from xtr.index import device
from xtr.index import files
from xtr.index import reader
from xtr.index import scann_process
from xtr.models import encoding
from xtr.models import model_spec
from xtr.retrieval import ranker
from xtr.retrieval import searcher as searcher_lib
from xtr.scoring import search_scores
from xtr.text import tokenization


def _search(exported, scifact_slice, config, bindings=()):
  model_dir, index_dir = exported
  gin.clear_config()
  gin.parse_config(bindings)
  token_index = reader.open_index(str(index_dir))
  encoder = model_spec.encoder(token_index.manifest["model"], str(index_dir),
                               encoding.load_params(str(model_dir)), str(model_dir),
                               token_index.vocabulary_file())
  data = beir_eval.load_beir(str(scifact_slice), "test")
  return data, token_index, ranker.search(encoder, token_index, data.queries, config)


@pytest.mark.parametrize("scoring,searcher", [("xtr", "bruteforce"), ("colbert", "scann"),
                                              ("colbert", "bruteforce"), ("aligner", "scann"),
                                              ("exhaustive", "scann")])
def test_a_nan_token_vector_is_refused_naming_the_document(exported, scifact_slice, tmp_path,
                                                           scoring, searcher):
  """One NaN token vector of the first document in a chunk with its true checksum (a forged
  index): xtr-search printed `NaN` scores (invalid JSON) with exit status 0, and ColBERT's and
  ALIGNER's refinement gave the document a finite score (XLA's max on CPU dropped the NaN)."""
  copy = tmp_path / "index"
  shutil.copytree(exported[1], copy)
  chunk = copy / "chunks" / "vectors-00000.npy"
  vectors = np.load(chunk)
  vectors[0] = np.nan
  np.save(chunk, vectors)
  manifest = json.loads((copy / files.MANIFEST).read_text())
  manifest["files"]["chunks/vectors-00000.npy"] = files.record(str(chunk))
  (copy / files.MANIFEST).write_text(json.dumps(manifest))
  first = reader.open_index(str(copy)).doc_ids[0]
  with pytest.raises(ValueError, match=f"document '{first}' scores NaN: the token index holds NaN"):
    _search((exported[0], copy), scifact_slice,
            ranker.SearchConfig(top_k=NUM_DOCS, scoring=scoring, searcher=searcher))


def test_export_writes_every_document(exported, scifact_slice):
  token_index = reader.open_index(str(exported[1]))
  token_index.verify()
  corpus_ids = [json.loads(line)["_id"] for line in (scifact_slice / "corpus.jsonl").open()]
  assert token_index.doc_ids == corpus_ids
  assert token_index.manifest["model"]["doc_max_length"] == 64
  lengths = [len(v) for v in token_index.doc_vectors(range(NUM_DOCS))]
  assert sum(lengths) == token_index.num_tokens and max(lengths) == 64


def test_xtr_with_all_tokens_ranks_as_exact_maxsim(exported, scifact_slice):
  num_tokens = reader.open_index(str(exported[1])).num_tokens
  _, _, exact = _search(exported, scifact_slice, ranker.SearchConfig(top_k=20,
                                                                     scoring="exhaustive"))
  _, _, xtr = _search(
      exported, scifact_slice,
      ranker.SearchConfig(top_k=20, k_prime=num_tokens, scoring="xtr", searcher="bruteforce"))
  for a, b in zip(exact.rankings, xtr.rankings):
    assert [d for d, _ in a] == [d for d, _ in b]
    np.testing.assert_allclose([s for _, s in a], [s for _, s in b], atol=1e-5)


def test_colbert_three_stages_rescore_candidates_exactly(exported, scifact_slice):
  _, token_index, exact = _search(exported, scifact_slice,
                                  ranker.SearchConfig(top_k=NUM_DOCS, scoring="exhaustive"))
  _, _, colbert = _search(
      exported, scifact_slice,
      ranker.SearchConfig(top_k=NUM_DOCS, k_prime=2, scoring="colbert", searcher="bruteforce"))
  for exact_ranking, colbert_ranking in zip(exact.rankings, colbert.rankings):
    exact_scores = dict(exact_ranking)
    assert len(colbert_ranking) < NUM_DOCS  # Only the retrieved candidates are scored ...
    for doc_id, score in colbert_ranking:  # ... with their exact f_ColBERT.
      assert score == pytest.approx(exact_scores[doc_id], abs=1e-5)


@pytest.mark.parametrize("searcher", ["scann", "bruteforce"])
def test_batched_search_ranks_as_one_query_at_a_time(exported, scifact_slice, monkeypatch,
                                                     searcher):
  """threads=2: f_XTR' over batches (3 of them) equals the per-query search, up to ScaNN's float
  rounding, which depends on how queries are batched (~1e-7): equal scores, and documents that
  trade places only at ties."""
  monkeypatch.setattr(ranker, "QUERIES_PER_BATCH", NUM_QUERIES // 3 + 1)
  config = ranker.SearchConfig(top_k=20, k_prime=30, searcher=searcher)
  _, _, alone = _search(exported, scifact_slice, config)
  _, _, batched = _search(exported, scifact_slice, dataclasses.replace(config, threads=2))
  assert len(set(batched.latency_ms)) == 3  # One amortized latency per batch.
  for a, b in zip(alone.rankings, batched.rankings):
    np.testing.assert_allclose([s for _, s in a], [s for _, s in b], atol=1e-6)
    for (doc_a, score_a), (doc_b, _) in zip(a, b):
      assert doc_a == doc_b or sum(abs(score - score_a) < 1e-6 for _, score in a) > 1


@pytest.mark.parametrize("scoring", ["xtr", "colbert"])
def test_device_searcher_ranks_as_brute_force(exported, scifact_slice, monkeypatch, scoring):
  """Float32 vectors resident on 8 simulated devices: token retrieval and (for xtr) f_XTR' on
  the devices give brute force's rankings; bfloat16 ones their top documents. Nothing compiles
  after the untimed warm-up: xtr's batches (3, the last one smaller) and colbert's queries of
  many lengths, one at a time, each reuse one compiled search."""
  monkeypatch.setattr(ranker, "QUERIES_PER_BATCH", NUM_QUERIES // 3 + 1)
  compiled = []  # The device search's and f_XTR''s compilations so far, after each call.
  for name in ("rank", "rank_batch"):
    monkeypatch.setattr(ranker, name,
                        _then(
                            getattr(ranker, name),
                            lambda: compiled.append(device._search._cache_size() + search_scores.
                                                    f_xtr_prime_top._cache_size())))  # pylint: disable=protected-access
  config = ranker.SearchConfig(top_k=10, k_prime=40, scoring=scoring)
  _, _, brute = _search(exported, scifact_slice, dataclasses.replace(config, searcher="bruteforce"))
  warm_ups = 2 if scoring == "xtr" else 1  # The first and the last batch; the first query.
  for dtype, tolerance in (("float32", 1e-5), ("bfloat16", 2e-2)):
    compiled.clear()
    _, token_index, on_device = _search(exported, scifact_slice,
                                        dataclasses.replace(config, searcher="device"),
                                        [f"xtr.index.device.DeviceConfig.dtype = '{dtype}'"])
    assert len(compiled) == warm_ups + (3 if scoring == "xtr" else NUM_QUERIES)
    assert set(compiled[warm_ups - 1:]) == {compiled[-1]}, compiled
    assert len(token_index.on_device()._vectors.sharding.device_set) == 8  # pylint: disable=protected-access
    for a, b in zip(brute.rankings, on_device.rankings):
      np.testing.assert_allclose([s for _, s in a], [s for _, s in b], atol=tolerance)
      if dtype == "float32":
        assert [d for d, _ in a] == [d for d, _ in b]
      else:
        assert a[0][0] == b[0][0] or abs(a[0][1] - a[1][1]) < tolerance
  gin.clear_config()


def _then(function, after):
  """`function`, calling `after()` after each call."""

  def call(*args, **kwargs):
    result = function(*args, **kwargs)
    after()
    return result

  return call


def test_colbert_refinement_compiles_per_document_bucket_not_per_query_length(
    exported, scifact_slice):
  """Queries of many lengths share one compiled f_ColBERT per padded document length."""
  search_scores._colbert.clear_cache()  # pylint: disable=protected-access
  data, token_index, _ = _search(
      exported, scifact_slice,
      ranker.SearchConfig(top_k=5, k_prime=4, scoring="colbert", searcher="bruteforce"))
  lengths = {len(q.split()) for q in data.queries}
  buckets = {search_scores._bucket(int(n)) for n in token_index.doc_lengths}  # pylint: disable=protected-access
  assert len(lengths) > 3
  assert search_scores._colbert._cache_size() <= len(buckets)  # pylint: disable=protected-access


def _eval_beir(exported, scifact_slice, tmp_path, *flags):
  model_dir, index_dir = exported
  command = [
      sys.executable, "-m", "xtr.cli.eval_beir", f"--data_dir={scifact_slice}",
      f"--index={index_dir}", f"--checkpoint={model_dir}", f"--out={tmp_path / 'r.json'}", *flags
  ]
  return subprocess.run(command, capture_output=True, text=True, cwd=REPO, env={
      **os.environ, "XLA_FLAGS": ""
  })


def test_eval_beir_cli_reports_metrics_equal_to_pytrec_eval(exported, scifact_slice, tmp_path):
  run_file = tmp_path / "run.trec"
  process = _eval_beir(exported, scifact_slice, tmp_path, "--k_prime=200", "--scoring=xtr",
                       f"--run_file={run_file}")
  assert process.returncode == 0, process.stderr
  report = json.loads((tmp_path / "r.json").read_text())
  assert report["num_queries"] == NUM_QUERIES
  assert (report["k_prime"], report["scoring"], report["impute"]) == (200, "xtr", "top_k_prime")
  assert set(report["latency_ms_per_query"]) == {"mean", "p50", "p95"}
  assert len(report["per_query"]) == NUM_QUERIES
  data = beir_eval.load_beir(str(scifact_slice), "test")
  import pytrec_eval  # pylint: disable=g-import-not-at-top
  run = beir_eval.read_trec_run(str(run_file))
  expected = pytrec_eval.RelevanceEvaluator(data.qrels, {"ndcg_cut.10", "recall.100"}).evaluate(run)
  for name, measure in (("ndcg@10", "ndcg_cut_10"), ("recall@100", "recall_100")):
    assert report[name] == pytest.approx(np.mean([v[measure] for v in expected.values()]))
  assert f"nDCG@10 {report['ndcg@10']:.4f}" in process.stdout
  # The report is a run record too: what made it, and the data's sha256s.
  assert "--k_prime=200" in report["command"] and report["git_commit"]
  assert report["data_sha256"][str(scifact_slice / "corpus.jsonl")] == xtr_io.sha256(
      str(scifact_slice / "corpus.jsonl"))
  assert "T5Config" in report["gin_config"]


def test_eval_refuses_a_checkpoint_the_index_was_not_built_with(exported, scifact_slice, tmp_path):
  other = exported[0].parent / "other_model"
  process = _eval_beir((other, exported[1]), scifact_slice, tmp_path)
  assert process.returncode != 0
  assert "does not match the query model" in process.stderr
  assert "checkpoint fingerprint" in process.stderr
  assert not (tmp_path / "r.json").exists()


def test_search_cli_reads_stdin_and_writes_jsonl(exported):
  model_dir, index_dir = exported
  process = subprocess.run([
      sys.executable, "-m", "xtr.cli.search", f"--index={index_dir}", f"--checkpoint={model_dir}",
      "--top_k=5", "--searcher=bruteforce"
  ], input="what causes scurvy\n\nvitamin c deficiency\n", capture_output=True, text=True, cwd=REPO,
                           env={
                               **os.environ, "XLA_FLAGS": ""
                           }, check=True)
  lines = [json.loads(line) for line in process.stdout.splitlines()]
  assert [line["query_id"] for line in lines] == ["1", "3"]
  assert all(len(line["results"]) == 5 for line in lines)
  scores = [r["score"] for r in lines[0]["results"]]
  assert scores == sorted(scores, reverse=True)


def test_searcher_api_ranks_as_the_cli_encoding_each_query_alone(exported, scifact_slice, tmp_path):
  """xtr.Searcher (queries encoded in one batch) against xtr-search --verbose (each query
  encoded alone, timed on stderr): the same rankings (scores to 1e-4: the two batch shapes give
  vectors equal to ~1e-6, which can move a query token's k'-th retrieved score)."""
  model_dir, index_dir = exported
  data = beir_eval.load_beir(str(scifact_slice), "test")
  queries = tmp_path / "queries.tsv"
  queries.write_text("".join(f"{i}\t{t}\n" for i, t in zip(data.query_ids, data.queries)))
  process = subprocess.run([
      sys.executable, "-m", "xtr.cli.search", f"--index={index_dir}", f"--checkpoint={model_dir}",
      "--top_k=5", "--k_prime=50", f"--queries={queries}", "--verbose"
  ], capture_output=True, text=True, cwd=REPO, env={
      **os.environ, "XLA_FLAGS": ""
  }, check=True)
  cli = [[(r["doc_id"], r["score"])
          for r in json.loads(line)["results"]]
         for line in process.stdout.splitlines()]
  gin.clear_config()
  api = xtr.Searcher(str(index_dir), str(model_dir)).search(list(data.queries), top_k=5, k_prime=50)
  assert len(cli) == len(api) == NUM_QUERIES
  for cli_ranking, api_ranking in zip(cli, api):
    assert [d for d, _ in cli_ranking] == [d for d, _ in api_ranking]
    np.testing.assert_allclose([s for _, s in cli_ranking], [s for _, s in api_ranking], atol=1e-4)
  for query_id in data.query_ids:
    assert f"query {query_id}: encode " in process.stderr
  assert f"median over {NUM_QUERIES} queries: encode " in process.stderr
  with pytest.raises(TypeError, match="not one string"):
    xtr.Searcher(str(index_dir), str(model_dir)).search("what causes scurvy")
  searcher = xtr.Searcher(str(index_dir), str(model_dir))
  for settings in ({}, {"threads": 2}, {"searcher": "device"}, {"scoring": "exhaustive"}):
    assert searcher.search([], **settings) == [], settings  # No query: no ranking, whatever way.


def test_the_api_answers_each_query_once_quietly_and_refuses_bad_input_before_encoding(
    exported, scifact_slice, monkeypatch, capfd):
  """Every `Searcher.search` call ranked its first query twice (an untimed warm-up, which only the
  CLI's latencies need) and wrote progress bars to the service's stderr; non-integer settings,
  non-str, blank or control-character queries failed deep in numpy, JAX, ScaNN or the tokenizer,
  after encoding every query (or were searched as if they were plain text)."""
  model_dir, index_dir = exported
  gin.clear_config()
  searcher = xtr.Searcher(str(index_dir), str(model_dir))
  retrievals = []
  search_tokens = reader.TokenIndex.search_tokens
  monkeypatch.setattr(
      reader.TokenIndex, "search_tokens",
      lambda self, q, *a, **k: retrievals.append(len(q)) or search_tokens(self, q, *a, **k))
  for settings in ({}, {"scoring": "colbert"}, {"threads": 2}):
    for queries in (["what causes scurvy"], ["vitamin c", "scurvy", "bones"]):
      retrievals.clear()
      searcher.search(queries, top_k=5, **settings)
      assert len(retrievals) == (1 if settings.get("threads") else len(queries)), settings
  with pytest.warns(UserWarning,
                    match=r"queries\[1\] \('😀😀'\) has only tokens that the vocabulary"):
    searcher.search(["scurvy", "😀😀"], top_k=5)
  assert len(searcher.search(["scurvy"], top_k=np.int64(3), k_prime=np.int32(50))[0]) == 3
  assert capfd.readouterr().err == ""
  monkeypatch.setattr(searcher.encoder, "encode_ids", lambda *a, **k: pytest.fail("encoded"))
  for queries, error, message in [
      (["scurvy", 42], TypeError, r"queries\[1\] is not a str but int 42"),
      ([b"scurvy"], TypeError, r"queries\[0\] is not a str but bytes"),
      (b"scurvy", TypeError, "not one string"),
      (["scurvy", "  "], ValueError, r"queries\[1\] is blank"),
      (["vitamin\x00 c"], ValueError, r"queries\[0\]: control character U\+0000 at character 8"),
      (["vitamin \ud800 c"], ValueError, r"queries\[0\]: lone surrogate U\+D800 at character 9"),
  ]:
    with pytest.raises(error, match=message):
      searcher.search(queries)
  for name, value in [("top_k", 2.5), ("top_k", float("nan")), ("k_prime", 7.5), ("k_prime", True),
                      ("threads", 2.5), ("leaves_to_search", 2.5)]:
    with pytest.raises(ValueError, match=f"{name} must be a positive integer, got {value!r}"):
      searcher.search(["scurvy"], **{name: value})


def test_a_closed_searcher_lets_go_of_its_index_at_once(exported):
  """A service had no way to release an index but dropping every reference to its Searcher."""
  model_dir, index_dir = exported
  maps = lambda: sum(str(index_dir) in line for line in open("/proc/self/maps"))
  gin.clear_config()
  gc.collect()  # Earlier tests' indexes go now, not while this one counts.
  before = maps()
  with xtr.Searcher(str(index_dir), str(model_dir)) as searcher:
    searcher.search(["what causes scurvy"], top_k=3)
    assert maps() > before
  assert maps() == before
  with pytest.raises(ValueError, match="This Searcher is closed"):
    searcher.search(["what causes scurvy"])


def test_a_search_process_imports_neither_tensorflow_nor_seqio(exported, scifact_slice):
  """xtr.Searcher in a fresh process (query encoding included: Python tokenization, ScaNN's
  pybind searcher): no TensorFlow, seqio or `scann` package, and the rankings of this process
  (which has imported TensorFlow)."""
  model_dir, index_dir = exported
  data = beir_eval.load_beir(str(scifact_slice), "test")
  script = ("import json, sys, xtr; "
            f"r = xtr.Searcher({str(index_dir)!r}, {str(model_dir)!r}).search("
            f"{list(data.queries)!r}, top_k=5, k_prime=50); print(json.dumps(r)); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'tensorflow', 'tensorflow_text', 'seqio', 'scann'}))")
  process = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO,
                           env={
                               **os.environ, "XLA_FLAGS": ""
                           }, check=True)
  rankings, imported = process.stdout.splitlines()[-2:]
  assert imported == "[]"
  gin.clear_config()
  expected = xtr.Searcher(str(index_dir), str(model_dir)).search(list(data.queries), top_k=5,
                                                                 k_prime=50)
  for got, want in zip(json.loads(rankings), expected, strict=True):
    assert [d for d, _ in got] == [d for d, _ in want]
    np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-6)


def test_an_xtr_only_export_ranks_as_the_full_index_and_refuses_refinement(
    exported, scifact_slice, t5_spm_path, tmp_path):
  """xtr-export --store_vectors=none: sizes reported per kind and token, no vector files, the
  same f_XTR' rankings as the float16 index, and refinement refused by flag."""
  model_dir, index_dir = exported
  out = tmp_path / "xtr_only"
  export = lambda: subprocess.run([
      sys.executable, "-m", "xtr.cli.export", f"--gin_file={REPO}/gin/models/t5_1_1_tiny.gin",
      f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'",
      "--gin_bindings=xtr.models.encoding.Encoder.doc_max_length = 64", f"--checkpoint={model_dir}",
      f"--corpus={scifact_slice / 'corpus.jsonl'}", f"--out={out}", "--docs_per_chunk=40",
      "--store_vectors=none"
  ], capture_output=True, text=True, cwd=REPO, env={
      **os.environ, "XLA_FLAGS": ""
  }, check=True)
  process = export()
  manifest = reader.open_index(str(out)).manifest
  sizes = files.bytes_by_kind(manifest)
  assert sizes["vectors"] == 0 and not list((out / "chunks").glob("vectors-*"))
  for kind, size in sizes.items():
    assert f"{kind:<9} {size:>14,} bytes {size / manifest['num_tokens']:8.1f} bytes/token" in (
        process.stdout)
  (out / "chunks/vectors-00001.npy").write_bytes(b"left by a kill after the manifest")
  assert "already a complete index" in export().stdout
  assert not list((out / "chunks").glob("vectors-*"))
  config = ranker.SearchConfig(top_k=10, k_prime=50)
  _, _, full = _search(exported, scifact_slice, config)
  _, _, xtr_only = _search((model_dir, out), scifact_slice, config)
  assert xtr_only.rankings == full.rankings
  process = subprocess.run([
      sys.executable, "-m", "xtr.cli.search", f"--index={out}", f"--checkpoint={model_dir}",
      "--scoring=colbert"
  ], input="scurvy\n", capture_output=True, text=True, cwd=REPO, env={
      **os.environ, "XLA_FLAGS": ""
  }, check=False)
  assert process.returncode != 0
  assert "--scoring=colbert needs the token vectors" in process.stderr
  assert "--store_vectors=none" in process.stderr


def test_an_index_asking_for_millions_of_extra_ids_is_refused(exported):
  """An index's manifest names its vocabulary's sentinels (T5's 100); 10^8 of them hung in
  building the vocabulary (1.2 GB after 20 s)."""
  token_index = reader.open_index(str(exported[1]))
  model = json.loads(json.dumps(token_index.manifest["model"]))
  assert model["vocabulary"]["extra_ids"] == 100
  model["vocabulary"]["extra_ids"] = 10**8
  with pytest.raises(
      ValueError, match=r"manifest: model.vocabulary.extra_ids = 100000000: "
      r"expected 0 to 100,000"):
    model_spec.encoder(model, "manifest", encoding.load_params(str(exported[0])), str(exported[0]),
                       token_index.vocabulary_file())


def test_token_analysis_equals_naive_ranking_of_all_tokens(exported, scifact_slice, tmp_path):
  """xtr-analyze-tokens (exact token search) against a sort of every corpus token, by loops."""
  data, token_index, _ = _search(exported, scifact_slice, ranker.SearchConfig())
  encoder = model_spec.encoder(token_index.manifest["model"], "manifest",
                               encoding.load_params(str(exported[0])), str(exported[0]),
                               token_index.vocabulary_file())
  k = 50
  process = subprocess.run([
      sys.executable, "-m", "xtr.cli.analyze_tokens", f"--data_dir={scifact_slice}",
      f"--index={exported[1]}", f"--checkpoint={exported[0]}", f"--k={k}", "--searcher=bruteforce",
      "--label=tiny", f"--out={tmp_path / 'tiny.json'}", f"--plot={tmp_path / 'tokens.png'}"
  ], capture_output=True, text=True, cwd=REPO, env={
      **os.environ, "XLA_FLAGS": ""
  })
  assert process.returncode == 0, process.stderr
  result = json.loads((tmp_path / "tiny.json").read_text())
  assert (tmp_path / "tokens.png").read_bytes()[:4] == b"\x89PNG"
  assert result["data_sha256"] == run_record.data_sha256([str(scifact_slice)], "test")
  tokenizer = encoder.tokenizer
  eos = tokenizer.suffix[0]
  doc_vectors = token_index.doc_vectors(range(token_index.num_docs))
  doc_ids = [
      tokenization.encode_batch(tokenizer, [text], encoder.doc_max_length)[0] for text in data.docs
  ]
  all_tokens = [(d, p) for d, v in enumerate(doc_vectors) for p in range(len(v))]
  gold, lexical, num_tokens = np.zeros(k), np.zeros(k), 0
  for query_id, query in zip(data.query_ids, data.queries):
    vectors, mask, _ = encoder.encode_queries([query])
    ids = tokenization.encode_batch(tokenizer, [query], encoder.query_max_length)[0]
    relevant = {data.doc_ids.index(d) for d, rel in data.qrels[query_id].items() if rel > 0}
    for i in range(mask.shape[1]):
      if not mask[0, i] or ids[i] == eos:
        continue
      num_tokens += 1
      scores = [float(vectors[0, i] @ doc_vectors[d][p]) for d, p in all_tokens]
      for rank, t in enumerate(np.argsort(-np.asarray(scores), kind="stable")[:k]):
        d, p = all_tokens[t]
        gold[rank] += d in relevant
        lexical[rank] += doc_ids[d][p] == ids[i]
  assert result["num_query_tokens"] == num_tokens
  np.testing.assert_allclose(result["gold"], gold / num_tokens, atol=1e-12)
  np.testing.assert_allclose(result["lexical"], lexical / num_tokens, atol=1e-12)
  assert max(result["lexical"]) > 0  # Same-token matches happen, so the check above has teeth.


def test_export_shards_split_the_corpus():
  ranges = [build.shard_range(10, s, 3) for s in range(3)]
  assert [list(r) for r in ranges] == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
  with pytest.raises(ValueError, match="shard_id"):
    build.shard_range(10, 3, 3)


@pytest.mark.parametrize("token_searcher", reader.SEARCHERS)
def test_scann_is_loaded_up_front_only_for_scann_search(exported, token_searcher):
  """The exact and device searchers never read ScaNN: opening for them leaves its codes on disk
  (at MS MARCO's size, tens of GB of host memory)."""
  model_dir, index_dir = exported
  _, token_index = searcher_lib.open_for_search(str(index_dir), str(model_dir),
                                                searcher=token_searcher)
  loaded = token_index._shards[0]._scann is not None  # pylint: disable=protected-access
  assert loaded == (token_searcher == "scann")


def test_scann_in_a_helper_process_searches_as_in_this_one(exported):
  """xtr-search's ScaNN, loaded and searched in a helper process (`scann_process`), retrieves
  what the searcher loaded in this process retrieves: the same tokens and scores, on one thread
  and on two, at the built leaves and at 2; one helper answers many requests. It imports
  neither JAX nor TensorFlow."""
  _, index_dir = exported
  here, helper = reader.open_index(str(index_dir)), reader.open_index(str(index_dir))
  helper.load_scann(in_helper=True)
  queries = np.random.default_rng(0).standard_normal((7, here.dim)).astype(np.float32)
  for k_prime, leaves, threads in ((10, None, 1), (50, 2, 2), (10_000, None, 1)):
    expected = here.search_tokens(queries, k_prime, "scann", leaves, threads)
    got = helper.search_tokens(queries, k_prime, "scann", leaves, threads)
    for a, b in zip(expected, got):
      np.testing.assert_array_equal(a, b)
  script = ("import sys; from xtr.index import scann_process; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'jax', 'flax', 'tensorflow', 'scann'}))")
  imported = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=REPO, check=True).stdout
  assert imported == "[]\n"  # What the helper imports before it loads: it starts in ~0.1 s.


def test_a_helper_that_fails_or_dies_is_named(exported, tmp_path, monkeypatch):
  """ScaNN's error in the helper's load (a damaged file that --verify=off let through) is a
  damaged index, a helper killed under a search an error; both name the ScaNN directory, and
  neither hangs; the dead helper is then cleaned up quietly (its finalizer raised
  BrokenPipeError closing the request it could not send)."""
  _, index_dir = exported
  copy = tmp_path / "index"
  shutil.copytree(index_dir, copy)
  partitioner = copy / "scann" / "serialized_partitioner.pb"
  partitioner.write_bytes(np.random.default_rng(0).bytes(partitioner.stat().st_size))
  damaged = reader.open_index(str(copy), verify="off")
  damaged.load_scann(in_helper=True)
  queries = np.ones((2, damaged.dim), np.float32)
  with pytest.raises(files.DamagedIndexError,
                     match=rf"^{copy / 'scann'}: ScaNN: DamagedIndexError: .*ScaNN cannot load"):
    damaged.search(queries, 5)
  killed = reader.open_index(str(index_dir))
  killed.load_scann(in_helper=True)
  helper = killed._shards[0]._scann  # pylint: disable=protected-access
  helper.wait()
  helper._process.kill()  # pylint: disable=protected-access
  helper._process.wait()  # pylint: disable=protected-access
  with pytest.raises(RuntimeError,
                     match=r"the process that loads and searches ScaNN ended \(exit status -9\)"):
    killed.search(queries, 5)
  unraisable = []  # What finalizers raise ("Exception ignored in: <finalize object ...>").
  monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
  del killed, helper
  gc.collect()
  assert not unraisable


def test_an_early_helper_is_taken_over_only_after_verification(exported, tmp_path):
  """`start_early` (the console script's, before any import of JAX) starts a helper that the
  index's `load_scann` takes over once it has verified the files, searching as a searcher
  loaded here does; a damaged ScaNN file of the right size gets a helper too, but the
  verification refuses it first; no index, or a sharded one, starts nothing."""
  _, index_dir = exported
  scann_process.start_early(str(index_dir))
  (early,) = scann_process._STARTED.values()  # pylint: disable=protected-access
  index = reader.open_index(str(index_dir))
  index.load_scann(in_helper=True)
  assert index._shards[0]._scann is early  # pylint: disable=protected-access
  assert not scann_process._STARTED  # pylint: disable=protected-access
  queries = np.random.default_rng(1).standard_normal((5, index.dim)).astype(np.float32)
  for a, b in zip(index.search_tokens(queries, 20),
                  reader.open_index(str(index_dir)).search_tokens(queries, 20)):
    np.testing.assert_array_equal(a, b)
  damaged = tmp_path / "index"
  shutil.copytree(index_dir, damaged)
  with open(damaged / "scann" / "hashed_dataset.npy", "r+b") as f:
    f.seek(-1, os.SEEK_END)
    last = f.read(1)
    f.seek(-1, os.SEEK_END)
    f.write(bytes([last[0] ^ 1]))
  scann_process.start_early(str(damaged))
  assert len(scann_process._STARTED) == 1  # pylint: disable=protected-access
  with pytest.raises(files.DamagedIndexError, match="hashed_dataset.npy"):
    reader.open_index(str(damaged)).load_scann(in_helper=True)
  scann_process._STARTED.clear()  # pylint: disable=protected-access
  (tmp_path / "sharded" / "shard-00000-of-00001").mkdir(parents=True)
  for nothing in (tmp_path / "missing", tmp_path / "sharded"):
    scann_process.start_early(str(nothing))
    assert not scann_process._STARTED  # pylint: disable=protected-access


@pytest.mark.parametrize("argv, index", [
    (["--index=I", "--top_k=3"], "I"),
    (["--top_k", "3", "--index", "I"], "I"),
    (["--flagfile={flagfile}"], "F"),
    (["--index=I", "--searcher=bruteforce"], None),
    (["--top_k=3"], None),
    (["--index"], None),
])
def test_the_console_script_reads_the_index_of_a_scann_search(argv, index, tmp_path):
  flagfile = tmp_path / "flags"
  flagfile.write_text("--index=F\n")
  argv = ["xtr-search", *(a.format(flagfile=flagfile) for a in argv)]
  assert search_main.scann_index(argv) == index


def test_the_search_console_script_starts_its_helper_before_importing_jax(exported):
  """`xtr-search` as installed (`xtr.search_main`): one helper, started before JAX is
  imported, and taken over by the search (no second one)."""
  model_dir, index_dir = exported
  script = "\n".join([
      "import os, sys", "from xtr.index import scann_process", "starts = []",
      "init = scann_process.Searcher.__init__", "def counting(self, *args):",
      "  starts.append('jax' in sys.modules)", "  init(self, *args)",
      "scann_process.Searcher.__init__ = counting", "exit_now = os._exit", "def report(code):",
      "  print('helpers started, jax imported:', starts, file=sys.stderr, flush=True)",
      "  exit_now(code)", "os._exit = report", "from xtr import search_main",
      "search_main.console_entry_point()"
  ])
  process = subprocess.run([
      sys.executable, "-c", script, f"--index={index_dir}", f"--checkpoint={model_dir}", "--top_k=3"
  ], input="vitamin c\n", capture_output=True, text=True, cwd=REPO, env={
      **os.environ, "XLA_FLAGS": ""
  }, check=True)
  assert "helpers started, jax imported: [False]" in process.stderr
  assert len(json.loads(process.stdout)["results"]) == 3


def test_a_cold_search_traces_the_model_once(exported, monkeypatch):
  """The checkpoint the index was exported with is not checked against the model's shapes again
  (that traces its init), and a lone query's encoding reuses the trace that found the token dim;
  another checkpoint is still checked (`test_cli`'s token-dim refusal)."""
  model_dir, index_dir = exported
  monkeypatch.setattr(model_spec, "check_params", lambda *_: pytest.fail("shapes checked again"))
  encoder, _ = searcher_lib.open_for_search(str(index_dir), str(model_dir), searcher="bruteforce")
  vectors, mask, _ = encoder.encode_queries(["what causes scurvy"])
  assert vectors.shape[-1] == encoder.dim and mask[0].any()
  assert encoder._apply._cache_size() == 1  # pylint: disable=protected-access


def _refused_settings() -> list[tuple[str, object, str]]:
  """(setting, value, what the refusal says) of SearchConfig's refusals."""
  cores, ranged = os.cpu_count(), r"a number in \[-10000, 10000\], got "
  return [
      ("leaves_to_search", 2**40, "leaves_to_search must be a positive integer, got "
       "1099511627776; at most 2,147,483,647"),
      ("top_k", 2**31, "top_k must be a positive integer"),
      ("k_prime", np.float32(3), "k_prime must be a positive integer"),
      ("threads", cores + 1, f"threads must be a positive integer, got {cores + 1}; at most "
       f"{cores:,} \\(the CPU cores\\)"),
      ("alignment", 5, "alignment must be an Alignment or its text"),
      ("alignment", "top_k:0", "alignment 'top_k:0'"),
      ("prune_query", "0.5", r"prune_query must be in \(0, 1\], got '0.5'"),
      ("prune_query", True, "prune_query must be in"),
      ("impute", 10**400, "impute must be one of top_k_prime, zero, none or " + ranged + "1000"),
      ("impute", 1e8, ranged + "100000000.0"),
      ("impute", float("nan"), ranged + "nan"),
      ("impute", "mean", ranged + "'mean'"),
      ("impute", True, ranged + "True"),
  ]


def test_search_settings_are_refused_by_name_or_taken_as_python_numbers():
  """Before, these failed deep in the search (ScaNN's or numpy's TypeError, an AttributeError
  after retrieval, an OverflowError), hung the process at exit (threads=20000), or refused a
  numpy integer impute after encoding; now SearchConfig refuses them naming the setting."""
  for name, value, message in _refused_settings():
    with pytest.raises(ValueError, match=message):
      ranker.SearchConfig(**{name: value})
  config = ranker.SearchConfig(top_k=np.uint64(3), threads=np.int8(1), impute=np.int64(1),
                               alignment="top_k:2", prune_query=np.float32(0.5))
  assert (type(config.top_k), type(config.threads), config.impute, type(config.impute),
          type(config.prune_query)) == (int, int, 1.0, float, float)
  assert (str(config.alignment), config.alignment.k) == ("top_k:2", 2)
