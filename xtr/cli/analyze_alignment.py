"""`xtr-analyze-alignment`: the instruments of "Generative Retrieval as Multi-Vector Dense
Retrieval" (Wu et al., 2024) on trained checkpoints and a BEIR-layout split (`xtr.analysis`).

  # after `make demo` (runs/demo):
  xtr-analyze-alignment --gin_file=gin/runs/demo.gin --gin_file=gin/analysis/untuned_minilm.gin \
    --data_dir=data/scifact --split=test --checkpoint=XTR=runs/demo/xtr/wise_ft_0.7 \
    [--checkpoint=LABEL=MODEL_DIR ...] [--compare=OTHER_DIR/alignment.json ...] \
    [--query_id=Q] [--doc_id=D] --out=DIR

Every checkpoint is loaded into the run file's model (%MODEL, as `xtr-export` does); with
gin/analysis/untuned_minilm.gin (`measure.Settings.pretrained_backbone`) the untuned backbone's
raw token vectors are analyzed too. Models of another architecture (e.g. ALIGNER's salience
heads) take a run of their own; --compare adds that run's models to the plots.

Writes to DIR:
  alignment.json     per model: rerank Recall@1, Recall@10, MRR@10, nDCG@10 of each direction
                     (q→d with the model's alignment, d→q, d→q per document token) over each
                     query's BM25 top-100 plus gold documents; exact-match rates of the hard and
                     soft alignments of both directions by equal-count IDF bin of the query
                     tokens (special tokens apart), over all candidates and over those that
                     contain the token; the same for the d→q alignments per document
                     token, by the document token's IDF (the unit of Figure 3); the mean
                     normalized singular-value spectrum and rank-1 error of each direction's
                     alignment; the case study's matrices (rounded to 4 decimals) and token
                     strings, panel by panel, as case_study.png draws them.
  term_matching.png  exact-match rate against query-token IDF, one curve per model (Figure 2)
  term_matching_document_tokens.png
                     d→q exact-match rate against document-token IDF (Figure 3's unit)
  spectra.png        the normalized spectra (§7.4)
  case_study.png     S and both alignments of --query_id (default: the split's first query) and
                     --doc_id (default: its most relevant judged document) (§7.5)
Settings (candidates, τ, IDF bins) are `measure.Settings` in gin; --temperature overrides τ, and
repeated, sweeps it (the GR paper's d→q alignment is softmax(S/τ); its rank depends on τ).
"""
import dataclasses
import json
import math
import os
from typing import Any
from typing import Sequence

from absl import flags
import numpy as np

from xtr import cli
from xtr import io
from xtr.analysis import directions
from xtr.analysis import measure
from xtr.analysis import plots
from xtr.evaluation import beir_eval
from xtr.models import encoding
from xtr.models import model_spec
from xtr.scoring import alignment

_SPLIT_FLAGS = cli.SplitFlags("qrels split of the queries (qrels/{split}.tsv).")
_CHECKPOINT = flags.DEFINE_multi_string(
    "checkpoint", [], "[LABEL=]MODEL_DIR: a checkpoint of the run file's model (repeatable); "
    "LABEL defaults to the directory's name.")
_COMPARE = flags.DEFINE_multi_string(
    "compare", [], "alignment.json of an earlier run, whose models join the plots.")
_QUERY_ID = flags.DEFINE_string("query_id", None, "The case study's query (default: the first).")
_DOC_ID = flags.DEFINE_string(
    "doc_id", None, "The case study's document (default: the query's "
    "most relevant judged document).")
_OUT = flags.DEFINE_string("out", None, "Directory to write (created if missing).")
_TEMPERATURE = flags.DEFINE_multi_float(
    "temperature", [], "τ of the softmax alignments (default: measure.Settings.temperature); "
    "repeat for a sweep: each model is analyzed at each τ, labelled 'LABEL τ=T' (the case study "
    "takes the first).")
flags.register_validator("temperature",
                         lambda values: all(math.isfinite(t) and t > 0 for t in values),
                         message="--temperature must be a positive finite number.")

