#!/usr/bin/env bash
# Runs xtr-train (or $XTR_TOOL, e.g. xtr-export: launch/export_tpu_pod.sh) on every worker of an
# *existing* TPU VM pod; creates nothing by itself.
#
#   launch/tpu_pod.sh TPU_NAME ZONE --gin_file=gin/runs/xtr_msmarco.gin \
#     --gin_bindings="MODEL_DIR='gs://bucket/xtr_base'" \
#     --gin_bindings="TRIPLES_PATH='gs://bucket/triples.train.small-*.tsv'"
#
# Each worker needs this repository at $REMOTE_DIR (default: ~/xtr) set up with
# `make setup-tpu`, and MODEL_DIR / data paths that every worker can read (gs://).
# One process per host; `--multihost` makes xtr-train call jax.distributed.initialize(), so the
# mesh spans all chips of the pod and every host reads its own files of the triples (README:
# "On a TPU pod" says how to split them).
set -euo pipefail
if [[ $# -lt 2 ]]; then
  echo "usage: $0 TPU_NAME ZONE [${XTR_TOOL:-xtr-train} flags...]" >&2
  exit 2
fi
tpu_name=$1
zone=$2
shift 2
remote_dir=${REMOTE_DIR:-'~/xtr'}
tool_args=$(printf ' %q' "$@")
gcloud compute tpus tpu-vm ssh "$tpu_name" --zone "$zone" --worker=all \
  --command "cd $remote_dir && .venv/bin/${XTR_TOOL:-xtr-train} --multihost$tool_args"
