"""How search cost grows with the corpus: the same queries over 1x, 2x, 4x, ... a corpus's tokens.

  .venv/bin/python benchmarks/scaling.py VECTORS_DIR DATA_DIR OUT_PREFIX \
      [--scales=1,2,4,8,16] [--real_index=INDEX_DIR ...] [--noise=0.3] \
      [--engines=fast,pylate_xtr_k1000] [--scann=fast=gin/scann/fast.gin]

VECTORS_DIR is benchmarks/dump_vectors.py's dump (e.g. SciFact's, with its test queries). For
scale s, the corpus is the dump's documents, then the documents of each --real_index (other
real corpora encoded by the same model, e.g. NFCorpus exported with the demo's checkpoint), then
synthetic documents until it holds s times the dump's tokens: each a copy of a real document
(drawn at random, seeded) whose token vectors are moved by Gaussian noise of norm ~`noise` and
renormalized. The added documents are judged non-relevant (they are distractors), so nDCG@10
is measured against the dump's qrels at every scale. Each scale is a dump of its own
(OUT_PREFIX.s{s}/, the queries linked), searched by benchmarks/engines.py (one thread, the
engines' own builds) into OUT_PREFIX.s{s}.json; then OUT_PREFIX.json/.md/.png give median
latency and peak RSS against tokens on log-log axes, with the exponent b of the least-squares
fit latency ~ a * tokens^b per engine. Where a peer's ScaNN build of a scale does not fit in 80 %
of this machine's memory (it holds ~3 float32 copies of every token), the peer is skipped with
the reason; this project's build streams the tokens from disk (`xtr.index.scann.build`,
benchmarks/build_memory.py) and builds one index at every scale.
"""
import argparse
import json
import os
import subprocess
import sys

import matplotlib
import numpy as np

from xtr import io
from xtr.index import reader

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # pylint: disable=wrong-import-position
from matplotlib import ticker  # pylint: disable=wrong-import-position

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUERY_FILES = ("query_vectors.npy", "query_mask.npy", "query_ids.json")
# A peer's ScaNN build holds ~3 float32 copies of the corpus at its peak: the input and two of
# its own (2M random 128-d tokens, 1 GB: peak RSS 3.8 GB over a 0.7 GB process).
PEER_BUILD_BYTES_PER_TOKEN = 3 * 128 * 4


def _real_documents(vectors_dir: str, real_indexes: list[str]):
  """Yields (doc id, [len, D] float16 token vectors) of the dump, then of each real index."""
  doc_vectors = np.load(os.path.join(vectors_dir, "doc_vectors.npy"), mmap_mode="r")
  lengths = np.load(os.path.join(vectors_dir, "doc_lengths.npy"))
  with open(os.path.join(vectors_dir, "doc_ids.json"), encoding="utf-8") as f:
    doc_ids = json.load(f)
  offsets = np.concatenate([[0], np.cumsum(lengths)])
  for i, doc_id in enumerate(doc_ids):
    yield doc_id, doc_vectors[offsets[i]:offsets[i + 1]]
  for path in real_indexes:
    index = reader.open_index(path)
    for start in range(0, index.num_docs, 1000):
      docs = range(start, min(start + 1000, index.num_docs))
      for d, vectors in zip(docs, index.doc_vectors(docs)):
        yield f"{os.path.basename(os.path.normpath(path))}/{index.doc_ids[d]}", vectors


def write_scale(vectors_dir: str, real_indexes: list[str], scale: int, noise: float,
                out_dir: str) -> int:
  """Writes the dump of `scale` (module docstring) into out_dir; returns its tokens."""
  base_tokens = int(np.load(os.path.join(vectors_dir, "doc_lengths.npy")).sum())
  target = scale * base_tokens
  docs, ids, total = [], [], 0
  for doc_id, vectors in _real_documents(vectors_dir, real_indexes if scale > 1 else []):
    if total >= target:
      break
    docs.append(np.asarray(vectors, np.float16))
    ids.append(doc_id)
    total += len(vectors)
  num_real, rng = len(docs), np.random.default_rng(scale)
  while total < target:
    source = docs[rng.integers(num_real)].astype(np.float32)
    moved = source + rng.normal(0, noise / np.sqrt(source.shape[1]), source.shape)
    docs.append((moved / np.linalg.norm(moved, axis=1, keepdims=True)).astype(np.float16))
    ids.append(f"synthetic-{len(ids)}")
    total += len(source)
  os.makedirs(out_dir, exist_ok=True)
  np.save(os.path.join(out_dir, "doc_vectors.npy"), np.concatenate(docs))
  np.save(os.path.join(out_dir, "doc_lengths.npy"), np.array([len(d) for d in docs], np.int64))
  with open(os.path.join(out_dir, "doc_ids.json"), "w", encoding="utf-8") as f:
    json.dump(ids, f)
  with open(os.path.join(vectors_dir, "source.json"), encoding="utf-8") as f:
    source_record = json.load(f)
  with open(os.path.join(out_dir, "source.json"), "w", encoding="utf-8") as f:
    json.dump(
        source_record | {
            "scale": scale,
            "real_docs": num_real,
            "noise": noise,
            "real_indexes": real_indexes
        }, f)
  for name in QUERY_FILES:
    target_path = os.path.join(out_dir, name)
    if not os.path.exists(target_path):
      os.symlink(os.path.abspath(os.path.join(vectors_dir, name)), target_path)
  return total


