"""Seconds to refine one query's candidates: ColBERT's rerank (f_ColBERT) against ALIGNER's
(sparse alignment with saliences), for each alignment strategy; ratios in one run.

  .venv/bin/python benchmarks/refinement_speed.py [--candidates=640] [--record=PATH]

Random unit vectors: 30 valid query tokens, candidates of 100–256 tokens of dim 128 (SciFact-like),
scored 64 per device call as in search. Each row is the best of 3 runs after a warm-up call.
"""
import argparse
import time

import numpy as np

from xtr import io
from xtr.evaluation import run_record
from xtr.scoring import alignment
from xtr.scoring import search_scores

parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
parser.add_argument("--candidates", type=int, default=640)
parser.add_argument("--record", help="write the times to this run record (JSON)")
args = parser.parse_args()
rng = np.random.default_rng(0)
num_candidates = args.candidates
unit = lambda x: (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)
q, q_mask, u_q = unit(rng.normal(size=(30, 128))), np.ones(30, bool), rng.random(30)
docs = [unit(rng.normal(size=(rng.integers(100, 257), 128))) for _ in range(num_candidates)]
saliences = [rng.random(len(d)).astype(np.float32) for d in docs]


def seconds(refine) -> float:
  refine()
  times = []
  for _ in range(3):
    start = time.perf_counter()
    refine()
    times.append(time.perf_counter() - start)
  return min(times)


colbert = seconds(lambda: search_scores.colbert_rerank(q, q_mask, docs))
print(f"{num_candidates} candidates | f_ColBERT rerank {colbert:.3f} s")
aligner = {}
for text in ("top_k:1", "top_k:8", "top_p:0.02", "differentiable:1"):
  strategy = alignment.Alignment.parse(text)
  aligner[text] = seconds(lambda: search_scores.alignment_rerank(q, q_mask, u_q.astype(np.float32),
                                                                 docs, saliences, strategy))
  print(f"ALIGNER {text:>16} {aligner[text]:.3f} s ({aligner[text] / colbert:.1f}x f_ColBERT)")
if args.record:
  io.write_results(
      args.record,
      run_record.record(
          {
              "candidates": num_candidates,
              "colbert_rerank_s": colbert,
              "aligner_rerank_s": aligner
          }, [], "test"))
