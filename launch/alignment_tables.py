"""docs/results.md's "Alignment analysis" tables (Markdown, on stdout) from the alignment.json
files of `xtr-analyze-alignment` (launch/alignment_analysis.sh writes them), and their run record.

  .venv/bin/python launch/alignment_tables.py runs/alignment/demo/alignment.json \
      runs/alignment/d128/alignment.json [--nfcorpus=runs/alignment/nfcorpus/alignment.json] \
      [--record=docs/runs/alignment_analysis_scifact.json --analysis_command=...]
  .venv/bin/python launch/alignment_tables.py runs/alignment/demo/alignment.json \
      --case_study_record=docs/runs/alignment_case_study.json --analysis_command=...

The record holds what the tables show of each model (rerank, term matching, low rank) with its
checkpoint, the analysis settings and the provenance (`run_record.provenance`);
tests/test_run_records.py rebuilds the tables from it with the functions below. The case study
record holds the first file's case study (each panel's matrix and token strings, as its
case_study.png draws them) and the checkpoints of its models.
"""
import argparse
import json

from xtr import io
from xtr.evaluation import run_record

KINDS = ("q→d hard", "q→d soft", "d→q hard", "d→q soft")


def _analysis(paths: list[str]) -> dict:
  """The settings and the table-relevant results of each model of the alignment.json files."""
  models, settings = {}, {}
  for path in paths:
    with open(path, encoding="utf-8") as f:
      report = json.load(f)
    settings = {
        k: report[k]
        for k in ("data_dir", "split", "num_queries", "candidates_per_query", "settings")
    }
    for label, result in report["models"].items():
      models[label] = {k: result[k] for k in ("checkpoint", "rerank", "term_matching", "low_rank")}
  return {**settings, "models": models}


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


def tables(models) -> str:
  """Every table of the section, with a title line before each."""
  parts = ["Rerank\n\n" + rerank(models)]
  for subset in ("candidates", "containing"):
    parts.append(f"Term matching over {subset}\n\n" + term_matching(models, subset))
    for kind in ("q→d hard", "d→q hard"):
      parts.append(f"{kind}, {subset}, by IDF bin\n\n" + by_bin(models, subset, kind))
  return "\n\n".join(parts + ["Low rank\n\n" + low_rank(models)])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("paths", nargs="+", help="SciFact alignment.json files, in table order.")
  parser.add_argument("--nfcorpus", help="The NFCorpus alignment.json (its rerank table).")
  parser.add_argument("--record", help="Write the run record here.")
  parser.add_argument("--analysis_command", action="append", default=[],
                      help="The command lines that wrote the alignment.json files (recorded).")
  parser.add_argument("--case_study_record",
                      help="Write the run record of the first file's case study here.")
  args = parser.parse_args()
  scifact = _analysis(args.paths)
  print(tables(scifact["models"]))
  record = {"scifact": scifact}
  if args.nfcorpus:
    record["nfcorpus"] = _analysis([args.nfcorpus])
    print("\nNFCorpus rerank\n\n" + rerank(record["nfcorpus"]["models"]))
  if args.record:
    data = [analysis["data_dir"] for analysis in record.values()]
    io.write_results(args.record, {
        **run_record.record(record, data, "test"), "analysis_commands": args.analysis_command
    })
  if args.case_study_record:
    with open(args.paths[0], encoding="utf-8") as f:
      report = json.load(f)
    case = {
        "case_study": report["case_study"],
        "temperature": report["settings"]["temperatures"][0],
        "checkpoints": {
            label: result["checkpoint"] for label, result in report["models"].items()
        }
    }
    io.write_results(
        args.case_study_record, {
            **run_record.record(case, [report["data_dir"]], report["split"]), "analysis_commands":
                args.analysis_command
        })


if __name__ == "__main__":
  main()
