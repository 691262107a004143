"""Tables (Markdown, on stdout) and figures of launch/aligner_scifact.sh's results.

  .venv/bin/python launch/aligner_tables.py runs/aligner [FIGURES_DIR] \
      [--nfcorpus_record=docs/runs/aligner_nfcorpus.json] \
      [--scifact_record=docs/runs/aligner_scifact.json]
  .venv/bin/python launch/aligner_tables.py runs/aligner_dev --dev_record=docs/runs/aligner_dev.json

Reads OUT_DIR/<model>/<evaluation>.json (xtr-eval-beir), OUT_DIR/<model>/adapt.json
(xtr-adapt-alignment) and OUT_DIR/relu/nfcorpus/ (launch/aligner_nfcorpus.sh); writes FIGURES_DIR
(default OUT_DIR)/aligner_pruning.png (Figure 7
analog: nDCG@10 against β_d, one line per β_q) and aligner_salience.png (Figure 6 analog:
nDCG@10 against β_d, one line per salience variant). Pruning cells not run yet show as "—";
variant rows appear once measured. --nfcorpus_record writes the run record of the NFCorpus rows
(`nfcorpus_record`; tests/test_run_records.py rebuilds them from it with `row`), --scifact_record
that of docs/results.md's first ALIGNER table, its pruning table, its salience-variant table and
its k' = 100 table and the entropy_lp row of its strategy table (`scifact_record`). With
--dev_record, OUT_DIR is launch/aligner_dev.sh's: the table of "Choosing the recipe on dev"
(`dev_table`) and its record (`dev_record`), nothing else.
"""
import argparse
import json
import pathlib

import matplotlib

from xtr import io

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # pylint: disable=wrong-import-position

BETA_D = (("100 %", 1.0, "top1"), ("40 %", 0.4, "top1_d0.4"), ("20 %", 0.2, "top1_d0.2"),
          ("10 %", 0.1, "top1_d0.1"), ("5 %", 0.05, "top1_d0.05"))
BETA_Q = ("1", "0.5", "0.3")
VARIANTS = ("entropy_lp", "relu", "hard", "l1")
# No latency column: the sweeps share the machine with training and exports.
HEAD = "| {} | nDCG@10 | Recall@100 | MRR@10 | ScaNN tokens | ScaNN MB |\n" + "|---" * 6 + "|"


def load(path: pathlib.Path) -> dict | None:
  return json.loads(path.read_text()) if path.exists() else None


def row(label: str, result: dict | None) -> str:
  if result is None:
    return f"| {label} |" + " — |" * 5
  return (
      f"| {label} | {result['ndcg@10']:.4f} | {result['recall@100']:.4f} | "
      f"{result['mrr@10']:.4f} | {result['indexed_tokens']:,} | {result['scann_bytes'] / 1e6:.1f} |"
  )


def reports(paths: dict[str, pathlib.Path]) -> dict:
  """name -> the report at its path (each with its provenance), per-query scores dropped."""
  return {
      name: {
          k: v for k, v in load(path).items() if k != "per_query"
      } for name, path in paths.items()
  }


def nfcorpus_record(out: pathlib.Path) -> dict:
  """The NFCorpus rows' results: xtr-eval-beir's top-1 evaluations (unpruned, β_d = 20 %) and
  xtr-adapt-alignment's report."""
  nfcorpus = out / "relu" / "nfcorpus"
  return reports({
      "top1_index": nfcorpus / "top1_index.json",
      "top1_index_d0.2": nfcorpus / "top1_index_d0.2.json",
      "adapt": nfcorpus / "adapt.json"
  })


