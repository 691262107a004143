"""How far nDCG@10 and search time move between ScaNN builds of the same vectors: this project's
f_XTR' over ScaNN with a gin file's settings, rebuilt with `ScannConfig.sample_seed` 0, 1, …,
beside PyLate's `retrieve.XTR` at k_token 1000, rebuilt as often (PyLate's ScaNN trains with
ScaNN's random initialisation, which is not seeded: each build differs). One query at a time on
one thread.

  .venv/bin/python benchmarks/build_noise.py VECTORS_DIR DATA_DIR OUT_DIR [--builds=5] \
      [--scann_gin=gin/scann/fastest.gin] [--record=PATH]

Build b is one benchmarks/engines.py run of both engines (interleaved, one round, an index cache
of its own: OUT_DIR/cache<b>), written to OUT_DIR/build<b>.json; a build already written is not
run again. Prints and records (--record: a run record) each engine's nDCG@10 and p50 ms per build,
their means and standard deviations, and those of the per-build difference in nDCG@10 (this
project's minus PyLate's).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

import numpy as np

from xtr import io
from xtr.evaluation import run_record

ENGINES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "engines.py")
PEER = "pylate_xtr_k1000"


def run_build(args, name: str, build: int) -> dict[str, dict]:
  """{engine: engines.py row} of build `build` (run now unless written)."""
  prefix = os.path.join(args.out, f"build{build}")
  if not os.path.exists(prefix + ".json"):
    gin_file = prefix + ".gin"
    with open(args.scann_gin, encoding="utf-8") as f:
      settings = f.read()
    with io.atomic_open(gin_file) as f:
      f.write(f"{settings}\nScannConfig.sample_seed = {build}\n")
    subprocess.run([
        sys.executable, ENGINES, args.vectors, args.data_dir, prefix, "--threads=1", "--rounds=1",
        f"--cache={args.out}/cache{build}", f"--scann={name}={gin_file}", f"--engines={name},{PEER}"
    ], check=True)
  with open(prefix + ".json", encoding="utf-8") as f:
    return {row["engine"]: row for row in json.load(f)["rows"]}


def summary(values: list[float]) -> dict[str, float]:
  return {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1))}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  for name in ("vectors", "data_dir", "out"):
    parser.add_argument(name)
  parser.add_argument("--builds", type=int, default=5)
  parser.add_argument("--scann_gin", default="gin/scann/fastest.gin")
  parser.add_argument("--record", help="write the results to this run record (JSON)")
  args = parser.parse_args()
  run_record.mark_start()
  os.makedirs(args.out, exist_ok=True)
  name = pathlib.Path(args.scann_gin).stem
  builds = [run_build(args, name, build) for build in range(args.builds)]
  results = {
      "builds": [{
          engine: {
              m: rows[engine][m] for m in ("ndcg@10", "p50_ms")
          } for engine in (name, PEER)
      } for rows in builds]
  }
  for engine in (name, PEER):
    results[engine] = {
        m: summary([b[engine][m] for b in results["builds"]]) for m in ("ndcg@10", "p50_ms")
    }
  results["ndcg@10_difference"] = summary(
      [b[name]["ndcg@10"] - b[PEER]["ndcg@10"] for b in results["builds"]])
  print(json.dumps({k: v for k, v in results.items() if k != "builds"}, indent=2))
  if args.record:
    io.write_results(args.record, run_record.record(results, [args.data_dir], "test"))


if __name__ == "__main__":
  main()
