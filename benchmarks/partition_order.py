"""What ScaNN's rows in partition order save per query (`xtr.index.scann.write` writes a ScaNN
that rescores that way): the same searcher in partition order and in token order (as exports
wrote it before), searched one after the other in one process, one query at a time on one thread.

  .venv/bin/python benchmarks/partition_order.py INDEX_DIR VECTORS_DIR [--rounds=3] \
      [--record=PATH]

INDEX_DIR is an index whose ScaNN rescores (`reorder_k`), exported in partition order and
holding every token (no pruning, no deletions); VECTORS_DIR is benchmarks/dump_vectors.py's dump
of the queries that search it (their valid tokens, k' 1000, the index's own leaves and
reorder_k). Its ScaNN files are copied to a temporary directory with their rows put back in
token order; both copies are loaded as xtr loads them. Each round searches every query with one
copy, then with the other (the first copy alternates by round). Prints, and records as a run
record, each order's mean and median ms per query over all rounds, the ratio of the means, and
the share of retrieved tokens that the two return alike (scores must be equal; tokens at a tied
score may come in either order).
"""
import argparse
import os
import shutil
import tempfile
import time

import dump_vectors  # benchmarks/, beside this script.
import numpy as np

from xtr import io
from xtr.evaluation import run_record
from xtr.index import files
from xtr.index import scann
from xtr.index import scann_search

K_PRIME = 1000


def token_order_copy(index_dir: str, out_dir: str) -> tuple[str, set[str], np.ndarray]:
  """Copies the index's ScaNN files to out_dir/scann with their rows in token order; returns that
  directory, its file names and the index's own row -> token table [T]."""
  manifest = files.read_json(os.path.join(index_dir, files.MANIFEST))
  files.check_manifest(manifest, os.path.join(index_dir, files.MANIFEST))
  rows, _ = files.scann_rows(index_dir, manifest)
  if len(rows) != manifest["num_tokens"] or np.array_equal(rows, np.arange(len(rows))):
    raise SystemExit(f"{index_dir}: not an index of every token in partition order")
  name = files.names(manifest)[files.SCANN_DIR]
  copy = os.path.join(out_dir, "scann")
  shutil.copytree(os.path.join(index_dir, name), copy)
  for kind, asset in scann_search.written_assets(copy).items():
    if scann_search.per_row(kind):
      scann.rewrite_rows(os.path.join(copy, asset), np.argsort(rows))
  return copy, scann_search.listed_names(manifest["files"], name), rows


def search_all(searcher, queries: list[np.ndarray], reorder_k: int) -> tuple[list, list[float]]:
  """Each query's (rows, scores) and ms."""
  found, ms = [], []
  for q in queries:
    begin = time.perf_counter()
    found.append(scann_search.search(searcher, q, K_PRIME, reorder_k, None, 1))
    ms.append(1000 * (time.perf_counter() - begin))
  return found, ms


def agreement(partition: list, token: list, rows: np.ndarray) -> float:
  """The share of retrieved tokens that both orders return at the same rank; raises unless every
  score is equal and every difference is at a tied score."""
  alike = total = 0
  for (p_rows, p_scores), (t_rows, t_scores) in zip(partition, token):
    np.testing.assert_array_equal(p_scores, t_scores)
    same = rows[p_rows] == t_rows  # Token order: row t holds token t.
    differs = np.diff(p_scores, axis=1) != 0
    edge = np.zeros((len(p_scores), 1), bool)
    untied = np.concatenate([~edge, differs], 1) & np.concatenate([differs, edge], 1)
    if not np.all(same[untied]):
      raise AssertionError("the two orders return other tokens at an untied score")
    alike, total = alike + same.sum(), total + same.size
  return float(alike / total)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
  parser.add_argument("index")
  parser.add_argument("vectors")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--record", help="write the results to this run record (JSON)")
  args = parser.parse_args()
  run_record.mark_start()
  source = dump_vectors.read_source(args.vectors)
  q = np.load(os.path.join(args.vectors, "query_vectors.npy"))
  mask = np.load(os.path.join(args.vectors, "query_mask.npy"))
  queries = [vectors[valid] for vectors, valid in zip(q, mask)]
  manifest = files.read_json(os.path.join(args.index, files.MANIFEST))
  reorder_k = manifest["scann"]["reorder_k"]
  with tempfile.TemporaryDirectory() as tmp:
    copy, names, rows = token_order_copy(args.index, tmp)
    name = files.names(manifest)[files.SCANN_DIR]
    searchers = {
        "partition": scann_search.load(os.path.join(args.index, name), names, len(rows)),
        "token": scann_search.load(copy, names, len(rows))
    }
    found, ms = {}, {order: [] for order in searchers}
    for order, searcher in searchers.items():  # Warm-up: page in both copies.
      found[order], _ = search_all(searcher, queries, reorder_k)
    for round_ in range(args.rounds):
      for order in (("partition", "token") if round_ % 2 else ("token", "partition")):
        ms[order] += search_all(searchers[order], queries, reorder_k)[1]
  results = {
      order: {
          "mean_ms": float(np.mean(times)),
          "p50_ms": float(np.median(times))
      } for order, times in ms.items()
  }
  results[
      "token_over_partition_mean"] = results["token"]["mean_ms"] / results["partition"]["mean_ms"]
  results["tokens_alike"] = agreement(found["partition"], found["token"], rows)
  results["settings"] = {
      "queries": len(queries),
      "rounds": args.rounds,
      "k_prime": K_PRIME,
      "scann": manifest["scann"]
  }
  for order in searchers:
    print(f"{order} order: {results[order]['mean_ms']:.2f} ms mean, "
          f"{results[order]['p50_ms']:.2f} ms p50 per query")
  print(f"token / partition order (means): {results['token_over_partition_mean']:.3f}; "
        f"tokens returned alike: {results['tokens_alike']:.4f}")
  if args.record:
    io.write_results(args.record, run_record.record(results, [source["data_dir"]], source["split"]))


if __name__ == "__main__":
  main()
