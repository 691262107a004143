"""Few-shot alignment adaptation (ALIGNER §3.1, §4.1): choose a task's pairwise alignment from a
few labelled queries, without changing the model.

The paper's protocol: split the labelled queries into folds of `shots` (8); on each fold pick
the strategy with the best nDCG@10 among top-k, k ∈ {1, 2, 4, 6, 8}, and top-p,
p ∈ {0.5, 1, 1.5, 2} %; evaluate it on the remaining queries; report the mean ± std of these
scores over the folds. Beside it: the default strategy (top-1, as trained) and the oracle (the
strategy best on all queries). The paper does not say how ties or a last partial fold are
handled: here ties go to the earlier strategy of the list (top-1 first) and a last fold smaller
than `shots` is dropped (its queries are still evaluated by the other folds).

Beyond the paper: each fold's change against the default on the same held-out queries, with a
95 % percentile bootstrap interval of its mean over folds (`bootstrap_interval`). Folds share
held-out queries, so their changes are not independent: the interval shows the spread of the
choice over folds, not a test over queries.
"""
from collections.abc import Mapping
from collections.abc import Sequence
import math
from typing import Any

import numpy as np

DEFAULT_STRATEGIES = ("top_k:1", "top_k:2", "top_k:4", "top_k:6", "top_k:8", "top_p:0.005",
                      "top_p:0.01", "top_p:0.015", "top_p:0.02")

# {strategy: {query id: nDCG@10}}
PerQuery = Mapping[str, Mapping[str, float]]


def folds(query_ids: Sequence[str], shots: int, seed: int = 0) -> list[list[str]]:
  """The query ids shuffled (numpy, `seed`) and cut into folds of `shots`; a last smaller fold
  is dropped."""
  if shots < 1 or shots >= len(query_ids):
    raise ValueError(f"shots={shots} must be in [1, {len(query_ids)}) for {len(query_ids)} "
                     "labelled queries: each fold needs other queries to be evaluated on.")
  order = np.random.default_rng(seed).permutation(len(query_ids))
  shuffled = [query_ids[i] for i in order]
  return [shuffled[i:i + shots] for i in range(0, len(shuffled) - shots + 1, shots)]


def mean(per_query: Mapping[str, float], query_ids: Sequence[str]) -> float:
  return math.fsum(per_query[q] for q in query_ids) / len(query_ids)


def best(per_query: PerQuery, query_ids: Sequence[str]) -> str:
  """The strategy of best mean over `query_ids` (ties: the first in `per_query`'s order)."""
  means = {strategy: mean(values, query_ids) for strategy, values in per_query.items()}
  return max(means, key=lambda strategy: (means[strategy], -list(means).index(strategy)))


def bootstrap_interval(values: Sequence[float], resamples: int = 10_000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
  """values: [F] -> the percentile bootstrap interval (`level`) of their mean: `resamples` means
  of F values drawn with replacement (numpy, `seed`)."""
  values = np.asarray(values, np.float64)
  draws = np.random.default_rng(seed).integers(0, len(values), size=(resamples, len(values)))
  means = values[draws].mean(axis=1)
  low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
  return float(low), float(high)


def adapt(per_query: PerQuery, fold_ids: Sequence[Sequence[str]],
          default: str = "top_k:1") -> dict[str, Any]:
  """The protocol's report from per-query nDCG@10 of every strategy.

  Args:
    per_query: {strategy: {query id: nDCG@10}} over the same labelled queries.
    fold_ids: the folds (`folds`).
    default: the strategy used without adaptation.

  Returns:
    {"adapted": {"mean", "std"} over folds, "folds": [{"queries", "chosen", "ndcg@10",
     "change"}], "change": {"mean", "ci95"}: adapted - default on each fold's held-out queries,
     "default": {"strategy", "ndcg@10"}, "oracle": {"strategy", "ndcg@10"},
     "strategies": {strategy: nDCG@10 over all queries}, "chosen_counts": {strategy: folds}}
  """
  all_ids = list(next(iter(per_query.values())))
  reports = []
  for fold in fold_ids:
    chosen = best(per_query, fold)
    held_out = [q for q in all_ids if q not in set(fold)]
    score = mean(per_query[chosen], held_out)
    reports.append({
        "queries": list(fold),
        "chosen": chosen,
        "ndcg@10": score,
        "change": score - mean(per_query[default], held_out)
    })
  scores = np.array([r["ndcg@10"] for r in reports])
  changes = [r["change"] for r in reports]
  oracle = best(per_query, all_ids)
  counts = {s: sum(r["chosen"] == s for r in reports) for s in per_query}
  return {
      "adapted": {
          "mean": float(scores.mean()),
          "std": float(scores.std())
      },
      "change": {
          "mean": float(np.mean(changes)),
          "ci95": bootstrap_interval(changes)
      },
      "default": {
          "strategy": default,
          "ndcg@10": mean(per_query[default], all_ids)
      },
      "oracle": {
          "strategy": oracle,
          "ndcg@10": mean(per_query[oracle], all_ids)
      },
      "strategies": {
          s: mean(v, all_ids) for s, v in per_query.items()
      },
      "chosen_counts": {
          s: c for s, c in counts.items() if c
      },
      "folds": reports
  }
