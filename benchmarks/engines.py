"""Retrieval engines side by side on the same token vectors and the same query vectors.

  bash benchmarks/peers/setup.sh      # once: the peers' venv, .venv-peers (not a dependency)
  .venv/bin/python benchmarks/dump_vectors.py INDEX_DIR CHECKPOINT DATA_DIR VECTORS_DIR
  .venv/bin/python benchmarks/engines.py VECTORS_DIR DATA_DIR OUT_PREFIX \
      [--scann=NAME[=GIN_FILE] ...] [--threads=1,2] [--rounds=3] [--queries=0] \
      [--engines=NAME,...] [--cache=DIR] [--shards=1]

Engines (`engines` says what each name is): this project's f_XTR' over an index of the vectors
with the ScaNN settings of each --scann gin file (e.g. gin/scann/fast.gin; none, and by default:
those of the dumped index; in --shards shards of contiguous documents, as `xtr-export
--num_shards` writes them, searched as one), one query at a time and in batches of 64, its
ColBERT three stages; PyLate 1.6's `retrieve.XTR` over its ScaNN index with PyLate's defaults
and with this project's settings, one query at a time and in batches; PyLate's PLAID with the
Stanford backend and with fast-plaid; WARP (xtr-warp-rs) through PyLate. Each runs in its own
worker process (benchmarks/peers/worker.py; the peers in .venv-peers), pinned to each thread
count in turn: OMP/MKL/OpenBLAS env, torch's threads, XLA's Eigen pool off and one intra-op
thread at 1 thread, ScaNN's threads (parallel batches off at 1 thread). A worker builds its
index once into --cache (the build's time and CPU are recorded then; the worker is restarted
after a build, so that its peak RSS is loading and searching only) or loads it, then answers one
untimed warm-up round; then the rounds run interleaved, A B C … A B C …. The first timed round's
top 100 give nDCG@10 (mean and per query) and Recall@100 (`xtr.evaluation.beir_eval.evaluate`
against DATA_DIR's qrels of the dump's split: test unless dump_vectors.py was given another);
latencies are every query's ms in every round: median, p95, and queries/s = 1000 / mean; "cores
busy" is the worker's CPU time over its wall time in the rounds (a check of the pinning). Peak
RSS is each worker's VmHWM at its end (not ru_maxrss, which keeps the driver's size from before
the worker's exec); every worker runs with MALLOC_ARENA_MAX=2, as the xtr CLIs do. An engine
that does not run gets a row saying exactly why.

Writes OUT_PREFIX.json and OUT_PREFIX.md (one table per thread count); workers' stderr goes to
OUT_PREFIX.logs/. Smoke run: --queries=20 --rounds=1.
"""
import argparse
import json
import os
import signal
import subprocess
import sys

import dump_vectors  # benchmarks/, beside this script.
import gin
import numpy as np

from xtr import io
from xtr.evaluation import beir_eval
from xtr.index import scann

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "benchmarks", "peers", "worker.py")
PEERS_PYTHON = os.path.join(ROOT, ".venv-peers", "bin", "python")
BATCH = 64