def scifact_record(out: pathlib.Path) -> dict:
  """The results of the first SciFact table, the pruning table, the salience-variant table and
  the k' = 100 table: xtr-eval-beir's top-1 evaluations of the relu, hard and l1 models at
  β_d = 100, 20, 10 and 5 % ("relu/top1_q1", "hard/top1_d0.2_q1", ...), of the
  entropy_lp model at every β_d and β_q ("entropy_lp/top1_d0.2_q0.5", ...), and of both at
  k' = 100 ("relu/top1_d0.1_q1_k100", ...); and the entropy_lp model's row of the strategy table:
  xtr-adapt-alignment's report ("entropy_lp/adapt")."""
  names = [
      f"{variant}/{prefix}_q1" for variant in ("relu", "hard", "l1") for _, _, prefix in BETA_D
      if prefix != "top1_d0.4"
  ]
  names += [f"entropy_lp/{prefix}_q{beta_q}" for _, _, prefix in BETA_D for beta_q in BETA_Q]
  names += [
      f"{model}/{prefix}_q1_k100" for model in ("entropy_lp", "relu") for _, _, prefix in BETA_D
      if prefix != "top1_d0.4"
  ]
  names.append("entropy_lp/adapt")
  return reports({name: out / f"{name}.json" for name in names})


DEV_ROWS = (
    ("entropy_lp (the paper's α^q 50 %, α^d 40 %, ε 0.002), unpruned", "entropy_lp/dev_index"),
    ("entropy_lp, β_d = 20 %", "entropy_lp/dev_index_d0.2"),
    ("relu, unpruned", "relu/dev_index"),
    ("relu, β_d = 20 %", "relu/dev_index_d0.2"),
)


def dev_record(out: pathlib.Path) -> dict:
  """launch/aligner_dev.sh's evaluations on the dev split: each gate unpruned and at β_d = 20 %."""
  return reports({name: out / f"{name}.json" for _, name in DEV_ROWS})


def dev_table(record: dict) -> str:
  """[DEV_ROWS] Markdown rows of "Choosing the recipe on dev": nDCG@10, Recall@100, MRR@10."""
  return "\n".join(f"| {label} | " + " | ".join(f"{record[name][m]:.4f}"
                                                for m in ("ndcg@10", "recall@100", "mrr@10")) + " |"
                   for label, name in DEV_ROWS)


def ndcg(result: dict | None) -> float:
  return float("nan") if result is None else result["ndcg@10"]


def main(out: pathlib.Path, figures: pathlib.Path) -> None:
  pruning = {
      (beta_d, beta_q): load(out / "entropy_lp" / f"{prefix}_q{beta_q}.json")
      for _, beta_d, prefix in BETA_D for beta_q in BETA_Q
  }
  print("Pruning (top-1 alignment, k' = 1000)\n\n" + HEAD.format("β_d, β_q"))
  for label, beta_d, _ in BETA_D:
    for beta_q in BETA_Q:
      print(row(f"{label}, {float(beta_q) * 100:.0f} %", pruning[beta_d, beta_q]))
  variants = {
      (v, beta_d): load(out / v / f"{prefix}_q1.json") for v in VARIANTS
      for _, beta_d, prefix in BETA_D
  }
  print("\nSalience variant (β_q = 100 %)\n\n" + HEAD.format("variant, β_d"))
  for variant in VARIANTS:
    for label, beta_d, _ in BETA_D:
      if variants[variant, beta_d] is not None:
        print(row(f"{variant}, {label}", variants[variant, beta_d]))
  print("\nPruning with k' = 100 (β_q = 100 %)\n\n" + HEAD.format("variant, β_d"))
  for variant in ("entropy_lp", "relu"):
    for label, _, prefix in BETA_D:
      if prefix != "top1_d0.4":
        print(row(f"{variant}, {label}", load(out / variant / f"{prefix}_q1_k100.json")))
  print("\nNFCorpus test, the SciFact-trained relu model (top-1, k' = 1000)\n\n" +
        HEAD.format("β_d"))
  for label, index in (("100 %", "index"), ("20 %", "index_d0.2")):
    print(row(label, load(out / "relu" / "nfcorpus" / f"top1_{index}.json")))
  for label, path in (("entropy_lp, SciFact", out / "entropy_lp" / "adapt.json"),
                      ("relu, SciFact", out / "relu" / "adapt.json"),
                      ("relu, NFCorpus", out / "relu" / "nfcorpus" / "adapt.json")):
    print_adaptation(label, load(path))
  plot_pruning(pruning, figures / "aligner_pruning.png")
  plot_variants(variants, figures / "aligner_salience.png")


