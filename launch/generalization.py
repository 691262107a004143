"""The generalization study of docs/results.md ("Generalization"): exact MaxSim of trained and
0-step models on SciFact and NFCorpus, in domain and out of domain.

  .venv/bin/python launch/generalization.py evaluate CHECKPOINT SET...
      Exact MaxSim of a checkpoint (gin/models/minilm_l6.gin; its projection size read from the
      checkpoint) on each SET; writes CHECKPOINT/<SET>.json.
  .venv/bin/python launch/generalization.py projections OUT_DIR SET... -- CHECKPOINT...
      0-step models that differ from the untuned backbone only by their projection: the corpus
      is encoded once by the backbone (raw 384-d token vectors) and each checkpoint's projection
      applied to it (the vectors are L2-normalized after a bias-free projection, so projecting
      the normalized raw vectors gives the model's own). Writes CHECKPOINT/<SET>.json and
      OUT_DIR/raw_384/<SET>.json (no projection).
  .venv/bin/python launch/generalization.py tables OUT_DIR
      docs/results.md's tables (Markdown, on stdout) from what has been measured ("—": not yet).

SETs: scifact_dev (the 162 queries of launch/generalization.sh's carved SciFact dev split),
nfcorpus_dev, scifact_test, nfcorpus_test. Documents are encoded as xtr-export does (256 tokens).
"""
import json
import os
import sys

import gin
import jax
import numpy as np

from xtr import cli
from xtr import io
from xtr.evaluation import beir_eval
from xtr.models import encoding
from xtr.retrieval import ranker

SHARED = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "beir")
SETS = {
    "scifact_dev": ("runs/scifact_dev", "dev"),
    "scifact_test": ("data/scifact", "test"),
    "nfcorpus_dev": (os.path.join(SHARED, "nfcorpus"), "dev"),
    "nfcorpus_test": (os.path.join(SHARED, "nfcorpus"), "test")
}


def _encoder(params) -> encoding.Encoder:
  """The MiniLM encoder of `params` (embed_dim from its projection, None without one)."""
  embed_dim = params["projection"]["kernel"].shape[1] if "projection" in params else None
  gin.clear_config()
  gin.add_config_file_search_path(str(cli.REPO_DIR))
  gin.parse_config_files_and_bindings(
      ["gin/models/minilm_l6.gin"],
      [f"xtr.models.xtr_encoder.XTREncoder.embed_dim = {embed_dim}", *cli.ENCODER_BINDINGS])
  return encoding.Encoder(params)


def _metrics(data: beir_eval.BeirData, results: ranker.Results) -> dict[str, float]:
  run = {query_id: dict(ranking) for query_id, ranking in zip(data.query_ids, results.rankings)}
  scores = beir_eval.evaluate(data.qrels, run)
  return {name: scores[name] for name in ("ndcg@10", "recall@100", "mrr@10")}


def _padded(queries: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
  q = np.zeros((len(queries), max(len(v) for v in queries), queries[0].shape[1]), np.float32)
  q_mask = np.zeros(q.shape[:2], bool)
  for i, v in enumerate(queries):
    q[i, :len(v)], q_mask[i, :len(v)] = v, True
  return q, q_mask


def _encode(encoder: encoding.Encoder, data: beir_eval.BeirData):
  """(docs [len_i, D] each, queries [len_i, D] each) of `data`."""
  docs, _ = encoder.encode_documents(data.docs, progress="encode corpus")
  q, q_mask, _ = encoder.encode_queries(data.queries)
  return docs, [v[m] for v, m in zip(q, q_mask)]


def _normalized(x: np.ndarray) -> np.ndarray:
  return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-6)


def _write(path: str, metrics: dict[str, float]) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  io.write_results(path, metrics)
  print(f"{path}: {metrics}", flush=True)


def evaluate(checkpoint: str, set_names: list[str]) -> None:
  encoder = _encoder(encoding.load_params(checkpoint))
  for name in set_names:
    path = os.path.join(checkpoint, f"{name}.json")
    if os.path.exists(path):
      continue
    data = beir_eval.load_beir(*SETS[name])
    docs, queries = _encode(encoder, data)
    _write(path,
           _metrics(data, ranker.exact_search(data.doc_ids, docs, *_padded(queries), top_k=100)))


def projections(out_dir: str, set_names: list[str], checkpoints: list[str]) -> None:
  kernels = {
      c: np.asarray(jax.device_get(encoding.load_params(c)["projection"]["kernel"]))
      for c in checkpoints
  }
  raw = None
  for name in set_names:
    targets = {os.path.join(c, f"{name}.json"): k for c, k in kernels.items()}
    targets[os.path.join(out_dir, "raw_384", f"{name}.json")] = None
    targets = {p: k for p, k in targets.items() if not os.path.exists(p)}
    if not targets:
      continue
    if raw is None:
      params = encoding.load_params(checkpoints[0])
      raw = _encoder({"backbone": params["backbone"]})
    data = beir_eval.load_beir(*SETS[name])
    docs, queries = _encode(raw, data)
    for path, kernel in targets.items():
      project = (lambda x: x) if kernel is None else (lambda x, k=kernel: _normalized(x @ k))
      results = ranker.exact_search(data.doc_ids, [project(d) for d in docs],
                                    *_padded([project(v) for v in queries]), top_k=100)
      _write(path, _metrics(data, results))


def _cell(path: str) -> str:
  if not os.path.exists(path):
    return "—"
  with open(path, encoding="utf-8") as f:
    return f"{json.load(f)['ndcg@10']:.4f}"


def _table(head: str, rows: dict[str, str], set_names: list[str]) -> str:
  """rows: {label: directory of <set>.json}."""
  lines = [f"| {head} | " + " | ".join(set_names) + " |", "|---" * (len(set_names) + 1) + "|"]
  for label, directory in rows.items():
    cells = [_cell(os.path.join(directory, f"{name}.json")) for name in set_names]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return "\n".join(lines)


def tables(out_dir: str) -> None:
  zero = {"no projection (384)": "raw_384"}
  for dim in (128, 256):
    for init, label in (("pca", "PCA, SciFact batches"), ("pca_mixed", "PCA, SciFact + NFCorpus"),
                        ("random", "random")):
      zero[f"{dim}, {label}"] = f"{init}_{dim}"
  print("0 steps: the projection alone (exact MaxSim, nDCG@10)\n")
  print(
      _table("projection", {
          k: os.path.join(out_dir, "zero", v) for k, v in zero.items()
      }, ["scifact_test", "nfcorpus_test", "scifact_dev", "nfcorpus_dev"]))
  trained = sorted(
      d for d in os.listdir(out_dir) if d != "zero" and os.path.isdir(os.path.join(out_dir, d)))
  rows = {}
  for name in trained:
    rows[name] = os.path.join(out_dir, name)
    for wise in sorted(os.listdir(rows[name])):
      if wise.startswith("wise_ft_"):
        rows[f"{name}, WiSE-FT α={wise[len('wise_ft_'):]}"] = os.path.join(rows[name], wise)
  print("\nTrained (exact MaxSim on the dev splits, nDCG@10)\n")
  print(_table("model", rows, ["scifact_dev", "nfcorpus_dev"]))


def main(argv: list[str]) -> None:
  command, *args = argv
  cli.quiet_logging()
  if command == "evaluate":
    evaluate(args[0], args[1:])
  elif command == "projections":
    split = args.index("--")
    projections(args[0], args[1:split], args[split + 1:])
  elif command == "tables":
    tables(args[0])
  else:
    raise SystemExit(__doc__)


if __name__ == "__main__":
  main(sys.argv[1:])
