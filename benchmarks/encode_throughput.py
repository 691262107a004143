"""Export encoding throughput: docs/s and tokens/s of `encoding.Encoder.encode_documents` on
SciFact documents with the demo's encoder (all-MiniLM-L6-v2, 384-d), by number of (simulated)
devices and with or without length buckets.

Each row runs in a fresh process with --xla_force_host_platform_device_count=N and
`Encoder.data_parallel=True` (rows split over the N devices, the parameters replicated); it encodes
the documents once to compile every bucket, then times a second pass. Simulated CPU devices share
this machine's cores, so the device rows show the cost of splitting a batch, not a speed-up; on a
TPU or GPU host each device is a chip. It also prints the largest difference of the bucketed
vectors from the full-length ones; with --record, writes the rows with their provenance
(`xtr.evaluation.run_record`).

  .venv/bin/python benchmarks/encode_throughput.py [--docs=512] [--max_length=256,512] \
    [--devices=1,2,4,8] [--record=OUT_JSON]
"""
import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np

from xtr import io
from xtr.evaluation import run_record

_DOCS = flags.DEFINE_integer("docs", 512, "SciFact documents encoded (the corpus's first).")
_MAX_LENGTHS = flags.DEFINE_list("max_length", ["256", "512"], "Encoder.doc_max_length values.")
_DEVICES = flags.DEFINE_list("devices", ["1", "2", "4", "8"], "Simulated device counts.")
_RECORD = flags.DEFINE_string("record", None, "Write the rows as a run record (JSON) here.")
_WORKER = flags.DEFINE_string("worker", None, "Internal: run one row, given as JSON.")


def _row(devices: int, max_length: int, length_bucket: int | None, docs: int) -> dict:
  """One measurement, in this process (its device count set by the caller's XLA_FLAGS)."""
  from xtr.data import beir_files  # pylint: disable=g-import-not-at-top
  from xtr.models import bert  # pylint: disable=g-import-not-at-top
  from xtr.models import encoding  # pylint: disable=g-import-not-at-top
  from xtr.models import hf_weights  # pylint: disable=g-import-not-at-top
  from xtr.models import xtr_encoder  # pylint: disable=g-import-not-at-top
  from xtr.text import vocabularies  # pylint: disable=g-import-not-at-top
  config = bert.BertConfig(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12,
                           intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2)
  minilm = hf_weights.bundled_minilm_dir()
  settings = dict(model=xtr_encoder.XTREncoder(bert.BertEncoder(config), embed_dim=None),
                  vocabulary=vocabularies.bert_vocabulary(minilm), doc_max_length=max_length,
                  data_parallel=True)
  params = {"backbone": hf_weights.load_bert_backbone(minilm, config)}
  encoder = encoding.Encoder(params, length_bucket=length_bucket, **settings)
  corpus = beir_files.read_jsonl("data/scifact/corpus.jsonl.gz", beir_files.document_text)
  texts = list(corpus.values())[:docs]
  encoder.encode_documents(texts)  # compiles every (rows, length) bucket
  start = time.perf_counter()
  vectors, _ = encoder.encode_documents(texts)
  seconds = time.perf_counter() - start
  tokens = sum(len(v) for v in vectors)
  row = dict(devices=devices, max_length=max_length, length_bucket=length_bucket, docs=docs,
             tokens=tokens, seconds=seconds, docs_per_s=docs / seconds,
             tokens_per_s=tokens / seconds)
  if length_bucket:
    full, _ = encoding.Encoder(params, length_bucket=None, **settings).encode_documents(texts)
    row["max_abs_diff"] = float(max(np.abs(a - b).max() for a, b in zip(vectors, full)))
  return row


def main(argv):
  del argv
  if _WORKER.value:
    print(json.dumps(_row(**json.loads(_WORKER.value))))
    return
  run_record.mark_start()
  print("devices  max_length  length_bucket  docs/s  tokens/s  max |bucketed - full|")
  rows = []
  for max_length in map(int, _MAX_LENGTHS.value):
    for devices in map(int, _DEVICES.value):
      for length_bucket in (None, 32):
        spec = dict(devices=devices, max_length=max_length, length_bucket=length_bucket,
                    docs=_DOCS.value)
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
        out = subprocess.run([sys.executable, __file__, f"--worker={json.dumps(spec)}"], env=env,
                             capture_output=True, text=True, check=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        rows.append(row)
        diff = f"{row['max_abs_diff']:.1e}" if "max_abs_diff" in row else "-"
        print(
            f"{devices:>7}  {max_length:>10}  {str(length_bucket):>13}  {row['docs_per_s']:6.1f}"
            f"  {row['tokens_per_s']:8.0f}  {diff}", flush=True)
  if _RECORD.value:
    io.write_results(_RECORD.value, run_record.record({"rows": rows}, ["data/scifact"], "test"))


if __name__ == "__main__":
  app.run(main)
