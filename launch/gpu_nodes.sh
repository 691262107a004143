#!/usr/bin/env bash
# Runs xtr-train on GPU nodes under SLURM, one process per node (all of its GPUs):
#
#   sbatch --nodes=4 --gpus-per-node=8 --ntasks-per-node=1 launch/gpu_nodes.sh \
#     --gin_file=gin/runs/xtr_msmarco.gin --gin_bindings="MODEL_DIR='/shared/runs/xtr_base'" \
#     --gin_bindings="TRIPLES_PATH='/shared/msmarco/triples.train.small-*.tsv'"
#
# The repository and its .venv (`make setup-gpu`) must be on a file system every node reads.
# `--multihost` calls jax.distributed.initialize(), which reads the coordinator, the number of
# processes and this process's index from SLURM. The mesh takes the devices process by process:
# a model axis of up to 8 (partitioning.make_mesh.num_partitions) stays inside a node (NVLink),
# and each node feeds the consecutive rows of every batch that its GPUs hold. A model axis across
# nodes: num_partitions = 16 with dcn_mesh_shape = (NODES / 2, 2).
#
# sbatch runs a copy of this script from its spool directory: the repository is the directory
# sbatch was called from (SLURM_SUBMIT_DIR), or XTR_REPO; run directly, the script's own.
set -euo pipefail
repo=${XTR_REPO:-${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}}
if [[ ! -x $repo/.venv/bin/xtr-train ]]; then
  echo "$(basename "$0"): $repo/.venv/bin/xtr-train is missing: call sbatch from the repository" \
    "root (after make setup-gpu), or set XTR_REPO to it." >&2
  exit 2
fi
cd "$repo"
source launch/slurm_gpus.sh  # JAX_LOCAL_DEVICE_IDS: all of the node's GPUs.
srun --ntasks-per-node=1 .venv/bin/xtr-train --multihost "$@"
