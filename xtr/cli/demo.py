"""`make demo`: XTR fine-tuned from all-MiniLM-L6-v2 on SciFact, beside BM25 and the untuned model.

  xtr-demo --gin_file=gin/runs/demo.gin

Trains (resuming if interrupted), exports the ScaNN token index of the corpus, ranks the test
queries with f_XTR' from token retrieval alone, runs the baselines, prints a table and writes
`{out_dir}/metrics.json` and its run record `{out_dir}/run.json` (`run_record`); the same for
every collection of `demo.run.extra_data_dirs` (out of domain). Every step shows progress and,
when it ends, its wall-clock time (also in run.json, `step_seconds`); a finished step is not
redone.
"""
import os
import shutil
import time
from typing import Any
from typing import Callable
from typing import Sequence

import gin
import numpy as np

from xtr import cli
from xtr import io
from xtr.evaluation import baselines
from xtr.evaluation import beir_eval
from xtr.evaluation import run_record
from xtr.index import build
from xtr.index import files
from xtr.index import reader
from xtr.models import encoding
from xtr.retrieval import ranker
from xtr.training import trainer
from xtr.training import wise_ft


def _metrics(data: beir_eval.BeirData, results: ranker.Results) -> dict[str, float]:
  run = {query_id: dict(ranking) for query_id, ranking in zip(data.query_ids, results.rankings)}
  scores = beir_eval.evaluate(data.qrels, run)
  return {
      "ndcg@10": scores["ndcg@10"],
      "recall@100": scores["recall@100"],
      "mrr@10": scores["mrr@10"],
      "ms_per_query": float(np.mean(results.latency_ms))
  }


def _xtr(checkpoint: str, data: beir_eval.BeirData, index_dir: str,
         config: ranker.SearchConfig) -> ranker.Results:
  """Exports the token index of `data`'s corpus (once per model: an index, finished or not, of
  an earlier step of the run is exported again) and ranks its test queries."""
  encoder = encoding.Encoder(encoding.load_params(checkpoint))
  for record in (files.MANIFEST, files.WRITER):
    path = os.path.join(index_dir, record)
    if os.path.exists(path) and files.read_json(path).get("fingerprint") != encoder.fingerprint:
      print(f"{index_dir} holds the index of another step of the run: exporting it again.",
            flush=True)
      shutil.rmtree(index_dir)
  if not os.path.exists(os.path.join(index_dir, files.MANIFEST)):
    corpus = build.corpus_record(data.corpus_path, range(len(data.doc_ids)), len(data.doc_ids))
    build.export(encoder, data.doc_ids, data.docs, index_dir, store_vectors="float16",
                 docs_per_chunk=500, corpus=corpus)
  return ranker.search(encoder, reader.open_index(index_dir), data.queries, config)


def format_table(rows: dict[str, dict[str, float]]) -> str:
  lines = [f"{'system':<34} {'nDCG@10':>8} {'R@100':>8} {'MRR@10':>8} {'ms/query':>9}"]
  for name, m in rows.items():
    lines.append(f"{name:<34} {m['ndcg@10']:>8.4f} {m['recall@100']:>8.4f} "
                 f"{m['mrr@10']:>8.4f} {m['ms_per_query']:>9.1f}")
  return "\n".join(lines)


class _Steps:
  """Numbers and prints the demo's steps; `seconds` holds each finished step's wall-clock time."""

  def __init__(self, total: int):
    self.total, self.seconds, self._current = total, {}, None

  def start(self, title: str) -> None:
    """Ends the current step, if any, and starts `title`."""
    self.end()
    print(f"== {len(self.seconds) + 1}/{self.total} {title}", flush=True)
    self._current = (title, time.monotonic())

  def end(self) -> None:
    """Records and prints the current step's time, if a step is running."""
    if self._current is not None:
      title, started = self._current
      self.seconds[title] = time.monotonic() - started
      print(f"   {title}: {self.seconds[title]:.0f} s", flush=True)
      self._current = None


