#!/usr/bin/env bash
# XTR search speed and size on SciFact test (docs/performance.md): the demo's index (`make demo`,
# the default ScaNN settings) and XTR-only copies of it with the settings of gin/scann/ (fast,
# compact; `xtr-export --from_index --store_vectors=none`: no re-encoding), each searched over
# k' and ScaNN leaves by benchmarks/xtr_latency.py (f_XTR', one query at a time, then in
# batches on every core, then end to end with each query encoded alone).
#
#   launch/xtr_latency.sh [DEMO_DIR] [OUT_DIR]   (defaults runs/demo, runs/latency; on 2 idle
#                                                 cores ~2-3 min per ScaNN build, ~5 min per
#                                                 benchmark)
#
# DEMO_DIR holds DEMO_DIR/xtr (a checkpoint) and DEMO_DIR/xtr/index: the 128-d model's demo run
# that docs/performance.md measures (its first paragraph says how to rebuild it).
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
demo=${1:-runs/demo}
out=${2:-runs/latency}
bin=.venv/bin
mkdir -p "$out"

for name in fast compact; do
  if [ ! -f "$out/$name/manifest.json" ]; then
    $bin/xtr-export --from_index="$demo/xtr/index" --out="$out/$name" --store_vectors=none \
      --gin_file="gin/scann/$name.gin"
  fi
done

for name in default fast compact; do
  index=$out/$name
  [ "$name" = default ] && index=$demo/xtr/index
  if [ ! -f "$out/$name.json" ]; then
    $bin/python benchmarks/xtr_latency.py "$index" "$demo/xtr" data/scifact "$out/$name" \
      100,1000,4000,40000 0,50,200
  fi
done