def engines(scanns: dict[str, tuple[str | None, dict]],
            shards: int = 1) -> dict[str, tuple[str, str, dict]]:
  """name -> (python, worker kind, settings), given scanns[NAME] = (gin file of this project's
  ScaNN settings, None for those of the dumped index; the settings an index of the dumped
  vectors gets from it, `xtr.index.scann.settings`), and the shards of this project's indexes.

  NAME, NAME_batched: this project's f_XTR' (k' = 1000) over an index of the vectors with ScaNN
    settings NAME, built by the worker, one query at a time (`ranker.rank`) or 64 per call
    (`ranker.rank_batch`).
  colbert: this project's ColBERT three stages (token retrieval, gather, exact f_ColBERT) over
    the index of the first settings.
  pylate_xtr[_batched]: PyLate's `retrieve.XTR` + `indexes.ScaNN`, all PyLate's defaults
    (k_token 10,000; min(2000, T) leaves, 200 searched, 2 dims per AH block, eta 0.2, spherical
    tree), one query per call or 64.
  pylate_xtr_k1000: PyLate's defaults but k_token 1000 (this project's k').
  pylate_xtr_project[_batched]: the same with this project's first ScaNN settings where PyLate
    has them (leaves, leaves searched, dims per block, eta, training
    sample; k_token 1000); the tree stays spherical and the codes LUT16 (PyLate hard-codes both).
  plaid_stanford, fast_plaid: PyLate's `indexes.PLAID` with its Stanford backend or fast-plaid,
    PyLate's PLAID defaults (nbits 4, 4 k-means iterations, 8 cells probed, 8192 docs scored).
  warp: PyLate's `indexes.WARP` (xtr-warp-rs) with PyLate's defaults, but its residual codec
    trained on 40,000 token vectors (xtr-warp-rs's default of 1M overflows torch's `quantile` at
    384 dims; PyLate does not pass the setting on, the worker sets it).
  """
  scann = next(iter(scanns.values()))[1]
  project_scann = {
      "num_leaves": scann["num_leaves"],
      "num_leaves_to_search": scann["num_leaves_to_search"],
      "dimensions_per_block": scann["dims_per_block"],
      "anisotropic_quantization_threshold": scann["anisotropic_quantization_threshold"],
      "training_sample_size": scann["training_sample_size"]
  }
  pylate_defaults = {"name": "pylate_scann_defaults", "index": {}}
  pylate_project = {"name": "pylate_scann_project", "index": project_scann, "k_token": 1000}
  plaid = {"nbits": 4, "kmeans_niters": 4, "n_ivf_probe": 8, "n_full_scores": 8192}
  ours = {}
  for name, (gin_file, _) in scanns.items():
    settings = {"name": name, "scann_gin": gin_file, "shards": shards}
    ours[name] = (sys.executable, "xtr", settings)
    ours[name + "_batched"] = (sys.executable, "xtr", settings | {"batch": BATCH})
  first, (gin_file, _) = next(iter(scanns.items()))
  return ours | {
      "colbert": (sys.executable, "xtr", {
          "name": first,
          "scann_gin": gin_file,
          "shards": shards,
          "scoring": "colbert"
      }),
      "pylate_xtr": (PEERS_PYTHON, "pylate_xtr", pylate_defaults),
      "pylate_xtr_batched": (PEERS_PYTHON, "pylate_xtr", pylate_defaults | {
          "batch": BATCH
      }),
      "pylate_xtr_k1000": (PEERS_PYTHON, "pylate_xtr", pylate_defaults | {
          "k_token": 1000
      }),
      "pylate_xtr_project": (PEERS_PYTHON, "pylate_xtr", pylate_project),
      "pylate_xtr_project_batched": (PEERS_PYTHON, "pylate_xtr", pylate_project | {
          "batch": BATCH
      }),
      "plaid_stanford": (PEERS_PYTHON, "pylate_index", {
          "name": "plaid_stanford",
          "index": "PLAID",
          "use_fast": False
      } | plaid),
      "fast_plaid": (PEERS_PYTHON, "pylate_index", {
          "name": "plaid_fast",
          "index": "PLAID",
          "use_fast": True
      } | plaid),
      "warp": (PEERS_PYTHON, "pylate_index", {
          "name": "warp",
          "index": "WARP",
          "codec_sample_max_tokens": 40_000
      }),
  }


def _scann_settings(gin_file: str, num_tokens: int) -> dict:
  """The ScaNN settings an index of `num_tokens` tokens gets from `gin_file`."""
  gin.parse_config_file(gin_file)
  try:
    return scann.settings(scann.ScannConfig(), num_tokens)
  finally:
    gin.clear_config()


def thread_env(threads: int) -> dict[str, str]:
  # Two malloc arenas for every engine, as the xtr CLIs set (`common._fewer_malloc_arenas`).
  env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
             OPENBLAS_NUM_THREADS=str(threads), TF_NUM_INTRAOP_THREADS=str(threads),
             TF_NUM_INTEROP_THREADS="1", TOKENIZERS_PARALLELISM="false", MALLOC_ARENA_MAX="2")
  if threads == 1:
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                        "intra_op_parallelism_threads=1").strip()
  return env