def print_adaptation(label: str, adapt: dict | None) -> None:
  """Every strategy's nDCG@10 and the few-shot result of an xtr-adapt-alignment report."""
  if adapt is None:
    return
  print(f"\nAlignment strategies ({label}, unpruned, nDCG@10)\n")
  print("| " + " | ".join(adapt["strategies"]) + " |\n" + "|---" * len(adapt["strategies"]) + "|")
  print("| " + " | ".join(f"{v:.4f}" for v in adapt["strategies"].values()) + " |")
  a = adapt["adapted"]
  print(f"\nFew-shot adaptation ({len(adapt['folds'])} folds of {adapt['shots']}): "
        f"{a['mean']:.4f} ± {a['std']:.4f}; default {adapt['default']['strategy']} "
        f"{adapt['default']['ndcg@10']:.4f}; oracle {adapt['oracle']['strategy']} "
        f"{adapt['oracle']['ndcg@10']:.4f}; chosen {adapt['chosen_counts']}")


def plot_pruning(pruning: dict, path: pathlib.Path) -> None:
  fig, ax = plt.subplots(figsize=(5, 3.5))
  x = [beta_d for _, beta_d, _ in BETA_D]
  for beta_q in BETA_Q:
    ax.plot(x, [ndcg(pruning[beta_d, beta_q]) for beta_d in x], marker="o",
            label=f"β_q = {float(beta_q) * 100:.0f} %")
  ax.set_xscale("log")
  ax.set_xticks(x, [label for label, _, _ in BETA_D])
  ax.minorticks_off()
  ax.invert_xaxis()  # more pruning to the right
  scores = [ndcg(r) for r in pruning.values() if r is not None]
  if scores:  # ±0.05 around the measurements: differences of 0.005 look as small as they are
    ax.set_ylim(min(scores) - 0.05, max(scores) + 0.05)
  ax.set_xlabel("β_d: document tokens in the token-retrieval index")
  ax.set_ylabel("nDCG@10 (SciFact test)")
  ax.set_title("ALIGNER-MiniLM: salience pruning")
  ax.legend(loc="lower left")
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  print(f"\nWrote {path}")


def plot_variants(variants: dict, path: pathlib.Path) -> None:
  fig, ax = plt.subplots(figsize=(5, 3.5))
  for variant in VARIANTS:
    points = [(beta_d, ndcg(variants[variant, beta_d]))
              for _, beta_d, _ in BETA_D
              if variants[variant, beta_d] is not None]
    if points:
      ax.plot(*zip(*points), marker="o", label=variant)
  ax.set_xscale("log")
  ax.set_xticks([beta_d for _, beta_d, _ in BETA_D], [label for label, _, _ in BETA_D])
  ax.minorticks_off()
  ax.invert_xaxis()
  ax.set_xlabel("β_d: document tokens in the token-retrieval index")
  ax.set_ylabel("nDCG@10 (SciFact test)")
  ax.set_title("ALIGNER-MiniLM: salience variant (β_q = 100 %)")
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  print(f"Wrote {path}")


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("out", type=pathlib.Path)
  parser.add_argument("figures", type=pathlib.Path, nargs="?")
  parser.add_argument("--nfcorpus_record", help="Write the NFCorpus rows' run record here.")
  parser.add_argument("--scifact_record", help="Write the first SciFact table's run record here.")
  parser.add_argument(
      "--dev_record", help="Write the dev table's run record here (OUT_DIR: "
      "launch/aligner_dev.sh's) and print the table.")
  args = parser.parse_args()
  if args.dev_record:
    record = dev_record(args.out)
    io.write_results(args.dev_record, record)
    print(dev_table(record))
  else:
    main(args.out, args.figures or args.out)
  if args.nfcorpus_record:
    io.write_results(args.nfcorpus_record, nfcorpus_record(args.out))
  if args.scifact_record:
    io.write_results(args.scifact_record, scifact_record(args.out))
