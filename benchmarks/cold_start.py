"""Where the seconds of a cold `xtr-search` of one query go: a fresh process per run.

  .venv/bin/python benchmarks/cold_start.py --index=INDEX_DIR --checkpoint=CHECKPOINT [--runs=5]

Each run starts a new Python process that runs the `xtr-search` console script's code on one
query (stdin) with its library calls wrapped in timers, and prints, per stage, the median
milliseconds over the runs: interpreter start, starting ScaNN's helper process (the console
script's `xtr.search_main`), imports, opening and verifying the index, loading ScaNN (or taking
the helper over), restoring the parameters, building the query encoder (fingerprint included),
encoding the query (its compilation included), waiting for the helper, search and scoring
(after that wait), the process's exit and the rest of main,
up to the parent's wall time of the process. --empty_cache gives each run an empty compilation
cache ($XDG_CACHE_HOME), as a first run ever; otherwise the runs share the user's. Extra
arguments go to xtr-search (e.g. --compilation_cache=off).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

QUERY = "what causes scurvy"
HELPER_WAIT = "wait for ScaNN's helper"
SEARCH = "search + score"
# (stage, module, attribute): wrapped callables, in the order a search calls them.
WRAPPED = (
    ("parse gin", "xtr.cli", "parse_gin"),
    ("open index", "xtr.index.reader", "open_index"),
    ("load ScaNN (or start its helper)", "xtr.index.reader", "TokenIndex.load_scann"),
    ("restore parameters", "xtr.models.encoding", "load_params"),
    ("build encoder", "xtr.models.model_spec", "encoder"),
    ("encode query", "xtr.models.encoding", "Encoder.encode_ids"),
    (HELPER_WAIT, "xtr.index.scann_process", "Searcher.wait"),  # Inside the search's time.
    (SEARCH, "xtr.retrieval.ranker", "rank"))

# Runs in the child: wraps WRAPPED, then runs xtr-search as its console script does.
CHILD = """
import functools, importlib, json, os, sys, time
t0 = float(sys.argv.pop(1)); out = sys.argv.pop(1)
events = {"interpreter": time.time() - t0}
def wrap(owner, name, stage):
  inner = getattr(owner, name)
  @functools.wraps(inner)
  def timed(*args, **kwargs):
    start = time.time()
    try:
      return inner(*args, **kwargs)
    finally:
      events.setdefault(stage, [start - t0, 0.0])[1] += time.time() - start
  setattr(owner, name, timed)
from xtr import search_main
search_main.start_helper(sys.argv)  # As the console script does, before the tool's imports.
events["helper started"] = time.time() - t0
from xtr.cli import search
events["imports"] = time.time() - t0
for stage, module, attribute in %r:
  owner = importlib.import_module(module)
  *path, name = attribute.split(".")
  for part in path:
    owner = getattr(owner, part)
  wrap(owner, name, stage)
def main_returned(*_):
  events["main returned"] = time.time() - t0
  with open(out, "w") as f:
    json.dump(events, f)
main, exit_now = search.main, os._exit
def timed_main(argv):
  events["main"] = time.time() - t0
  main(argv)
  main_returned()
os._exit = lambda code: (main_returned(), exit_now(code))  # A tool may skip the teardown.
search.main = timed_main
search.console_entry_point()
""" % (WRAPPED,)


def run_once(arguments: list[str], empty_cache: bool) -> dict[str, float]:
  """One cold process: {stage: ms} (each stage's own time; "rest" = wall - the others).

  empty_cache: the process gets an empty compilation cache (a first run ever), not the user's.
  """
  with tempfile.TemporaryDirectory() as scratch:
    out = os.path.join(scratch, "events.json")
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if empty_cache:
      env["XDG_CACHE_HOME"] = scratch
    start = time.time()
    subprocess.run([sys.executable, "-P", "-c", CHILD,
                    repr(start), out, *arguments], input=QUERY + "\n", text=True, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    wall = time.time() - start
    with open(out) as f:
      events = json.load(f)
  stages = {
      "interpreter start": events["interpreter"],
      "start ScaNN's helper": events["helper started"] - events["interpreter"],
      "imports": events["imports"] - events["helper started"]
  }
  stages["flags"] = events["main"] - events["imports"]
  stages.update({stage: events[stage][1] for stage, _, _ in WRAPPED if stage in events})
  if HELPER_WAIT in stages:  # The first search waits for the helper: that time is counted once.
    stages[SEARCH] -= stages[HELPER_WAIT]
  stages["exit"] = wall - events["main returned"]
  stages["rest of main (queries, checks, output)"] = wall - sum(stages.values())
  stages["total (wall)"] = wall
  return {stage: 1000 * seconds for stage, seconds in stages.items()}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--index", required=True)
  parser.add_argument("--checkpoint", required=True)
  parser.add_argument("--runs", type=int, default=5)
  parser.add_argument("--empty_cache", action="store_true",
                      help="give every run an empty compilation cache (first runs ever)")
  args, extra = parser.parse_known_args()
  arguments = [f"--index={args.index}", f"--checkpoint={args.checkpoint}", "--top_k=5", *extra]
  runs = [run_once(arguments, args.empty_cache) for _ in range(args.runs)]
  print(f"{'stage':34s} " + " ".join(f"{f'run {i + 1}':>8s}" for i in range(len(runs))) +
        f" {'median':>8s}")
  for stage in runs[0]:
    values = [run[stage] for run in runs]
    print(f"{stage:34s} " + " ".join(f"{v:8.0f}" for v in values) + f" {np.median(values):8.0f}")


if __name__ == "__main__":
  main()
