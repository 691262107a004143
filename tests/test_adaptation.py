"""xtr/scoring/adaptation.py: folds and the few-shot protocol against hand-made cases and a loop."""
import itertools

import numpy as np
import pytest

from xtr.scoring import adaptation


def test_folds_partition_the_shuffled_queries_and_drop_a_last_small_fold():
  ids = [f"q{i}" for i in range(21)]
  folds = adaptation.folds(ids, 8, seed=3)
  assert [len(f) for f in folds] == [8, 8]
  assert len(set(itertools.chain(*folds))) == 16 and set(itertools.chain(*folds)) < set(ids)
  assert folds == adaptation.folds(ids, 8, seed=3) != adaptation.folds(ids, 8, seed=4)
  with pytest.raises(ValueError, match=r"shots=21 must be in \[1, 21\)"):
    adaptation.folds(ids, 21)


def test_each_fold_picks_its_best_strategy_and_is_scored_on_the_others():
  """Strategy "b" wins on queries 0-1, "c" on queries 2-3; "a" (the default) is best overall."""
  per_query = {
      "a": {
          "0": 0.5,
          "1": 0.5,
          "2": 0.5,
          "3": 0.5
      },
      "b": {
          "0": 0.9,
          "1": 0.8,
          "2": 0.0,
          "3": 0.1
      },
      "c": {
          "0": 0.1,
          "1": 0.0,
          "2": 0.7,
          "3": 0.9
      }
  }
  report = adaptation.adapt(per_query, [["0", "1"], ["2", "3"]], default="a")
  assert [f["chosen"] for f in report["folds"]] == ["b", "c"]
  np.testing.assert_allclose([f["ndcg@10"] for f in report["folds"]], [0.05, 0.05])
  assert report["adapted"] == pytest.approx({"mean": 0.05, "std": 0.0})
  assert report["oracle"] == {"strategy": "a", "ndcg@10": 0.5}
  assert report["default"] == {"strategy": "a", "ndcg@10": 0.5}
  assert report["chosen_counts"] == {"b": 1, "c": 1}


def test_ties_go_to_the_earlier_strategy():
  per_query = {"top_k:1": {"0": 0.5, "1": 0.2}, "top_k:2": {"0": 0.2, "1": 0.5}}
  assert adaptation.best(per_query, ["0", "1"]) == "top_k:1"
  assert adaptation.best(dict(reversed(per_query.items())), ["0", "1"]) == "top_k:2"


def test_protocol_against_a_loop():
  rng = np.random.default_rng(0)
  strategies = list(adaptation.DEFAULT_STRATEGIES)
  ids = [str(i) for i in range(30)]
  per_query = {s: {q: float(rng.random()) for q in ids} for s in strategies}
  folds = adaptation.folds(ids, 8)
  report = adaptation.adapt(per_query, folds)
  scores = []
  for fold in folds:
    best, best_mean = None, -1.0
    for s in strategies:
      mean = sum(per_query[s][q] for q in fold) / len(fold)
      if mean > best_mean:
        best, best_mean = s, mean
    rest = [q for q in ids if q not in fold]
    scores.append(sum(per_query[best][q] for q in rest) / len(rest))
  assert report["adapted"]["mean"] == pytest.approx(np.mean(scores))
  assert report["adapted"]["std"] == pytest.approx(np.std(scores))


def test_bootstrap_interval_against_scipy_and_the_normal_approximation():
  from scipy import stats  # pylint: disable=import-outside-toplevel
  values = np.random.default_rng(1).normal(0.01, 0.02, size=40)
  low, high = adaptation.bootstrap_interval(values, resamples=20_000)
  reference = stats.bootstrap((values,), np.mean, n_resamples=20_000, method="percentile",
                              random_state=np.random.default_rng(7)).confidence_interval
  # Different draws: the ends agree to a few hundredths of the interval's width.
  assert low == pytest.approx(reference.low, abs=0.03 * (high - low))
  assert high == pytest.approx(reference.high, abs=0.03 * (high - low))
  half = 1.96 * values.std() / np.sqrt(len(values))
  assert (low, high) == pytest.approx((values.mean() - half, values.mean() + half), abs=0.1 * half)
  assert adaptation.bootstrap_interval([0.3] * 5) == pytest.approx((0.3, 0.3))


def test_the_change_is_against_the_default_on_each_folds_held_out_queries():
  rng = np.random.default_rng(2)
  ids = [str(i) for i in range(30)]
  per_query = {s: {q: float(rng.random()) for q in ids} for s in adaptation.DEFAULT_STRATEGIES}
  folds = adaptation.folds(ids, 8)
  report = adaptation.adapt(per_query, folds, default="top_k:2")
  changes = []
  for fold, fold_report in zip(folds, report["folds"]):
    rest = [q for q in ids if q not in fold]
    default = sum(per_query["top_k:2"][q] for q in rest) / len(rest)
    changes.append(fold_report["ndcg@10"] - default)
  np.testing.assert_allclose([f["change"] for f in report["folds"]], changes)
  assert report["change"]["mean"] == pytest.approx(np.mean(changes))
  low, high = report["change"]["ci95"]
  assert min(changes) <= low <= np.mean(changes) <= high <= max(changes)
