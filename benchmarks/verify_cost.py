"""Seconds to open a token index and make it ready for ScaNN search and for gathering, by --verify.

  .venv/bin/python benchmarks/verify_cost.py INDEX_DIR

Each row opens the index anew, runs one ScaNN search (which verifies and loads the ScaNN files)
and gathers one document (which verifies the vector chunks); "off" (sizes only) is the baseline.
"""
import os
import sys
import time

import numpy as np

from xtr.index import reader
from xtr.index import verify

path = sys.argv[1]
queries = np.random.default_rng(0).normal(size=(32, 128)).astype(np.float32)


def ready(mode: str) -> tuple[float, float, float]:
  """(opened, ScaNN ready, chunks ready) seconds since the open began."""
  start = time.perf_counter()
  index = reader.open_index(path, mode)
  opened = time.perf_counter() - start
  index.search(queries, 10, "scann")
  scann_ready = time.perf_counter() - start
  index.doc_vectors([0])
  return opened, scann_ready, time.perf_counter() - start


record = os.path.join(path, verify.RECORD)
if os.path.exists(record):
  os.remove(record)
for label, mode in (("off", "off"), ("full", "full"), ("fast, first open", "fast"),
                    ("fast, later opens", "fast"), ("off", "off")):
  o, s, c = ready(mode)
  print(f"{label:18s} open {o:6.2f} s | + ScaNN ready {s:6.2f} s | + chunks ready {c:6.2f} s")
