"""The model rows of docs/results.md "Generalization" (§1 and §3) from the outputs of
launch/generalization_bars.sh, and their run record.

  .venv/bin/python launch/generalization_bars.py OUT_DIR [--record=RECORD.json]

Prints §1's table rows (our systems on SciFact test and NFCorpus test). The record
(docs/runs/generalization_bars.json) is {"demo": xtr-demo's run record, "evaluations": {name:
xtr-eval-beir's report without per-query scores}}; tests/test_run_records.py rebuilds the rows
from it with `rows`.
"""
import argparse
import json
import pathlib

from xtr import io

SETS = ("scifact", "nfcorpus")
EVALUATIONS = tuple(f"{model}_{name}_{scoring}" for model, scorings in (("demo", ("exhaustive",)),
                                                                        ("recipe128",
                                                                         ("xtr", "exhaustive")))
                    for name in SETS for scoring in scorings)
# (label, trained on, where its metrics are: ("demo", system) or ("eval", model, scoring))
ROWS = (
    ("demo model (384-d, WiSE-FT α = 0.7), f_XTR' (ScaNN)", "SciFact train", ("demo", "xtr")),
    ("demo model, exact MaxSim", "SciFact train", ("eval", "demo", "exhaustive")),
    ("128-d recipe (the demo's model until issue 14), f_XTR' (ScaNN)", "SciFact train",
     ("eval", "recipe128", "xtr")),
    ("128-d recipe, exact MaxSim", "SciFact train", ("eval", "recipe128", "exhaustive")),
    ("BM25 (bm25s, k1 0.9, b 0.4)", "— (no training)", ("demo", "bm25")),
    ("untuned MiniLM, single vector", "neither collection", ("demo", "minilm_single_vector")),
    ("untuned MiniLM, raw-token exact MaxSim (384-d)", "neither collection", ("demo",
                                                                              "minilm_maxsim")),
)


def collect(out: pathlib.Path) -> dict:
  """The record: the demo's run record and every evaluation, without per-query scores."""
  evaluations = {}
  for name in EVALUATIONS:
    report = json.loads((out / f"{name}.json").read_text())
    report.pop("per_query", None)
    evaluations[name] = report
  return {"demo": json.loads((out / "demo" / "run.json").read_text()), "evaluations": evaluations}


def metrics(record: dict, where: tuple[str, ...], name: str) -> dict[str, float]:
  """nDCG@10, Recall@100 and MRR@10 of a row's system on the set `name`."""
  if where[0] == "demo":
    return record["demo"]["results"][name][where[1]]
  return record["evaluations"][f"{where[1]}_{name}_{where[2]}"]


# (SciFact, NFCorpus) regimes by what a row's system was trained on: in-domain, zero-shot, or
# none (BM25 is not trained).
REGIMES = {
    "SciFact train": ("ID", "ZS"),
    "neither collection": ("ZS", "ZS"),
    "— (no training)": (None, None)
}


def rows(record: dict) -> list[str]:
  """§1's rows: nDCG@10 on SciFact and NFCorpus with their regimes, NFCorpus R@100 and MRR@10."""
  lines = []
  for label, trained_on, where in ROWS:
    scifact, nfcorpus = (metrics(record, where, name) for name in SETS)
    ndcg = [
        f"{m['ndcg@10']:.4f}" + (f" ({regime})" if regime else "")
        for m, regime in zip((scifact, nfcorpus), REGIMES[trained_on])
    ]
    cells = [label, trained_on, *ndcg, f"{nfcorpus['recall@100']:.4f}", f"{nfcorpus['mrr@10']:.4f}"]
    lines.append("| " + " | ".join(cells) + " |")
  return lines


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("out", type=pathlib.Path)
  parser.add_argument("--record", help="Write the run record here (JSON).")
  args = parser.parse_args()
  record = collect(args.out)
  print("\n".join(rows(record)))
  if args.record:
    io.write_results(args.record, record)


if __name__ == "__main__":
  main()