@gin.configurable
def run(out_dir: str = gin.REQUIRED, model_dir: str = gin.REQUIRED, data_dir: str = gin.REQUIRED,
        model: Any = gin.REQUIRED, vocabulary: Any = gin.REQUIRED,
        pretrained_backbone: Callable[[], Any] = gin.REQUIRED, k_prime: int = 1000,
        split: str = "test", extra_data_dirs: Sequence[str] = (),
        wise_ft_alpha: float | None = None) -> dict[str, dict[str, dict[str, float]]]:
  """Runs the demo; returns {set: {system: {"ndcg@10", "recall@100", "mrr@10", "ms_per_query"}}}.

  Args:
    data_dir: the training collection; its `split` is the first evaluation set.
    extra_data_dirs: more BEIR-layout collections whose `split` is evaluated the same way (out of
      domain: the model never saw them), each named by its directory's name.
    wise_ft_alpha: evaluate the WiSE-FT interpolation θ_α of the fine-tuned model with its
      initial parameters (`xtr.training.wise_ft`; the run saves them) instead of the fine-tuned one.
  """
  sets = _named_sets([data_dir, *extra_data_dirs])
  try:  # Here, not after the fine-tuning.
    config = ranker.SearchConfig(top_k=100, k_prime=k_prime, scoring="xtr")
  except ValueError as e:
    raise ValueError(f"demo.run.k_prime = {k_prime!r}: {e}; check its gin binding.") from None
  if wise_ft_alpha is not None and not 0 <= wise_ft_alpha <= 1:
    raise ValueError(f"demo.run.wise_ft_alpha = {wise_ft_alpha}: expected a number in [0, 1].")
  if wise_ft_alpha is not None and not _saves_initial_params():
    raise ValueError("demo.run.wise_ft_alpha needs "
                     "initialization.Initialization.save_initial_params = True.")
  datasets = {name: beir_eval.load_beir(path, split) for name, path in sets.items()}
  os.makedirs(out_dir, exist_ok=True)  # Now, not found missing when the results are written.
  steps = _Steps(1 + (wise_ft_alpha is not None) + 3 * len(sets))
  steps.start("fine-tune XTR from MiniLM")
  trainer.train()  # Preempted: the process ends here, and the same command resumes.
  checkpoint = model_dir
  if wise_ft_alpha is not None:
    checkpoint = os.path.join(model_dir, f"wise_ft_{wise_ft_alpha:g}")
    steps.start(f"WiSE-FT: interpolate with the initial parameters, α={wise_ft_alpha:g}")
    if not wise_ft.write(model_dir, wise_ft_alpha, checkpoint):
      print(
          f"{checkpoint} was interpolated from another step of the run: interpolating again, "
          "its index with it.", flush=True)
      shutil.rmtree(checkpoint)
      wise_ft.write(model_dir, wise_ft_alpha, checkpoint)
  backbone_params = pretrained_backbone()  # the untuned baselines' weights, read once
  tables = {}
  for number, (name, data) in enumerate(datasets.items()):
    index_dir = os.path.join(checkpoint, "index" if number == 0 else f"index_{name}")
    steps.start(f"{name}: export the token index and search with f_XTR'")
    rows = {
        f"XTR-MiniLM (ScaNN, f_XTR', k'={k_prime})":
            _metrics(data, _xtr(checkpoint, data, index_dir, config))
    }
    steps.start(f"{name}: BM25")
    rows["BM25 (k1=0.9, b=0.4)"] = _metrics(data, baselines.bm25_search(data, top_k=100))
    steps.start(f"{name}: untuned all-MiniLM-L6-v2")
    untuned = baselines.untuned_search(model.backbone, backbone_params, vocabulary, data, top_k=100)
    rows["MiniLM single-vector (mean pool)"] = _metrics(data, untuned["single_vector"])
    rows["MiniLM MaxSim, raw tokens (exact)"] = _metrics(data, untuned["maxsim"])
    tables[name] = dict(zip(KEYS, rows.values()))
    steps.end()
    print(f"{name} ({split})\n{format_table(rows)}", flush=True)
  io.write_results(os.path.join(out_dir, "metrics.json"), tables)
  io.write_results(os.path.join(out_dir, "run.json"), {
      **run_record.record(tables, list(sets.values()), split), "step_seconds": steps.seconds
  })
  print(f"Wrote {os.path.join(out_dir, 'metrics.json')} and its run record, run.json")
  return tables


KEYS = ("xtr", "bm25", "minilm_single_vector", "minilm_maxsim")  # metrics.json's, per set


def _saves_initial_params() -> bool:
  try:
    return bool(gin.query_parameter("initialization.Initialization.save_initial_params"))
  except ValueError:  # not bound: the default, False
    return False


def _named_sets(data_dirs: Sequence[str]) -> dict[str, str]:
  """{directory name: path}; refuses two sets of one name before any work."""
  sets = {}
  for path in data_dirs:
    name = os.path.basename(os.path.normpath(path))
    if name in sets:
      raise ValueError(f"demo.run: {path} and {sets[name]} are both named {name!r}; the sets "
                       "are named by their directories.")
    sets[name] = path
  return sets


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  cli.parse_gin(extra_bindings=cli.ENCODER_BINDINGS)
  run()


def console_entry_point() -> None:
  cli.run(main, __name__)


if __name__ == "__main__":
  console_entry_point()
