"""The ScaNN build at growing corpus sizes: peak memory, build time, search time and recall.

  .venv/bin/python benchmarks/build_memory.py INDEX_DIR CHECKPOINT DATA_DIR OUT_DIR \
      [--scales=1,2,4] [--noise=0.3] [--rotate] [--num_leaves=1000000] [--leaves_to_search=200,400]
      [--reorder_k=4000 --reorder_type=int8] [--spherical] [--leaf_size=1114]
      [--training_threads=0]

INDEX_DIR is a complete index with stored vectors (e.g. SciFact's, `xtr-export
--store_vectors=float16`). For scale s, OUT_DIR/s{s} is an index of s times its tokens: its
documents, then copies of them drawn at random (seeded) whose token vectors are moved by
Gaussian noise of norm ~`noise` and renormalized, and with --rotate first turned by a random
rotation, one per copy of the corpus (isotropic noise alone leaves copies near-duplicates of their
originals; a rotation keeps each copy's geometry but puts it elsewhere); the rate at which a copy's
token has its original as nearest neighbour among the real tokens is reported (a low rate: copies
are not near-duplicates). Each scale's chunks are written by one process, then its ScaNN is
built by a fresh one that does nothing else (`IndexWriter.finalize`, as `xtr-export` does after
encoding): its peak RSS is that process's, imports included, beside its RSS when the build
started.
ScaNN's settings are the defaults but `num_leaves` (default here: no cap, so the tree keeps √T
leaves and each query token scans ~100·√T tokens; with --leaf_size, T / leaf_size leaves of a
fixed size: `ScannConfig.leaf_size`), trained on one thread (or --training_threads), with
--spherical a spherical tree (`ScannConfig.spherical`) and, if given, reordering
(`ScannConfig.reorder_k` and `reorder_type`: each query token's best `reorder_k` by AH codes
rescored with the vectors ScaNN keeps, which the build's memory then includes). Then the test
queries' tokens search it (k' = 1000, one thread): median ms per query and the recall of the
exact top-k' over the first 10 queries' tokens, as built and with each --leaves_to_search. Rows go
to OUT_DIR/build_memory.json with the fitted exponents of search time and peak RSS against
tokens, and of the search time of each scale's fastest setting with recall ≥ 0.9. A scale whose
build record exists is searched again, not rebuilt.
"""
import argparse
import functools
import json
import os
import subprocess
import sys
import time

import numpy as np

from xtr import io
from xtr.evaluation import beir_eval
from xtr.index import files
from xtr.index import reader
from xtr.index import scann
from xtr.index import writer as writer_lib
from xtr.retrieval import searcher

DOCS_PER_CHUNK = 1000
K_PRIME = 1000
RECALL = 0.9  # The bar for the search exponent.


def _status_mb(field: str) -> float:
  """A memory field of /proc/self/status (VmRSS: resident now, VmHWM: peak) in MiB."""
  with open("/proc/self/status", encoding="ascii") as f:
    return next(int(line.split()[1]) / 1024 for line in f if line.startswith(field + ":"))


@functools.cache
def _rotation(dim: int, seed: int) -> np.ndarray:
  """[dim, dim] a random orthogonal matrix (seeded)."""
  q, r = np.linalg.qr(np.random.default_rng(seed).normal(size=(dim, dim)))
  return q * np.sign(np.diag(r))


