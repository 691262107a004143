"""WARP (xtr-warp-rs) and fast-plaid on the accelerator, on the vectors that
benchmarks/device_search.py --dump wrote there, beside `--searcher=device` on the same device.

  PYTHONPATH=. python3 benchmarks/peers/device.py VECTORS_DIR DATA_DIR OUT_JSON [--device=cuda]
      [--engines=warp,fast_plaid] [--rounds=3] [--cache=DIR]

Runs under a torch 2.11 with CUDA (the lent GPU machine's python3, or .venv-peers with
--device=cpu), with gin-config and pytrec-eval-terrier beside it for the metrics. It calls the
two libraries directly with the settings PyLate 1.6 gives them by default (`indexes.WARP`,
`indexes.PLAID(use_fast=True)`; PyLate only wraps them, and its own requirements are not needed
here), as benchmarks/engines.py runs them on the CPU: WARP's residual codec trained on 40,000
tokens (engines.py says why). Each engine builds its index on --device (timed), then answers one
warm-up query; then the rounds run interleaved, engine after engine: every query alone, then the
queries 64 per call (the call's ms / 64 per query). The first
round's top 100 give nDCG@10 and Recall@100 (`xtr.evaluation.beir_eval.evaluate`, pytrec_eval,
as engines.py; where device_search.py dumped N copies of the corpus, a copy's documents carry
their originals' ids and count at their best rank, as there). Device memory: torch's allocator's
peak over the build, and what the index holds after it.

xtr-warp-rs imports duckdb for its metadata filters, which this benchmark does not use; where
duckdb is not installed (a 25 MB wheel that the lent machine lacks), an empty module stands in
and the record says so.
"""
import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import time
import types

import numpy as np
import torch
import worker  # benchmarks/peers/, beside this script.

from xtr import io
from xtr.evaluation import beir_eval

BATCH = 64


def _warp(docs: list[torch.Tensor], folder: str, device: str):
  """xtr-warp-rs's index of `docs`, built and loaded on `device`, and its search."""
  from xtr_warp import search  # pylint: disable=import-outside-toplevel
  index = search.XTRWarp(index=folder, device=device)
  index.create(embeddings_source=docs, device=device, kmeans_niters=4, max_points_per_centroid=256,
               nbits=4, seed=42, show_progress=False, codec_sample_max_tokens=40_000)
  index.load(device=device, dtype=torch.float32, mmap=True)
  return lambda queries: index.search(queries, top_k=worker.TOP_K, nprobe=32, t_prime=100_000,
                                      batch_size=8192, num_threads=1, show_progress=False)


def _fast_plaid(docs: list[torch.Tensor], folder: str, device: str):
  """fast-plaid's index of `docs`, built and loaded on `device`, and its search."""
  from fast_plaid import search  # pylint: disable=import-outside-toplevel
  index = search.FastPlaid(index=folder, device=device, low_memory=False)
  index.create(documents_embeddings=docs, kmeans_niters=4, max_points_per_centroid=256, nbits=4,
               seed=42)
  return lambda queries: index.search(queries, top_k=worker.TOP_K, batch_size=1 << 18, n_ivf_probe=
                                      8, n_full_scores=8192, show_progress=False)


ENGINES = {"warp": _warp, "fast_plaid": _fast_plaid}


def _duckdb() -> str:
  """duckdb's version, or, where it is not installed, an empty module put in its place."""
  if importlib.util.find_spec("duckdb") is None:
    sys.modules["duckdb"] = types.ModuleType("duckdb")
    return "not installed: an empty module stood in (WARP's metadata filters, unused here)"
  return importlib.metadata.version("duckdb")


def _memory_mb(device: str) -> tuple[float, float] | tuple[None, None]:
  """(allocated, peak allocated since the last reset) MiB of torch's allocator on CUDA."""
  if not device.startswith("cuda"):
    return None, None
  return torch.cuda.memory_allocated() / 2**20, torch.cuda.max_memory_allocated() / 2**20


