"""Indexes updated in place (`xtr.index.update`) against the export they update.

  .venv/bin/python benchmarks/update.py INDEX_DIR CHECKPOINT GIN_FILE DATA_DIR OUT_DIR \
      [--fraction=0.1]

INDEX_DIR is a complete index of DATA_DIR's corpus exported with CHECKPOINT and GIN_FILE, with
stored vectors. Two updates, each evaluated by `xtr-eval-beir` (test split, k' = 1000, one query
at a time) beside INDEX_DIR; the rows go to OUT_DIR/update.json:

- "replace": INDEX_DIR copied to OUT_DIR/replaced, a seeded `fraction` of its documents deleted
  there and encoded again from the corpus under the same ids: one `xtr-export --delete=IDS
  --add=CORPUS` run, timed with its peak RSS by /usr/bin/time. The corpus is then the same.
- "grow": OUT_DIR/grown, an index of the first half of INDEX_DIR's documents written from its
  stored vectors (ScaNN trained on that half alone), to which the second half is then added
  (their stored vectors, not encoded again: the update's ScaNN alone is measured). ScaNN's
  partitions and codebooks never saw the added half's tokens.
"""
import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

from xtr.index import reader
from xtr.index import update
from xtr.index import writer as writer_lib

BIN = os.path.dirname(sys.executable)
DOCS_PER_CHUNK = 1000


def _update_files(data_dir: str, out_dir: str, fraction: float) -> int:
  """Writes OUT_DIR/delete.txt and OUT_DIR/add.jsonl (the same documents); returns their count."""
  path = os.path.join(data_dir, "corpus.jsonl")
  with (gzip.open(path + ".gz", "rt", encoding="utf-8") if os.path.exists(path + ".gz") else open(
      path, encoding="utf-8")) as f:
    lines = f.readlines()
  rng = np.random.default_rng(0)
  chosen = sorted(rng.choice(len(lines), round(fraction * len(lines)), replace=False))
  with open(os.path.join(out_dir, "delete.txt"), "w", encoding="utf-8") as f:
    f.writelines(json.loads(lines[i])["_id"] + "\n" for i in chosen)
  with open(os.path.join(out_dir, "add.jsonl"), "w", encoding="utf-8") as f:
    f.writelines(lines[i] for i in chosen)
  return len(chosen)


class _StoredVectors:
  """An encoder of the documents of an index whose texts are their doc indices: their stored
  vectors (the index's fingerprint and dim)."""

  def __init__(self, index: reader.TokenIndex):
    self.index, self.fingerprint, self.dim = index, index.manifest["fingerprint"], index.dim

  def encode_documents(self, texts):
    return self.index.doc_vectors([int(t) for t in texts]), None


def _grow(source_dir: str, out: str) -> dict[str, float]:
  """Writes `out` from the first half of the source's documents, adds the second half; returns
  the wall seconds of the export (chunks and ScaNN) and of the update."""
  source = reader.open_index(source_dir)
  half, manifest = source.num_docs // 2, source.manifest
  start = time.time()
  writer = writer_lib.IndexWriter(out, source.dim, manifest["dtype"], manifest["model"],
                                  manifest["fingerprint"], DOCS_PER_CHUNK, {
                                      **manifest["corpus"], "docs": [0, half],
                                      "total_docs": half
                                  }, vocabulary=source.vocabulary_file())
  for chunk, first in enumerate(range(0, half, DOCS_PER_CHUNK)):
    docs = range(first, min(first + DOCS_PER_CHUNK, half))
    writer.write_chunk(chunk, [source.doc_ids[d] for d in docs], source.doc_vectors(docs))
  writer.finalize()
  exported = time.time() - start
  added = range(half, source.num_docs)
  update.update(out, lambda: (_StoredVectors(source), manifest["model"]),
                ([source.doc_ids[d] for d in added], [str(d) for d in added]), [],
                {"benchmark": "grow"})
  return {"export_half_s": exported, "add_half_s": time.time() - start - exported}


def _timed(command: list[str]) -> dict[str, float]:
  """Runs `command` under /usr/bin/time -v: its wall seconds and peak RSS (MiB)."""
  start = time.time()
  process = subprocess.run(["/usr/bin/time", "-v", *command], capture_output=True, text=True,
                           check=True)
  peak = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", process.stderr)[1])
  return {"wall_s": time.time() - start, "peak_rss_mib": peak / 1024}


def _evaluate(index_dir: str, checkpoint: str, gin_file: str, data_dir: str, out: str) -> dict:
  subprocess.run([
      os.path.join(BIN, "xtr-eval-beir"), f"--gin_file={gin_file}", f"--checkpoint={checkpoint}",
      f"--index={index_dir}", f"--data_dir={data_dir}", "--split=test", "--k_prime=1000",
      f"--out={out}"
  ], check=True, capture_output=True)
  with open(out, encoding="utf-8") as f:
    report = json.load(f)
  return {
      key: report[key] for key in ("ndcg@10", "recall@100", "mrr@10")
  } | {
      "ms_per_query_p50": report["latency_ms_per_query"]["p50"]
  }


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  for name in ("index", "checkpoint", "gin_file", "data_dir", "out_dir"):
    parser.add_argument(name)
  parser.add_argument("--fraction", type=float, default=0.1)
  args = parser.parse_args()
  os.makedirs(args.out_dir, exist_ok=True)
  replaced, grown = (os.path.join(args.out_dir, name) for name in ("replaced", "grown"))
  for path in (replaced, grown):
    if os.path.exists(path):
      shutil.rmtree(path)
  shutil.copytree(args.index, replaced)
  num_docs = _update_files(args.data_dir, args.out_dir, args.fraction)
  row = {"replace": {"documents": num_docs, "fraction": args.fraction}}
  row["replace"]["update"] = _timed([
      os.path.join(BIN,
                   "xtr-export"), f"--gin_file={args.gin_file}", f"--checkpoint={args.checkpoint}",
      f"--out={replaced}", f"--delete={os.path.join(args.out_dir, 'delete.txt')}",
      f"--add={os.path.join(args.out_dir, 'add.jsonl')}"
  ])
  row["grow"] = _grow(args.index, grown)
  for name, index_dir in (("export", args.index), ("replaced", replaced), ("grown", grown)):
    row[name] = _evaluate(index_dir, args.checkpoint, args.gin_file, args.data_dir,
                          os.path.join(args.out_dir, f"eval_{name}.json"))
  print(json.dumps(row, indent=1))
  with open(os.path.join(args.out_dir, "update.json"), "w", encoding="utf-8") as f:
    json.dump({"command": sys.argv, **row}, f, indent=1)


if __name__ == "__main__":
  main()