UNTUNED = "untuned backbone"
_MAX_COMPARE_BYTES = 256 << 20  # An alignment.json of many models is a few MB.


def _labelled(values: Sequence[str]) -> dict[str, str]:
  """--checkpoint values -> {label: model dir}; refuses a repeated label."""
  labelled = {}
  for value in values:
    label, sep, path = value.partition("=")
    if not sep:
      label, path = os.path.basename(os.path.normpath(value)), value
    if not label or not path or label in labelled or label == UNTUNED:
      raise flags.ValidationError(f"--checkpoint={value}: give LABEL=MODEL_DIR with a label of "
                                  f"its own (labels so far: {sorted(labelled)}).")
    labelled[label] = path
  return labelled


def _read_compare(path: str) -> dict[str, Any]:
  """The models of an earlier alignment.json, each holding what the plots draw (a
  ValidationError naming the file if it is not one)."""
  try:
    models = json.loads(io.read_bytes(path, _MAX_COMPARE_BYTES))["models"]
    for result in models.values():
      _check_plotted(result)
  except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
    raise flags.ValidationError(f"--compare={path}: not an alignment.json of "
                                f"xtr-analyze-alignment ({type(e).__name__}: {e}).") from None
  return models


def _check_plotted(result: dict[str, Any]) -> None:
  """Raises KeyError, TypeError or ValueError where a model's result lacks what `plots` draws:
  its term matching bins (of the document tokens too, if present) and its spectra."""
  matchings = [(result["term_matching"], directions.KINDS)]
  if "document_token_term_matching" in result:
    matchings.append((result["document_token_term_matching"], measure.DOCUMENT_TOKEN_KINDS))
  for matching, kinds in matchings:
    for subset in ("candidates", "containing"):
      for rates in matching[subset]["bins"]:
        _numbers([rates["idf_mean"], *(rates[kind] for kind in kinds if rates[kind] is not None)])
  for spectrum in result["low_rank"].values():
    _numbers([*spectrum["spectrum"], spectrum["rank1_error"]])


def _numbers(values: Sequence[Any]) -> None:
  """Raises TypeError unless every value is a number (an int or float, not a bool)."""
  if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
    raise TypeError(f"expected numbers, got {values[:3]}...")


def _case(data: beir_eval.BeirData) -> tuple[str, str]:
  """(query id, doc id) of the case study, checked against the split."""
  query_id = _QUERY_ID.value or data.query_ids[0]
  if query_id not in data.query_ids:
    raise flags.ValidationError(f"--query_id={query_id} is not a query of qrels/"
                                f"{_SPLIT_FLAGS.split.value}.tsv in {_SPLIT_FLAGS.data_dir.value}.")
  doc_id = _DOC_ID.value or data.most_relevant(query_id)
  if doc_id is None or doc_id not in data.doc_ids:
    raise flags.ValidationError(f"--doc_id={doc_id}: name a document of the corpus (query "
                                f"{query_id} has no relevant one to default to).")
  return query_id, doc_id


