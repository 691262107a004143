"""docs/results.md's "Alignment analysis" tables (Markdown, on stdout) from the alignment.json
files of `xtr-analyze-alignment` (launch/alignment_analysis.sh writes them).

  .venv/bin/python launch/alignment_tables.py runs/alignment/demo/alignment.json \
      runs/alignment/d128/alignment.json
"""
import json
import sys

KINDS = ("q→d hard", "q→d soft", "d→q hard", "d→q soft")


def _models(paths):
  models = {}
  for path in paths:
    with open(path) as f:
      models |= json.load(f)["models"]
  return models


def rerank(models) -> str:
  rows = [
      "| model | direction | Recall@1 | Recall@10 | MRR@10 | nDCG@10 |", "|---|---|---|---|---|---|"
  ]
  for label, result in models.items():
    for direction, m in result["rerank"].items():
      rows.append(f"| {label} | {direction} | {m['recall@1']:.4f} | {m['recall@10']:.4f} | "
                  f"{m['mrr@10']:.4f} | {m['ndcg@10']:.4f} |")
  return "\n".join(rows)


def term_matching(models, subset: str) -> str:
  rows = ["| model | tokens | " + " | ".join(KINDS) + " |", "|---|---|" + "---|" * len(KINDS)]
  for label, result in models.items():
    tm = result["term_matching"][subset]
    for name, part in (("all (non-special)", tm["all"]), ("special", tm["special"]),
                       ("lowest-IDF bin", tm["bins"][0]), ("highest-IDF bin", tm["bins"][-1])):
      rows.append(f"| {label} | {name} | " +
                  " | ".join("—" if part[k] is None else f"{part[k]:.3f}" for k in KINDS) + " |")
  return "\n".join(rows)


def by_bin(models, subset: str, kind: str) -> str:
  labels = list(models)
  bins = next(iter(models.values()))["term_matching"][subset]["bins"]
  rows = ["| IDF bin | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
  for b, edges in enumerate(bins):
    cells = []
    for label in labels:
      value = models[label]["term_matching"][subset]["bins"][b][kind]
      cells.append("—" if value is None else f"{value:.3f}")
    rows.append(f"| {edges['idf_min']:.2f}–{edges['idf_max']:.2f} | " + " | ".join(cells) + " |")
  return "\n".join(rows)


def low_rank(models) -> str:
  rows = ["| model | alignment | σ̂₁ | σ̂₂ | σ̂₃ | rank-1 error |", "|---|---|---|---|---|---|"]
  for label, result in models.items():
    for name, lr in result["low_rank"].items():
      s = lr["spectrum"]
      rows.append(f"| {label} | {name} | {s[0]:.3f} | {s[1]:.3f} | {s[2]:.3f} | "
                  f"{lr['rank1_error']:.3f} |")
  return "\n".join(rows)


def main(paths) -> None:
  models = _models(paths)
  print("Rerank\n\n" + rerank(models))
  for subset in ("candidates", "containing"):
    print(f"\nTerm matching over {subset}\n\n" + term_matching(models, subset))
    for kind in ("q→d hard", "d→q hard"):
      print(f"\n{kind}, {subset}, by IDF bin\n\n" + by_bin(models, subset, kind))
  print("\nLow rank\n\n" + low_rank(models))


if __name__ == "__main__":
  main(sys.argv[1:])
