"""BEIR evaluation: test split loading, trec_eval metrics, TREC run files and result JSON.

A run is {query id: {doc id: score}}. Metrics follow BEIR's `EvaluateRetrieval.evaluate` (the
numbers of the XTR paper): pytrec_eval (trec_eval) per query, averaged over the queries that are
in both the qrels and the run, with documents whose id equals the query id dropped first.
  ndcg@k:   trec_eval `ndcg_cut_k` (gain = graded relevance, discount log2(rank + 1), ideal DCG
            from the qrels' relevance levels).
  recall@k: trec_eval `recall_k` (relevant = relevance >= 1; 0 for a query with none).
  mrr@k:    trec_eval `recip_rank` of the run cut to its top k, i.e. 1 / rank of the first
            relevant document within the top k, else 0.
Ranks everywhere use trec_eval's order (`trec_order`): score (as a C float) descending, ties
broken by doc id descending. The run's own order and any ranks in a run file are ignored, as
trec_eval does.
"""
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
import ctypes
import dataclasses
import math
import os
from typing import Any

from absl import logging
import gin
import pytrec_eval

from xtr import io
from xtr.data import beir_files

Run = Mapping[str, Mapping[str, float]]
Qrels = Mapping[str, Mapping[str, int]]
# `evaluate`'s defaults: the XTR paper's metrics, computed as BEIR computes them.
NDCG_AT, RECALL_AT, MRR_AT = (10,), (100,), (10,)
IGNORE_IDENTICAL_IDS = True


@dataclasses.dataclass(frozen=True)
class BeirData:
  """The corpus and the judged queries of one BEIR split.

  Attributes:
    doc_ids: corpus ids in corpus.jsonl order (document index -> id).
    docs: `beir_files.document_text` (title + " " + text) of each document, by index.
    query_ids: ids of the queries that have qrels in the split, in qrels order (as BEIR).
    queries: text of each of those queries.
    qrels: {query id: {doc id: relevance}} of the split, every row kept (relevance 0 included).
    num_queries_without_qrels: queries of queries.jsonl with no qrels row in the split; they
      are not evaluated (BEIR's queries.jsonl holds the queries of all splits).
    corpus_path: the corpus file read (corpus.jsonl or corpus.jsonl.gz).
  """
  doc_ids: tuple[str, ...]
  docs: tuple[str, ...]
  query_ids: tuple[str, ...]
  queries: tuple[str, ...]
  qrels: dict[str, dict[str, int]]
  num_queries_without_qrels: int
  corpus_path: str

  def most_relevant(self, query_id: str) -> str | None:
    """The query's most relevant judged document (ties: first in the qrels); None if it has
    no document of relevance > 0."""
    judged = self.qrels.get(query_id, {})
    relevant = [doc for doc, grade in judged.items() if grade > 0]
    return max(relevant, key=lambda doc: judged[doc]) if relevant else None


@gin.configurable
def load_beir(data_dir: str = gin.REQUIRED, split: str = "test") -> BeirData:
  """Reads corpus.jsonl, queries.jsonl and qrels/{split}.tsv of a BEIR dataset directory.

  Logs a warning with the number of queries that have no qrels in the split.

  Raises:
    ValueError: naming the file, line and field of the first malformed row, or of a qrels
      query-id / corpus-id that is not in queries.jsonl / corpus.jsonl; or if the qrels are empty.
  """
  data_dir = os.fspath(data_dir)
  corpus, queries, qrels, qrels_path = beir_files.read_split(data_dir, split)
  if not qrels:
    raise ValueError(f"{qrels_path}: no qrels rows")
  unjudged = len(queries) - len(qrels)
  if unjudged:
    logging.warning("%d of %d queries in queries.jsonl have no qrels in %s: not evaluated.",
                    unjudged, len(queries), qrels_path)
  return BeirData(doc_ids=tuple(corpus), docs=tuple(corpus.values()), query_ids=tuple(qrels),
                  queries=tuple(queries[query_id] for query_id in qrels), qrels=qrels,
                  num_queries_without_qrels=unjudged,
                  corpus_path=beir_files.resolve(data_dir, "corpus.jsonl"))


