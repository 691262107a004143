"""`xtr-eval-beir`: search a BEIR split with a token index and report the paper's metrics.

  xtr-eval-beir --data_dir=data/scifact --split=test --index=runs/smoke/index \
    --checkpoint=runs/smoke --k_prime=1000 --scoring=xtr --impute=top_k_prime \
    --out=runs/smoke/scifact.json --run_file=runs/smoke/scifact.trec

Writes JSON with nDCG@10, Recall@100 and MRR@10 (pytrec_eval, averaged as BEIR does), the
search settings, the latency of search + scoring per query (encoding excluded) and per-query
values; prints a one-line summary. --data_dir is any BEIR-layout directory whose corpus the
index was exported from.
"""
from typing import Any
from typing import Sequence

from absl import app
from absl import flags
import numpy as np

from xtr import cli
from xtr import io
from xtr.evaluation import beir_eval
from xtr.evaluation import run_record
from xtr.retrieval import ranker

_SPLIT_FLAGS = cli.SplitFlags("qrels split to evaluate (qrels/{split}.tsv).")
_INDEX_FLAGS = cli.IndexFlags()
_OUT = flags.DEFINE_string("out", None, "Results JSON to write.")
_RUN_FILE = flags.DEFINE_string("run_file", None, "Also write the ranking as a TREC run file.")
_SEARCH_CONFIG = cli.define_search_flags()


def latency_summary(latency_ms: np.ndarray) -> dict[str, float]:
  return {
      "mean": float(np.mean(latency_ms)),
      "p50": float(np.percentile(latency_ms, 50)),
      "p95": float(np.percentile(latency_ms, 95))
  }


def check_top_k(top_k: int) -> None:
  """Refuses a --top_k below the deepest cutoff of the metrics reported: the search returns
  top_k documents a query, so "Recall@100" would have been Recall@top_k, silently."""
  metrics = {"nDCG": beir_eval.NDCG_AT, "Recall": beir_eval.RECALL_AT, "MRR": beir_eval.MRR_AT}
  cutoff, name = max((k, name) for name, cutoffs in metrics.items() for k in cutoffs)
  if top_k < cutoff:
    raise app.UsageError(f"--top_k={top_k} is below {cutoff}, the cutoff of {name}@{cutoff}, "
                         f"which would count {top_k} documents a query; give --top_k={cutoff} "
                         "or more.")


def evaluate_split(data: beir_eval.BeirData, results: ranker.Results,
                   config: ranker.SearchConfig) -> tuple[dict[str, Any], beir_eval.Run]:
  """(report, run): the metrics of `results` on `data`'s qrels with their settings, and the run
  they were computed on (`beir_eval.evaluated_run`), which --run_file holds."""
  run = beir_eval.evaluated_run({
      query_id: dict(ranking) for query_id, ranking in zip(data.query_ids, results.rankings)
  })
  metrics = beir_eval.evaluate(data.qrels, run)
  per_query = metrics.pop("per_query")
  settings = {"alignment": str(config.alignment)} if config.scoring == "aligner" else {}
  return {
      **metrics, "k_prime": config.k_prime,
      "scoring": config.scoring,
      "impute": config.impute,
      "searcher": config.searcher,
      "top_k": config.top_k,
      "prune_query": config.prune_query,
      "leaves_to_search": config.leaves_to_search,
      "threads": config.threads,
      **settings, "latency_ms_per_query": latency_summary(results.latency_ms),
      "unknown_only_queries": {
          "count": len(results.unknown_only),
          "query_ids": [data.query_ids[i] for i in results.unknown_only]
      },
      "per_query": per_query
  }, run


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  config = _SEARCH_CONFIG()
  check_top_k(config.top_k)
  cli.check_output_files(out=_OUT.value, run_file=_RUN_FILE.value)
  data = _SPLIT_FLAGS.load()
  encoder, token_index = _INDEX_FLAGS.open(config.searcher)
  cli.check_index_covers_qrels(token_index.doc_ids, data.qrels, _INDEX_FLAGS.index.value)
  if _RUN_FILE.value:
    beir_eval.check_trec_ids(data.query_ids, token_index.doc_ids)
  corpus_matches = cli.corpus_matches_index(data.corpus_path, token_index)
  results = ranker.search(encoder, token_index, data.queries, config)
  report, run = evaluate_split(data, results, config)
  report.update(data_dir=_SPLIT_FLAGS.data_dir.value, split=_SPLIT_FLAGS.split.value,
                index=_INDEX_FLAGS.index.value, checkpoint=_INDEX_FLAGS.checkpoint.value,
                fingerprint=encoder.fingerprint, corpus_matches_index=corpus_matches,
                prune_doc=token_index.manifest.get("prune_doc"),
                indexed_tokens=token_index.num_indexed_tokens, scann_bytes=token_index.scann_bytes)
  report.update(run_record.provenance([_SPLIT_FLAGS.data_dir.value], _SPLIT_FLAGS.split.value))
  io.write_results(_OUT.value, report)
  if _RUN_FILE.value:
    beir_eval.write_trec_run(run, _RUN_FILE.value, tag=f"xtr-{config.scoring}")
  latency = report["latency_ms_per_query"]
  print(f"{_SPLIT_FLAGS.data_dir.value} {_SPLIT_FLAGS.split.value} "
        f"({report['num_queries']} queries), "
        f"scoring={config.scoring} k'={config.k_prime} impute={config.impute}: "
        f"nDCG@10 {report['ndcg@10']:.4f} | Recall@100 {report['recall@100']:.4f} | "
        f"MRR@10 {report['mrr@10']:.4f} | {latency['mean']:.1f} ms/query "
        f"(p50 {latency['p50']:.1f}, p95 {latency['p95']:.1f})")


def console_entry_point() -> None:
  cli.run(main, __name__, required=["data_dir", "index", "checkpoint", "out"])


if __name__ == "__main__":
  console_entry_point()
