#!/usr/bin/env bash
# ALIGNER on SciFact test (docs/results.md, "ALIGNER"): ALIGNER-MiniLM trained with
# gin/runs/aligner_minilm_scifact.gin (the demo's backbone, data and budget), exported unpruned
# and re-pruned (`xtr-export --from_index`) to β_d ∈ {40, 20, 10, 5} % of each document's tokens,
# evaluated with top-1 sparse alignment at β_q ∈ {100, 50, 30} %; few-shot alignment adaptation
# (folds of 8) and every strategy's score on the unpruned index; the salience variants (relu,
# hard, l1) at β_d ∈ {100, 20, 10, 5} %; Table 4's example (query 148 and its gold document).
#
#   launch/aligner_scifact.sh [OUT_DIR]     (default runs/aligner; on 2 cores ~25 min per model,
#                                            ~10 min per export, ~1 min per re-pruning, ~4 min
#                                            per evaluation)
#
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
# Results: OUT_DIR/<model>/<evaluation>.json, OUT_DIR/<model>/example.{md,html,json} (Table 4's
# example and its run record), OUT_DIR/tables.md, OUT_DIR/*.png (launch/aligner_tables.py).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
out=${1:-runs/aligner}
data=data/scifact
bin=.venv/bin

# name | extra gin bindings (';'-separated)
models=(
  "entropy_lp|salience.Salience.variant = 'entropy_lp'"
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

export_index() {  # export_index MODEL: its unpruned index
  [[ -f $out/$1/index/manifest.json ]] || $bin/xtr-export "${gin[@]}" \
    --checkpoint=$out/$1 --corpus=$data/corpus.jsonl.gz --out=$out/$1/index
}

reprune() {  # reprune MODEL BETA_D: index_dBETA_D from the model's unpruned index, no re-encoding
  [[ -f $out/$1/index_d$2/manifest.json ]] || $bin/xtr-export --from_index=$out/$1/index \
    --prune_doc=$2 --out=$out/$1/index_d$2
}

for spec in "${models[@]}"; do
  IFS='|' read -r model bindings <<< "$spec"
  gin=(--gin_file=gin/runs/aligner_minilm_scifact.gin --gin_bindings="MODEL_DIR = '$out/$model'")
  IFS=';' read -ra extra <<< "$bindings"
  for binding in "${extra[@]}"; do gin+=(--gin_bindings="$binding"); done
  $bin/xtr-train "${gin[@]}"
  export_index $model
  evaluate $model index top1_q1 --prune_query=1
  for beta_d in 0.2 0.1 0.05; do
    reprune $model $beta_d
    evaluate $model "index_d$beta_d" "top1_d${beta_d}_q1" --prune_query=1
  done
  if [[ $model == entropy_lp || $model == relu ]]; then  # k' = 100: fewer candidates
    evaluate $model index top1_q1_k100 --prune_query=1 --k_prime=100
    for beta_d in 0.2 0.1 0.05; do
      evaluate $model "index_d$beta_d" "top1_d${beta_d}_q1_k100" --prune_query=1 --k_prime=100
    done
  fi
done

for model in entropy_lp relu; do
  [[ -f $out/$model/adapt.json ]] || $bin/xtr-adapt-alignment --data_dir=$data --split=test \
    --index=$out/$model/index --checkpoint=$out/$model --k_prime=1000 --shots=8 \
    --out=$out/$model/adapt.json
done
model=entropy_lp
for beta_q in 1 0.5 0.3; do
  for beta_d in 0.1 0.4 0.05 0.2; do
    reprune $model $beta_d
    evaluate $model "index_d$beta_d" "top1_d${beta_d}_q$beta_q" --prune_query=$beta_q
  done
  evaluate $model index "top1_q$beta_q" --prune_query=$beta_q
done
for model in entropy_lp relu; do  # Table 4's example; its record: example.json (the Markdown).
  [[ -f $out/$model/example.md ]] || $bin/xtr-show-alignment --data_dir=$data --split=test \
    --index=$out/$model/index --checkpoint=$out/$model --query_id=148 \
    --out=$out/$model/example.md --record=$out/$model/example.json
  [[ -f $out/$model/example.html ]] || $bin/xtr-show-alignment --data_dir=$data --split=test \
    --index=$out/$model/index --checkpoint=$out/$model --query_id=148 \
    --out=$out/$model/example.html
done
$bin/python launch/aligner_tables.py "$out" | tee "$out/tables.md"
