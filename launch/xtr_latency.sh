#!/usr/bin/env bash
# XTR search speed and size on SciFact test (docs/performance.md): the demo's index (`make demo`,
# ScaNN with 1 dimension per AH block) and XTR-only copies of it with other ScaNN settings (2
# and 4 dimensions per block, the anisotropic threshold, 256 centers per block; `xtr-export
# --from_index --store_vectors=none`: no re-encoding), each searched over k' and ScaNN leaves by benchmarks/xtr_latency.py (f_XTR', one query at a time, then in batches on
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

# name | ScannConfig gin bindings (';'-separated) of an XTR-only copy of the demo's index
variants=(
  "dims2|ScannConfig.dims_per_block = 2"
  "dims4|ScannConfig.dims_per_block = 4"
  "dims4_eta02|ScannConfig.dims_per_block = 4;ScannConfig.anisotropic_quantization_threshold = 0.2"
  "dims4_lut256|ScannConfig.dims_per_block = 4;ScannConfig.hash_type = 'lut256'"
)
for variant in "${variants[@]}"; do
  IFS='|' read -r name bindings <<< "$variant"
  if [ ! -f "$out/$name/manifest.json" ]; then
    IFS=';' read -ra gin <<< "$bindings"
    $bin/xtr-export --from_index="$demo/xtr/index" --out="$out/$name" --store_vectors=none \
      "${gin[@]/#/--gin_bindings=}"
  fi
done

for index in "$demo/xtr/index" "${variants[@]%%|*}"; do
  name=$(basename "$index")
  [ "$name" = index ] && name=dims1 || index=$out/$name
  if [ ! -f "$out/$name.json" ]; then
    $bin/python benchmarks/xtr_latency.py "$index" "$demo/xtr" data/scifact "$out/$name" \
      100,1000,4000,40000 0,50,200
  fi
done
