"""XTR search on one machine: nDCG@10 against latency over k' and ScaNN leaves searched, and the
end-to-end time of a lone query.

  .venv/bin/python benchmarks/xtr_latency.py INDEX_DIR CHECKPOINT DATA_DIR OUT_PREFIX \
      [K_PRIMES=100,1000,4000,40000] [LEAVES=0,200,400]

LEAVES 0 means the index's own setting. For every (k', leaves) the test queries are searched one
at a time (f_XTR', as `xtr-eval-beir --scoring=xtr`); the table gives nDCG@10, Recall@100, the
median and p95 of search + scoring, and queries/s (1000 / mean ms); per leaves setting, a row
at k' = 1000 answers the queries in batches on every core (`--threads`). The last row encodes each
query alone (a 1-row batch) at the index's settings and k' = 1000: the end-to-end time a user of
`xtr-search` waits; a profile splits a query at k' = 1000 into ScaNN and f_XTR' + top-k. Writes
OUT_PREFIX.json, OUT_PREFIX.md and OUT_PREFIX.png (nDCG@10 against
median ms, one line per leaves setting); peak RSS is the process's at the end.
"""
import json
import os
import resource
import sys
import time

import matplotlib
import numpy as np

from xtr import io
from xtr.evaluation import beir_eval
from xtr.retrieval import ranker
from xtr.retrieval import searcher
from xtr.scoring import search_scores

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # pylint: disable=wrong-import-position
from matplotlib import ticker  # pylint: disable=wrong-import-position


def _row(data: beir_eval.BeirData, results: ranker.Results, **settings) -> dict:
  metrics = beir_eval.evaluate(data.qrels, {
      q: dict(r) for q, r in zip(data.query_ids, results.rankings)
  })
  row = {
      **settings, "ndcg@10": metrics["ndcg@10"],
      "recall@100": metrics["recall@100"],
      "p50_ms": float(np.median(results.latency_ms)),
      "p95_ms": float(np.percentile(results.latency_ms, 95)),
      "queries_per_s": float(1000 / np.mean(results.latency_ms))
  }
  if results.encode_ms is not None:
    total = results.encode_ms + results.latency_ms
    row |= {
        "encode_p50_ms": float(np.median(results.encode_ms)),
        "end_to_end_p50_ms": float(np.median(total))
    }
  print(row, file=sys.stderr, flush=True)
  return row


def _profile(token_index, q: np.ndarray, q_mask: np.ndarray, config: ranker.SearchConfig) -> dict:
  """Median ms of the two stages of an f_XTR' query (q [Q, n, D], q_mask [Q, n]): ScaNN token
  retrieval, then f_XTR' and the top-k."""
  stages = {"scann_ms": [], "f_xtr_prime_and_top_k_ms": []}
  for vectors, mask in zip(q, q_mask):
    start = time.perf_counter()
    token_scores, token_docs = token_index.search(vectors[mask], config.k_prime, "scann",
                                                  config.leaves_to_search)
    retrieved = time.perf_counter()
    search_scores.top_candidates(*search_scores.f_xtr_prime(token_scores, token_docs), config.top_k)
    stages["scann_ms"].append(retrieved - start)
    stages["f_xtr_prime_and_top_k_ms"].append(time.perf_counter() - retrieved)
  return {stage: 1000 * float(np.median(times)) for stage, times in stages.items()}


