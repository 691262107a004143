"""An index updated in place (`xtr-export --delete --add`) against the export it updates.

  .venv/bin/python benchmarks/update.py INDEX_DIR CHECKPOINT GIN_FILE DATA_DIR OUT_DIR \
      [--fraction=0.1]

INDEX_DIR is a complete index of DATA_DIR's corpus exported with CHECKPOINT and GIN_FILE. It is
copied to OUT_DIR/updated; a seeded `fraction` of its documents is deleted there and encoded
again from the corpus under the same ids (one `xtr-export --delete=IDS --add=CORPUS` run, timed
with its peak RSS by /usr/bin/time). The corpus is then the same: what changes is where their
tokens sit in ScaNN, upserted into partitions and codebooks trained without them. Both indexes
are evaluated by `xtr-eval-beir` (test split, k' = 1000, one query at a time), and the rows go
to OUT_DIR/update.json.
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

BIN = os.path.dirname(sys.executable)


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
  updated = os.path.join(args.out_dir, "updated")
  if os.path.exists(updated):
    shutil.rmtree(updated)
  shutil.copytree(args.index, updated)
  num_docs = _update_files(args.data_dir, args.out_dir, args.fraction)
  row = {"documents_replaced": num_docs, "fraction": args.fraction}
  row["update"] = _timed([
      os.path.join(BIN,
                   "xtr-export"), f"--gin_file={args.gin_file}", f"--checkpoint={args.checkpoint}",
      f"--out={updated}", f"--delete={os.path.join(args.out_dir, 'delete.txt')}",
      f"--add={os.path.join(args.out_dir, 'add.jsonl')}"
  ])
  for name, index_dir in (("export", args.index), ("updated", updated)):
    row[name] = _evaluate(index_dir, args.checkpoint, args.gin_file, args.data_dir,
                          os.path.join(args.out_dir, f"eval_{name}.json"))
  print(json.dumps(row, indent=1))
  with open(os.path.join(args.out_dir, "update.json"), "w", encoding="utf-8") as f:
    json.dump({"command": sys.argv, **row}, f, indent=1)


if __name__ == "__main__":
  main()