def _documents(source: reader.TokenIndex, scale: int, noise: float, rotate: bool):
  """Yields (doc id, [len, D] float32 vectors, [len] saliences or None, original doc or -1): the
  source's documents, then copies until scale times its tokens, moved by noise, and with `rotate`
  turned by the random rotation of their copy of the corpus (the copies drawn while the tokens
  pass the 2nd, 3rd, ... multiple of the source's share one). Saliences where the source's model
  has a salience gate (ALIGNER's): a copy keeps its original's."""

  def saliences(docs) -> list:
    return source.doc_saliences(docs) if source.has_salience else [None] * len(docs)

  for start in range(0, source.num_docs, DOCS_PER_CHUNK):
    docs = range(start, min(start + DOCS_PER_CHUNK, source.num_docs))
    for d, vectors, salience in zip(docs, source.doc_vectors(docs), saliences(docs)):
      yield source.doc_ids[d], vectors, salience, -1
  rng, total = np.random.default_rng(scale), source.num_tokens
  while total < scale * source.num_tokens:
    original = int(rng.integers(source.num_docs))
    vectors = source.doc_vectors([original])[0]
    if rotate:
      vectors = vectors @ _rotation(vectors.shape[1], total // source.num_tokens)
    moved = vectors + rng.normal(0, noise / np.sqrt(vectors.shape[1]), vectors.shape)
    yield (f"copy-{total}", moved / np.linalg.norm(moved, axis=1, keepdims=True),
           saliences([original])[0], original)
    total += len(vectors)


def _writer(source: reader.TokenIndex, out_dir: str, scale: int) -> writer_lib.IndexWriter:
  """The writer of the index of `scale` (a new one, or the one `write_scale` left)."""
  manifest = source.manifest
  corpus = manifest["corpus"] | {"path": f"{scale}x {manifest['corpus']['path']}"}
  return writer_lib.IndexWriter(out_dir, source.dim, manifest["dtype"], manifest["model"],
                                manifest["fingerprint"], DOCS_PER_CHUNK, corpus,
                                vocabulary=source.vocabulary_file())


def write_scale(index_dir: str, out_dir: str, scale: int, noise: float, rotate: bool) -> list[int]:
  """Writes the chunks of the index of `scale` (those a killed run did not: the documents are
  drawn the same way each time); returns each document's original (-1: real)."""
  source = reader.open_index(index_dir)
  writer = _writer(source, out_dir, scale)
  written = writer.completed_chunks()
  chunk, docs, originals = 0, [], []

  def write() -> None:
    if chunk >= written:
      ids, vectors, saliences = zip(*docs)
      writer.write_chunk(chunk, ids, vectors, saliences if source.has_salience else None)

  for doc_id, doc_vectors, salience, original in _documents(source, scale, noise, rotate):
    docs.append((doc_id, doc_vectors, salience))
    originals.append(original)
    if len(docs) == DOCS_PER_CHUNK:
      write()
      chunk, docs = chunk + 1, []
  if docs:
    write()
  return originals


def build_scale(index_dir: str, out_dir: str, scale: int, config: scann.ScannConfig) -> dict:
  """Builds ScaNN over the written chunks of `scale`, in a process that did nothing else: its
  peak RSS is the process's (imports included) while it builds."""
  writer = _writer(reader.open_index(index_dir), out_dir, scale)
  before = _status_mb("VmRSS")
  start = time.perf_counter()
  built = writer.finalize(config)
  return {
      "scale": scale,
      "tokens": built["num_tokens"],
      "build_s": time.perf_counter() - start,
      "rss_before_build_mb": before,
      "build_peak_rss_mb": _status_mb("VmHWM"),
      "scann_bytes_per_token": files.bytes_by_kind(built)["scann"] / built["num_tokens"],
      "num_leaves": built["scann"]["num_leaves"]
  }


def _near_duplicate_rate(source: reader.TokenIndex, index: reader.TokenIndex, originals: list[int],
                         samples: int = 200) -> float | None:
  """How often a sampled copy token's nearest real token is the token it was copied from."""
  copies = np.flatnonzero(np.asarray(originals) >= 0)
  if not len(copies):
    return None
  rng = np.random.default_rng(0)
  picked = rng.choice(copies, min(samples, len(copies)), replace=False)
  real = np.concatenate(source.doc_vectors(range(source.num_docs)))
  starts = np.concatenate([[0], np.cumsum(source.doc_lengths)])
  hits = 0
  for doc, copy in zip(np.asarray(originals)[picked], index.doc_vectors(picked)):
    position = rng.integers(len(copy))
    nearest = np.argmax(real @ copy[position])
    hits += nearest == starts[doc] + position
  return hits / len(picked)


def search_scale(index: reader.TokenIndex, queries: list[np.ndarray],
                 leaves: list[int | None]) -> list[dict]:
  """For each number of leaves searched (None: as built): median ms per query of ScaNN token
  retrieval, and recall of the exact top-k' over the first 10 queries' tokens."""
  index.load_scann()
  sample = np.concatenate(queries[:10])
  _, exact_docs, exact_positions = index.search_tokens(sample, K_PRIME, "bruteforce")
  exact = [set(zip(d, p)) for d, p in zip(exact_docs, exact_positions)]
  results = []
  for leaves_to_search in leaves:
    search = functools.partial(index.search_tokens, k_prime=K_PRIME,
                               leaves_to_search=leaves_to_search)
    search(queries[0])
    times = []
    for q in queries:
      start = time.perf_counter()
      search(q)
      times.append(1000 * (time.perf_counter() - start))
    _, docs, positions = search(sample)
    found = [set(zip(d, p)) for d, p in zip(docs, positions)]
    results.append({
        "leaves_searched": leaves_to_search,
        "p50_ms": float(np.median(times)),
        "recall": float(np.mean([len(f & e) / K_PRIME for f, e in zip(found, exact)]))
    })
  return results


def _fit(x: list[float], y: list[float]) -> float:
  return float(np.polyfit(np.log(x), np.log(y), 1)[0])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  for name in ("index", "checkpoint", "data_dir", "out"):
    parser.add_argument(name)
  parser.add_argument("--scales", default="1,2,4")
  parser.add_argument("--noise", type=float, default=0.3)
  parser.add_argument("--num_leaves", type=int, default=1_000_000)
  parser.add_argument("--rotate", action="store_true",
                      help="turn each copy of the corpus by a random rotation of its own")
  parser.add_argument("--spherical", action="store_true", help="ScannConfig.spherical")
  parser.add_argument("--leaf_size", type=int, default=0, help="ScannConfig.leaf_size")
  parser.add_argument("--training_threads", type=int, default=1,
                      help="ScannConfig.training_threads")
  parser.add_argument("--reorder_k", type=int, default=0)
  parser.add_argument("--reorder_type", default="float32", help="float32, bfloat16 or int8")
  parser.add_argument("--leaves_to_search", default="",
                      help="Also search with these numbers of leaves (comma-separated).")
  parser.add_argument("--write", type=int, help="Internal: write this scale's chunks.")
  parser.add_argument("--build", type=int, help="Internal: build this scale's ScaNN.")
  args = parser.parse_args()
  config = scann.ScannConfig(num_leaves=args.num_leaves, spherical=args.spherical,
                             leaf_size=args.leaf_size, training_threads=args.training_threads,
                             reorder_k=args.reorder_k, reorder_type=args.reorder_type)
  internal_steps = {
      "write": lambda scale, out: write_scale(args.index, out, scale, args.noise, args.rotate),
      "build": lambda scale, out: build_scale(args.index, out, scale, config)
  }
  for step, run in internal_steps.items():
    if getattr(args, step):
      scale = getattr(args, step)
      print(json.dumps(run(scale, os.path.join(args.out, f"s{scale}"))))
      return
  leaves = [int(n) for n in args.leaves_to_search.split(",") if n]
  encoder, source = searcher.open_for_search(args.index, args.checkpoint)
  q, q_mask, _ = encoder.encode_queries(beir_eval.load_beir(args.data_dir, "test").queries)
  queries = [vectors[mask] for vectors, mask in zip(q, q_mask)]
  rows = []
  for scale in map(int, args.scales.split(",")):
    path = os.path.join(args.out, f"s{scale}")
    record = path + ".build.json"
    if not os.path.exists(record):
      row = {}
      for step in ("write", "build"):
        output = subprocess.run([sys.executable, __file__, *sys.argv[1:], f"--{step}={scale}"],
                                check=True, capture_output=True, text=True).stdout
        row[step] = json.loads(output.splitlines()[-1])
      io.write_results(record, row["build"] | {"copies_of": row["write"]})
    with open(record, encoding="utf-8") as f:
      row = json.load(f)
    index = reader.open_index(path)
    row["near_duplicate_rate"] = _near_duplicate_rate(source, index, row.pop("copies_of"))
    as_built, *more = search_scale(index, queries, [None, *leaves])
    rows.append(row | as_built | ({"by_leaves": more} if more else {}))
    print(json.dumps(rows[-1]), flush=True)
  tokens = [r["tokens"] for r in rows]
  fits = {} if len(rows) < 2 else {
      "search_exponent": _fit(tokens, [r["p50_ms"] for r in rows]),
      "build_rss_exponent": _fit(tokens, [r["build_peak_rss_mb"] for r in rows])
  }
  # At a fixed recall: each scale's fastest setting that reaches it.
  fastest = [
      min((r["p50_ms"] for r in [row, *row.get("by_leaves", [])] if r["recall"] >= RECALL),
          default=None) for row in rows
  ]
  if len(rows) > 1 and None not in fastest:
    fits[f"search_exponent_at_recall_{RECALL}"] = _fit(tokens, fastest)
  io.write_results(os.path.join(args.out, "build_memory.json"), {
      "rows": rows,
      "fits": fits,
      "args": vars(args)
  })
  print(json.dumps(fits))


if __name__ == "__main__":
  main()
