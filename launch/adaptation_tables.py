"""The adaptation study's table (Markdown, on stdout) and record, from launch/aligner_adaptation.sh.

  .venv/bin/python launch/adaptation_tables.py runs/aligner/relu/adaptation

Reads DIR/<set>/adapt_<index>.json (xtr-adapt-alignment, folds of 8) and runs the protocol
again on each one's per-query scores with folds of 8 and 16 (`adaptation.adapt`, seed 0): per set
and index, the unadapted top-1, each fold size's adapted nDCG@10 and its change against top-1 on
the same index with the 95 % bootstrap interval over folds, and the oracle. Writes the table's
numbers and each report's provenance to DIR/record.json.
"""
import json
import pathlib
import sys

from xtr import io
from xtr.scoring import adaptation

INDEXES = (("100 %", "index"), ("40 %", "index_d0.4"), ("20 %", "index_d0.2"))
SHOTS = (8, 16)


def study(report: dict) -> dict:
  """{shots: adaptation report} for SHOTS, from one xtr-adapt-alignment report."""
  per_query, seed, default = report["per_query"], report["seed"], report["default"]["strategy"]
  ids = list(next(iter(per_query.values())))
  return {
      shots: adaptation.adapt(per_query, adaptation.folds(ids, shots, seed), default)
      for shots in SHOTS
  }


def cell(result: dict) -> str:
  low, high = result["change"]["ci95"]
  return (f"{result['adapted']['mean']:.4f} | {result['change']['mean']:+.4f} "
          f"[{low:+.4f}, {high:+.4f}]")


def entry(report: dict) -> dict:
  """The record of one xtr-adapt-alignment report: its scores, both fold sizes' protocol and
  its provenance."""
  return {
      "default": report["default"],
      "oracle": report["oracle"],
      "strategies": report["strategies"],
      "shots": {
          str(shots): {
              k: result[k] for k in ("adapted", "change", "chosen_counts")
          } for shots, result in study(report).items()
      },
      "num_queries": report["num_queries"],
      "provenance": {
          k: report[k] for k in ("command", "git_commit", "data_sha256", "date", "index")
      },
  }


def row(name: str, label: str, result: dict) -> str:
  """The table's row of one record entry."""
  oracle = result["oracle"]
  return (f"| {name} | {label} | {result['default']['ndcg@10']:.4f} | "
          f"{cell(result['shots']['8'])} | {cell(result['shots']['16'])} | "
          f"{oracle['ndcg@10']:.4f} ({oracle['strategy']}) |")


def main(root: pathlib.Path) -> None:
  print(
      "| set | β_d | top-1 | 8-shot | change [95 % CI] | 16-shot | change [95 % CI] | oracle |\n" +
      "|---" * 8 + "|")
  record = {}
  for set_dir in sorted(p for p in root.iterdir() if p.is_dir()):
    for label, index in INDEXES:
      path = set_dir / f"adapt_{index}.json"
      if path.exists():
        record[f"{set_dir.name}/{index}"] = result = entry(json.loads(path.read_text()))
        print(row(set_dir.name, label, result))
  io.write_results(str(root / "record.json"), record)


if __name__ == "__main__":
  main(pathlib.Path(sys.argv[1]))