def trec_order(doc_scores: Mapping[str, float]) -> list[tuple[str, float]]:
  """(doc id, score) pairs in trec_eval's ranking order: score descending, then doc id descending.

  trec_eval (and pytrec_eval) hold a score in a C float: scores equal as float32 (1.0 and
  1.0 + 1e-9) are ties there, broken by the doc id, so they are compared as float32 here (else
  MRR@k's cut, and a run file's ranks, disagreed with trec_eval's). It breaks ties with strcmp on
  the UTF-8 bytes, which orders like Python's code points.
  """
  return sorted(doc_scores.items(), key=lambda item: (ctypes.c_float(item[1]).value, item[0]),
                reverse=True)


def best_scores(ranking: Iterable[tuple[str, float]]) -> dict[str, float]:
  """{doc id: its best score} of (doc id, score) pairs in which an id may repeat (copies of a
  document under its id count as the document, at their best rank)."""
  best = {}
  for doc_id, score in ranking:
    best[doc_id] = max(score, best.get(doc_id, score))
  return best


@gin.configurable
def evaluate(qrels: Qrels, run: Run, ndcg_at: Sequence[int] = NDCG_AT,
             recall_at: Sequence[int] = RECALL_AT, mrr_at: Sequence[int] = MRR_AT,
             ignore_identical_ids: bool = IGNORE_IDENTICAL_IDS) -> dict[str, Any]:
  """Mean and per-query nDCG@k, Recall@k and MRR@k of `run` against `qrels`, as BEIR computes them.

  Args:
    qrels: {query id: {doc id: relevance}}.
    run: {query id: {doc id: score}}; scores must not be NaN.
    ndcg_at, recall_at, mrr_at: the cutoffs k of each metric.
    ignore_identical_ids: drop documents whose id is the query id (BEIR's default; it matters
      where queries are also corpus documents, e.g. ArguAna and Quora).

  Returns:
    {"ndcg@10": mean, ..., "num_queries": queries averaged over (in both qrels and run),
     "num_queries_not_in_run": qrels queries absent from the run (not averaged over, as in BEIR;
     logged as a warning), "per_query": {query id: {"ndcg@10": value, ...}}}.
  """
  run = _checked_run(run, ignore_identical_ids)
  measures = {
      f"{measure}.{','.join(map(str, cutoffs))}" for measure, cutoffs in (("ndcg_cut", ndcg_at),
                                                                          ("recall", recall_at))
      if cutoffs
  }
  per_query = {
      query_id: {
          f"ndcg@{k}": values[f"ndcg_cut_{k}"] for k in ndcg_at
      } | {
          f"recall@{k}": values[f"recall_{k}"] for k in recall_at
      } for query_id, values in _trec_eval(qrels, run, measures).items()
  }
  if not per_query:
    raise ValueError("No query is in both the qrels and the run.")
  for k in mrr_at:
    top_k = {query_id: dict(trec_order(docs)[:k]) for query_id, docs in run.items()}
    for query_id, values in _trec_eval(qrels, top_k, {"recip_rank"}).items():
      per_query[query_id][f"mrr@{k}"] = values["recip_rank"]
  not_in_run = sum(query_id not in run for query_id in qrels)
  if not_in_run:
    logging.warning("%d of %d qrels queries are not in the run: not evaluated (as in BEIR).",
                    not_in_run, len(qrels))
  names = next(iter(per_query.values())).keys()
  means = {name: math.fsum(v[name] for v in per_query.values()) / len(per_query) for name in names}
  return means | {
      "num_queries": len(per_query),
      "num_queries_not_in_run": not_in_run,
      "per_query": per_query
  }


