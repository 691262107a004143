"""`xtr-export`: encode a corpus with a trained XTR encoder and build its token index.

  xtr-export --gin_file=gin/runs/smoke.gin --checkpoint=runs/smoke \
    --corpus=DATA_DIR/corpus.jsonl --out=INDEX_DIR

Documents are encoded in chunks (`--docs_per_chunk`) with a progress bar; a killed export
resumes at its last complete chunk when rerun with the same flags. With --num_shards=S, run once
per --shard_id (e.g. one per host): each writes INDEX_DIR/shard-SSSSS-of-NNNNN over a contiguous
range of the corpus, and search fans out over the shards. ScaNN settings: `index.ScannConfig`.
"""
import math
import os
from typing import Sequence

import gin
import numpy as np
import tqdm
from absl import app
from absl import flags

from xtr import beir_files
from xtr import cli
from xtr import encoding
from xtr import index as index_lib

_CHECKPOINT = flags.DEFINE_string("checkpoint", None,
                                  "xtr-train model dir or checkpoint step dir.")
_CORPUS = flags.DEFINE_string("corpus", None, "BEIR corpus.jsonl(.gz) ({_id, title, text}).")
_OUT = flags.DEFINE_string("out", None, "Index directory to write.")
_DTYPE = flags.DEFINE_enum("dtype", "float16", index_lib.DTYPES, "Stored token vector dtype.")
_DOCS_PER_CHUNK = flags.DEFINE_integer("docs_per_chunk", 1000, "Documents per saved chunk.")
_NUM_SHARDS = flags.DEFINE_integer("num_shards", 1, "Split the corpus into this many shards.")
_SHARD_ID = flags.DEFINE_integer("shard_id", 0, "The shard this process exports.")


def shard_range(num_docs: int, shard_id: int, num_shards: int) -> range:
  """Contiguous document range of one shard; shards differ in size by at most one document."""
  if not 0 <= shard_id < num_shards:
    raise ValueError(f"--shard_id={shard_id} is not in [0, --num_shards={num_shards}).")
  bounds = np.linspace(0, num_docs, num_shards + 1).round().astype(int)
  return range(bounds[shard_id], bounds[shard_id + 1])


def export(encoder: encoding.Encoder, doc_ids: Sequence[str], texts: Sequence[str],
           out_dir: str, dtype: str, docs_per_chunk: int) -> dict:
  """Encodes `texts` chunk by chunk into an index at `out_dir` (resuming), builds ScaNN.

  Returns:
    The index manifest.
  """
  writer = index_lib.IndexWriter(
      out_dir, encoder.dim, dtype,
      model_info={"gin_config": gin.config_str(),
                  "query_max_length": encoder.query_max_length,
                  "doc_max_length": encoder.doc_max_length},
      fingerprint=encoder.fingerprint, docs_per_chunk=docs_per_chunk)
  num_chunks = math.ceil(len(doc_ids) / docs_per_chunk)
  done = writer.completed_chunks()
  if done:
    print(f"Resuming {out_dir} at chunk {done} of {num_chunks}.", flush=True)
  for chunk in tqdm.tqdm(range(done, num_chunks), initial=done, total=num_chunks,
                         desc="export", unit="chunk"):
    docs = slice(chunk * docs_per_chunk, (chunk + 1) * docs_per_chunk)
    writer.write_chunk(chunk, doc_ids[docs], encoder.encode_documents(texts[docs]))
  print(f"Building the ScaNN index of {out_dir}.", flush=True)
  return writer.finalize(index_lib.ScannConfig())


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  cli.quiet_logging()
  cli.parse_gin(extra_bindings=cli.ENCODER_BINDINGS)
  out_dir = _OUT.value
  if _NUM_SHARDS.value > 1:
    out_dir = index_lib.shard_path(out_dir, _SHARD_ID.value, _NUM_SHARDS.value)
  if os.path.exists(os.path.join(out_dir, index_lib.MANIFEST)):
    print(f"{out_dir} is already a complete index; nothing to do.")
    return
  corpus = beir_files.read_jsonl(_CORPUS.value, beir_files.document_text)
  docs = shard_range(len(corpus), _SHARD_ID.value, _NUM_SHARDS.value)
  doc_ids = list(corpus)[docs.start:docs.stop]
  texts = list(corpus.values())[docs.start:docs.stop]
  encoder = encoding.Encoder(encoding.load_params(_CHECKPOINT.value))
  manifest = export(encoder, doc_ids, texts, out_dir, _DTYPE.value, _DOCS_PER_CHUNK.value)
  print(f"Wrote {out_dir}: {manifest['num_docs']} documents, {manifest['num_tokens']} tokens "
        f"of dim {manifest['dim']} ({manifest['dtype']}).")


def console_entry_point() -> None:
  flags.mark_flags_as_required(["checkpoint", "corpus", "out"])
  app.run(main)


if __name__ == "__main__":
  console_entry_point()