def _round(search, queries: list[torch.Tensor], batch: int, device: str) -> tuple[list, list]:
  """(ms per query, each query's [(doc index, score)] top 100) for the queries, `batch` per call."""
  ms, found = [], []
  for first in range(0, len(queries), batch):
    part = queries[first:first + batch]
    start = time.perf_counter()
    found += search(part)
    if device.startswith("cuda"):
      torch.cuda.synchronize()
    ms += [1000 * (time.perf_counter() - start) / len(part)] * len(part)
  return ms, found


def _metrics(data: worker.Data, qrels: dict, found: list) -> dict[str, float]:
  """nDCG@10 and Recall@100 of each query's [(doc index, score)] top 100 (pytrec_eval)."""
  run = {
      q: beir_eval.best_scores((data.doc_ids[d], float(s)) for d, s in top)
      for q, top in zip(data.query_ids, found)
  }
  metrics = beir_eval.evaluate(qrels, run, mrr_at=())
  return {"ndcg@10": metrics["ndcg@10"], "recall@100": metrics["recall@100"]}


def _build(name: str, docs: list[torch.Tensor], query: torch.Tensor, folder: str, device: str,
           tokens: int):
  """(engine `name`'s row: build time, memory, bytes/token; its search, warmed up on `query`),
  or (its row with the error, None)."""
  shutil.rmtree(folder, ignore_errors=True)
  if device.startswith("cuda"):
    torch.cuda.reset_peak_memory_stats()
  before, _ = _memory_mb(device)
  start = time.perf_counter()
  try:
    search = ENGINES[name](docs, folder, device)
  except Exception as error:  # pylint: disable=broad-except
    return {"engine": name, "error": worker.reason(error)}, None
  build_s = time.perf_counter() - start
  after, peak = _memory_mb(device)
  search([query])
  return {
      "engine": name,
      "device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
      "build_s": build_s,
      "build_peak_mb": peak,
      "resident_mb": None if after is None else after - before,
      "bytes_per_token": worker.dir_bytes(folder) / tokens,
      "ms_one_query": [],
      "ms_batched": []
  }, search


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  for name in ("vectors", "data_dir", "out"):
    parser.add_argument(name)
  parser.add_argument("--device", default="cuda")
  parser.add_argument("--engines", default="warp,fast_plaid")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--cache", default="/tmp/peer_indexes")
  args = parser.parse_args()
  unknown = set(args.engines.split(",")) - ENGINES.keys()
  if unknown:
    parser.error(f"--engines={args.engines}: unknown {sorted(unknown)} (known: {sorted(ENGINES)})")
  duckdb = _duckdb()
  data = worker.Data(args.vectors, 0)
  qrels = beir_eval.load_beir(args.data_dir, "test").qrels
  qrels = {q: qrels[q] for q in data.query_ids}
  queries = [torch.from_numpy(q) for q in data.queries]
  docs = [torch.from_numpy(np.array(d)) for d in data.docs()]
  tokens = int(data.doc_lengths.sum())
  rows, searches = {}, {}
  for name in args.engines.split(","):
    rows[name], search = _build(name, docs, queries[0], os.path.join(args.cache, name), args.device,
                                tokens)
    print(json.dumps(rows[name]), flush=True)
    if search:
      searches[name] = search
  for r in range(args.rounds):
    for name, search in searches.items():
      row = rows[name]
      for batch, key in ((1, "ms_one_query"), (BATCH, "ms_batched")):
        ms, found = _round(search, queries, batch, args.device)
        row[key] += ms
        if r == 0 and batch == 1:
          row |= _metrics(data, qrels, found)
      row |= {
          "rounds": r + 1,
          "p50_ms_one_query": float(np.median(row["ms_one_query"])),
          "queries_per_s_batched": 1000 / float(np.mean(row["ms_batched"]))
      }
      print(json.dumps({k: v for k, v in row.items() if not k.startswith("ms_")}), flush=True)
    io.write_results(  # After every round, so that a run cut short keeps what it measured.
        args.out, {
            "rows": list(rows.values()),
            "args": vars(args),
            "tokens": tokens,
            "torch": torch.__version__,
            "duckdb": duckdb
        })


if __name__ == "__main__":
  main()