def evaluated_run(run: Run) -> dict[str, dict[str, float]]:
  """`run` as `evaluate`, under its gin bindings, computes metrics on it: without the documents
  whose id is the query id (unless `evaluate.ignore_identical_ids` is bound to False). A run file
  written from it holds the run of the metrics, so trec_eval on it agrees with them."""
  return _checked_run(run,
                      gin.get_bindings(evaluate).get("ignore_identical_ids", IGNORE_IDENTICAL_IDS))


def _checked_run(run: Run, ignore_identical_ids: bool) -> dict[str, dict[str, float]]:
  """A copy of `run` with Python float scores (as pytrec_eval needs), no NaN, and without the
  documents whose id is the query id if `ignore_identical_ids`."""
  checked = {}
  for query_id, docs in run.items():
    checked[query_id] = {}
    for doc_id, score in docs.items():
      if math.isnan(score):
        raise ValueError(f"run: query '{query_id}', doc '{doc_id}': score is NaN")
      if not (ignore_identical_ids and doc_id == query_id):
        checked[query_id][doc_id] = float(score)
  return checked


def _trec_eval(qrels: Qrels, run: Run, measures: set[str]) -> dict[str, dict[str, float]]:
  """pytrec_eval's per-query values for the queries in both qrels and run."""
  return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)


def write_trec_run(run: Run, path: str, tag: str) -> None:
  """Writes `qid Q0 docid rank score tag` lines, ranks from 1 in `trec_order`, atomically.

  Scores are written with `repr`, so `read_trec_run` gives back the same floats.

  Raises:
    ValueError: an id or the tag is empty or contains whitespace, or a score is NaN (the file
      is then left as it was).
  """
  _check_token("tag", tag)
  with io.atomic_open(path) as f:
    for query_id, docs in run.items():
      _check_token("query id", query_id)
      for rank, (doc_id, score) in enumerate(trec_order(docs), start=1):
        _check_token(f"query '{query_id}': doc id", doc_id)
        if math.isnan(score):
          raise ValueError(f"query '{query_id}', doc '{doc_id}': score is NaN")
        f.write(f"{query_id} Q0 {doc_id} {rank} {float(score)!r} {tag}\n")


def read_trec_run(path: str) -> dict[str, dict[str, float]]:
  """{query id: {doc id: score}} from a TREC run file (the Q0 and rank columns are ignored).

  Raises:
    ValueError: naming the line of a row without 6 fields, a rank that is not a non-negative
      integer, a score that is not a number or is NaN, or a (query, doc) pair seen before.
  """
  run = {}
  with open(path, encoding="utf-8") as f:
    for line_number, line in enumerate(f, start=1):
      where = f"{path}:{line_number}"
      fields = line.split()
      if len(fields) != 6:
        raise ValueError(f"{where}: expected 6 fields (qid Q0 docid rank score tag), "
                         f"got {len(fields)}")
      query_id, _, doc_id, rank, score, _ = fields
      if not rank.isdigit():
        raise ValueError(f"{where}: rank {rank!r} is not a non-negative integer")
      try:
        value = float(score)
      except ValueError:
        raise ValueError(f"{where}: score {score!r} is not a number") from None
      if math.isnan(value):
        raise ValueError(f"{where}: score is NaN")
      if doc_id in run.setdefault(query_id, {}):
        raise ValueError(f"{where}: doc '{doc_id}' repeated for query '{query_id}'")
      run[query_id][doc_id] = value
  return run


def check_trec_ids(query_ids: Iterable[str], doc_ids: Iterable[str]) -> None:
  """Refuses, before a search, ids that a TREC run file cannot hold (empty or with whitespace).

  Raises:
    ValueError: naming the first such query or document id.
  """
  for name, ids in (("query id", query_ids), ("doc id", doc_ids)):
    for value in ids:
      _check_token(name, value)


def _check_token(name: str, value: str) -> None:
  if not value or any(c.isspace() for c in value):
    raise ValueError(f"{name} {value!r} is empty or contains whitespace, which a TREC run file "
                     "cannot hold (its fields are separated by whitespace)")
