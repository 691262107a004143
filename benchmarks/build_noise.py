"""How far nDCG@10 and search time move between ScaNN builds of the same vectors: this project's
f_XTR' over ScaNN with a gin file's settings, rebuilt with `ScannConfig.sample_seed` 0, 1, …,
beside PyLate's `retrieve.XTR` at k_token 1000, rebuilt as often (PyLate's ScaNN trains with
ScaNN's random initialisation, which is not seeded: each build differs). One query at a time on
one thread.

  .venv/bin/python benchmarks/build_noise.py VECTORS_DIR DATA_DIR OUT_DIR [--builds=5] \
      [--scann_gin=gin/scann/fastest.gin] [--exact=METRICS_JSON] [--record=PATH]

Build b is one benchmarks/engines.py run of both engines (interleaved, one round, an index cache
of its own: OUT_DIR/cache<b>, loaded if it is there), written to OUT_DIR/build<b>.json; a build
already written is not run again. Prints and records (--record: a run record) each engine's
nDCG@10 and p50 ms per build, their means and standard deviations, and those of the per-build
difference in nDCG@10 (this project's minus PyLate's). "paired" adds the difference query by
query: each query's nDCG@10 averaged over the builds, one engine's minus the other's, and the
95 % bootstrap interval over queries of the mean (how far the difference could move on other
queries like these), with the number of queries whose nDCG@10 differs; with --exact (the
`xtr-eval-beir --searcher=bruteforce --out` of the same model, k' and split), each engine
against exact search too.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

import dump_vectors  # benchmarks/, beside this script.
import numpy as np

from xtr import io
from xtr.evaluation import run_record
from xtr.scoring import adaptation

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


def per_query_mean(builds: list[dict[str, dict]], engine: str) -> dict[str, float]:
  """{query id: `engine`'s nDCG@10 averaged over the builds' rows}."""
  per_build = [rows[engine]["ndcg@10_per_query"] for rows in builds]
  return {query_id: float(np.mean([b[query_id] for b in per_build])) for query_id in per_build[0]}


def paired(a: dict[str, float], b: dict[str, float]) -> dict:
  """a, b: {query id: nDCG@10} over the same queries -> the mean of a - b, its 95 % bootstrap
  interval over queries, and the queries where a and b differ."""
  if a.keys() != b.keys():
    raise ValueError(f"paired runs answer different queries: {len(a)} and {len(b)}")
  differences = [a[query_id] - b[query_id] for query_id in a]
  return {
      "mean": float(np.mean(differences)),
      "ci95": adaptation.bootstrap_interval(differences),
      "queries_differing": sum(d != 0 for d in differences),
      "queries": len(differences)
  }


def read_exact(parser: argparse.ArgumentParser, path: str, split: str) -> dict[str, float]:
  """{query id: nDCG@10} of xtr-eval-beir's metrics at `path` on `split` (the dump's, which
  engines.py evaluates); anything else is a usage error (exit 2) before any build runs."""
  try:
    with open(path, encoding="utf-8") as f:
      metrics = json.load(f)
    per_query = {query_id: values["ndcg@10"] for query_id, values in metrics["per_query"].items()}
    metrics_split = metrics["split"]
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    parser.error(f"--exact={path}: not xtr-eval-beir's metrics with nDCG@10 per query ({e!r})")
  if metrics_split != split:
    parser.error(f"--exact={path}: split {metrics_split!r}; the vectors' queries are {split}'s")
  return per_query


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  for name in ("vectors", "data_dir", "out"):
    parser.add_argument(name)
  parser.add_argument("--builds", type=int, default=5)
  parser.add_argument("--scann_gin", default="gin/scann/fastest.gin")
  parser.add_argument("--exact", help="xtr-eval-beir's metrics (JSON) of exact search")
  parser.add_argument("--record", help="write the results to this run record (JSON)")
  args = parser.parse_args()
  try:
    split = dump_vectors.read_source(args.vectors)["split"]
  except (OSError, ValueError, TypeError) as e:
    parser.error(f"{args.vectors}: not benchmarks/dump_vectors.py's dump ({e!r})")
  exact = read_exact(parser, args.exact, split) if args.exact else None
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
  runs = {engine: per_query_mean(builds, engine) for engine in (name, PEER)}
  if exact:
    runs["exact"] = exact
  results["paired"] = {
      f"{a} - {b}": paired(runs[a], runs[b])
      for a, b in ((name, PEER), (name, "exact"), (PEER, "exact"))
      if b in runs
  }
  print(json.dumps({k: v for k, v in results.items() if k != "builds"}, indent=2))
  if args.record:
    io.write_results(args.record, run_record.record(results, [args.data_dir], split))


if __name__ == "__main__":
  main()
