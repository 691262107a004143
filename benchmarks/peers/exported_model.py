"""A model exported by `xtr-export-model`, loaded by PyLate's `models.ColBERT`: the same token
vectors as xtr's.

Two sides, one per venv, over SciFact's first --docs documents:

  .venv/bin/xtr-export-model --gin_file=gin/runs/demo.gin \
    --checkpoint=runs/demo/xtr/wise_ft_0.7 --out=runs/exported/demo
  .venv/bin/python benchmarks/peers/exported_model.py --side=xtr --model=runs/exported/demo \
    --embed_dim=384 --vectors=runs/exported/xtr_vectors.npz
  PYTHONPATH=. .venv-peers/bin/python benchmarks/peers/exported_model.py --side=pylate \
    --model=runs/exported/demo --vectors=runs/exported/xtr_vectors.npz \
    --record=docs/runs/exported_model_pylate.json

The xtr side reads the directory back (gin/models/minilm_l6.gin with MINILM_DIR = it) and saves
each document's valid token vectors; the PyLate side loads it with `ColBERT(model_name_or_path=
...)` without ColBERT's [Q]/[D] prefixes, query expansion or punctuation skiplist (XTR has none),
documents cut at 256 tokens, and prints the largest difference from xtr's vectors (with
--record, also writes it as a run record: `xtr.evaluation.run_record`, hence PYTHONPATH=.).
"""
import argparse
import gzip
import json

import numpy as np

_MAX_LENGTH = 256


def _documents(count: int) -> list[str]:
  """SciFact's first `count` documents as xtr reads them (title + " " + text)."""
  with gzip.open("data/scifact/corpus.jsonl.gz", "rt") as f:
    docs = [json.loads(line) for line, _ in zip(f, range(count))]
  return [f"{d['title']} {d['text']}" for d in docs]


def _xtr_side(args: argparse.Namespace) -> None:
  import gin  # pylint: disable=g-import-not-at-top

  from xtr import cli  # pylint: disable=g-import-not-at-top
  from xtr.models import encoding  # pylint: disable=g-import-not-at-top
  gin.parse_config_files_and_bindings(["gin/models/minilm_l6.gin"], [
      *cli.ENCODER_BINDINGS, f"MINILM_DIR = '{args.model}'",
      f"xtr_encoder.XTREncoder.embed_dim = {args.embed_dim}"
  ])
  encoder = encoding.Encoder(encoding.load_params(args.model), doc_max_length=_MAX_LENGTH)
  vectors, _ = encoder.encode_documents(_documents(args.docs))
  np.savez(args.vectors, vectors=np.concatenate(vectors),
           lengths=np.array([len(v) for v in vectors]))


def _pylate_side(args: argparse.Namespace) -> None:
  from pylate import models  # pylint: disable=g-import-not-at-top
  model = models.ColBERT(model_name_or_path=args.model, query_prefix="", document_prefix="",
                         document_length=_MAX_LENGTH, do_query_expansion=False, skiplist_words=[],
                         device="cpu")
  theirs = model.encode(_documents(args.docs), is_query=False, batch_size=16, convert_to_numpy=True)
  saved = np.load(args.vectors)
  ours = np.split(saved["vectors"], np.cumsum(saved["lengths"])[:-1])
  lengths_equal = [len(a) == len(b) for a, b in zip(ours, theirs)]
  diff = max(float(np.abs(a - b).max()) for a, b in zip(ours, theirs) if len(a) == len(b))
  result = {
      "documents": len(ours),
      "tokens": int(saved["lengths"].sum()),
      "token_counts_equal": sum(lengths_equal),
      "max_abs_difference": diff
  }
  print(f"{result['documents']} documents, {result['tokens']} tokens: token counts equal in "
        f"{result['token_counts_equal']} of {len(ours)}; max |xtr - PyLate| = {diff:.2e}")
  if args.record:
    import pylate  # pylint: disable=g-import-not-at-top

    from xtr import io  # pylint: disable=g-import-not-at-top
    from xtr.evaluation import run_record  # pylint: disable=g-import-not-at-top
    result["pylate_version"] = pylate.__version__
    io.write_results(args.record, run_record.record(result, ["data/scifact"], "test"))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--side", choices=["xtr", "pylate"], required=True)
  parser.add_argument("--model", required=True, help="xtr-export-model's --out directory")
  parser.add_argument("--vectors", required=True, help="xtr's token vectors (.npz)")
  parser.add_argument("--embed_dim", type=int, default=128, help="xtr side: projection size")
  parser.add_argument("--docs", type=int, default=64, help="SciFact's first documents")
  parser.add_argument("--record", help="pylate side: write the result here (JSON)")
  args = parser.parse_args()
  (_xtr_side if args.side == "xtr" else _pylate_side)(args)


if __name__ == "__main__":
  main()
