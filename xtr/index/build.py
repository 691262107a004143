"""Corpus -> token vectors -> token index: the library side of `xtr-export` (and of the demo).

Kept apart from the CLI module so that importing it defines no command-line flags.
"""
import math
from typing import Any
from typing import Sequence

import gin
import numpy as np
import tqdm

from xtr import io
from xtr.index import scann
from xtr.index import writer as writer_lib
from xtr.models import encoding
from xtr.models import model_spec


def shard_range(num_docs: int, shard_id: int, num_shards: int) -> range:
  """Contiguous document range of one shard; shards differ in size by at most one document."""
  if not 0 <= shard_id < num_shards:
    raise ValueError(f"--shard_id={shard_id} is not in [0, --num_shards={num_shards}).")
  bounds = np.linspace(0, num_docs, num_shards + 1).round().astype(int)
  return range(bounds[shard_id], bounds[shard_id + 1])


def corpus_record(path: str, docs: range, total_docs: int) -> dict[str, Any]:
  """What an index records of its corpus: the file (path, sha256) and its documents it holds."""
  return {
      "path": path,
      "sha256": io.sha256(path),
      "docs": [docs.start, docs.stop],
      "total_docs": total_docs
  }


def export(encoder: encoding.Encoder, doc_ids: Sequence[str], texts: Sequence[str], out_dir: str,
           store_vectors: str, docs_per_chunk: int | None, corpus: dict[str, Any],
           prune_doc: float | None = None, repair: bool = False) -> dict:
  """Encodes `texts` chunk by chunk into an index at `out_dir` (resuming), builds ScaNN.

  Args:
    store_vectors: the stored token vectors' dtype, or "none" (written as float16 while the
      export runs, then deleted: `IndexWriter`'s store_vectors).
    docs_per_chunk: None: the value `out_dir` records (resume, repair), else 1000.
    corpus: `corpus_record` of the corpus file that `doc_ids` and `texts` come from.
    prune_doc: β_d: ScaNN indexes each document's top ⌈β_d·m⌉ tokens by salience (None: all).
    repair: verify a complete index and redo what is damaged (`IndexWriter`).

  Returns:
    The index manifest.

  Raises:
    writer.IndexComplete: `out_dir` is a complete index of these settings and not `repair`.
  """
  writer = writer_lib.IndexWriter(out_dir, encoder.dim,
                                  "float16" if store_vectors == "none" else store_vectors,
                                  model_spec.describe(encoder), encoder.fingerprint, docs_per_chunk,
                                  corpus, gin_config=gin.config_str(), prune_doc=prune_doc,
                                  store_vectors=store_vectors != "none", repair=repair)
  if writer.repair_report:
    print(writer.repair_report, flush=True)
  docs_per_chunk = writer.settings["docs_per_chunk"]
  num_chunks = math.ceil(len(doc_ids) / docs_per_chunk)
  done = writer.completed_chunks()
  if done:
    print(f"Resuming {out_dir} at chunk {done} of {num_chunks}.", flush=True)
  for chunk in tqdm.tqdm(range(done, num_chunks), initial=done, total=num_chunks, desc="export",
                         unit="chunk"):
    docs = slice(chunk * docs_per_chunk, (chunk + 1) * docs_per_chunk)
    writer.write_chunk(chunk, doc_ids[docs], *encoder.encode_documents(texts[docs]))
  print(f"Building the ScaNN index of {out_dir}.", flush=True)
  return writer.finalize(scann.ScannConfig())
