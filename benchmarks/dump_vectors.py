"""Dumps an index's document token vectors and a split's queries' token vectors, for engines
outside this project (benchmarks/engines.py) to search exactly the vectors xtr searches.

  .venv/bin/python benchmarks/dump_vectors.py INDEX_DIR CHECKPOINT DATA_DIR OUT_DIR [SPLIT]

SPLIT is the BEIR split whose queries are encoded (default test); engines.py evaluates it.

Writes to OUT_DIR:
  doc_vectors.npy    [T, D] the index's token vectors, in its dtype (float16 or float32), docs
                     in index order, each doc's tokens contiguous;
  doc_lengths.npy    [N] int64 tokens per doc;
  doc_ids.json       [N] corpus ids;
  query_vectors.npy  [Q, n, D] float32 the split's queries encoded by CHECKPOINT's model (as
                     xtr-search encodes them);
  query_mask.npy     [Q, n] bool valid query tokens;
  query_ids.json     [Q] query ids (the qrels' order);
  source.json        the arguments (the split among them), the index's dtype and ScaNN settings.
"""
import json
import os
import sys

import numpy as np

from xtr.evaluation import beir_eval
from xtr.retrieval import searcher


def write_rest(out_dir: str, doc_lengths: np.ndarray, doc_ids: list[str], q: np.ndarray,
               q_mask: np.ndarray, query_ids: list[str], source: dict) -> None:
  """Writes OUT_DIR's files but doc_vectors.npy, which each caller writes its own way."""
  np.save(os.path.join(out_dir, "doc_lengths.npy"), np.asarray(doc_lengths, np.int64))
  np.save(os.path.join(out_dir, "query_vectors.npy"), q.astype(np.float32))
  np.save(os.path.join(out_dir, "query_mask.npy"), q_mask.astype(bool))
  for name, value in (("doc_ids", list(doc_ids)), ("query_ids", list(query_ids)), ("source",
                                                                                   source)):
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
      json.dump(value, f)


def read_source(vectors_dir: str) -> dict:
  """source.json of the dump at `vectors_dir`; its "split" is "test" in dumps older than it."""
  with open(os.path.join(vectors_dir, "source.json"), encoding="utf-8") as f:
    return {"split": "test", **json.load(f)}


def main(index_dir: str, checkpoint: str, data_dir: str, out_dir: str, split: str = "test") -> None:
  encoder, token_index = searcher.open_for_search(index_dir, checkpoint)
  data = beir_eval.load_beir(data_dir, split)
  os.makedirs(out_dir, exist_ok=True)
  dtype = token_index.manifest["dtype"]
  vectors = np.lib.format.open_memmap(os.path.join(out_dir, "doc_vectors.npy"), "w+", dtype,
                                      (token_index.num_tokens, token_index.dim))
  start = 0
  for first in range(0, token_index.num_docs, 1000):
    for doc in token_index.doc_vectors(range(first, min(first + 1000, token_index.num_docs))):
      vectors[start:start + len(doc)] = doc  # float32 copies of the stored values: exact.
      start += len(doc)
  vectors.flush()
  q, q_mask, _ = encoder.encode_queries(data.queries)
  write_rest(
      out_dir, token_index.doc_lengths, token_index.doc_ids, q, q_mask, data.query_ids, {
          "index": index_dir,
          "checkpoint": checkpoint,
          "data_dir": data_dir,
          "split": split,
          "dtype": dtype,
          "scann": token_index.manifest["scann"]
      })
  print(f"{out_dir}: {token_index.num_docs} docs, {start} tokens ({dtype}), {len(q)} {split} "
        f"queries of {int(q_mask.sum(1).mean())} tokens on average.")


if __name__ == "__main__":
  main(*sys.argv[1:])