def _fit(tokens: list[int], values: list[float]) -> float:
  """The exponent b of the least-squares fit values ~ a * tokens^b."""
  return float(np.polyfit(np.log(tokens), np.log(values), 1)[0])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("vectors", help="benchmarks/dump_vectors.py's OUT_DIR")
  parser.add_argument("data_dir", help="the BEIR dataset of the dump's queries (test qrels)")
  parser.add_argument("out", help="OUT_PREFIX")
  parser.add_argument("--scales", default="1,2,4,8,16")
  parser.add_argument("--real_index", action="append", default=[])
  parser.add_argument("--noise", type=float, default=0.3)
  parser.add_argument("--engines", default="fast,pylate_xtr_k1000")
  parser.add_argument("--scann", action="append", default=[],
                      help="NAME=GIN_FILE, as engines.py's (default: fast=gin/scann/fast.gin)")
  parser.add_argument("--rounds", type=int, default=1)
  args = parser.parse_args()
  args.scann = args.scann or ["fast=gin/scann/fast.gin"]
  available = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  base_tokens = int(np.load(os.path.join(args.vectors, "doc_lengths.npy")).sum())
  ours = [spec.partition("=")[0] for spec in args.scann]
  rows, skipped = [], []
  for scale in map(int, args.scales.split(",")):
    build_bytes = scale * base_tokens * PEER_BUILD_BYTES_PER_TOKEN
    engine_names = args.engines.split(",")
    if build_bytes > 0.8 * available:
      engine_names = [e for e in engine_names if e.removesuffix("_batched") in ours]
      skipped += [
          f"{e} at {scale}x: one index of {scale * base_tokens:,} tokens needs ~"
          f"{build_bytes / 2**30:.0f} GiB to build (ScaNN holds ~3 float32 copies), over "
          f"80 % of this machine's {available / 2**30:.0f} GiB"
          for e in args.engines.split(",")
          if e not in engine_names
      ]
      print(f"scale {scale}: {'; '.join(skipped)}", file=sys.stderr, flush=True)
    out_dir = f"{args.out}.s{scale}"
    if not os.path.exists(os.path.join(out_dir, "source.json")):
      write_scale(args.vectors, args.real_index, scale, args.noise, out_dir)
    report = f"{args.out}.s{scale}"
    if not os.path.exists(report + ".json"):
      subprocess.run([
          sys.executable,
          os.path.join(ROOT, "benchmarks", "engines.py"), out_dir, args.data_dir, report,
          "--threads=1", f"--rounds={args.rounds}", f"--engines={','.join(engine_names)}",
          *[f"--scann={s}" for s in args.scann]
      ], check=True)
    with open(report + ".json", encoding="utf-8") as f:
      engine_rows = json.load(f)["rows"]
    tokens = int(np.load(os.path.join(out_dir, "doc_lengths.npy")).sum())
    rows += [row | {"scale": scale, "tokens": tokens} for row in engine_rows]
  fits = {}
  for engine in dict.fromkeys(r["engine"] for r in rows):
    ran = [r for r in rows if r["engine"] == engine and "error" not in r]
    if len(ran) >= 2:
      fits[engine] = {
          "latency_exponent": _fit([r["tokens"] for r in ran], [r["p50_ms"] for r in ran]),
          "rss_exponent": _fit([r["tokens"] for r in ran], [r["peak_rss_mb"] for r in ran])
      }
  io.write_results(
      args.out + ".json", {
          "rows": rows,
          "fits": fits,
          "skipped": skipped,
          "noise": args.noise,
          "real_indexes": args.real_index
      })
  lines = [
      "| engine | scale | tokens | nDCG@10 | p50 ms | peak RSS MB | build s |",
      "|---|---|---|---|---|---|---|"
  ]
  lines += [
      f"| {r['engine']} | {r['scale']}x | {r['tokens']:,} | "
      f"{r['ndcg@10']:.4f} | {r['p50_ms']:.1f} | {r['peak_rss_mb']:.0f} | "
      f"{r['build_s']:.0f} |" for r in rows if "error" not in r
  ]
  lines += [
      f"\n{engine}: latency ~ tokens^{fit['latency_exponent']:.2f}, peak RSS ~ "
      f"tokens^{fit['rss_exponent']:.2f}" for engine, fit in fits.items()
  ]
  lines += [f"\nSkipped: {reason}." for reason in skipped]
  with io.atomic_open(args.out + ".md") as f:
    f.write("\n".join(lines) + "\n")
  print("\n".join(lines))
  figure, axes = plt.subplots(1, 2, figsize=(10, 4))
  for engine in dict.fromkeys(r["engine"] for r in rows):
    ran = [r for r in rows if r["engine"] == engine and "error" not in r]
    for axis, key in zip(axes, ("p50_ms", "peak_rss_mb")):
      axis.plot([r["tokens"] for r in ran], [r[key] for r in ran], "o-", label=engine)
  for axis, label in zip(axes, ("median ms per query (1 thread)", "peak RSS MB")):
    axis.set_xscale("log")
    axis.set_yscale("log")
    for ticks in (axis.xaxis, axis.yaxis):
      ticks.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
      ticks.set_major_formatter(ticker.FormatStrFormatter("%g"))
      ticks.set_minor_formatter(ticker.NullFormatter())
    axis.set_xlabel("tokens in the corpus")
    axis.set_ylabel(label)
    axis.legend()
  figure.tight_layout()
  figure.savefig(args.out + ".png", dpi=120)


if __name__ == "__main__":
  main()
