"""`make demo`: XTR fine-tuned from all-MiniLM-L6-v2 on SciFact, beside BM25 and the untuned model.

  xtr-demo --gin_file=gin/runs/demo.gin

Trains (resuming if interrupted), exports the ScaNN token index of the corpus, ranks the test
queries with f_XTR' from token retrieval alone, runs the baselines, prints a table and writes
`{out_dir}/metrics.json`. Every step shows progress; a finished step is not redone.
"""
import os
from typing import Any, Callable, Sequence

import gin
import numpy as np

from xtr import baselines
from xtr import cli
from xtr import encoding
from xtr import evaluation
from xtr import indexing
from xtr import retrieval
from xtr import trainer
from xtr.index import files
from xtr.index import reader


def _metrics(data: evaluation.BeirData, results: retrieval.Results) -> dict[str, float]:
  run = {query_id: dict(ranking) for query_id, ranking in zip(data.query_ids, results.rankings)}
  scores = evaluation.evaluate(data.qrels, run)
  return {"ndcg@10": scores["ndcg@10"], "recall@100": scores["recall@100"],
          "mrr@10": scores["mrr@10"], "ms_per_query": float(np.mean(results.latency_ms))}


def _xtr(model_dir: str, data: evaluation.BeirData, config: retrieval.SearchConfig):
  """Exports the token index of the fine-tuned model (once) and ranks the test queries."""
  encoder = encoding.Encoder(encoding.load_params(model_dir))
  index_dir = os.path.join(model_dir, "index")
  if not os.path.exists(os.path.join(index_dir, files.MANIFEST)):
    corpus = indexing.corpus_record(data.corpus_path, range(len(data.doc_ids)), len(data.doc_ids))
    indexing.export(encoder, data.doc_ids, data.docs, index_dir, store_vectors="float16",
                    docs_per_chunk=500, corpus=corpus)
  return retrieval.search(encoder, reader.open_index(index_dir), data.queries, config)


def format_table(rows: dict[str, dict[str, float]]) -> str:
  lines = [f"{'system':<34} {'nDCG@10':>8} {'R@100':>8} {'MRR@10':>8} {'ms/query':>9}"]
  for name, m in rows.items():
    lines.append(f"{name:<34} {m['ndcg@10']:>8.4f} {m['recall@100']:>8.4f} "
                 f"{m['mrr@10']:>8.4f} {m['ms_per_query']:>9.1f}")
  return "\n".join(lines)


@gin.configurable
def run(out_dir: str = gin.REQUIRED, model_dir: str = gin.REQUIRED, data_dir: str = gin.REQUIRED,
        model: Any = gin.REQUIRED, vocabulary: Any = gin.REQUIRED,
        pretrained_backbone: Callable[[], Any] = gin.REQUIRED, k_prime: int = 1000,
        split: str = "test") -> dict[str, dict[str, float]]:
  """Runs the demo; returns {system: {"ndcg@10", "recall@100", "mrr@10", "ms_per_query"}}."""
  data = evaluation.load_beir(data_dir, split)
  print("== 1/4 fine-tune XTR from MiniLM", flush=True)
  trainer.train()
  print("== 2/4 export the token index and search with f_XTR'", flush=True)
  config = retrieval.SearchConfig(top_k=100, k_prime=k_prime, scoring="xtr")
  rows = {f"XTR-MiniLM (ScaNN, f_XTR', k'={k_prime})": _metrics(data, _xtr(model_dir, data,
                                                                              config))}
  print("== 3/4 BM25", flush=True)
  rows["BM25 (k1=0.9, b=0.4)"] = _metrics(data, baselines.bm25_search(data, top_k=100))
  print("== 4/4 untuned all-MiniLM-L6-v2", flush=True)
  untuned = baselines.untuned_search(model.backbone, pretrained_backbone(), vocabulary, data,
                                     top_k=100)
  rows["MiniLM single-vector (mean pool)"] = _metrics(data, untuned["single_vector"])
  rows["MiniLM MaxSim, raw tokens (exact)"] = _metrics(data, untuned["maxsim"])
  print(format_table(rows))
  keys = ("xtr", "bm25", "minilm_single_vector", "minilm_maxsim")
  evaluation.write_json(dict(zip(keys, rows.values())), os.path.join(out_dir, "metrics.json"))
  print(f"Wrote {os.path.join(out_dir, 'metrics.json')}")
  return rows


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  cli.quiet_logging()
  cli.parse_gin(extra_bindings=cli.ENCODER_BINDINGS)
  run()


def console_entry_point() -> None:
  cli.run(main, __name__)
