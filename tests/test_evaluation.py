"""Tests of xtr/evaluation/beir_eval.py against plain-Python metrics, direct pytrec_eval and the
raw files."""
import csv
import functools
import json
import math
import os

import numpy as np
import pytest
import pytrec_eval

from xtr import io
from xtr.evaluation import beir_eval


def _trec_eval_ranking(docs: dict[str, float]) -> list[str]:
  """trec_eval's comp_sim_docno: sim (a C float) descending, then strcmp(docno2, docno1) on the
  bytes."""

  def compare(a, b):
    sim_a, sim_b = np.float32(a[1]), np.float32(b[1])
    if sim_a != sim_b:
      return -1 if sim_a > sim_b else 1
    x, y = a[0].encode("utf-8"), b[0].encode("utf-8")
    return (y > x) - (y < x)

  return [doc for doc, _ in sorted(docs.items(), key=functools.cmp_to_key(compare))]


def _naive_metrics(rels: dict[str, int], docs: dict[str, float], ndcg_k: int = 10,
                   recall_k: int = 100, mrr_k: int = 10) -> dict[str, float]:
  """nDCG (gain = relevance, log2 discount, ideal DCG from the qrels), recall, MRR of one query."""
  ranking = _trec_eval_ranking(docs)
  dcg = sum(
      rels.get(doc, 0) / math.log2(rank + 2)
      for rank, doc in enumerate(ranking[:ndcg_k])
      if rels.get(doc, 0) > 0)
  ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:ndcg_k]
  ideal_dcg = sum(gain / math.log2(rank + 2) for rank, gain in enumerate(ideal))
  relevant = {doc for doc, r in rels.items() if r >= 1}
  found = len(relevant & set(ranking[:recall_k]))
  first = [rank for rank, doc in enumerate(ranking[:mrr_k], start=1) if doc in relevant]
  return {
      f"ndcg@{ndcg_k}": dcg / ideal_dcg if ideal_dcg else 0.0,
      f"recall@{recall_k}": found / len(relevant) if relevant else 0.0,
      f"mrr@{mrr_k}": 1 / first[0] if first else 0.0
  }


def _fixture() -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
  """Qrels and a run with ties at the rank-10 cutoff, graded relevance and unmatched queries."""
  nine = {f"n{i}": float(20 - i) for i in range(9)}  # ranks 1-9, all non-relevant
  qrels = {
      # "da" and "db" tie at ranks 10-11: trec_eval puts "db" first, so MRR@10 = 0.
      "tie_lost": {
          "da": 1,
          "db": 0
      },
      "tie_won": {
          "db": 1,
          "da": 0
      },
      "graded": {
          "a": 2,
          "b": 1,
          "c": 1,
          "z": 0,
          "unretrieved": 2
      },
      "not_in_run": {
          "a": 1
      },
      "empty_run": {
          "a": 1
      },
      "no_relevant": {
          "a": 0
      },
      "self": {
          "a": 1
      },
  }
  run = {
      "tie_lost": nine | {
          "da": 1.0,
          "db": 1.0
      },
      "tie_won": nine | {
          "da": 1.0,
          "db": 1.0
      },
      "graded": {
          "b": 3.0,
          "z": 2.5,
          "a": 2.5,
          "x": 2.5,
          "c": 0.5
      },
      "empty_run": {},
      "no_relevant": {
          "a": 1.0
      },
      "self": {
          "self": 9.0,
          "b": 2.0,
          "a": 1.0
      },  # "self" (an identical id) is dropped
      "not_in_qrels": {
          "a": 1.0
      },
  }
  rng = np.random.default_rng(0)
  for q in range(20):  # 150 docs (recall@100 cuts), scores on a 0.1 grid (many ties)
    docs = [f"d{i:03d}" for i in rng.permutation(300)[:150]]
    run[f"r{q}"] = {doc: float(rng.integers(0, 30)) / 10 for doc in docs}
    judged = [f"d{i:03d}" for i in rng.choice(300, size=rng.integers(1, 12), replace=False)]
    qrels[f"r{q}"] = {doc: int(rng.integers(0, 3)) for doc in judged}
  return qrels, run


