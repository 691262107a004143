"""Searching a sharded index: one corpus as 1, 4 and 16 shards, the shards searched one after the
other (`reader.FANOUT_THREADS` = 1) or at once (one thread per core), interleaved in one run.

  .venv/bin/python benchmarks/fanout.py INDEX_DIR CHECKPOINT DATA_DIR OUT_DIR \
      [--shards=1,4,16] [--rounds=3]

INDEX_DIR is a complete index with stored vectors (`xtr-export --store_vectors=float16`).
OUT_DIR/sS holds its vectors cut into S contiguous document ranges, as `xtr-export
--num_shards=S` writes them, each shard with its own ScaNN (default settings; kept across
runs). Each query is answered alone (f_XTR', k' = 1000, one ScaNN thread per shard), as an
interactive user's; the table gives nDCG@10 and the median ms per query of each way, and goes
to OUT_DIR/fanout.json.
"""
import argparse
import json
import math
import os

import numpy as np

from xtr import io
from xtr.evaluation import beir_eval
from xtr.index import build
from xtr.index import files
from xtr.index import reader
from xtr.index import writer as writer_lib
from xtr.retrieval import ranker
from xtr.retrieval import searcher

DOCS_PER_CHUNK = 1000


def write_shards(source: reader.TokenIndex, out_dir: str, num_shards: int) -> None:
  """Writes `source`'s documents and vectors as `num_shards` shards under out_dir (resuming)."""
  manifest = source.manifest
  for shard in range(num_shards):
    path = files.shard_path(out_dir, shard, num_shards) if num_shards > 1 else out_dir
    if os.path.exists(os.path.join(path, files.MANIFEST)):
      continue
    docs = build.shard_range(source.num_docs, shard, num_shards)
    corpus = manifest["corpus"] | {"docs": [docs.start, docs.stop]}
    writer = writer_lib.IndexWriter(path, source.dim, manifest["dtype"], manifest["model"],
                                    manifest["fingerprint"], DOCS_PER_CHUNK, corpus,
                                    vocabulary=source.vocabulary_file())
    for chunk in range(writer.completed_chunks(), math.ceil(len(docs) / DOCS_PER_CHUNK)):
      chunk_docs = range(docs.start + chunk * DOCS_PER_CHUNK,
                         min(docs.start + (chunk + 1) * DOCS_PER_CHUNK, docs.stop))
      writer.write_chunk(chunk, [source.doc_ids[d] for d in chunk_docs],
                         source.doc_vectors(chunk_docs))
    writer.finalize()


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("index")
  parser.add_argument("checkpoint")
  parser.add_argument("data_dir")
  parser.add_argument("out")
  parser.add_argument("--shards", default="1,4,16")
  parser.add_argument("--rounds", type=int, default=3)
  args = parser.parse_args()
  encoder, source = searcher.open_for_search(args.index, args.checkpoint)
  data = beir_eval.load_beir(args.data_dir, "test")
  config = ranker.SearchConfig(top_k=100, k_prime=1000)
  ways = {"one after the other": 1, "at once": os.cpu_count()}
  rows = []
  for num_shards in map(int, args.shards.split(",")):
    path = os.path.join(args.out, f"s{num_shards}")
    write_shards(source, path, num_shards)
    index = reader.open_index(path)
    index.load_scann()
    latency_ms, ndcg = {way: [] for way in ways}, {}
    for _ in range(args.rounds):
      for way, threads in ways.items():
        reader.FANOUT_THREADS, index._pool = threads, None  # pylint: disable=protected-access
        results = ranker.search(encoder, index, data.queries, config, progress=False)
        latency_ms[way] += list(results.latency_ms)
        run = {q: dict(r) for q, r in zip(data.query_ids, results.rankings)}
        ndcg[way] = beir_eval.evaluate(data.qrels, run)["ndcg@10"]
    for way in ways:
      rows.append({
          "shards": num_shards,
          "way": way,
          "threads": min(num_shards, ways[way]),
          "ndcg@10": ndcg[way],
          "p50_ms": float(np.median(latency_ms[way]))
      })
      print(
          f"{num_shards:>3} shards, {way:<20} nDCG@10 {ndcg[way]:.4f}  "
          f"p50 {rows[-1]['p50_ms']:.1f} ms", flush=True)
  io.write_results(os.path.join(args.out, "fanout.json"), {
      "rows": rows,
      "cores": os.cpu_count(),
      "args": vars(args)
  })
  print(json.dumps(rows))


if __name__ == "__main__":
  main()