def main(index_dir: str, checkpoint: str, data_dir: str, out: str,
         k_primes: str = "100,1000,4000,40000", leaves: str = "0,200,400") -> None:
  encoder, token_index = searcher.open_for_search(index_dir, checkpoint)
  data = beir_eval.load_beir(data_dir, "test")
  rows = []
  for leaves_to_search in [int(v) or None for v in leaves.split(",")]:
    for k_prime in map(int, k_primes.split(",")):
      config = ranker.SearchConfig(top_k=100, k_prime=k_prime, leaves_to_search=leaves_to_search)
      results = ranker.search(encoder, token_index, data.queries, config, progress=False)
      rows.append(_row(data, results, k_prime=k_prime, leaves=leaves_to_search or "built"))
    config = ranker.SearchConfig(top_k=100, k_prime=1000, leaves_to_search=leaves_to_search,
                                 threads=os.cpu_count())
    results = ranker.search(encoder, token_index, data.queries, config, progress=False)
    rows.append(
        _row(data, results, k_prime=1000, leaves=leaves_to_search or "built",
             threads=config.threads))
  results = ranker.search(encoder, token_index, data.queries,
                          ranker.SearchConfig(top_k=100, k_prime=1000), encode_alone=True,
                          progress=False)
  rows.append(_row(data, results, k_prime=1000, leaves="built", encode="alone"))
  q, q_mask, _ = encoder.encode_queries(data.queries)
  profile = _profile(token_index, q, q_mask, ranker.SearchConfig(top_k=100, k_prime=1000))
  peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
  report = {
      "index": index_dir,
      "checkpoint": checkpoint,
      "data_dir": data_dir,
      "num_leaves": token_index.manifest["scann"]["num_leaves"],
      "leaves_built": token_index.manifest["scann"]["num_leaves_to_search"],
      "peak_rss_mb": peak_rss_mb,
      "profile_k_prime_1000": profile,
      "rows": rows
  }
  with io.atomic_open(out + ".json") as f:
    json.dump(report, f, indent=1)
  lines = [
      "| k' | leaves | threads | nDCG@10 | R@100 | p50 ms | p95 ms | queries/s | "
      "end to end p50 ms |", "|---|---|---|---|---|---|---|---|---|"
  ]
  end_to_end = lambda r: f"{r['end_to_end_p50_ms']:.1f}" if "end_to_end_p50_ms" in r else "—"
  lines += [
      f"| {r['k_prime']} | {r['leaves']} | {r.get('threads', 1)} | {r['ndcg@10']:.4f} | "
      f"{r['recall@100']:.3f} | {r['p50_ms']:.1f} | {r['p95_ms']:.1f} | "
      f"{r['queries_per_s']:.0f} | {end_to_end(r)} |" for r in rows
  ]
  lines.append(f"\nPeak RSS {peak_rss_mb:.0f} MB; {report['num_leaves']} leaves, "
               f"{report['leaves_built']} searched as built. Stages at k' = 1000 (median ms): "
               f"ScaNN {profile['scann_ms']:.2f}, f_XTR' and top-k "
               f"{profile['f_xtr_prime_and_top_k_ms']:.2f}.")
  with io.atomic_open(out + ".md") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines))
  plot(rows, out + ".png")


def plot(rows: list[dict], path: str) -> None:
  """nDCG@10 against median ms (log), one line per leaves setting, into the PNG at `path`."""
  figure, axes = plt.subplots(figsize=(6, 4))
  per_query = [r for r in rows if "encode" not in r and "threads" not in r]
  for leaves_setting in dict.fromkeys(r["leaves"] for r in per_query):
    line = [r for r in per_query if r["leaves"] == leaves_setting]
    axes.plot([r["p50_ms"] for r in line], [r["ndcg@10"] for r in line], "o-",
              label=f"leaves {leaves_setting}")
    for r in line:
      axes.annotate(f"k'={r['k_prime']}", (r["p50_ms"], r["ndcg@10"]), fontsize=7)
  axes.set_xscale("log")
  axes.xaxis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
  axes.xaxis.set_major_formatter(ticker.FormatStrFormatter("%g"))
  axes.xaxis.set_minor_formatter(ticker.NullFormatter())
  axes.set_xlabel("median search + scoring ms per query (log)")
  axes.set_ylabel("nDCG@10")
  axes.legend()
  figure.tight_layout()
  figure.savefig(path, dpi=120)


if __name__ == "__main__":
  main(*sys.argv[1:])
