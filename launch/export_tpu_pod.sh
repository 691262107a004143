#!/usr/bin/env bash
# Runs xtr-export on every worker of an *existing* TPU VM pod: each host encodes one shard of the
# corpus on its own chips and builds that shard's ScaNN; creates nothing by itself.
#
#   launch/export_tpu_pod.sh TPU_NAME ZONE --gin_file=gin/models/xtr_base_en.gin \
#     --checkpoint=/mnt/xtr_base --corpus=/mnt/msmarco/corpus.jsonl.gz --out=/mnt/msmarco_index
#
# Each worker needs this repository at $REMOTE_DIR (default: ~/xtr) set up with
# `make setup-tpu`; --checkpoint, --corpus and --out on a file system that every worker reads and
# writes (e.g. a Filestore or gcsfuse mount). `--multihost` makes shard jax.process_index() of
# jax.process_count() this host's: OUT/shard-SSSSS-of-NNNNN. Rerun the same command to resume
# after a preemption; search the shards as one index with `xtr-search --index=OUT`.
XTR_TOOL=xtr-export exec "$(dirname "$0")/tpu_pod.sh" "$@"
