"""The entropy-LP study's table (Markdown, on stdout) and OUT_DIR/summary.json, from the training
logs of launch/entropy_lp_study.sh.

  .venv/bin/python launch/entropy_lp_summary.py runs/entropy_lp_study

Per run: dev nDCG@10 over the bounded candidates at each evaluation, nDCG@10 and Recall@100 of
full-corpus retrieval where it was run (OUT_DIR/<name>/dev_index.json), and the mean loss,
gradient norm and document salience of the logged steps of each half of training.
"""
import json
import pathlib
import re
import sys

import numpy as np

from xtr import io

RUNS = ("relu", "entropy_lp", "solver_1000", "epsilon_0.2", "alpha_0.9")
STEP = re.compile(r"^step (\d+)/\d+ \| (.*?) \| [\d.]+ steps/s")
EVALUATION = re.compile(r"^step (\d+) \| dev_ndcg@10 ([\d.]+)$")


def parse(log: str) -> dict:
  """{"dev_ndcg@10": {step: value}, "steps": {step: {metric: value}}} of a training log."""
  evaluations, steps = {}, {}
  for line in log.splitlines():
    if match := EVALUATION.match(line):
      evaluations[int(match[1])] = float(match[2])
    elif match := STEP.match(line):
      steps[int(match[1])] = {
          name: float(value) for name, value in (part.split() for part in match[2].split(" | "))
      }
  return {"dev_ndcg@10": evaluations, "steps": steps}


def halves(steps: dict, metric: str) -> tuple[float, float]:
  """The mean of `metric` over the logged steps of each half of the run."""
  last = max(steps)
  first = [v[metric] for s, v in steps.items() if s <= last // 2]
  second = [v[metric] for s, v in steps.items() if s > last // 2]
  return float(np.mean(first)), float(np.mean(second))


def main(out: pathlib.Path) -> None:
  summary = {}
  print("| run | dev nDCG@10, candidates (step 75 / 150) | full retrieval: nDCG@10 / R@100 | "
        "loss (1st / 2nd half) | grad norm | document salience |\n" + "|---" * 6 + "|")
  for name in RUNS:
    path = out / name / "train.log"
    if not path.exists():
      continue
    run = parse(path.read_text())
    full = out / name / "dev_index.json"
    if full.exists():
      report = json.loads(full.read_text())
      run["full_retrieval"] = {k: report[k] for k in ("ndcg@10", "recall@100", "command")}
    summary[name] = run
    ndcg = " / ".join(f"{v:.4f}" for _, v in sorted(run["dev_ndcg@10"].items()))
    retrieval = run.get("full_retrieval")
    retrieval = ("—" if retrieval is None else
                 f"{retrieval['ndcg@10']:.4f} / {retrieval['recall@100']:.4f}")
    cells = [
        " / ".join(f"{v:.3f}"
                   for v in halves(run["steps"], metric))
        for metric in ("loss", "grad_norm", "document_salience")
    ]
    print(f"| {name} | {ndcg} | {retrieval} | " + " | ".join(cells) + " |")
  io.write_results(str(out / "summary.json"), summary)


if __name__ == "__main__":
  main(pathlib.Path(sys.argv[1]))
