"""`--searcher=device` against exact search: queries/s, ms per query and recall of the exact top-k'.

  .venv/bin/python benchmarks/device_search.py CHECKPOINT DATA_DIR OUT_JSON \
      (--index=INDEX_DIR | --gin_file=MODEL_GIN [--gin_bindings=...]) \
      [--dtypes=bfloat16,int8,float32] [--token_blocks=65536] [--recall_targets=none]
      [--queries=300] [--k_prime=1000] [--copies=1] [--dump=VECTORS_DIR]

The token vectors are those of INDEX_DIR (an index with stored vectors), or, with --gin_file
(the model of CHECKPOINT, as `xtr-export` takes it), DATA_DIR's corpus encoded here, on the
devices: no index and no ScaNN build, so an accelerator measures in minutes (the encoding's
docs/s is reported too). For each resident type (`device.DeviceConfig.dtype`), the vectors are
put on every local device (sharded over tokens) and the test queries answered by f_XTR' on the
device (`ranker.device_xtr_top`, as `--searcher=device` does: batches of 64, and
one query at a time), after a warm-up that compiles both. Recall is that of the exact top-k'
tokens (the float32 resident copy, which equals exact search: tests/test_device_search.py) for
the query tokens of the first 30 queries; the nDCG@10 is pytrec_eval's.

`--copies=N` makes the corpus N times larger as `benchmarks/scaling.py` does: the tokens and
N - 1 copies of them, each token moved by Gaussian noise of norm ~`--noise` and normalized
(made on the first device, so that 16x SciFact is built in seconds). A copy's documents are
new documents under their originals' ids: the nDCG@10 there counts each document at the best rank
of any of its copies ("folded"; `beir_eval.best_scores`), so that it says whether the relevant
documents are still found among N times as many tokens. On the accelerator machine it measures
the accelerator; here, the CPU ("device" then means this host's cores).

`--dump=VECTORS_DIR` also writes the tokens (with their copies) and the queries in
benchmarks/dump_vectors.py's layout, float32, for the peers to search the same vectors on the same
device (benchmarks/peers/device.py); copies keep their originals' ids there too.
"""
import argparse
import itertools
import json
import os
import time

import dump_vectors  # benchmarks/, beside this script.
import gin
import jax
import jax.numpy as jnp
import numpy as np

from xtr import cli
from xtr import io
from xtr.evaluation import beir_eval
from xtr.index import device
from xtr.models import encoding
from xtr.retrieval import ranker
from xtr.retrieval import searcher

BATCH = 64


def _source(args: argparse.Namespace, data: beir_eval.BeirData):
  """(the query encoder, the tokens: (chunks [T_c, D], docs [T], positions [T]), doc ids, the
  seconds spent encoding the corpus or None)."""
  if args.index:
    encoder, index = searcher.open_for_search(args.index, args.checkpoint, searcher="device")
    return encoder, index.retrieval_tokens(), index.doc_ids, None
  gin.add_config_file_search_path(str(cli.REPO_DIR))
  gin.parse_config_files_and_bindings(args.gin_file, [*args.gin_bindings, *cli.ENCODER_BINDINGS])
  encoder = encoding.Encoder(encoding.load_params(args.checkpoint))
  encoder.encode_documents(data.docs[:64])  # Compiles the longest bucket.
  start = time.perf_counter()
  vectors, _ = encoder.encode_documents(data.docs, progress="encode")
  encode_s = time.perf_counter() - start
  lengths = [len(v) for v in vectors]
  docs = np.repeat(np.arange(len(vectors), dtype=np.int32), lengths)
  positions = np.concatenate([np.arange(n, dtype=np.int32) for n in lengths])
  return encoder, ([np.concatenate(vectors)], docs, positions), data.doc_ids, encode_s


