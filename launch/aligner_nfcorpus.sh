#!/usr/bin/env bash
# ALIGNER on a second BEIR set (docs/results.md, "ALIGNER", NFCorpus): the SciFact-trained
# ALIGNER-MiniLM of launch/aligner_scifact.sh (OUT_DIR/VARIANT), applied zero-shot to NFCorpus:
# exported unpruned and re-pruned to β_d = 20 %, evaluated on the test queries with top-1 sparse
# alignment, and few-shot alignment adaptation with every strategy's score (Table 3 analog).
#
#   launch/aligner_nfcorpus.sh [VARIANT] [DATA_DIR] [OUT_DIR]
#     defaults: relu, ../shared/data/beir/nfcorpus, runs/aligner  (on 2 cores ~10 min export,
#     ~4 min per evaluation, ~10 min adaptation)
#
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
# Results: OUT_DIR/VARIANT/nfcorpus/*.json
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
variant=${1:-relu}
data=${2:-../shared/data/beir/nfcorpus}
model=${3:-runs/aligner}/$variant
out=$model/nfcorpus
bin=.venv/bin
[[ -d $model/checkpoints ]] || { echo "No model at $model: run launch/aligner_scifact.sh." >&2; exit 1; }
mkdir -p "$out"

[[ -f $out/index/manifest.json ]] || $bin/xtr-export \
  --gin_file=gin/runs/aligner_minilm_scifact.gin --gin_bindings="salience.Salience.variant = '$variant'" \
  --checkpoint=$model --corpus=$data/corpus.jsonl.gz --out=$out/index
[[ -f $out/index_d0.2/manifest.json ]] || $bin/xtr-export --from_index=$out/index \
  --prune_doc=0.2 --out=$out/index_d0.2
for index in index index_d0.2; do
  [[ -f $out/top1_$index.json ]] || $bin/xtr-eval-beir --data_dir=$data --split=test \
    --index=$out/$index --checkpoint=$model --scoring=aligner --k_prime=1000 --prune_query=1 \
    --out=$out/top1_$index.json
done
[[ -f $out/adapt.json ]] || $bin/xtr-adapt-alignment --data_dir=$data --split=test \
  --index=$out/index --checkpoint=$model --k_prime=1000 --shots=8 --out=$out/adapt.json
