"""The entropy-LP study's table (Markdown, on stdout) and OUT_DIR/summary.json, from the training
logs of launch/entropy_lp_study.sh.

  .venv/bin/python launch/entropy_lp_summary.py runs/entropy_lp_study

Per run: dev nDCG@10 at each evaluation, and the mean loss, gradient norm and saliences of the
logged steps of the first and second half of training.
"""
import json
import pathlib
import re
import sys

import numpy as np

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
  print("| run | dev nDCG@10 (step 75 / 150) | loss (1st / 2nd half) | grad norm | "
        "document salience |\n" + "|---" * 5 + "|")
  for name in RUNS:
    path = out / name / "train.log"
    if not path.exists():
      continue
    run = parse(path.read_text())
    summary[name] = run
    ndcg = " / ".join(f"{v:.4f}" for _, v in sorted(run["dev_ndcg@10"].items()))
    cells = [
        " / ".join(f"{v:.3f}"
                   for v in halves(run["steps"], metric))
        for metric in ("loss", "grad_norm", "document_salience")
    ]
    print(f"| {name} | {ndcg} | " + " | ".join(cells) + " |")
  (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
  main(pathlib.Path(sys.argv[1]))
