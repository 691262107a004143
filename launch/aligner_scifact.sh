#!/usr/bin/env bash
# ALIGNER on SciFact test (docs/results.md, "ALIGNER"): ALIGNER-MiniLM trained with
# gin/runs/aligner_minilm_scifact.gin (the demo's backbone, data and budget), exported unpruned
# and pruned to β_d ∈ {40, 20, 10, 5} % of each document's tokens, evaluated with top-1 sparse
# alignment at β_q ∈ {100, 50, 30} %; few-shot alignment adaptation (folds of 8) and every
# strategy's score on the unpruned index; the salience variants (relu, hard, l1) at β_d = 20 %.
#
#   launch/aligner_scifact.sh [OUT_DIR]     (default runs/aligner; ~25 min per model on 2 cores,
#                                            ~4 min per export)
#
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
# Results: OUT_DIR/<model>/<evaluation>.json, OUT_DIR/tables.md.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
out=${1:-runs/aligner}
data=data/scifact
bin=.venv/bin

# name | extra gin bindings (';'-separated)
models=(
  "entropy_lp|"
  "relu|salience.Salience.variant = 'relu'"
  "hard|salience.Salience.variant = 'hard'"
  "l1|salience.Salience.variant = 'l1';salience.Salience.l1 = 0.01"
)

evaluate() {  # evaluate MODEL INDEX NAME FLAGS...
  local model=$1 index=$2 name=$3
  shift 3
  [[ -f $out/$model/$name.json ]] && return
  $bin/xtr-eval-beir --data_dir=$data --split=test --index=$out/$model/$index \
    --checkpoint=$out/$model --out=$out/$model/$name.json --scoring=aligner --k_prime=1000 "$@"
}

export_index() {  # export_index MODEL INDEX FLAGS...
  local model=$1 index=$2
  shift 2
  [[ -f $out/$model/$index/manifest.json ]] || $bin/xtr-export "${gin[@]}" \
    --checkpoint=$out/$model --corpus=$data/corpus.jsonl.gz --out=$out/$model/$index "$@"
}

for spec in "${models[@]}"; do
  IFS='|' read -r model bindings <<< "$spec"
  gin=(--gin_file=gin/runs/aligner_minilm_scifact.gin --gin_bindings="MODEL_DIR = '$out/$model'")
  IFS=';' read -ra extra <<< "$bindings"
  for binding in "${extra[@]}"; do gin+=(--gin_bindings="$binding"); done
  $bin/xtr-train "${gin[@]}"
  if [[ $model == entropy_lp ]]; then
    export_index $model index
    evaluate $model index top1_q1 --prune_query=1
    [[ -f $out/$model/adapt.json ]] || $bin/xtr-adapt-alignment --data_dir=$data --split=test \
      --index=$out/$model/index --checkpoint=$out/$model --k_prime=1000 --shots=8 \
      --out=$out/$model/adapt.json
    for beta_d in 0.2 0.1 0.4 0.05; do
      export_index $model "index_d$beta_d" --prune_doc=$beta_d
      evaluate $model "index_d$beta_d" "top1_d${beta_d}_q1" --prune_query=1
      evaluate $model "index_d$beta_d" "top1_d${beta_d}_q0.5" --prune_query=0.5
    done
    for beta_q in 0.5 0.3; do
      evaluate $model index "top1_q$beta_q" --prune_query=$beta_q
      for beta_d in 0.2 0.1 0.4 0.05; do
        evaluate $model "index_d$beta_d" "top1_d${beta_d}_q$beta_q" --prune_query=$beta_q
      done
    done
  else
    export_index $model index_d0.2 --prune_doc=0.2
    evaluate $model index_d0.2 "top1_d0.2_q1"
  fi
done

$bin/python - "$out" <<'PYTHON' | tee "$out/tables.md"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
load = lambda path: json.loads(path.read_text())
head = "| {} | nDCG@10 | Recall@100 | MRR@10 | ScaNN tokens | ScaNN MB | ms/query |\n" + "|---" * 7 + "|"
def row(label, path):
  r = load(path)
  return (f"| {label} | {r['ndcg@10']:.4f} | {r['recall@100']:.4f} | {r['mrr@10']:.4f} | "
          f"{r['indexed_tokens']:,} | {r['scann_bytes'] / 2**20:.1f} | "
          f"{r['latency_ms_per_query']['mean']:.1f} |")
print("Pruning (top-1 alignment, k' = 1000)\n\n" + head.format("β_d, β_q"))
for beta_d, prefix in (("100 %", "top1"), ("40 %", "top1_d0.4"), ("20 %", "top1_d0.2"),
                       ("10 %", "top1_d0.1"), ("5 %", "top1_d0.05")):
  for beta_q in ("1", "0.5", "0.3"):
    print(row(f"{beta_d}, {float(beta_q):.0%}", out / "entropy_lp" / f"{prefix}_q{beta_q}.json"))
print("\nSalience variant (β_d = 20 %, β_q = 100 %)\n\n" + head.format("variant"))
for variant in ("entropy_lp", "relu", "hard", "l1"):
  print(row(variant, out / variant / "top1_d0.2_q1.json"))
adapt = load(out / "entropy_lp" / "adapt.json")
print("\nAlignment strategies (unpruned, nDCG@10)\n")
print("| " + " | ".join(adapt["strategies"]) + " |\n" + "|---" * len(adapt["strategies"]) + "|")
print("| " + " | ".join(f"{v:.4f}" for v in adapt["strategies"].values()) + " |")
a = adapt["adapted"]
print(f"\nFew-shot adaptation ({len(adapt['folds'])} folds of {adapt['shots']}): "
      f"{a['mean']:.4f} ± {a['std']:.4f}; default {adapt['default']['strategy']} "
      f"{adapt['default']['ndcg@10']:.4f}; oracle {adapt['oracle']['strategy']} "
      f"{adapt['oracle']['ndcg@10']:.4f}; chosen {adapt['chosen_counts']}")
PYTHON
