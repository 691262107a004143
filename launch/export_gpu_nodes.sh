#!/usr/bin/env bash
# Runs xtr-export on GPU nodes under SLURM, one process per node: each node encodes one shard of
# the corpus on all of its GPUs (data parallel) and builds that shard's ScaNN.
#
#   sbatch --nodes=4 --gpus-per-node=8 --ntasks-per-node=1 launch/export_gpu_nodes.sh \
#     --gin_file=gin/models/xtr_base_en.gin --checkpoint=/shared/xtr_base \
#     --corpus=/shared/msmarco/corpus.jsonl.gz --out=/shared/msmarco_index
#
# The repository and its .venv (`make setup-gpu`), the checkpoint, the corpus and --out must be
# on a file system every node reads and writes. `--multihost` calls jax.distributed.initialize(),
# which reads the coordinator, the number of processes and this process's index from SLURM; node
# i writes OUT/shard-0000i-of-0000N. Rerun to resume; `xtr-search --index=OUT` searches all.
#
# sbatch runs a copy of this script from its spool directory: the repository is the directory
# sbatch was called from (SLURM_SUBMIT_DIR), or XTR_REPO; run directly, the script's own.
set -euo pipefail
repo=${XTR_REPO:-${SLURM_SUBMIT_DIR:-$(dirname "$0")/..}}
if [[ ! -x $repo/.venv/bin/xtr-export ]]; then
  echo "$(basename "$0"): $repo/.venv/bin/xtr-export is missing: call sbatch from the repository" \
    "root (after make setup-gpu), or set XTR_REPO to it." >&2
  exit 2
fi
cd "$repo"
source launch/slurm_gpus.sh  # JAX_LOCAL_DEVICE_IDS: all of the node's GPUs.
srun --ntasks-per-node=1 .venv/bin/xtr-export --multihost "$@"
