#!/usr/bin/env bash
# Chooses the salience variant of gin/runs/aligner_minilm_scifact.gin on a dev split of SciFact
# train (docs/results.md, "ALIGNER", "Choosing the recipe on dev"): each variant is trained on 647
# train queries, exported unpruned and re-pruned to β_d = 20 %, and evaluated on the 162 held-out
# queries with top-1 sparse alignment (k' = 1000). The test split is never read.
#
#   launch/aligner_dev.sh [OUT_DIR]     (default runs/aligner_dev; on 2 cores ~25 min per model,
#                                        ~10 min per export, ~3 min per evaluation)
#
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
# Results: OUT_DIR/<variant>/<evaluation>.json
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
out=${1:-runs/aligner_dev}
data=runs/scifact_dev
bin=.venv/bin

[[ -f $data/qrels/dev.tsv ]] || $bin/python -c \
  "from xtr.data import beir_files; beir_files.carve_dev_split('data/scifact', '$data')"

for variant in entropy_lp relu; do
  gin=(--gin_file=gin/runs/aligner_minilm_scifact.gin --gin_bindings="DATA_DIR = '$data'"
       --gin_bindings="MODEL_DIR = '$out/$variant'"
       --gin_bindings="salience.Salience.variant = '$variant'")
  $bin/xtr-train "${gin[@]}"
  [[ -f $out/$variant/index/manifest.json ]] || $bin/xtr-export "${gin[@]}" \
    --checkpoint=$out/$variant --corpus=$data/corpus.jsonl.gz --out=$out/$variant/index
  [[ -f $out/$variant/index_d0.2/manifest.json ]] || $bin/xtr-export \
    --from_index=$out/$variant/index --prune_doc=0.2 --out=$out/$variant/index_d0.2
  for index in index index_d0.2; do
    [[ -f $out/$variant/dev_$index.json ]] || $bin/xtr-eval-beir --data_dir=$data --split=dev \
      --index=$out/$variant/$index --checkpoint=$out/$variant --scoring=aligner --k_prime=1000 \
      --prune_query=1 --out=$out/$variant/dev_$index.json
  done
done
