#!/usr/bin/env bash
# The generalization study of docs/results.md ("Generalization"): which recipe keeps the
# backbone's quality out of domain. Models get the demo's steps and settings
# (gin/runs/xtr_minilm_scifact.gin) plus one change each, are trained on SciFact (the 647 train
# queries of a carved dev split) or on NFCorpus train, and are scored by exact MaxSim on the 162
# SciFact dev queries and on NFCorpus dev, in domain and out. 0-step models (the projection
# alone) are also scored on both test splits (docs/results.md's table 1.2).
#
#   launch/generalization.sh [OUT_DIR]   (default runs/generalization; on 2 cores ~8 min per
#                                         model and ~5 min per evaluation of both dev sets)
#
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
# Results: OUT_DIR/<model>/<set>.json, OUT_DIR/<model>/wise_ft_<alpha>/<set>.json (each with its
# provenance); the tables of docs/results.md and their run record, OUT_DIR/record.json, are
# written after each model (`launch/generalization.py tables`).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
out=${1:-runs/generalization}
dev=runs/scifact_dev
nfcorpus=../shared/data/beir/nfcorpus
bin=.venv/bin
study="$bin/python launch/generalization.py"

[[ -f $dev/qrels/dev.tsv ]] || $bin/python -c \
  "from xtr.data import beir_files; beir_files.carve_dev_split('data/scifact', '$dev')"

train() {  # train NAME DATA_DIR BINDING...: the demo's recipe with extra gin bindings
  local name=$1 data=$2
  shift 2
  local gin=(--gin_file=gin/runs/mixture_scifact_nfcorpus.gin --gin_bindings="DATA_DIR = '$data'"
             --gin_bindings="NFCORPUS_DIR = '$nfcorpus'" --gin_bindings="MODEL_DIR = '$out/$name'"
             --gin_bindings="initialization.Initialization.save_initial_params = True")
  for binding in "$@"; do gin+=(--gin_bindings="$binding"); done
  $bin/xtr-train "${gin[@]}"
}

# 1.2: the projection alone (0 steps), its PCA fitted on the demo's SciFact training batches or
# on batches of the SciFact + NFCorpus mixture; or random.
zero=()
for dim in 128 256; do
  for init in pca random pca_mixed; do
    sample=$([[ $init == pca_mixed ]] && echo "'scifact_nfcorpus'" || echo None)
    train "zero/${init}_$dim" data/scifact "trainer.train.num_steps = 0" \
      "xtr_encoder.XTREncoder.embed_dim = $dim" \
      "initialization.Initialization.projection_init = '${init%_mixed}'" \
      "initialization.Initialization.projection_sample_task = $sample"
    zero+=("$out/zero/${init}_$dim")
  done
done
$study projections "$out/zero" scifact_test nfcorpus_test scifact_dev nfcorpus_dev -- "${zero[@]}"
$study tables "$out" --record="$out/record.json" > "$out/tables.md"

# 2: one change each to the demo's recipe; name | training data | gin bindings (';'-separated).
d384="xtr_encoder.XTREncoder.embed_dim = None;initialization.Initialization.projection_init = 'random'"
# The demo's candidate first, so that a partial run has it.
models=(
  "scifact_d384|$dev|$d384"
  "scifact_d128|$dev|"
  "scifact_d384_distill|$dev|$d384;objective.Objective.distillation = 1.0"
  "nfcorpus_d384|$nfcorpus|$d384"
  "scifact_d384_frozen|$dev|$d384;optimizers.make_optimizer.frozen = ['backbone/embeddings', 'backbone/layers_[0-2]/']"
  "scifact_d256_pca_mixed|$dev|xtr_encoder.XTREncoder.embed_dim = 256;initialization.Initialization.projection_sample_task = 'scifact_nfcorpus'"
  "mixture_d384|$dev|$d384;pipeline.DatasetConfig.task_name = 'scifact_nfcorpus'"
  "scifact_d384_lr1e-5|$dev|$d384;optimizers.warmup_constant.learning_rate = 1e-5"
  "nfcorpus_d128|$nfcorpus|"
)
# WiSE-FT θ_α of some models: α swept on dev for the demo's candidate.
declare -A alphas=([scifact_d128]="0.5" [scifact_d384]="0.3 0.5 0.7" [scifact_d384_distill]="0.5 0.7"
                   [nfcorpus_d384]="0.5 0.7")
for spec in "${models[@]}"; do
  IFS='|' read -r name data bindings <<< "$spec"
  IFS=';' read -r -a extra <<< "$bindings"
  train "$name" "$data" "${extra[@]}"
  $study evaluate "$out/$name" scifact_dev nfcorpus_dev
  for alpha in ${alphas[$name]:-}; do
    [[ -d $out/$name/wise_ft_$alpha ]] || $bin/xtr-wise-ft --checkpoint="$out/$name" \
      --alpha="$alpha" --out="$out/$name/wise_ft_$alpha"
    $study evaluate "$out/$name/wise_ft_$alpha" scifact_dev nfcorpus_dev
  done
  $study tables "$out" --record="$out/record.json" > "$out/tables.md"
done

# Bytes per token of the index each dimension makes (xtr-export prints them; the record holds
# them): SciFact's corpus exported by the 128-, 256- and 384-d models trained on SciFact.
declare -A dims=([scifact_d128]=128 [scifact_d256_pca_mixed]=256 [scifact_d384]=None)
for name in "${!dims[@]}"; do
  [[ -f $out/$name/index/manifest.json ]] || $bin/xtr-export --gin_file=gin/runs/xtr_minilm_scifact.gin \
    --gin_bindings="xtr_encoder.XTREncoder.embed_dim = ${dims[$name]}" --checkpoint="$out/$name" \
    --corpus=data/scifact/corpus.jsonl.gz --out="$out/$name/index"
done
$study tables "$out" --record="$out/record.json" > "$out/tables.md"
