#!/usr/bin/env bash
# The dev-split tuning of docs/results.md ("Tuning on a dev split of SciFact train"): recipes
# around gin/runs/xtr_minilm_scifact.gin, each trained on 647 of SciFact train's 809 queries,
# exported, and evaluated on the 162 held out (`beir_files.carve_dev_split`, seed 0) with f_XTR'
# through ScaNN (k' = 1000) and exact MaxSim; never on test.
#
#   launch/scifact_dev_tuning.sh [OUT_DIR]     (default runs/dev_tuning; ~10 min per recipe on
#                                               2 cores; the k_train sweep first)
#
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
# Results: OUT_DIR/<recipe>/{xtr,exhaustive}.json; the table and its record:
# launch/ablation_tables.py --dev_tuning=OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
out=${1:-runs/dev_tuning}
dev=$out/scifact_dev
bin=.venv/bin
[[ -f $dev/qrels/dev.tsv ]] || $bin/python -c \
  "from xtr.data import beir_files; beir_files.carve_dev_split('data/scifact', '$dev')"

# name | extra gin bindings (';'-separated)
recipes=(
  "k1024|objective.Objective.k_train = 1024"
  "k512|objective.Objective.k_train = 512"
  "k128|objective.Objective.k_train = 128"
  "k32|objective.Objective.k_train = 32"
  "k32_random|objective.Objective.k_train = 32;initialization.Initialization.projection_init = 'random'"
  "k32_lr1e-5|objective.Objective.k_train = 32;optimizers.warmup_constant.learning_rate = 1e-5"
  "first|objective.Objective.k_train = 32;initialization.Initialization.projection_init = 'random';optimizers.warmup_constant.learning_rate = 1e-4"
)

for spec in "${recipes[@]}"; do
  IFS='|' read -r recipe bindings <<< "$spec"
  gin=(--gin_file=gin/runs/xtr_minilm_scifact.gin --gin_bindings="DATA_DIR = '$dev'"
       --gin_bindings="MODEL_DIR = '$out/$recipe'")
  IFS=';' read -ra extra <<< "$bindings"
  for binding in "${extra[@]}"; do gin+=(--gin_bindings="$binding"); done
  $bin/xtr-train "${gin[@]}"
  [[ -f $out/$recipe/index/manifest.json ]] || $bin/xtr-export "${gin[@]}" \
    --checkpoint=$out/$recipe --corpus=data/scifact/corpus.jsonl.gz --out=$out/$recipe/index
  for scoring in xtr exhaustive; do
    [[ -f $out/$recipe/$scoring.json ]] || $bin/xtr-eval-beir --data_dir=$dev --split=dev \
      --index=$out/$recipe/index --checkpoint=$out/$recipe --k_prime=1000 --scoring=$scoring \
      --out=$out/$recipe/$scoring.json
  done
done