class Worker:
  """One engine's worker process (the protocol of benchmarks/peers/worker.py)."""

  def __init__(self, name: str, python: str, kind: str, settings: dict, args, threads: int):
    self.name, self.info, self.error, self.rounds = name, {}, None, []
    os.makedirs(args.out + ".logs", exist_ok=True)
    self.log = os.path.join(args.out + ".logs", f"{name}-t{threads}.log")
    if os.path.exists(self.log):
      os.remove(self.log)
    if not os.path.exists(python):
      self.error, self.process = f"{python} is missing: run bash benchmarks/peers/setup.sh", None
      return
    command = [
        python, WORKER, kind, args.vectors, args.cache,
        str(threads),
        str(args.queries),
        json.dumps(settings)
    ]
    for _ in range(2):  # Once more after a build: peak RSS is then loading and searching only.
      with open(self.log, "a", encoding="utf-8") as log:
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=log, text=True, env=thread_env(threads), cwd=ROOT)
      self.info = self.ask(None) or {}
      if "error" in self.info:
        self.error = self.info.pop("error")
      if not self.info.pop("built_now", False):
        break
      self.close()

  def ask(self, command: dict | None) -> dict | None:
    """Sends `command` (None: only reads) and returns the reply; None (and `error` set) if the
    worker died."""
    if self.error:
      return None
    try:
      if command is not None:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
      line = self.process.stdout.readline()
    except BrokenPipeError:
      line = ""
    if line:
      return json.loads(line)
    code = self.process.wait()
    died = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit status {code}"
    with open(self.log, encoding="utf-8") as f:
      lines = [line.rstrip() for line in f if line.strip()]
    fatal = [i for i, line in enumerate(lines) if line.startswith("Fatal Python error")]
    shown = lines[fatal[-1]:fatal[-1] + 5] if fatal else lines[-8:]  # Innermost frames first.
    notes = [line for line in lines if line.startswith("worker note:") and line not in shown]
    self.error = f"the worker died ({died}); its stderr says:\n" + "\n".join(notes + shown)
    return None

  def close(self) -> None:
    reply = self.ask({"cmd": "exit"})
    if reply:
      self.info["peak_rss_mb"] = reply["peak_rss_mb"]
      self.process.wait()


def run_threads(args, threads: int, names: list[str], specs: dict, data) -> list[dict]:
  workers = []
  for name in names:
    print(f"[{threads} thread(s)] starting {name}", file=sys.stderr, flush=True)
    workers.append(Worker(name, *specs[name], args, threads))
    if workers[-1].error:
      print(f"  {name}: {workers[-1].error}", file=sys.stderr, flush=True)
    else:
      workers[-1].ask({"cmd": "round"})  # Warm-up, untimed.
  rankings = {}
  for round_ in range(args.rounds):
    for worker in workers:
      reply = worker.ask({"cmd": "round", "rankings": round_ == 0})
      if reply:
        worker.rounds.append(reply)
        rankings.setdefault(worker.name, reply.get("rankings"))
    print(f"[{threads} thread(s)] round {round_ + 1}/{args.rounds} done", file=sys.stderr,
          flush=True)
  rows = []
  for worker in workers:
    worker.close()
    row = {"engine": worker.name, "threads": threads, **worker.info}
    if worker.error:
      rows.append(row | {"error": worker.error})
      continue
    run = {
        query_id: dict(map(tuple, ranking))
        for query_id, ranking in zip(data.query_ids, rankings[worker.name])
    }
    metrics = beir_eval.evaluate(data.qrels, run, mrr_at=())
    ms = np.asarray([r["ms"] for r in worker.rounds])  # [rounds, queries]
    rows.append(
        row | {
            "ndcg@10":
                metrics["ndcg@10"],
            "recall@100":
                metrics["recall@100"],
            "num_queries":
                metrics["num_queries"],
            "ndcg@10_per_query": {
                query_id: values["ndcg@10"] for query_id, values in metrics["per_query"].items()
            },
            "p50_ms":
                float(np.median(ms)),
            "p95_ms":
                float(np.percentile(ms, 95)),
            "queries_per_s":
                float(1000 / ms.mean()),
            "p50_ms_per_round":
                np.median(ms, axis=1).tolist(),
            "cores_used":
                sum(r["cpu_s"] for r in worker.rounds) / sum(r["wall_s"] for r in worker.rounds)
        })
  return rows


