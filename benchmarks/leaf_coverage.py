"""Where a query token's exact top-k' lies among the leaves of a ScaNN build, and how much of it
the leaves searched reach (docs/performance.md, "Why 16× needs 400–800 leaves").

  .venv/bin/python benchmarks/leaf_coverage.py CHECKPOINT DATA_DIR RECORD INDEX_DIR [INDEX_DIR ...]

For each index (e.g. benchmarks/build_memory.py's OUT_DIR/s1, s4, s16), over the first 10 test
queries' tokens: their exact top-k' tokens (k' = 1000); the fewest leaves that hold 90 % of
them (an oracle's choice; median over the query tokens) and how many tokens those leaves hold;
the norms of ScaNN's leaf centers (read from its serialized partitioner); and the share of the
exact top-k' inside the first L leaves when the leaves are ranked by q·c (how ScaNN ranks a
generic tree's leaves) and by q·c / |c| (the cosine: a spherical tree's centers are unit
vectors). These shares are the recall of the partitions alone; the AH codes lose more. Rows go
to RECORD, a run record (`run_record.record`).
"""
import argparse
import os

import numpy as np
from scann.partitioning import partitioner_pb2

from xtr import io
from xtr.evaluation import beir_eval
from xtr.evaluation import run_record
from xtr.index import files
from xtr.index import reader
from xtr.retrieval import searcher

K_PRIME = 1000
LEAVES = (12, 25, 50, 100, 200, 400, 800)


def _leaves(index_dir: str) -> tuple[np.ndarray, np.ndarray]:
  """([T] the leaf of each token, [leaves, D] the leaves' centers) of an index's ScaNN."""
  scann_dir = os.path.join(index_dir, files.SCANN_DIR)
  leaf = np.load(os.path.join(scann_dir, "datapoint_to_token.npy"), allow_pickle=False)
  with open(os.path.join(scann_dir, "serialized_partitioner.pb"), "rb") as f:
    tree = partitioner_pb2.SerializedPartitioner.FromString(f.read()).kmeans.kmeans_tree
  return leaf, np.array([c.dimension for c in tree.root.centers])


def _share_within(scores: np.ndarray, neighbour_leaves: np.ndarray) -> dict[int, float]:
  """scores [Q, leaves] of the leaves for each query token, neighbour_leaves [Q, K] -> {L: share
  of the neighbours whose leaf ranks among the first L}."""
  order = np.argsort(-scores, axis=1)
  rank = np.empty_like(order)
  np.put_along_axis(rank, order, np.broadcast_to(np.arange(order.shape[1]), order.shape), axis=1)
  ranks = np.take_along_axis(rank, neighbour_leaves, axis=1)
  return {L: float(np.mean(ranks < L)) for L in LEAVES}


def coverage(index_dir: str, queries: np.ndarray) -> dict:
  """The row of one index (see the module docstring); queries [Q, D]."""
  index = reader.open_index(index_dir)
  leaf, centers = _leaves(index_dir)
  starts = np.concatenate([[0], np.cumsum(index.doc_lengths)])
  _, docs, positions = index.search_tokens(queries, K_PRIME, "bruteforce")
  neighbour_leaves = leaf[starts[np.asarray(docs)] + np.asarray(positions)]  # [Q, K]
  sizes = np.bincount(leaf, minlength=len(centers))
  oracle_leaves, oracle_tokens = [], []
  for row in neighbour_leaves:
    ids, counts = np.unique(row, return_counts=True)
    order = np.argsort(-counts)
    needed = int(np.searchsorted(np.cumsum(counts[order]), 0.9 * K_PRIME)) + 1
    oracle_leaves.append(needed)
    oracle_tokens.append(int(sizes[ids[order[:needed]]].sum()))
  norms = np.linalg.norm(centers, axis=1)
  return {
      "index": index_dir,
      "tokens": index.num_tokens,
      "leaves": len(centers),
      "center_norm_p50": float(np.median(norms)),
      "oracle_leaves_for_0.9_p50": float(np.median(oracle_leaves)),
      "oracle_tokens_for_0.9_p50": float(np.median(oracle_tokens)),
      "share_by_dot": _share_within(queries @ centers.T, neighbour_leaves),
      "share_by_cosine": _share_within(queries @ (centers / norms[:, None]).T, neighbour_leaves)
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  for name in ("checkpoint", "data_dir", "record"):
    parser.add_argument(name)
  parser.add_argument("indexes", nargs="+")
  args = parser.parse_args()
  run_record.mark_start()
  encoder, _ = searcher.open_for_search(args.indexes[0], args.checkpoint)
  q, q_mask, _ = encoder.encode_queries(beir_eval.load_beir(args.data_dir, "test").queries[:10])
  queries = np.concatenate([vectors[mask] for vectors, mask in zip(q, q_mask)])
  rows = []
  for index_dir in args.indexes:
    rows.append(coverage(index_dir, queries))
    print(rows[-1], flush=True)
  io.write_results(args.record, run_record.record({"rows": rows}, [args.data_dir], "test"))


if __name__ == "__main__":
  main()
