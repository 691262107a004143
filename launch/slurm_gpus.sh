# Sourced by gpu_nodes.sh and export_gpu_nodes.sh (one process per node): sets
# JAX_LOCAL_DEVICE_IDS to every GPU of the node. Under SLURM, jax.distributed.initialize() would
# otherwise let each process drive only the GPU of its SLURM_LOCALID (JAX's default of one process
# per GPU): with one task per node, GPU 0 alone. A JAX_LOCAL_DEVICE_IDS already set is kept.
if [[ -z ${JAX_LOCAL_DEVICE_IDS:-} ]]; then
  if [[ ! ${SLURM_GPUS_ON_NODE:-} =~ ^[1-9][0-9]*$ ]]; then
    echo "$(basename "$0"): SLURM_GPUS_ON_NODE=${SLURM_GPUS_ON_NODE:-} is not a number of GPUs:" \
      "submit with --gpus-per-node=N, or set JAX_LOCAL_DEVICE_IDS=0,1,...,N-1." >&2
    exit 2
  fi
  JAX_LOCAL_DEVICE_IDS=$(seq -s, 0 $((SLURM_GPUS_ON_NODE - 1)))
  export JAX_LOCAL_DEVICE_IDS
fi
