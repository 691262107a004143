#!/usr/bin/env bash
# XTR search speed and size on SciFact test (docs/performance.md): the demo's index (`make demo`,
# ScaNN with 1 dimension per AH block) and XTR-only copies of it with 2 and 4 dimensions per
# block (`xtr-export --from_index --store_vectors=none`: no re-encoding), each searched over k'
# and ScaNN leaves by benchmarks/xtr_latency.py (f_XTR', one query at a time, then in batches on
# every core, then end to end with each query encoded alone).
#
#   launch/xtr_latency.sh [DEMO_DIR] [OUT_DIR]   (defaults runs/demo, runs/latency; on 2 idle
#                                                 cores ~2 min per ScaNN build, ~5 min per
#                                                 benchmark)
#
# Every step is skipped when its output exists, so a killed run resumes where it stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
demo=${1:-runs/demo}
out=${2:-runs/latency}
bin=.venv/bin
mkdir -p "$out"

for dims in 2 4; do
  if [ ! -f "$out/dims$dims/manifest.json" ]; then
    $bin/xtr-export --from_index="$demo/xtr/index" --out="$out/dims$dims" --store_vectors=none \
      --gin_bindings="ScannConfig.dims_per_block = $dims"
  fi
done

for index in "$demo/xtr/index" "$out/dims2" "$out/dims4"; do
  name=$(basename "$index")
  [ "$name" = index ] && name=dims1
  if [ ! -f "$out/$name.json" ]; then
    $bin/python benchmarks/xtr_latency.py "$index" "$demo/xtr" data/scifact "$out/$name" \
      100,1000,4000,40000 0,20,50,200
  fi
done
