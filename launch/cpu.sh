#!/usr/bin/env bash
# Trains on this machine's CPU. Arguments go to xtr-train, e.g.
#   launch/cpu.sh --gin_file=gin/runs/smoke.gin
# NUM_CPU_DEVICES=8 splits the CPU into 8 XLA devices, to try a mesh (e.g. num_partitions=2)
# before taking the same gin config to a TPU pod.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s setup
if [[ -n "${NUM_CPU_DEVICES:-}" ]]; then
  export XLA_FLAGS="--xla_force_host_platform_device_count=${NUM_CPU_DEVICES} ${XLA_FLAGS:-}"
fi
exec .venv/bin/xtr-train "$@"
