"""`xtr-export`: encode a corpus with a trained XTR encoder and build its token index.

  xtr-export --gin_file=gin/runs/smoke.gin --checkpoint=runs/smoke \
    --corpus=DATA_DIR/corpus.jsonl --out=INDEX_DIR

Documents are encoded in chunks (`--docs_per_chunk`) with a progress bar; a killed export
resumes at its last complete chunk when rerun with the same flags. With --num_shards=S, run once
per --shard_id (e.g. one per host): each writes INDEX_DIR/shard-SSSSS-of-NNNNN over a contiguous
range of the corpus, and search fans out over the shards. ScaNN settings: `index.ScannConfig`.
"""
import os
from typing import Sequence

from absl import app
from absl import flags

from xtr import beir_files
from xtr import cli
from xtr import encoding
from xtr import index as index_lib
from xtr import indexing

_CHECKPOINT = flags.DEFINE_string("checkpoint", None,
                                  "xtr-train model dir or checkpoint step dir.")
_CORPUS = flags.DEFINE_string("corpus", None, "BEIR corpus.jsonl(.gz) ({_id, title, text}).")
_OUT = flags.DEFINE_string("out", None, "Index directory to write.")
_DTYPE = flags.DEFINE_enum("dtype", "float16", index_lib.DTYPES, "Stored token vector dtype.")
_DOCS_PER_CHUNK = flags.DEFINE_integer("docs_per_chunk", 1000, "Documents per saved chunk.")
_NUM_SHARDS = flags.DEFINE_integer("num_shards", 1, "Split the corpus into this many shards.")
_SHARD_ID = flags.DEFINE_integer("shard_id", 0, "The shard this process exports.")


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
  docs = indexing.shard_range(len(corpus), _SHARD_ID.value, _NUM_SHARDS.value)
  doc_ids = list(corpus)[docs.start:docs.stop]
  texts = list(corpus.values())[docs.start:docs.stop]
  encoder = encoding.Encoder(encoding.load_params(_CHECKPOINT.value))
  manifest = indexing.export(encoder, doc_ids, texts, out_dir, _DTYPE.value, _DOCS_PER_CHUNK.value)
  print(f"Wrote {out_dir}: {manifest['num_docs']} documents, {manifest['num_tokens']} tokens "
        f"of dim {manifest['dim']} ({manifest['dtype']}).")


def console_entry_point() -> None:
  flags.mark_flags_as_required(["checkpoint", "corpus", "out"])
  app.run(main)


if __name__ == "__main__":
  console_entry_point()
