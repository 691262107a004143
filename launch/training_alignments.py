"""Evaluation and table of launch/training_alignments.sh (issue 33 §3; docs/results.md, "Training
alignments compared").

  .venv/bin/python launch/training_alignments.py evaluate MODEL_DIR ALIGNMENT OUT_JSON \
      SET=DATA_DIR:SPLIT ... -- GIN_ARGS...
  .venv/bin/python launch/training_alignments.py table OUT_DIR

`evaluate` scores MODEL_DIR's last checkpoint (built from GIN_ARGS, the training run's
--gin_file/--gin_bindings) on each SET's queries with ALIGNMENT ("top_k:2", "top_p:0.02"; "maxsim"
for the XTR model: exact MaxSim, what f_XTR' approximates when every token is retrieved) over
`dev_eval.DevEvaluator`'s bounded candidates: the split's judged documents plus 1,000 others
drawn once (seed 0), the same for every model. Writes OUT_JSON ({SET: nDCG@10} with its run
record). `table` prints mean ± sample std over the seeds of OUT_DIR/<name>_seed<S>/eval.json as
Markdown (one seed: its value alone) and writes OUT_DIR/summary.json ({"table": those, "runs":
every eval.json}).
"""
import json
import pathlib
import re
import sys

import gin
import numpy as np

from xtr import cli
from xtr import io
from xtr.evaluation import dev_eval
from xtr.evaluation import run_record
from xtr.models import encoding
from xtr.scoring import alignment as alignment_lib

# name: how it trains (launch/training_alignments.sh), in the table's order.
RUNS = {
    "xtr": "XTR, in-batch top-k_train (k_train = 1024 of 4,096)",
    "top_k1": "top-1 (ColBERT)",
    "top_k2": "top-k, k = 2",
    "top_k4": "top-k, k = 4",
    "top_p0.02": "top-p, p = 2 %",
}
SETS = {
    "scifact_dev": "SciFact dev (in-domain)",
    "scifact_test": "SciFact test (in-domain)",
    "nfcorpus_test": "NFCorpus test (zero-shot)"
}


def evaluate(model_dir: str, alignment: str, out: str, sets: list[str], gin_args: list[str]):
  files = [a.split("=", 1)[1] for a in gin_args if a.startswith("--gin_file=")]
  bindings = [a.split("=", 1)[1] for a in gin_args if a.startswith("--gin_bindings=")]
  gin.add_config_file_search_path(str(cli.REPO_DIR))
  gin.parse_config_files_and_bindings(files, [*bindings, *cli.ENCODER_BINDINGS])
  encoder = encoding.Encoder(encoding.load_params(model_dir))
  chosen = None if alignment == "maxsim" else alignment_lib.Alignment.parse(alignment)
  results, data = {}, {}
  for spec in sets:
    name, _, where = spec.partition("=")
    data_dir, _, split = where.rpartition(":")
    evaluator = dev_eval.DevEvaluator(data_dir=data_dir, split=split, every_steps=1,
                                      alignment=chosen)
    results[name] = evaluator(0, encoder.model, encoder.params, encoder.tokenizer)["dev_ndcg@10"]
    data.update(run_record.data_sha256([data_dir], split))
    print(f"{model_dir} {alignment} {name}: nDCG@10 {results[name]:.4f}", flush=True)
  record = run_record.record({"ndcg@10": results, "alignment": alignment}, [], "")
  io.write_results(out, {**record, "data_sha256": data})


def table(out_dir: pathlib.Path) -> None:
  seed = re.compile(r"^(.*)_seed(\d+)$")
  runs, records = {}, {}
  for path in sorted(out_dir.glob("*_seed*/eval.json")):
    match = seed.match(path.parent.name)
    records[path.parent.name] = json.loads(path.read_text())
    runs.setdefault(match[1], {})[int(match[2])] = records[path.parent.name]["results"]
  summary = {}
  print("| run | training alignment | seeds | " + " | ".join(SETS.values()) + " |\n" + "|---" *
        (3 + len(SETS)) + "|")
  for name, label in RUNS.items():
    seeds = runs.get(name, {})
    if not seeds:
      continue
    cells, summary[name] = [], {"seeds": sorted(seeds)}
    for s in SETS:
      values = np.array([seeds[k]["ndcg@10"][s] for k in sorted(seeds)])
      std = float(values.std(ddof=1)) if len(values) > 1 else None
      summary[name][s] = {"mean": float(values.mean()), "std": std}
      cells.append(f"{values.mean():.4f}" + ("" if std is None else f" ± {std:.4f}"))
    print(f"| {name} | {label} | {len(seeds)} | " + " | ".join(cells) + " |")
  io.write_results(str(out_dir / "summary.json"), {"table": summary, "runs": records})


if __name__ == "__main__":
  if sys.argv[1] == "evaluate":
    split_at = sys.argv.index("--")
    evaluate(*sys.argv[2:5], sys.argv[5:split_at], sys.argv[split_at + 1:])
  else:
    table(pathlib.Path(sys.argv[2]))
