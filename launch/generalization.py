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
  .venv/bin/python launch/generalization.py tables OUT_DIR [--record=RECORD.json]
      docs/results.md's tables (Markdown, on stdout) from what has been measured ("—": not yet);
      --record writes the run record of every measurement ({"<model>/<SET>": report}, e.g.
      "zero/pca_128/scifact_test", "scifact_d384/wise_ft_0.7/nfcorpus_dev"), from which
      tests/test_run_records.py rebuilds the tables with `tables`, and the size of each model's
      exported index ({"<model>/index": {"num_tokens": T, "bytes": {kind: bytes}}}, kinds as
      `xtr.index.files.bytes_by_kind`).

Each report is the metrics with the run's provenance (xtr.evaluation.run_record). SETs:
scifact_dev (the 162 queries of launch/generalization.sh's carved SciFact dev split),
nfcorpus_dev, scifact_test, nfcorpus_test. Documents are encoded as xtr-export does (256 tokens).
"""
import json
import os
import sys

from absl import flags
import gin
import jax
import numpy as np

from xtr import cli
from xtr import io
from xtr.evaluation import beir_eval
from xtr.evaluation import run_record
from xtr.index import files
from xtr.models import encoding
from xtr.retrieval import ranker

SHARED = os.path.join("..", "shared", "data", "beir")  # As SETS, relative to the repository.
SETS = {
    "scifact_dev": ("runs/scifact_dev", "dev"),
    "scifact_test": ("data/scifact", "test"),
    "nfcorpus_dev": (os.path.join(SHARED, "nfcorpus"), "dev"),
    "nfcorpus_test": (os.path.join(SHARED, "nfcorpus"), "test")
}

ZERO_SETS = {
    name: name for name in ("scifact_test", "nfcorpus_test", "scifact_dev", "nfcorpus_dev")
}
DEV_SETS = {"SciFact dev": "scifact_dev", "NFCorpus dev": "nfcorpus_dev"}
ZERO = {
    "no projection (384)": "zero/raw_384"
} | {
    f"{dim}, {label}": f"zero/{init}_{dim}" for dim in (128, 256)
    for init, label in (("pca", "PCA, SciFact batches"), ("pca_mixed", "PCA, SciFact + NFCorpus"),
                        ("random", "random"))
}
BACKBONE = {"untuned backbone (384-d, 0 steps), for reference": "zero/raw_384"}
TRAINED_ON_SCIFACT = BACKBONE | {
    "128-d, PCA init (the previous demo recipe)": "scifact_d128",
    "128-d, WiSE-FT α = 0.5": "scifact_d128/wise_ft_0.5",
    "256-d, PCA on the SciFact + NFCorpus mixture": "scifact_d256_pca_mixed",
    "384-d (no projection)": "scifact_d384",
    "384-d, WiSE-FT α = 0.3": "scifact_d384/wise_ft_0.3",
    "384-d, WiSE-FT α = 0.5": "scifact_d384/wise_ft_0.5",
    "**384-d, WiSE-FT α = 0.7 (the demo)**": "scifact_d384/wise_ft_0.7",
    "384-d, distillation weight 1": "scifact_d384_distill",
    "384-d, distillation, WiSE-FT α = 0.5": "scifact_d384_distill/wise_ft_0.5",
    "384-d, distillation, WiSE-FT α = 0.7": "scifact_d384_distill/wise_ft_0.7",
    "384-d, embeddings and layers 0–2 frozen": "scifact_d384_frozen",
    "384-d, learning rate 1e-5 (not 3e-5)": "scifact_d384_lr1e-5",
    "384-d, SciFact + NFCorpus train, 1:1 mixture": "mixture_d384",
}
TRAINED_ON_NFCORPUS = BACKBONE | {
    "128-d, PCA init": "nfcorpus_d128",
    "384-d": "nfcorpus_d384",
    "384-d, WiSE-FT α = 0.5": "nfcorpus_d384/wise_ft_0.5",
    "384-d, WiSE-FT α = 0.7": "nfcorpus_d384/wise_ft_0.7",
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


def _write(path: str, metrics: dict[str, float], set_name: str) -> None:
  """The metrics of `set_name` with their provenance, to `path`."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  io.write_results(path, {
      **metrics,
      **run_record.provenance([SETS[set_name][0]], SETS[set_name][1])
  })
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
           _metrics(data, ranker.exact_search(data.doc_ids, docs, *_padded(queries), top_k=100)),
           name)


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
      _write(path, _metrics(data, results), name)


def collect(out_dir: str) -> dict[str, dict]:
  """{"<model>/<SET>": report} of every measurement under `out_dir`, and {"<model>/index": size}
  of every model's exported index."""
  record = {}
  for model in {*ZERO.values(), *TRAINED_ON_SCIFACT.values(), *TRAINED_ON_NFCORPUS.values()}:
    for name in SETS:
      path = os.path.join(out_dir, model, f"{name}.json")
      if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
          record[f"{model}/{name}"] = json.load(f)
    index = os.path.join(out_dir, model, "index")
    if os.path.exists(os.path.join(index, files.MANIFEST)):
      manifest = files.complete_manifest(index)
      record[f"{model}/index"] = {
          "num_tokens": manifest["num_tokens"],
          "bytes": files.bytes_by_kind(manifest)
      }
  return dict(sorted(record.items()))


def table(head: str, rows: dict[str, str], columns: dict[str, str], record: dict) -> str:
  """A Markdown table of nDCG@10: rows {label: model}, columns {header: SET} ("—": not
  measured)."""
  lines = [f"| {head} | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
  for label, model in rows.items():
    cells = [record.get(f"{model}/{name}", {}).get("ndcg@10") for name in columns.values()]
    lines.append(f"| {label} | " + " | ".join("—" if c is None else f"{c:.4f}" for c in cells) +
                 " |")
  return "\n".join(lines)


def tables(record: dict) -> dict[str, str]:
  """docs/results.md's three tables of the study, by title."""
  return {
      "0 steps: the projection alone (exact MaxSim, nDCG@10)":
          table("projection", ZERO, ZERO_SETS, record),
      "Trained on SciFact (exact MaxSim on the dev splits, nDCG@10)":
          table("model (one change to the recipe)", TRAINED_ON_SCIFACT, DEV_SETS, record),
      "Trained on NFCorpus (exact MaxSim on the dev splits, nDCG@10)":
          table("model (one change to the recipe)", TRAINED_ON_NFCORPUS, DEV_SETS, record),
  }


def main(argv: list[str]) -> None:
  command, *args = argv
  run_record.mark_start()
  flags.FLAGS(sys.argv[:1])  # No flags of its own; parsed for cli.quiet_logging.
  cli.quiet_logging()
  if command == "evaluate":
    evaluate(args[0], args[1:])
  elif command == "projections":
    split = args.index("--")
    projections(args[0], args[1:split], args[split + 1:])
  elif command == "tables":
    out_dir, *options = args
    for option in options:
      if not option.startswith("--record="):
        sys.exit(f"launch/generalization.py tables: unknown option {option!r} (--record=FILE)")
    record = collect(out_dir)
    for title, markdown in tables(record).items():
      print(f"{title}\n\n{markdown}\n")
    for option in options:
      io.write_results(option.removeprefix("--record="), record)
  else:
    raise SystemExit(__doc__)


if __name__ == "__main__":
  main(sys.argv[1:])
