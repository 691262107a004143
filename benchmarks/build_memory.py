"""The ScaNN build at growing corpus sizes: peak memory, build time, search time and recall.

  .venv/bin/python benchmarks/build_memory.py INDEX_DIR CHECKPOINT DATA_DIR OUT_DIR \
      [--scales=1,2,4] [--noise=0.3] [--rotate] [--num_leaves=1000000] [--leaves_to_search=200,400]
      [--reorder_k=4000 --reorder_type=int8] [--spherical] [--leaf_size=1114]
      [--training_threads=0] [--shards=1,1,4]

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
started. With --shards (one number per scale), a scale is written as that many shards of
contiguous documents, as `xtr-export --num_shards` cuts a corpus, and each shard's ScaNN is built
by a fresh process of its own: the scale's peak RSS is its largest shard's, its build time the
sum. A scale is searched shard by shard, as one machine searches the shards one after the other
while holding one shard's ScaNN at a time (all of 64×'s would not fit 24 GiB): each shard's is
loaded, searched by every query at every setting and released; a query's time is the sum of its
shards' plus the merge of their top-k' lists (`reader.merge_shards`), and, as
`p50_ms_shards_at_once`, the slowest shard's plus the merge (shards on machines of their own).
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
import itertools
import json
import os
import subprocess
import sys
import time

import numpy as np

from xtr import io
from xtr.evaluation import beir_eval
from xtr.index import build
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


def _copies(source: reader.TokenIndex, scale: int, noise: float):
  """Yields (original doc, tokens before it, its noise [len, D]) for each copy in the index of
  `scale`: drawn at random (seeded) until scale times the source's tokens. Reads no vectors, so
  planning the index (`_originals`) draws what writing it draws."""
  rng, total = np.random.default_rng(scale), source.num_tokens
  while total < scale * source.num_tokens:
    original = int(rng.integers(source.num_docs))
    length = int(source.doc_lengths[original])
    yield original, total, rng.normal(0, noise / np.sqrt(source.dim), (length, source.dim))
    total += length


def _originals(source: reader.TokenIndex, scale: int, noise: float) -> list[int]:
  """[N] each document's original in the index of `scale` (-1: a real one)."""
  return [-1] * source.num_docs + [original for original, _, _ in _copies(source, scale, noise)]