def _copied(tokens, num_docs: int, copies: int, noise: float):
  """The tokens (chunks, docs [T], positions [T]) and, with copies > 1, noisy copies after them
  (chunks as float32 arrays on the first device; copy c's docs moved by c·num_docs)."""
  chunks, docs, positions = tokens
  if copies == 1:
    return tokens
  base = [jnp.asarray(np.asarray(c, np.float32)) for c in chunks]

  @jax.jit
  def moved(vectors, key):
    vectors = vectors + noise / np.sqrt(vectors.shape[1]) * jax.random.normal(key, vectors.shape)
    return vectors / jnp.linalg.norm(vectors, axis=1, keepdims=True)

  keys = jax.random.split(jax.random.key(0), copies * len(base))
  made = base + [
      moved(v, keys[c * len(base) + i]) for c in range(1, copies) for i, v in enumerate(base)
  ]
  return (made, np.concatenate([docs + c * num_docs for c in range(copies)]),
          np.tile(positions, copies))


def _dump(out_dir: str, tokens, doc_ids: list[str], query_ids: list[str], q: np.ndarray,
          q_mask: np.ndarray, source: dict) -> None:
  """Writes the tokens (chunks, docs [T] in order, positions) and the queries [Q, n, D] in
  benchmarks/dump_vectors.py's layout, the vectors as float32, a chunk at a time; `doc_ids`
  name docs 0, 1, ... in turn (a copy's documents their originals' ids)."""
  chunks, docs, _ = tokens
  os.makedirs(out_dir, exist_ok=True)
  vectors = np.lib.format.open_memmap(os.path.join(out_dir, "doc_vectors.npy"), "w+", np.float32,
                                      (len(docs), chunks[0].shape[1]))
  start = 0
  for chunk in chunks:
    vectors[start:start + len(chunk)] = np.asarray(chunk, np.float32)
    start += len(chunk)
  vectors.flush()
  dump_vectors.write_rest(out_dir, np.bincount(docs, minlength=len(doc_ids)), doc_ids, q, q_mask,
                          query_ids, source | {"dtype": "float32"})


