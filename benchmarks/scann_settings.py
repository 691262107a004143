"""ScaNN settings on a latency–quality curve: token recall against exact search (no labels),
nDCG@10 of f_XTR' and ScaNN's time, for each setting, over an index's token vectors.

  .venv/bin/python benchmarks/scann_settings.py INDEX_DIR CHECKPOINT DATA_DIR OUT_PREFIX \
      '[{"leaves_factor": 1.8, "leaves": [50, 100]}, {"dims_per_block": 2, "leaves": [100]}]' \
      [SPLIT]

Each JSON object is `ScannConfig` fields (`xtr.index.scann`; the rest default) plus "leaves",
the leaves searched per query token to measure, and optionally "reordered", the candidates
rescored per query token to measure (search-time `reorder_k` values over one build with
reordering; the built `reorder_k` by default). Every ScaNN is built by `scann.build` (one
training thread: what an export builds) from the index's stored vectors, and searched with the
tokens of SPLIT's queries (k' = 1000, one thread; SPLIT: test by default, a dev split to choose
settings without seeing the test queries): recall@1000 is the fraction of each token's
exact top 1000 (numpy, float32) that ScaNN returns, averaged over the tokens; nDCG@10 ranks by
f_XTR' from ScaNN's lists (top-k' imputation); ms is the median of ScaNN's search of one
query's tokens. Writes OUT_PREFIX.json and OUT_PREFIX.md.
"""
import itertools
import json
import sys
import time

import numpy as np

from xtr import io
from xtr.evaluation import beir_eval
from xtr.index import scann
from xtr.index import scann_search
from xtr.retrieval import searcher
from xtr.scoring import search_scores

K_PRIME = 1000


def exact_top(tokens: np.ndarray, vectors: np.ndarray, k: int) -> np.ndarray:
  """[n, k] indices of each query token's k best document tokens (unordered)."""
  top = []
  for start in range(0, len(tokens), 64):
    scores = tokens[start:start + 64] @ vectors.T
    top.append(np.argpartition(-scores, k, axis=1)[:, :k].copy())
  return np.concatenate(top)


def main(index_dir: str, checkpoint: str, data_dir: str, out: str, settings: str,
         split: str = "test") -> None:
  encoder, token_index = searcher.open_for_search(index_dir, checkpoint)
  data = beir_eval.load_beir(data_dir, split)
  q, q_mask, _ = encoder.encode_queries(data.queries)
  vectors = np.concatenate(token_index.doc_vectors(range(token_index.num_docs)))
  tokens = q[q_mask]
  bounds = np.cumsum(q_mask.sum(axis=1))[:-1]
  exact = exact_top(tokens, vectors, K_PRIME)
  doc_of_token = np.repeat(np.arange(token_index.num_docs), token_index.doc_lengths)
  rows = []
  for setting in json.loads(settings):
    leaves = setting.pop("leaves")
    reordered = setting.pop("reordered", [setting.get("reorder_k", 0)])
    config = scann.ScannConfig(**setting)
    start = time.perf_counter()
    built, built_settings = scann.build(lambda: [vectors], len(vectors), config)
    build_s = time.perf_counter() - start
    for leaves_to_search, reorder_k in itertools.product(leaves, reordered):
      found, scores = scann_search.search(built.searcher, tokens, K_PRIME, reorder_k,
                                          leaves_to_search, 1)
      recall = np.mean([len(np.intersect1d(f, e)) / K_PRIME for f, e in zip(found, exact)])
      run = {}
      for query_id, token_scores, token_rows in zip(data.query_ids, np.split(scores, bounds),
                                                    np.split(found.astype(np.int64), bounds)):
        top, top_scores = search_scores.top_candidates(
            *search_scores.f_xtr_prime(token_scores, doc_of_token[token_rows]), 100)
        run[query_id] = {token_index.doc_ids[d]: float(s) for d, s in zip(top, top_scores)}
      times = []
      for query_tokens in np.split(tokens, bounds):
        begin = time.perf_counter()
        scann_search.search(built.searcher, query_tokens, K_PRIME, reorder_k, leaves_to_search, 1)
        times.append(1000 * (time.perf_counter() - begin))
      rows.append({
          **setting, "reorder_k": reorder_k,
          "num_leaves_built": built_settings["num_leaves"],
          "leaves_searched": leaves_to_search,
          "recall@1000": float(recall),
          "ndcg@10": beir_eval.evaluate(data.qrels, run)["ndcg@10"],
          "scann_p50_ms": float(np.median(times)),
          "build_s": build_s
      })
      print(rows[-1], file=sys.stderr, flush=True)
  io.write_results(out + ".json", {"index": index_dir, "split": split, "rows": rows})
  lines = [
      "| settings | leaves | searched | recall@1000 | nDCG@10 | ScaNN p50 ms | build s |",
      "|---|---|---|---|---|---|---|"
  ]
  defaults = scann.ScannConfig()
  for r in rows:
    changed = {
        k: v
        for k, v in r.items()
        if k in scann.ScannConfig.__dataclass_fields__ and v != getattr(defaults, k)
    }
    lines.append(f"| {json.dumps(changed) if changed else 'default'} | {r['num_leaves_built']} | "
                 f"{r['leaves_searched']} | {r['recall@1000']:.4f} | {r['ndcg@10']:.4f} | "
                 f"{r['scann_p50_ms']:.2f} | {r['build_s']:.0f} |")
  with io.atomic_open(out + ".md") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines))


if __name__ == "__main__":
  main(*sys.argv[1:])
