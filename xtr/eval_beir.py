"""`xtr-eval-beir`: search a BEIR split with a token index and report the paper's metrics.

  xtr-eval-beir --data_dir=data/scifact --split=test --index=runs/smoke/index \
    --checkpoint=runs/smoke --k_prime=1000 --scoring=xtr --impute=top_k_prime \
    --out=runs/smoke/scifact.json --run_file=runs/smoke/scifact.trec

Writes JSON with nDCG@10, Recall@100 and MRR@10 (pytrec_eval, averaged as BEIR does), the
search settings, the latency of search + scoring per query (encoding excluded) and per-query
values; prints a one-line summary. --data_dir is any BEIR-layout directory whose corpus the
index was exported from.
"""
from typing import Any, Sequence

import numpy as np
from absl import flags

from xtr import cli
from xtr import evaluation
from xtr import retrieval

_DATA_DIR = flags.DEFINE_string("data_dir", None, "BEIR-layout dataset directory.")
_SPLIT = flags.DEFINE_string("split", "test",
                             "qrels split to evaluate (qrels/{split}.tsv).")
_INDEX = flags.DEFINE_string("index", None, "Token index of the dataset's corpus.")
_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "The checkpoint the index was built with (an xtr-train checkpoint or a "
    "directory of the released XTR weights).")
_OUT = flags.DEFINE_string("out", None, "Results JSON to write.")
_RUN_FILE = flags.DEFINE_string("run_file", None,
                                "Also write the ranking as a TREC run file.")
_SEARCH_CONFIG = cli.define_search_flags()
_OPEN_FOR_SEARCH = cli.define_index_flags()


def latency_summary(latency_ms: np.ndarray) -> dict[str, float]:
  return {"mean": float(np.mean(latency_ms)), "p50": float(np.percentile(latency_ms, 50)),
          "p95": float(np.percentile(latency_ms, 95))}


def evaluate_split(data: evaluation.BeirData, results: retrieval.Results,
                   config: retrieval.SearchConfig) -> tuple[dict[str, Any], evaluation.Run]:
  """(report, run): the metrics of `results` on `data`'s qrels with their settings, the run."""
  run = {query_id: dict(ranking) for query_id, ranking in zip(data.query_ids, results.rankings)}
  metrics = evaluation.evaluate(data.qrels, run)
  per_query = metrics.pop("per_query")
  settings = {"alignment": str(config.alignment)} if config.scoring == "aligner" else {}
  return {**metrics, "k_prime": config.k_prime, "scoring": config.scoring,
          "impute": config.impute, "searcher": config.searcher, "top_k": config.top_k,
          "prune_query": config.prune_query, "leaves_to_search": config.leaves_to_search,
          "threads": config.threads,
          **settings,
          "latency_ms_per_query": latency_summary(results.latency_ms),
          "unknown_only_queries": {"count": len(results.unknown_only),
                                   "query_ids": [data.query_ids[i] for i in results.unknown_only]},
          "per_query": per_query}, run


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  config = _SEARCH_CONFIG()
  cli.check_output_file("out", _OUT.value)
  cli.check_output_file("run_file", _RUN_FILE.value)
  data = evaluation.load_beir(_DATA_DIR.value, _SPLIT.value)
  encoder, token_index = _OPEN_FOR_SEARCH(_INDEX.value, _CHECKPOINT.value)
  cli.check_index_covers_qrels(token_index.doc_ids, data.qrels, _INDEX.value)
  if _RUN_FILE.value:
    evaluation.check_trec_ids(data.query_ids, token_index.doc_ids)
  corpus_matches = cli.corpus_matches_index(data.corpus_path, token_index)
  results = retrieval.search(encoder, token_index, data.queries, config)
  report, run = evaluate_split(data, results, config)
  report.update(data_dir=_DATA_DIR.value, split=_SPLIT.value, index=_INDEX.value,
                checkpoint=_CHECKPOINT.value, fingerprint=encoder.fingerprint,
                corpus_matches_index=corpus_matches,
                prune_doc=token_index.manifest.get("prune_doc"),
                indexed_tokens=token_index.num_indexed_tokens,
                scann_bytes=token_index.scann_bytes)
  evaluation.write_json(report, _OUT.value)
  if _RUN_FILE.value:
    evaluation.write_trec_run(run, _RUN_FILE.value, tag=f"xtr-{config.scoring}")
  latency = report["latency_ms_per_query"]
  print(f"{_DATA_DIR.value} {_SPLIT.value} ({report['num_queries']} queries), "
        f"scoring={config.scoring} k'={config.k_prime} impute={config.impute}: "
        f"nDCG@10 {report['ndcg@10']:.4f} | Recall@100 {report['recall@100']:.4f} | "
        f"MRR@10 {report['mrr@10']:.4f} | {latency['mean']:.1f} ms/query "
        f"(p50 {latency['p50']:.1f}, p95 {latency['p95']:.1f})")


def console_entry_point() -> None:
  cli.run(main, __name__, required=["data_dir", "index", "checkpoint", "out"])


if __name__ == "__main__":
  console_entry_point()