def _documents(source: reader.TokenIndex, scale: int, noise: float, rotate: bool):
  """Yields (doc id, [len, D] float32 vectors, [len] saliences or None): the source's documents,
  then its copies (`_copies`) moved by their noise and renormalized, with `rotate` first turned
  by the random rotation of their copy of the corpus (the copies drawn while the tokens pass the
  2nd, 3rd, ... multiple of the source's share one). Saliences where the source's model has a
  salience gate (ALIGNER's): a copy keeps its original's."""

  def saliences(docs) -> list:
    return source.doc_saliences(docs) if source.has_salience else [None] * len(docs)

  for start in range(0, source.num_docs, DOCS_PER_CHUNK):
    docs = range(start, min(start + DOCS_PER_CHUNK, source.num_docs))
    yield from zip((source.doc_ids[d] for d in docs), source.doc_vectors(docs), saliences(docs))
  for original, total, noise_vectors in _copies(source, scale, noise):
    vectors = source.doc_vectors([original])[0]
    if rotate:
      vectors = vectors @ _rotation(source.dim, total // source.num_tokens)
    moved = vectors + noise_vectors
    yield (f"copy-{total}", moved / np.linalg.norm(moved, axis=1, keepdims=True),
           saliences([original])[0])


def _shards(out_dir: str, num_docs: int, num_shards: int) -> list[tuple[str, range]]:
  """(directory, documents) of each shard of an index of `num_docs` documents under out_dir, cut
  as `xtr-export --num_shards` cuts a corpus (one shard: out_dir itself)."""
  if num_shards == 1:
    return [(out_dir, range(num_docs))]
  ranges = [build.shard_range(num_docs, shard, num_shards) for shard in range(num_shards)]
  return [(files.shard_path(out_dir, shard, num_shards), docs) for shard, docs in enumerate(ranges)]


def _writer(source: reader.TokenIndex, out_dir: str, scale: int, docs: range,
            num_docs: int) -> writer_lib.IndexWriter:
  """The writer of `docs` of the index of `scale` (a new one, or the one `write_scale` left)."""
  manifest = source.manifest
  corpus = manifest["corpus"] | {
      "path": f"{scale}x {manifest['corpus']['path']}",
      "docs": [docs.start, docs.stop],
      "total_docs": num_docs
  }
  return writer_lib.IndexWriter(out_dir, source.dim, manifest["dtype"], manifest["model"],
                                manifest["fingerprint"], DOCS_PER_CHUNK, corpus,
                                vocabulary=source.vocabulary_file())


def write_scale(index_dir: str, out_dir: str, scale: int, num_shards: int, noise: float,
                rotate: bool) -> list[int]:
  """Writes the chunks of the index of `scale` as `num_shards` shards (those a killed run did
  not: the documents are drawn the same way each time); returns each document's original (-1:
  real)."""
  source = reader.open_index(index_dir)
  originals = _originals(source, scale, noise)
  documents = _documents(source, scale, noise, rotate)
  for path, docs in _shards(out_dir, len(originals), num_shards):
    writer = _writer(source, path, scale, docs, len(originals))
    written = writer.completed_chunks()
    for chunk, start in enumerate(range(docs.start, docs.stop, DOCS_PER_CHUNK)):
      batch = itertools.islice(documents, min(DOCS_PER_CHUNK, docs.stop - start))
      ids, vectors, saliences = zip(*batch)
      if chunk >= written:
        writer.write_chunk(chunk, ids, vectors, saliences if source.has_salience else None)
  return originals


def build_shard(index_dir: str, out_dir: str, scale: int, num_docs: int, shard: int,
                num_shards: int, config: scann.ScannConfig) -> dict:
  """Builds ScaNN over the written chunks of one shard of the index of `scale` (`num_docs`
  documents), in a process that did nothing else: its peak RSS is the process's (imports
  included) while it builds."""
  source = reader.open_index(index_dir)
  path, docs = _shards(out_dir, num_docs, num_shards)[shard]
  writer = _writer(source, path, scale, docs, num_docs)
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


def _sharded(builds: list[dict]) -> dict:
  """One record of a scale's shard builds: tokens, time and leaves summed, peaks the largest
  shard's (each shard is built alone); a single shard's record as it is."""
  if len(builds) == 1:
    return builds[0]
  tokens = sum(b["tokens"] for b in builds)
  scann_bytes = sum(b["scann_bytes_per_token"] * b["tokens"] for b in builds)
  return {
      "scale": builds[0]["scale"],
      "shards": len(builds),
      "tokens": tokens,
      "build_s": sum(b["build_s"] for b in builds),
      "rss_before_build_mb": max(b["rss_before_build_mb"] for b in builds),
      "build_peak_rss_mb": max(b["build_peak_rss_mb"] for b in builds),
      "scann_bytes_per_token": scann_bytes / tokens,
      "num_leaves": sum(b["num_leaves"] for b in builds),
      "by_shard": builds
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


def _search_shard(path: str, queries: list[np.ndarray], sample: np.ndarray,
                  leaves: list[int | None]) -> list[tuple]:
  """Loads one shard's ScaNN, and per number of leaves searched (None: as built): (ms [Q] of each
  query, each query's lists, the sample's lists), each list local (scores, doc, position) [*, k'].
  The shard's ScaNN is released when this returns."""
  shard = reader.open_index(path)
  shard.load_scann()
  runs = []
  for leaves_to_search in leaves:
    search = functools.partial(shard.search_tokens, k_prime=K_PRIME,
                               leaves_to_search=leaves_to_search)
    search(queries[0])
    times, lists = [], []
    for q in queries:
      start = time.perf_counter()
      lists.append(search(q))
      times.append(1000 * (time.perf_counter() - start))
    runs.append((np.array(times), lists, search(sample)))
  return runs


def search_scale(index: reader.TokenIndex, shards: list[tuple[str, range]],
                 queries: list[np.ndarray], leaves: list[int | None]) -> list[dict]:
  """For each number of leaves searched (None: as built): median ms per query of ScaNN token
  retrieval over `shards` (directory, documents) searched one after the other with their lists
  merged (`reader.merge_shards`), and, if more than one, with the shards searched at once (the
  slowest one's time, then the merge); and recall of `index`'s exact top-k' over the first 10
  queries' tokens."""
  sample = np.concatenate(queries[:10])
  _, exact_docs, exact_positions = index.search_tokens(sample, K_PRIME, "bruteforce")
  exact = [set(zip(d, p)) for d, p in zip(exact_docs, exact_positions)]
  starts = [docs.start for _, docs in shards]
  by_shard = [_search_shard(path, queries, sample, leaves) for path, _ in shards]
  results = []
  for setting, leaves_to_search in enumerate(leaves):
    runs = [shard[setting] for shard in by_shard]
    merge_ms = []
    for q in range(len(queries)):
      start = time.perf_counter()
      reader.merge_shards([lists[q] for _, lists, _ in runs], starts, K_PRIME)
      merge_ms.append(1000 * (time.perf_counter() - start))
    shard_ms = np.array([times for times, _, _ in runs])  # [shards, Q]
    _, docs, positions = reader.merge_shards([found for _, _, found in runs], starts, K_PRIME)
    found = [set(zip(d, p)) for d, p in zip(docs, positions)]
    results.append({
        "leaves_searched": leaves_to_search,
        "p50_ms": float(np.median(shard_ms.sum(0) + merge_ms)),
        "recall": float(np.mean([len(f & e) / K_PRIME for f, e in zip(found, exact)]))
    } | ({
        "p50_ms_shards_at_once": float(np.median(shard_ms.max(0) + merge_ms))
    } if len(shards) > 1 else {}))
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
  parser.add_argument("--shards", default="",
                      help="Shards of each scale, comma-separated in --scales' order (default: 1).")
  parser.add_argument("--write", type=int, help="Internal: write this scale's chunks.")
  parser.add_argument("--build", type=int, help="Internal: build this scale's ScaNN.")
  parser.add_argument("--shard", type=int, default=0, help="Internal: the shard --build builds.")
  parser.add_argument("--num_docs", type=int, help="Internal: the documents of the --build scale.")
  args = parser.parse_args()
  config = scann.ScannConfig(num_leaves=args.num_leaves, spherical=args.spherical,
                             leaf_size=args.leaf_size, training_threads=args.training_threads,
                             reorder_k=args.reorder_k, reorder_type=args.reorder_type)
  scales = [int(s) for s in args.scales.split(",")]
  shards = [int(s) for s in args.shards.split(",") if s] or [1] * len(scales)
  if len(shards) != len(scales):
    parser.error(f"--shards={args.shards}: one number per scale of --scales={args.scales}")
  num_shards = dict(zip(scales, shards))
  if args.write or args.build:  # An internal step: its result goes to the parent's stdout.
    scale = args.write or args.build
    out = os.path.join(args.out, f"s{scale}")
    if args.write:
      result = write_scale(args.index, out, scale, num_shards[scale], args.noise, args.rotate)
    else:
      result = build_shard(args.index, out, scale, args.num_docs, args.shard, num_shards[scale],
                           config)
    print(json.dumps(result))
    return
  leaves = [int(n) for n in args.leaves_to_search.split(",") if n]
  encoder, source = searcher.open_for_search(args.index, args.checkpoint)
  q, q_mask, _ = encoder.encode_queries(beir_eval.load_beir(args.data_dir, "test").queries)
  queries = [vectors[mask] for vectors, mask in zip(q, q_mask)]

  def run(*step: str) -> dict | list:
    """An internal step in a fresh process: what it prints."""
    output = subprocess.run([sys.executable, __file__, *sys.argv[1:], *step], check=True,
                            capture_output=True, text=True).stdout
    return json.loads(output.splitlines()[-1])

  rows = []
  for scale in scales:
    path = os.path.join(args.out, f"s{scale}")
    record = path + ".build.json"
    if not os.path.exists(record):
      originals = run(f"--write={scale}")
      builds = [
          run(f"--build={scale}", f"--num_docs={len(originals)}", f"--shard={k}")
          for k in range(num_shards[scale])
      ]
      io.write_results(record, _sharded(builds) | {"copies_of": originals})
    with open(record, encoding="utf-8") as f:
      row = json.load(f)
    index, originals = reader.open_index(path), row.pop("copies_of")
    row["near_duplicate_rate"] = _near_duplicate_rate(source, index, originals)
    shards = _shards(path, len(originals), num_shards[scale])
    as_built, *more = search_scale(index, shards, queries, [None, *leaves])
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
