"""Tables (Markdown, on stdout) of launch/scifact_ablations.sh's and launch/scifact_dev_tuning.sh's
results, and their run records.

  .venv/bin/python launch/ablation_tables.py runs/ablations \
      [--record=docs/runs/scifact_ablations.json]
  .venv/bin/python launch/ablation_tables.py runs/dev_tuning --dev \
      [--record=docs/runs/scifact_dev_tuning.json]

Reads OUT_DIR/<model>/<evaluation>.json (xtr-eval-beir) and OUT_DIR/<model>/tokens.json
(xtr-analyze-tokens). Cells not run yet show as "—". --record writes what the tables show, each
evaluation with its provenance (command, commit, gin config, data sha256; per-query scores
dropped), in the record's layout {"evaluations": {model: {evaluation: report}}, "tokens": {model:
report}}; tests/test_run_records.py rebuilds the tables of docs/results.md from it with `tables`
(`dev_table` with --dev).
"""
import argparse
import json
import pathlib

from xtr import io

MODELS = ("xtr_k32", "xtr_k128", "xtr_k1024", "colbert")
# Recorded too: the first recipe (AdamW 1e-4, random projection, k_train 32), a row of the
# quality-goal table of docs/results.md.
RECORDED = (*MODELS, "first")
HEAD = "| {} | nDCG@10 | Recall@100 | MRR@10 | ms/query |\n|---|---|---|---|---|"
IMPUTE = ("none", "zero", "0.2", "0.4")
RANKS = (1, 10, 100, 1000)
# launch/scifact_dev_tuning.sh's recipes, in docs/results.md's order.
DEV_RECIPES = (
    ("first", "first recipe: AdamW 1e-4, random projection, k_train 32"),
    ("k32_random", "AdamW 3e-5, random projection, k_train 32"),
    ("k32", "AdamW 3e-5, PCA projection, k_train 32"),
    ("k32_lr1e-5", "AdamW 1e-5, PCA projection, k_train 32"),
    ("k128", "AdamW 3e-5, PCA projection, k_train 128"),
    ("k512", "AdamW 3e-5, PCA projection, k_train 512"),
    ("k1024", "AdamW 3e-5, PCA projection, k_train 1024 (the current recipe)"),
)


def collect(out: pathlib.Path, models: tuple[str, ...]) -> dict:
  """The record: every report under OUT_DIR that the tables read, without per-query scores."""
  evaluations, tokens = {}, {}
  for model in models:
    for path in sorted((out / model).glob("*.json")):
      report = {k: v for k, v in json.loads(path.read_text()).items() if k != "per_query"}
      if path.stem == "tokens":
        tokens[model] = report
      else:
        evaluations.setdefault(model, {})[path.stem] = report
  return {"evaluations": evaluations, "tokens": tokens}


def row(label: str, report: dict | None) -> str:
  if report is None:
    return f"| {label} |" + " — |" * 4
  return (f"| {label} | {report['ndcg@10']:.4f} | {report['recall@100']:.4f} | "
          f"{report['mrr@10']:.4f} | {report['latency_ms_per_query']['mean']:.1f} |")


def tables(record: dict) -> dict[str, str]:
  """{title: Markdown table} of the objective x scoring, imputation, k' and token-retrieval
  tables."""
  get = lambda model, name: record["evaluations"].get(model, {}).get(name)
  objective = [
      row(f"{model} / {scoring}", get(model, scoring))
      for model in MODELS
      for scoring in ("xtr", "colbert", "exhaustive")
  ]
  impute = [
      row(f"{model}, {value}",
          get(model, f"impute_{value}") if value != "top_k_prime" else get(model, "xtr"))
      for model in ("xtr_k32", "xtr_k1024")
      for value in (*IMPUTE, "top_k_prime")
  ]
  k_prime = [
      row(f"{model}, {k}", get(model, name))
      for model in ("xtr_k32", "xtr_k1024", "colbert")
      for k, name in (("100", "k_prime_100"), ("1000", "xtr"), ("10000", "k_prime_10000"),
                      ("all", "exhaustive"))
  ]
  return {
      "Training objective x scoring": "\n".join([HEAD.format("objective / scoring"), *objective]),
      "Imputation (k' = 1000)": "\n".join([HEAD.format("model, impute"), *impute]),
      "k' (all tokens = exhaustive MaxSim)": "\n".join([HEAD.format("model, k'"), *k_prime]),
      "Token retrieval": token_table(record["tokens"]),
  }


def token_table(tokens: dict) -> str:
  """P(gold) and P(lexical) at ranks 1, 10, 100 and 1000 of each model's token retrieval."""
  lines = [
      "| model | P(gold) at rank 1 / 10 / 100 / 1000 | P(lexical) at rank 1 / 10 / 100 / 1000 |",
      "|---|---|---|"
  ]
  for model in ("xtr_k32", "xtr_k1024", "colbert"):
    if model not in tokens:
      lines.append(f"| {model} | — | — |")
      continue
    curves = [
        " / ".join(f"{tokens[model][name][rank - 1]:.3f}"
                   for rank in RANKS)
        for name in ("gold", "lexical")
    ]
    lines.append(f"| {tokens[model]['label']} | {curves[0]} | {curves[1]} |")
  return "\n".join(lines)


def dev_table(record: dict) -> str:
  """nDCG@10 on the dev split of each recipe, by f_XTR' and by exact MaxSim."""
  lines = ["| recipe | f_XTR' (ScaNN, k' = 1000) | exact MaxSim |", "|---|---|---|"]
  for recipe, label in DEV_RECIPES:
    runs = record["evaluations"].get(recipe, {})
    cells = [f"{runs[s]['ndcg@10']:.4f}" if s in runs else "—" for s in ("xtr", "exhaustive")]
    lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
  return "\n".join(lines)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("out", type=pathlib.Path)
  parser.add_argument("--dev", action="store_true",
                      help="OUT_DIR is launch/scifact_dev_tuning.sh's: its table.")
  parser.add_argument("--record", help="Write the run record here (JSON).")
  args = parser.parse_args()
  if args.dev:
    record = collect(args.out, tuple(recipe for recipe, _ in DEV_RECIPES))
    print(dev_table(record))
  else:
    record = collect(args.out, RECORDED)
    for title, table in tables(record).items():
      print(f"{title}\n\n{table}\n")
  if args.record:
    io.write_results(args.record, record)


if __name__ == "__main__":
  main()