def table(rows: list[dict]) -> list[str]:
  lines = [
      "| engine | nDCG@10 | R@100 | p50 ms | p95 ms | queries/s | cores busy | build s | "
      "bytes/token | peak RSS MB |", "|---|---|---|---|---|---|---|---|---|---|"
  ]
  for r in rows:
    if "error" in r:
      lines.append(f"| {r['engine']} | did not run (below) | | | | | | | | |")
      continue
    lines.append(f"| {r['engine']} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | "
                 f"{r['p50_ms']:.1f} | {r['p95_ms']:.1f} | {r['queries_per_s']:.1f} | "
                 f"{r['cores_used']:.2f} | "
                 f"{r['build_s']:.0f} ({r['build_cpu_s'] / r['build_s']:.1f} cores) | "
                 f"{r['bytes_per_token']:.1f} | "
                 f"{r.get('peak_rss_mb', float('nan')):.0f} |")
  failed = [r for r in rows if "error" in r]
  for r in failed:
    lines.append(f"\n**{r['engine']}** did not run:\n```\n{r['error']}\n```")
  return lines


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("vectors", help="benchmarks/dump_vectors.py's OUT_DIR")
  parser.add_argument("data_dir", help="the BEIR dataset (the qrels of the dump's split)")
  parser.add_argument("out", help="OUT_PREFIX of the .json and .md written")
  parser.add_argument("--threads", default="1,2")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--queries", type=int, default=0, help="the first N queries (0: all)")
  parser.add_argument("--engines", default="", help="comma-separated names (default: all)")
  parser.add_argument("--cache", default="", help="built indexes (default: VECTORS/indexes)")
  parser.add_argument(
      "--scann", action="append", default=[], metavar="NAME[=GIN_FILE]",
      help="this project's engine NAME with the ScaNN settings of GIN_FILE "
      "(e.g. gin/scann/fast.gin; none: the dumped index's); repeat for "
      "several (default: xtr, the dumped index's)")
  parser.add_argument("--shards", type=int, default=1,
                      help="this project's indexes in this many shards (contiguous documents)")
  args = parser.parse_args()
  args.cache = args.cache or os.path.join(args.vectors, "indexes")
  for name in ("vectors", "cache", "out"):
    setattr(args, name, os.path.abspath(getattr(args, name)))
  source = dump_vectors.read_source(args.vectors)
  with open(os.path.join(args.vectors, "query_ids.json"), encoding="utf-8") as f:
    query_ids = json.load(f)[:args.queries or None]
  beir = beir_eval.load_beir(args.data_dir, source["split"])
  data = argparse.Namespace(query_ids=query_ids, qrels={q: beir.qrels[q] for q in query_ids})
  num_tokens = int(np.load(os.path.join(args.vectors, "doc_lengths.npy")).sum())
  scanns = {"xtr": (None, source["scann"])}
  if args.scann:
    scanns = {}
    for name, _, gin_file in (spec.partition("=") for spec in args.scann):
      scanns[name] = ((os.path.abspath(gin_file),
                       _scann_settings(gin_file, num_tokens)) if gin_file else
                      (None, source["scann"]))
  specs = engines(scanns, args.shards)
  names = args.engines.split(",") if args.engines else list(specs)
  rows = [
      row for threads in map(int, args.threads.split(","))
      for row in run_threads(args, threads, names, specs, data)
  ]
  report = {
      "vectors": args.vectors,
      "source": source,
      "data_dir": args.data_dir,
      "rounds": args.rounds,
      "queries": len(query_ids),
      "cpus": os.cpu_count(),
      "load_average": os.getloadavg(),
      "rows": rows
  }
  io.write_results(args.out + ".json", report)
  lines = []
  for threads in dict.fromkeys(r["threads"] for r in rows):
    lines += [f"\n### {threads} thread(s): {len(query_ids)} queries × {args.rounds} rounds\n"]
    lines += table([r for r in rows if r["threads"] == threads])
  with io.atomic_open(args.out + ".md") as f:
    f.write("\n".join(lines).lstrip() + "\n")
  print("\n".join(lines))


if __name__ == "__main__":
  main()