def _encoders(checkpoints: dict[str, str], settings: measure.Settings):
  """(label, encoder) of each checkpoint, then of the untuned backbone if a loader is bound;
  one at a time, so that one model's parameters are in memory at once."""
  for label, path in checkpoints.items():
    yield label, model_spec.gin_encoder(path)  # Refused unless it fits the gin model.
  if settings.pretrained_backbone is not None:
    yield UNTUNED, measure.untuned_encoder(settings)


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  cli.parse_gin(extra_bindings=cli.ENCODER_BINDINGS + measure.SETTINGS_BINDINGS)
  settings = measure.Settings()
  checkpoints = _labelled(_CHECKPOINT.value)
  if not checkpoints and settings.pretrained_backbone is None:
    raise flags.ValidationError("Nothing to analyze: give --checkpoint, or bind "
                                "measure.Settings.pretrained_backbone (gin/analysis/).")
  compared = {
      label: result for path in _COMPARE.value for label, result in _read_compare(path).items()
  }
  for path in checkpoints.values():
    encoding.latest_step_dir(path)  # FileNotFoundError naming it, before any work
  data = _SPLIT_FLAGS.load()
  query_id, doc_id = _case(data)
  case_query = data.queries[data.query_ids.index(query_id)]
  case_doc = data.docs[data.doc_ids.index(doc_id)]
  temperatures = _TEMPERATURE.value or [settings.temperature]
  os.makedirs(_OUT.value, exist_ok=True)

  print(f"BM25 candidates of {len(data.query_ids)} queries", flush=True)
  candidates_of = measure.candidates(data, settings.bm25_depth)
  candidate_docs = sorted(set().union(*candidates_of))
  results, panels = {}, []
  for number, (label, encoder) in enumerate(_encoders(checkpoints, settings), 1):
    print(f"== model {number}: {label}", flush=True)
    strategy = alignment.Alignment() if label != UNTUNED else alignment.Alignment("top_k", k=1)
    model = measure.Model(
        label, encoder.tokenizer, measure.encode(encoder, data.queries, "query"),
        measure.encode(encoder, [data.docs[d] for d in candidate_docs], "document"), strategy)
    corpus_ids = measure.token_ids(encoder.tokenizer, data.docs, encoder.doc_max_length)
    for tau in temperatures:
      name = label if len(temperatures) == 1 else f"{label} τ={tau:g}"
      results[name] = measure.analyze(model, data, candidate_docs, candidates_of, corpus_ids,
                                      dataclasses.replace(settings, temperature=tau))
      results[name] |= {"checkpoint": checkpoints.get(label), "temperature": tau}
    matrices, q_pieces, d_pieces = measure.case_study(encoder, strategy, case_query, case_doc,
                                                      temperatures[0])
    panels += [
        (f"{label}: {name}", matrix, q_pieces, d_pieces) for name, matrix in matrices.items()
    ]

  report = {
      "data_dir": _SPLIT_FLAGS.data_dir.value,
      "split": _SPLIT_FLAGS.split.value,
      "num_queries": len(data.query_ids),
      "candidates_per_query": float(np.mean([len(c) for c in candidates_of])),
      "settings": {
          "bm25_depth": settings.bm25_depth,
          "temperatures": temperatures,
          "num_idf_bins": settings.num_idf_bins
      },
      "case_study": {
          "query_id":
              query_id,
          "doc_id":
              doc_id,
          "panels": [{
              "title": title,
              "query_tokens": q_tokens,
              "doc_tokens": d_tokens,
              "matrix": np.round(matrix, 4).tolist()
          } for title, matrix, q_tokens, d_tokens in panels]
      },
      "models": results
  }
  io.write_results(os.path.join(_OUT.value, "alignment.json"), report)
  everything = compared | results
  plots.term_matching({
      k: v["term_matching"] for k, v in everything.items()
  }, os.path.join(_OUT.value, "term_matching.png"))
  plots.term_matching(
      {
          k: v["document_token_term_matching"]
          for k, v in everything.items()
          if "document_token_term_matching" in v
      }, os.path.join(_OUT.value, "term_matching_document_tokens.png"),
      measure.DOCUMENT_TOKEN_KINDS, "document token")
  plots.spectra({
      k: v["low_rank"] for k, v in everything.items()
  }, os.path.join(_OUT.value, "spectra.png"))
  plots.case_study(panels, os.path.join(_OUT.value, "case_study.png"))
  for label, result in results.items():
    for direction, metrics in result["rerank"].items():
      print(f"{label:>20} {direction:>14}: " + " ".join(
          f"{name} {metrics[name]:.4f}" for name in ("recall@1", "recall@10", "mrr@10", "ndcg@10")))
  print(f"Wrote {_OUT.value}/alignment.json and its PNGs.")


def console_entry_point() -> None:
  cli.run(main, __name__, required=["data_dir", "out"])


if __name__ == "__main__":
  console_entry_point()