def _padded(q: np.ndarray, q_mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """Queries padded to a multiple of BATCH with queries of no tokens (one compiled shape)."""
  pad = -len(q) % BATCH
  return (np.concatenate([q, np.zeros((pad, *q.shape[1:]), q.dtype)]),
          np.concatenate([q_mask, np.zeros((pad, q_mask.shape[1]), bool)]))


def _measure(resident: device.DeviceTokens, q: np.ndarray, q_mask: np.ndarray,
             config: ranker.SearchConfig) -> tuple[list, float, list[float]]:
  """(the ranking of each query, seconds for all of them in batches, ms of 50 queries alone)."""
  padded, padded_mask = _padded(q, q_mask)
  ranker.device_xtr_top(resident, padded[:BATCH], padded_mask[:BATCH], config)  # Compiles.
  ranker.device_xtr_top(resident, q[:1], q_mask[:1], config)
  start = time.perf_counter()
  ranked = []
  for first in range(0, len(padded), BATCH):
    batch = slice(first, first + BATCH)
    ranked += zip(*ranker.device_xtr_top(resident, padded[batch], padded_mask[batch], config))
  batch_s = time.perf_counter() - start
  alone_ms = []
  for one in range(min(50, len(q))):
    start = time.perf_counter()
    ranker.device_xtr_top(resident, q[one:one + 1], q_mask[one:one + 1], config)
    alone_ms.append(1000 * (time.perf_counter() - start))
  return ranked[:len(q)], batch_s, alone_ms


def _ndcg(data: beir_eval.BeirData, query_ids: list[str], doc_ids: list[str],
          ranked: list) -> float:
  """pytrec_eval's nDCG@10 of the rankings (doc_index, scores) of `query_ids` (`doc_ids` may
  repeat an id: its best score counts)."""
  run = {
      query: beir_eval.best_scores((doc_ids[d], float(s)) for d, s in zip(*top) if d >= 0)
      for query, top in zip(query_ids, ranked)
  }
  return beir_eval.evaluate(data.qrels, run)["ndcg@10"]


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  for name in ("checkpoint", "data_dir", "out"):
    parser.add_argument(name)
  source = parser.add_mutually_exclusive_group(required=True)
  source.add_argument("--index", help="An index with stored vectors.")
  source.add_argument("--gin_file", action="append", help="The model's gin (encode the corpus).")
  parser.add_argument("--gin_bindings", action="append", default=[])
  parser.add_argument("--dtypes", default="bfloat16,int8,float32")
  parser.add_argument("--token_blocks", default="65536",
                      help="DeviceConfig.token_block values to measure (each with every dtype).")
  parser.add_argument("--recall_targets", default="none",
                      help="DeviceConfig.recall_target values to measure ('none': exact).")
  parser.add_argument("--queries", type=int, default=300)
  parser.add_argument("--k_prime", type=int, default=1000)
  parser.add_argument("--copies", type=int, default=1)
  parser.add_argument("--noise", type=float, default=0.3)
  parser.add_argument("--dump", help="Also write the vectors and queries here (for the peers).")
  args = parser.parse_args()
  data = beir_eval.load_beir(args.data_dir, "test")
  encoder, tokens, doc_ids, encode_s = _source(args, data)
  query_ids, texts = data.query_ids[:args.queries], data.queries[:args.queries]
  q, q_mask, _ = encoder.encode_queries(texts)
  sample = np.concatenate([v[m] for v, m in zip(q[:30], q_mask[:30])])
  tokens = _copied(tokens, len(doc_ids), args.copies, args.noise)
  doc_ids = list(doc_ids) * args.copies
  if args.dump:
    _dump(args.dump, tokens, doc_ids, query_ids, q, q_mask, {"made_by": vars(args)})
  exact = device.DeviceTokens(*tokens, device.DeviceConfig(dtype="float32"))
  exact_scores, docs, positions = map(np.asarray, exact.search(sample, args.k_prime))
  del exact
  wanted = [set(zip(d, p)) for d, p in zip(docs, positions)]
  config = ranker.SearchConfig(top_k=100, k_prime=args.k_prime, searcher="device")
  rows = []
  targets = [None if t == "none" else float(t) for t in args.recall_targets.split(",")]
  for dtype, block, target in itertools.product(args.dtypes.split(","),
                                                map(int, args.token_blocks.split(",")), targets):
    start = time.perf_counter()
    resident = device.DeviceTokens(
        *tokens, device.DeviceConfig(dtype=dtype, token_block=block, recall_target=target))
    jax.block_until_ready(resident.search(sample[:1], 1))
    load_s = time.perf_counter() - start
    ranked, batch_s, alone_ms = _measure(resident, q, q_mask, config)
    scores, found_docs, found_positions = map(np.asarray, resident.search(sample, args.k_prime))
    recall = np.mean([
        len(set(zip(d, p)) & w) / args.k_prime
        for d, p, w in zip(found_docs, found_positions, wanted)
    ])
    rows.append({
        "dtype": dtype,
        "token_block": block,
        "recall_target": target,
        "bin_width": device.bin_width(resident.num_tokens, args.k_prime, block, target),
        "device": str(jax.local_devices()[0].device_kind),
        "devices": len(jax.local_devices()),
        "tokens": resident.num_tokens,
        "resident_mb": resident.nbytes / 2**20,
        "load_s": load_s,
        "queries_per_s_batched": len(q) / batch_s,
        "p50_ms_one_query": float(np.median(alone_ms)),
        "recall_exact_top_k": float(recall),
        "max_score_error": float(np.abs(scores - exact_scores).max()),
        "ndcg@10": _ndcg(data, query_ids, doc_ids, ranked)
    })
    del resident
    print(json.dumps(rows[-1]), flush=True)
  io.write_results(
      args.out, {
          "rows": rows,
          "args": vars(args),
          "tokens": rows[0]["tokens"],
          "encode_docs_per_s": None if encode_s is None else len(doc_ids) / encode_s
      })


if __name__ == "__main__":
  main()
