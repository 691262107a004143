#!/usr/bin/env bash
# The model rows of docs/results.md "Generalization" (§1, the problem; §3, the bars) and their
# run record: the demo's model (gin/runs/demo.gin: 384-d, WiSE-FT α = 0.7) and the 128-d recipe
# it replaced (gin/runs/xtr_minilm_scifact.gin: launch/scifact_ablations.sh's xtr_k1024) on
# SciFact test and NFCorpus test, through ScaNN + f_XTR' (k' = 1000) and by exact MaxSim, beside
# the demo's untuned baselines on both sets.
#
#   launch/generalization_bars.sh [DEMO_MODEL_DIR] [RECIPE_128_DIR] [OUT_DIR]
#     (defaults runs/demo/xtr, runs/ablations/xtr_k1024, runs/generalization_bars; with both
#      models trained, ~20 min on 2 cores: the demo's baselines encode both corpora again)
#
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
# Results: OUT_DIR/demo/run.json (xtr-demo), OUT_DIR/<model>_<set>_<scoring>.json
# (xtr-eval-beir) and the record OUT_DIR/record.json (launch/generalization_bars.py).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
demo=${1:-runs/demo/xtr}
recipe128=${2:-runs/ablations/xtr_k1024}
out=${3:-runs/generalization_bars}
nfcorpus=../shared/data/beir/nfcorpus
bin=.venv/bin

# The demo's model on both sets, and the untuned baselines (trained first if it is not there).
[[ -f $out/demo/run.json ]] || $bin/xtr-demo --gin_file=gin/runs/demo.gin \
  --gin_bindings="MODEL_DIR = '$demo'" --gin_bindings="demo.run.out_dir = '$out/demo'" \
  --gin_bindings="demo.run.extra_data_dirs = ['$nfcorpus']"

evaluate() {  # evaluate NAME CHECKPOINT INDEX DATA_DIR SCORING
  [[ -f $out/$1.json ]] || $bin/xtr-eval-beir --data_dir="$4" --split=test --index="$3" \
    --checkpoint="$2" --scoring="$5" --k_prime=1000 --out="$out/$1.json"
}
evaluate demo_scifact_exhaustive "$demo/wise_ft_0.7" "$demo/wise_ft_0.7/index" data/scifact \
  exhaustive
evaluate demo_nfcorpus_exhaustive "$demo/wise_ft_0.7" "$demo/wise_ft_0.7/index_nfcorpus" \
  $nfcorpus exhaustive
[[ -f $recipe128/index_nfcorpus/manifest.json ]] || $bin/xtr-export \
  --gin_file=gin/runs/xtr_minilm_scifact.gin --checkpoint="$recipe128" \
  --corpus=$nfcorpus/corpus.jsonl.gz --out="$recipe128/index_nfcorpus"
for scoring in xtr exhaustive; do
  evaluate "recipe128_scifact_$scoring" "$recipe128" "$recipe128/index" data/scifact $scoring
  evaluate "recipe128_nfcorpus_$scoring" "$recipe128" "$recipe128/index_nfcorpus" $nfcorpus \
    $scoring
done
$bin/python launch/generalization_bars.py "$out" --record="$out/record.json"
