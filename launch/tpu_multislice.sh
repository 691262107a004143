#!/usr/bin/env bash
# Runs xtr-train on every worker of an *existing* multi-slice TPU job (queued resource with
# --node-count=N); creates nothing by itself. Data parallelism across the slices, over DCN:
#
#   launch/tpu_multislice.sh QUEUED_RESOURCE ZONE NUM_SLICES --gin_file=gin/runs/xtr_msmarco.gin \
#     --gin_bindings="MODEL_DIR='gs://bucket/xtr_base'" \
#     --gin_bindings="TRIPLES_PATH='gs://bucket/triples.train.small-*.tsv'"
#
# Each worker of each slice needs this repository at $REMOTE_DIR (default: ~/xtr) set up with
# `make setup-tpu`. The TPU runtime gives every device its slice_index; the mesh is built per
# slice (host-major, model groups as boxes of chips) and the slices are stacked on `data`
# (partitioning.make_mesh.dcn_mesh_shape = (NUM_SLICES, 1)). Slice s's node is named
# QUEUED_RESOURCE-s, as `gcloud compute tpus queued-resources create --node-prefix` names them.
set -euo pipefail
if [[ $# -lt 3 ]]; then
  echo "usage: $0 QUEUED_RESOURCE ZONE NUM_SLICES [xtr-train flags...]" >&2
  exit 2
fi
name=$1
zone=$2
num_slices=$3
shift 3
remote_dir=${REMOTE_DIR:-'~/xtr'}
train_args=$(printf ' %q' "$@" "--gin_bindings=partitioning.make_mesh.dcn_mesh_shape = ($num_slices, 1)")
for ((s = 0; s < num_slices; s++)); do
  gcloud compute tpus tpu-vm ssh "$name-$s" --zone "$zone" --worker=all \
    --command "cd $remote_dir && .venv/bin/xtr-train --multihost$train_args" &
done
wait
