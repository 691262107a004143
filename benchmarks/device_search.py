"""`--searcher=device` against exact search: queries/s, ms per query and recall of the exact top-k'.

  .venv/bin/python benchmarks/device_search.py INDEX_DIR CHECKPOINT DATA_DIR OUT_JSON \
      [--dtypes=bfloat16,int8,float32] [--queries=300] [--k_prime=1000]

INDEX_DIR is an index with stored vectors. For each resident type (`device.DeviceConfig.dtype`),
its vectors are put on every local device (sharded over tokens) and the test queries answered
by f_XTR' on the device (`ranker.rank_batch`, batches of 64, and `ranker.rank`, one query at a
time), after a warm-up that compiles both. Recall is that of the exact top-k' tokens (float32
`--searcher=bruteforce` over the same vectors) for the query tokens of the first 30 queries;
the nDCG@10 is pytrec_eval's. On the accelerator machine it measures the accelerator; here, the
CPU ("device" then means this host's cores).
"""
import argparse
import json
import time

import gin
import jax
import numpy as np

from xtr import io
from xtr.evaluation import beir_eval
from xtr.retrieval import ranker
from xtr.retrieval import searcher


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  for name in ("index", "checkpoint", "data_dir", "out"):
    parser.add_argument(name)
  parser.add_argument("--dtypes", default="bfloat16,int8,float32")
  parser.add_argument("--queries", type=int, default=300)
  parser.add_argument("--k_prime", type=int, default=1000)
  args = parser.parse_args()
  encoder, index = searcher.open_for_search(args.index, args.checkpoint)
  data = beir_eval.load_beir(args.data_dir, "test")
  query_ids, texts = data.query_ids[:args.queries], data.queries[:args.queries]
  q, q_mask, u_q = encoder.encode_queries(texts)
  u_q = np.ones(q_mask.shape, np.float32) if u_q is None else u_q
  sample = np.concatenate([v[m] for v, m in zip(q[:30], q_mask[:30])])
  exact_scores, docs, positions = index.search_tokens(sample, args.k_prime, "bruteforce")
  wanted = [set(zip(d, p)) for d, p in zip(docs, positions)]
  config = ranker.SearchConfig(top_k=100, k_prime=args.k_prime, searcher="device")
  rows = []
  for dtype in args.dtypes.split(","):
    gin.clear_config()
    gin.bind_parameter("xtr.index.device.DeviceConfig.dtype", dtype)
    start = time.perf_counter()
    resident = index.on_device()
    load_s = time.perf_counter() - start
    ranker.rank_batch(index, q[:64], q_mask[:64], u_q[:64], config)  # Compiles.
    ranker.rank(index, q[0], q_mask[0], u_q[0], config)
    start = time.perf_counter()
    ranked = []
    for first in range(0, len(q), 64):
      batch = slice(first, first + 64)
      ranked += ranker.rank_batch(index, q[batch], q_mask[batch], u_q[batch], config)
    batch_s = time.perf_counter() - start
    alone_ms = []
    for vectors, mask, u in zip(q[:50], q_mask[:50], u_q[:50]):
      start = time.perf_counter()
      ranker.rank(index, vectors, mask, u, config)
      alone_ms.append(1000 * (time.perf_counter() - start))
    scores, found_docs, found_positions = map(np.asarray, resident.search(sample, args.k_prime))
    recall = np.mean([
        len(set(zip(d, p)) & w) / args.k_prime
        for d, p, w in zip(found_docs, found_positions, wanted)
    ])
    run = {
        query: {
            index.doc_ids[d]: float(s) for d, s in zip(*top) if d >= 0
        } for query, top in zip(query_ids, ranked)
    }
    rows.append({
        "dtype": dtype,
        "device": str(jax.local_devices()[0].device_kind),
        "devices": len(jax.local_devices()),
        "resident_mb": resident.nbytes / 2**20,
        "load_s": load_s,
        "queries_per_s_batched": len(q) / batch_s,
        "p50_ms_one_query": float(np.median(alone_ms)),
        "recall_exact_top_k": float(recall),
        "max_score_error": float(np.abs(scores - exact_scores).max()),
        "ndcg@10": beir_eval.evaluate(data.qrels, run)["ndcg@10"]
    })
    print(json.dumps(rows[-1]), flush=True)
  io.write_results(args.out, {"rows": rows, "args": vars(args), "tokens": index.num_tokens})


if __name__ == "__main__":
  main()