def _without_identical_ids(run):
  return {q: {d: s for d, s in docs.items() if d != q} for q, docs in run.items()}


def test_metrics_match_naive_implementation():
  qrels, run = _fixture()
  results = beir_eval.evaluate(qrels, run)
  evaluated = [q for q in qrels if q in run]
  expected = {q: _naive_metrics(qrels[q], _without_identical_ids(run)[q]) for q in evaluated}
  assert results["per_query"].keys() == set(evaluated)
  for q in evaluated:
    assert results["per_query"][q] == pytest.approx(expected[q], rel=1e-12, abs=1e-15), q
  for name in ("ndcg@10", "recall@100", "mrr@10"):
    assert results[name] == pytest.approx(np.mean([expected[q][name] for q in evaluated]),
                                          rel=1e-12)
  assert results["num_queries"] == len(evaluated) == 26
  assert results["num_queries_not_in_run"] == 1
  assert results["per_query"]["tie_lost"]["mrr@10"] == 0.0
  assert results["per_query"]["tie_won"]["mrr@10"] == 0.1
  assert results["per_query"]["self"]["mrr@10"] == 0.5


def test_other_cutoffs_match_naive_implementation():
  qrels, run = _fixture()
  results = beir_eval.evaluate(qrels, run, ndcg_at=(3, 100), recall_at=(5, 100), mrr_at=(1, 20))
  for q, values in results["per_query"].items():
    docs = _without_identical_ids(run)[q]
    expected = (_naive_metrics(qrels[q], docs, ndcg_k=3, recall_k=5, mrr_k=1) |
                _naive_metrics(qrels[q], docs, ndcg_k=100, recall_k=100, mrr_k=20))
    assert values == pytest.approx(expected, rel=1e-12, abs=1e-15), q


@pytest.mark.parametrize("ignore_identical_ids", [True, False])
def test_metrics_match_direct_pytrec_eval(ignore_identical_ids):
  qrels, run = _fixture()
  results = beir_eval.evaluate(qrels, run, ignore_identical_ids=ignore_identical_ids)
  trec_run = _without_identical_ids(run) if ignore_identical_ids else run
  direct = pytrec_eval.RelevanceEvaluator(
      qrels, {"ndcg_cut.10", "recall.100", "recip_rank"}).evaluate(trec_run)
  assert results["per_query"].keys() == direct.keys()
  for q, values in direct.items():
    rr = values["recip_rank"]  # 1 / rank of the first relevant doc over the whole ranking
    assert results["per_query"][q] == {
        "ndcg@10": values["ndcg_cut_10"],
        "recall@100": values["recall_100"],
        "mrr@10": rr if rr >= 0.1 else 0.0
    }
  # BEIR's EvaluateRetrieval: sum over pytrec_eval's queries / their number.
  beir_ndcg = sum(values["ndcg_cut_10"] for values in direct.values()) / len(direct)
  assert results["ndcg@10"] == pytest.approx(beir_ndcg, rel=1e-12)
  assert results["num_queries"] == len(direct)


def test_identical_ids_change_the_ranking():
  qrels, run = _fixture()
  kept = beir_eval.evaluate(qrels, run, ignore_identical_ids=False)["per_query"]["self"]
  assert kept == pytest.approx({"ndcg@10": 1 / math.log2(4), "recall@100": 1.0, "mrr@10": 1 / 3})


def test_evaluate_rejects_nan_and_runs_without_judged_queries():
  with pytest.raises(ValueError, match="query 'q', doc 'd': score is NaN"):
    beir_eval.evaluate({"q": {"d": 1}}, {"q": {"d": float("nan")}})
  with pytest.raises(ValueError, match="No query is in both"):
    beir_eval.evaluate({"q": {"d": 1}}, {"other": {"d": 1.0}})


