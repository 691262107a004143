#!/usr/bin/env bash
# ALIGNER's few-shot alignment adaptation where it matters (docs/results.md, "Adaptation study"):
# the relu ALIGNER-MiniLM of launch/aligner_scifact.sh on SciFact (in-domain) and NFCorpus
# (zero-shot), each with its unpruned index and the index re-pruned to β_d = 40 % and 20 %, and
# 8- and 16-shot folds: the change against the unadapted top-1 alignment on the same index, with
# a 95 % bootstrap interval over folds (launch/adaptation_tables.py, from each search's per-query
# scores). A set of your own in BEIR layout (e.g. ArguAna, where the paper's adaptation gains
# came from) goes in as NAME=DATA_DIR.
#
#   launch/aligner_adaptation.sh [OUT_DIR] [NAME=DATA_DIR ...]
#     defaults: runs/aligner, scifact=data/scifact nfcorpus=../shared/data/beir/nfcorpus
#     (on 2 cores ~10 min per export, ~1 min per re-pruning, ~5-10 min per adaptation)
#
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
# Results: OUT_DIR/relu/adaptation/NAME/adapt_{index,index_d0.4,index_d0.2}.json
# (xtr-adapt-alignment); OUT_DIR/relu/adaptation/tables.md and record.json
# (launch/adaptation_tables.py).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
model=${1:-runs/aligner}/relu
shift || true
sets=("$@")
[[ ${#sets[@]} -gt 0 ]] || sets=(scifact=data/scifact nfcorpus=../shared/data/beir/nfcorpus)
bin=.venv/bin
[[ -d $model/checkpoints ]] || { echo "No model at $model: run launch/aligner_scifact.sh." >&2; exit 1; }

for spec in "${sets[@]}"; do
  name=${spec%%=*} data=${spec#*=}
  out=$model/adaptation/$name
  mkdir -p "$out"
  [[ -f $out/index/manifest.json ]] || $bin/xtr-export \
    --gin_file=gin/runs/aligner_minilm_scifact.gin --gin_bindings="salience.Salience.variant = 'relu'" \
    --checkpoint=$model --corpus=$data/corpus.jsonl.gz --out=$out/index
  for beta_d in 0.4 0.2; do
    [[ -f $out/index_d$beta_d/manifest.json ]] || $bin/xtr-export --from_index=$out/index \
      --prune_doc=$beta_d --out=$out/index_d$beta_d
  done
  for index in index index_d0.4 index_d0.2; do  # One search per index; 16-shot folds from it.
    [[ -f $out/adapt_$index.json ]] || $bin/xtr-adapt-alignment --data_dir=$data --split=test \
      --index=$out/$index --checkpoint=$model --k_prime=1000 --shots=8 --out=$out/adapt_$index.json
  done
done
$bin/python launch/adaptation_tables.py "$model/adaptation" | tee "$model/adaptation/tables.md"
