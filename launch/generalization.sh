#!/usr/bin/env bash
# The generalization study of docs/results.md ("Generalization"): which recipe keeps the
# backbone's quality out of domain. Models are trained on a carved SciFact dev split's 647 train
# queries (the demo's steps and settings, gin/runs/xtr_minilm_scifact.gin, plus one binding each)
# and scored by exact MaxSim on the 162 SciFact dev queries and on NFCorpus dev; 0-step models
# (projection only) are also scored on both test splits, as docs/results.md's table 1.2.
#
#   launch/generalization.sh [OUT_DIR]   (default runs/generalization; on 2 cores ~8 min per
#                                         model and ~9 min per evaluation of both dev sets)
#
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
# Results: OUT_DIR/<model>/<set>.json
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
out=${1:-runs/generalization}
dev=runs/scifact_dev
bin=.venv/bin
study="$bin/python launch/generalization.py"

[[ -f $dev/qrels/dev.tsv ]] || $bin/python -c \
  "from xtr import beir_files; beir_files.carve_dev_split('data/scifact', '$dev')"

train() {  # train NAME DATA_DIR BINDING...: the demo's recipe with extra gin bindings
  local name=$1 data=$2
  shift 2
  local gin=(--gin_file=gin/runs/xtr_minilm_scifact.gin --gin_bindings="DATA_DIR = '$data'"
             --gin_bindings="MODEL_DIR = '$out/$name'")
  for binding in "$@"; do gin+=(--gin_bindings="$binding"); done
  $bin/xtr-train "${gin[@]}"
}

# 1.2: the projection alone (0 steps), its PCA fitted on the demo's SciFact training batches.
zero=()
for dim in 128 256; do
  for init in pca random; do
    train "zero/${init}_$dim" data/scifact "trainer.train.num_steps = 0" \
      "models.XTREncoder.embed_dim = $dim" "trainer.train.projection_init = '$init'"
    zero+=("$out/zero/${init}_$dim")
  done
done
$study projections "$out/zero" scifact_test nfcorpus_test scifact_dev nfcorpus_dev -- "${zero[@]}"

# 2: trained on SciFact (dev split's train queries), scored on both dev sets.
# name | gin bindings (';'-separated)
models=(
  "scifact_d128|"
  "scifact_d384|models.XTREncoder.embed_dim = None;trainer.train.projection_init = 'random'"
)
for spec in "${models[@]}"; do
  IFS='|' read -r name bindings <<< "$spec"
  IFS=';' read -r -a extra <<< "$bindings"
  train "$name" $dev "${extra[@]}"
  $study evaluate "$out/$name" scifact_dev nfcorpus_dev
done