def test_load_beir_scifact_matches_raw_files(scifact_dir):
  data = beir_eval.load_beir(scifact_dir, "test")

  def read(name):
    with open(scifact_dir / name, encoding="utf-8") as f:
      return [json.loads(line) for line in f]

  corpus, queries = read("corpus.jsonl"), {q["_id"]: q["text"] for q in read("queries.jsonl")}
  with open(scifact_dir / "qrels" / "test.tsv", encoding="utf-8") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))

  assert data.doc_ids == tuple(doc["_id"] for doc in corpus) and len(data.doc_ids) == 5183
  assert data.docs == tuple(f"{doc['title']} {doc['text']}".strip() for doc in corpus)
  assert len(data.query_ids) == 300 and sum(map(len, data.qrels.values())) == len(rows) == 339
  assert data.query_ids == tuple(dict.fromkeys(row["query-id"] for row in rows))
  assert data.queries == tuple(queries[q] for q in data.query_ids)
  assert all(data.qrels[row["query-id"]][row["corpus-id"]] == int(row["score"]) for row in rows)
  assert data.num_queries_without_qrels == 1109 - 300


def _write_beir(tmp_path, qrels_rows: list[str]):
  corpus = [{"_id": "d1", "title": "T", "text": "one"}, {"_id": "d2", "text": "two"}]
  queries = [{"_id": f"q{i}", "text": f"query {i}"} for i in (1, 2, 3)]
  for name, records in (("corpus.jsonl", corpus), ("queries.jsonl", queries)):
    (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
  (tmp_path / "qrels").mkdir()
  (tmp_path / "qrels" / "test.tsv").write_text(
      "query-id\tcorpus-id\tscore\n" + "".join(row + "\n" for row in qrels_rows), encoding="utf-8")


def test_load_beir_rejects_qrels_doc_missing_from_corpus(tmp_path):
  _write_beir(tmp_path, ["q1\td1\t1", "q2\tdX\t1"])
  with pytest.raises(ValueError, match=r"qrels/test.tsv:3: corpus-id 'dX' is not in corpus.jsonl"):
    beir_eval.load_beir(tmp_path, "test")


def test_load_beir_counts_queries_without_qrels(tmp_path, caplog):
  _write_beir(tmp_path, ["q2\td2\t1", "q1\td1\t0"])
  data = beir_eval.load_beir(tmp_path, "test")
  assert data.query_ids == ("q2", "q1") and data.queries == ("query 2", "query 1")
  assert data.qrels == {"q2": {"d2": 1}, "q1": {"d1": 0}}
  assert data.docs == ("T one", "two")
  assert data.num_queries_without_qrels == 1
  assert "1 of 3 queries in queries.jsonl have no qrels" in caplog.text


def test_trec_run_round_trip(tmp_path):
  qrels, run = _fixture()
  run["graded"]["f32"] = float(np.float32(0.1))
  path = tmp_path / "run.trec"
  beir_eval.write_trec_run(run, path, tag="xtr")
  run.pop("empty_run")  # a query without documents has no line
  assert beir_eval.read_trec_run(path) == run
  lines = path.read_text(encoding="utf-8").splitlines()
  assert lines[9:11] == ["tie_lost Q0 db 10 1.0 xtr", "tie_lost Q0 da 11 1.0 xtr"]
  graded = [line.split() for line in lines if line.startswith("graded ")]
  assert [row[2] for row in graded] == _trec_eval_ranking(run["graded"])
  assert [row[3] for row in graded] == [str(rank) for rank in range(1, len(graded) + 1)]
  assert beir_eval.evaluate(qrels, beir_eval.read_trec_run(path)) == beir_eval.evaluate(qrels, run)


@pytest.mark.parametrize("existing", [True, False])
def test_writers_leave_no_partial_file(tmp_path, existing):
  path = tmp_path / "out"
  if existing:
    path.write_text("old\n", encoding="utf-8")
  bad_run = {"q1": {"d1": 1.0, "d2": 0.5}, "q2": {"bad doc": 1.0}}  # fails after q1's lines
  with pytest.raises(ValueError, match="query 'q2': doc id 'bad doc'"):
    beir_eval.write_trec_run(bad_run, path, tag="xtr")
  with pytest.raises(ValueError, match="Out of range float"):
    io.write_results(path, {"ndcg@10": 0.5, "per_query": {"q": float("nan")}})
  assert os.listdir(tmp_path) == (["out"] if existing else [])
  if existing:
    assert path.read_text(encoding="utf-8") == "old\n"


def test_write_json_round_trip(tmp_path):
  qrels, run = _fixture()
  results = beir_eval.evaluate(qrels, run)
  io.write_results(tmp_path / "results.json", results)
  assert json.loads((tmp_path / "results.json").read_text(encoding="utf-8")) == results


@pytest.mark.parametrize("line, error", [
    ("q1 Q0 d1 1 0.5", "expected 6 fields"),
    ("q1 Q0 d1 one 0.5 t", "rank 'one'"),
    ("q1 Q0 d1 1 high t", "score 'high' is not a number"),
    ("q1 Q0 d1 1 nan t", "score is NaN"),
    ("q0 Q0 d0 2 0.5 t", "doc 'd0' repeated for query 'q0'"),
])
def test_read_trec_run_names_bad_line(tmp_path, line, error):
  path = tmp_path / "run.trec"
  path.write_text(f"q0 Q0 d0 1 1.0 t\n{line}\n", encoding="utf-8")
  with pytest.raises(ValueError, match=f"run.trec:2: {error}"):
    beir_eval.read_trec_run(path)


def test_scores_equal_as_c_floats_are_ties_broken_by_doc_id_as_in_trec_eval(tmp_path):
  """Before: `trec_order` compared float64 scores, trec_eval C floats: MRR@1 of q1 was 1 (a
  ranked first by 1e-9), where trec_eval ties a with b and ranks b first; a run file ranked a
  first too.
  q3's scores are both inf as C floats."""
  qrels = {"q1": {"a": 1}, "q2": {"b": 1, "c": 1}, "q3": {"a": 1}}
  run = {
      "q1": {
          "a": 1.0 + 1e-9,
          "b": 1.0
      },
      "q2": {
          "a": 0.5,
          "b": 0.5 - 1e-12,
          "c": 0.25 + 1e-10,
          "d": 0.25
      },
      "q3": {
          "a": 1e39,
          "b": 1e40
      },
  }
  results = beir_eval.evaluate(qrels, run, ndcg_at=(1, 2), recall_at=(1,), mrr_at=(1, 2))
  direct = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.1,2", "recall.1", "recip_rank"})
  for q, values in direct.evaluate(run).items():
    rr = values["recip_rank"]
    assert results["per_query"][q] == {
        "ndcg@1": values["ndcg_cut_1"],
        "ndcg@2": values["ndcg_cut_2"],
        "recall@1": values["recall_1"],
        "mrr@1": rr if rr >= 1 else 0.0,
        "mrr@2": rr if rr >= 0.5 else 0.0
    }, q
  assert [results["per_query"][q]["mrr@1"] for q in ("q1", "q2", "q3")] == [0.0, 1.0, 0.0]
  beir_eval.write_trec_run(run, tmp_path / "run.trec", tag="xtr")
  ranks = [line.split()[2:4] for line in (tmp_path / "run.trec").read_text().splitlines()]
  assert ranks[:6] == [["b", "1"], ["a", "2"], ["b", "1"], ["a", "2"], ["d", "3"], ["c", "4"]]
  assert [doc for doc, _ in ranks[2:6]] == _trec_eval_ranking(run["q2"])
