#!/usr/bin/env bash
# Training alignments compared (issue 33 §3; docs/results.md, "Training alignments compared"):
# the demo's recipe (gin/runs/xtr_minilm_scifact.gin: all-MiniLM-L6-v2, batch 16, 150 steps)
# trained on 647 SciFact train queries (the 162 others are the dev split) with each training
# alignment, 3 seeds each (`trainer.train.seed`: data order, projection init, dropout):
#   xtr         XTR's in-batch top-k_train (the recipe)
#   top_k1      ALIGNER's top-1 alignment (= ColBERT's MaxSim), no salience
#   top_k2/4    top-k, k = 2 / 4
#   top_p0.02   top-p, p = 2 % (2 alignments per 128-token training document; 0.5 % and 1 % are
#               top-1 at that length)
# Each model is evaluated with its training alignment (XTR: exact MaxSim) on SciFact dev and test
# and NFCorpus test (zero-shot) over DevEvaluator's bounded candidates
# (launch/training_alignments.py).
#
#   launch/training_alignments.sh [OUT_DIR] [SEEDS]   (defaults runs/training_alignments, "0 1 2";
#                                                      on 2 idle cores ~7 min training and ~4 min
#                                                      evaluation per model)
#
# Seeds run in order, all alignments of one seed before the next, and a finished step is skipped,
# so a killed run resumes and a partial run has whole seeds. Results: OUT_DIR/<name>_seed<S>/
# eval.json, OUT_DIR/summary.json and the Markdown table on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
out=${1:-runs/training_alignments}
seeds=${2:-0 1 2}
data=runs/scifact_dev
nfcorpus=../shared/data/beir/nfcorpus
bin=.venv/bin
[[ -f $data/qrels/dev.tsv ]] || $bin/python -c \
  "from xtr.data import beir_files; beir_files.carve_dev_split('data/scifact', '$data')"

aligner=("from xtr.scoring import alignment" "objective.Objective.scoring = 'aligner'"
         "objective.Objective.alignment = @alignment.Alignment()"
         "objective.Objective.token_hit_rate = False")
# name | evaluation alignment | gin bindings (';'-separated) on top of the recipe
runs=(
  "xtr|maxsim|"
  "top_k1|top_k:1|alignment.Alignment.k = 1"
  "top_k2|top_k:2|alignment.Alignment.k = 2"
  "top_k4|top_k:4|alignment.Alignment.k = 4"
  "top_p0.02|top_p:0.02|alignment.Alignment.pairwise = 'top_p';alignment.Alignment.p = 0.02"
)
for seed in $seeds; do
  for spec in "${runs[@]}"; do
    IFS='|' read -r name evaluation bindings <<< "$spec"
    dir=$out/${name}_seed$seed
    gin=(--gin_file=gin/runs/xtr_minilm_scifact.gin --gin_bindings="DATA_DIR = '$data'"
         --gin_bindings="MODEL_DIR = '$dir'" --gin_bindings="trainer.train.seed = $seed")
    if [[ $name != xtr ]]; then
      for binding in "${aligner[@]}"; do gin+=(--gin_bindings="$binding"); done
    fi
    IFS=';' read -ra extra <<< "$bindings"
    for binding in "${extra[@]}"; do gin+=(--gin_bindings="$binding"); done
    mkdir -p "$dir"
    grep -qs "step 150/150" "$dir/train.log" || $bin/xtr-train "${gin[@]}" 2>&1 |
      tee "$dir/train.log"
    [[ -f $dir/eval.json ]] || $bin/python launch/training_alignments.py evaluate "$dir" \
      "$evaluation" "$dir/eval.json" scifact_dev=$data:dev scifact_test=data/scifact:test \
      nfcorpus_test=$nfcorpus:test -- "${gin[@]}"
  done
done
$bin/python launch/training_alignments.py table "$out"
