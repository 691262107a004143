"""`xtr-analyze-tokens`: what the token retrieval of a model returns, by rank (XTR Figure 4).

  xtr-analyze-tokens --data_dir=data/scifact --split=test --index=INDEX --checkpoint=MODEL \
    --k=1000 --label=XTR --out=xtr_tokens.json --plot=tokens.png [--compare=colbert_tokens.json]

For every query token of the split (special tokens such as [CLS] and [SEP] excluded), retrieves
its top-k document tokens from the index and measures, at each rank r = 1..k, the fraction of
query tokens whose rank-r token
  - comes from a gold document of the query (relevance > 0): P(gold | rank r);
  - is the same vocabulary token as the query token (lexically identical): P(lexical | rank r).
Writes both curves as JSON, with the run's provenance (`run_record`), and, with --plot, draws
them (with the curves of earlier --out files given to --compare) side by side.
"""
import json
from typing import Any
from typing import Sequence

from absl import flags
import matplotlib
import numpy as np
import tqdm

from xtr import cli
from xtr import io
from xtr.evaluation import beir_eval
from xtr.evaluation import run_record
from xtr.index import reader
from xtr.text import tokenization

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position

_SPLIT_FLAGS = cli.SplitFlags("qrels split whose queries are analyzed.")
_INDEX_FLAGS = cli.IndexFlags()
_K = cli.define_count(
    "k", 1000, "Ranks analyzed: document tokens retrieved per query token (at "
    "most the tokens of the index's token retrieval).")
_SEARCHER = flags.DEFINE_enum("searcher", "scann", reader.SEARCHERS, "Token searcher.")
_LABEL = flags.DEFINE_string("label", "model", "The model's name in the JSON and the plot.")
_OUT = flags.DEFINE_string("out", None, "JSON of the curves to write.")
_PLOT = flags.DEFINE_string("plot", None, "PNG of the curves to write (optional).")
_COMPARE = flags.DEFINE_list("compare", [], "Earlier --out JSON files drawn in the same plot.")
_MAX_COMPARE_BYTES = 64 << 20  # Curves of k <= 2^20 ranks.


def token_curves(doc_index: Sequence[np.ndarray], position: Sequence[np.ndarray],
                 query_token_ids: Sequence[np.ndarray], gold_docs: Sequence[set[int]],
                 doc_token_ids: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
  """P(gold | rank) and P(lexical | rank) over all query tokens of all queries.

  Args:
    doc_index: per query, [n_q, k] doc index of each retrieved token (-1 = none).
    position: per query, [n_q, k] position of each retrieved token in its document.
    query_token_ids: per query, [n_q] vocabulary id of each query token.
    gold_docs: per query, the doc indices judged relevant.
    doc_token_ids: doc index -> [len] vocabulary ids of its indexed tokens.

  Returns:
    {"gold": [k], "lexical": [k]} float64 fractions; a missing token (-1) counts as neither.
  """
  known = np.array(sorted(doc_token_ids), dtype=np.int64)
  table = np.full((len(known), max(map(len, doc_token_ids.values()), default=0)), -1)
  for row, d in enumerate(known):
    table[row, :len(doc_token_ids[d])] = doc_token_ids[d]
  gold, lexical = [], []
  for docs, positions, ids, relevant in zip(doc_index, position, query_token_ids, gold_docs):
    found = docs >= 0
    gold.append(np.isin(docs, list(relevant)) & found)
    rows = np.searchsorted(known, np.where(found, docs, known[0]))
    retrieved_ids = np.where(found, table[rows, np.where(found, positions, 0)], -1)
    lexical.append(retrieved_ids == ids[:, None])
  return {
      "gold": np.concatenate(gold).mean(axis=0),
      "lexical": np.concatenate(lexical).mean(axis=0)
  }


def analyze(data: beir_eval.BeirData, encoder: Any, token_index: reader.TokenIndex, k: int,
            searcher: str) -> dict[str, Any]:
  """Retrieves the top-k tokens of every (non-special) query token of `data`; their curves."""
  tokenizer = encoder.tokenizer
  q, q_mask, _ = encoder.encode_queries(data.queries)
  q_ids = tokenization.encode_batch(tokenizer, data.queries, encoder.query_max_length)
  row_of = {doc_id: i for i, doc_id in enumerate(token_index.doc_ids)}
  doc_index, position, query_token_ids, gold_docs = [], [], [], []
  for i, query_id in enumerate(tqdm.tqdm(data.query_ids, desc="retrieve", unit="query")):
    keep = q_mask[i] & ~np.isin(q_ids[i], tokenizer.prefix + tokenizer.suffix)
    _, docs, positions = token_index.search_tokens(q[i][keep], k, searcher)
    doc_index.append(docs)
    position.append(positions)
    query_token_ids.append(q_ids[i][keep])
    gold_docs.append({row_of[d] for d, rel in data.qrels[query_id].items() if rel > 0})
  retrieved = sorted({int(d) for docs in doc_index for d in np.unique(docs) if d >= 0})
  texts = {doc_id: text for doc_id, text in zip(data.doc_ids, data.docs)}
  ids = tokenization.encode_batch(tokenizer, [texts[token_index.doc_ids[d]] for d in retrieved],
                                  encoder.doc_max_length)
  doc_token_ids = {d: row[row != 0] for d, row in zip(retrieved, ids)}
  for d, row in doc_token_ids.items():
    indexed = token_index.doc_lengths[d]
    if len(row) != indexed:
      raise ValueError(f"Document {token_index.doc_ids[d]!r} has {len(row)} tokens here but "
                       f"{indexed} in the index at {token_index.path}: different tokenization.")
  curves = token_curves(doc_index, position, query_token_ids, gold_docs, doc_token_ids)
  return {
      "k": k,
      "searcher": searcher,
      "num_query_tokens": int(sum(len(t) for t in query_token_ids)),
      **{
          name: curve.tolist() for name, curve in curves.items()
      }
  }


def plot(curves: dict[str, dict[str, Any]], path: str) -> None:
  """Draws P(gold | rank) and P(lexical | rank) of each labelled model into a PNG."""
  figure, axes = plt.subplots(1, 2, figsize=(10, 4))
  titles = {
      "gold": "retrieved token from a gold document",
      "lexical": "retrieved token lexically identical to the query token"
  }
  for axis, (name, title) in zip(axes, titles.items()):
    for label, result in curves.items():
      axis.plot(np.arange(1, result["k"] + 1), result[name], label=label)
    axis.set(xscale="log", xlabel="rank k of the retrieved token", ylabel="probability",
             title=title, ylim=(0, 1))
    axis.title.set_size(9)
    axis.grid(alpha=0.3)
    axis.legend()
  figure.tight_layout()
  with io.atomic_open(path, "wb") as f:
    figure.savefig(f, format="png", dpi=120)
  plt.close(figure)


def _read_compare(path: str) -> dict[str, Any]:
  """An earlier --out JSON, holding what `plot` draws (a ValidationError naming it if not)."""
  try:
    earlier = json.loads(io.read_bytes(path, _MAX_COMPARE_BYTES))
    if not (isinstance(earlier["label"], str) and isinstance(earlier["k"], int) and all(
        len(earlier[name]) == earlier["k"] and all(isinstance(p, float)
                                                   for p in earlier[name])
        for name in ("gold", "lexical"))):
      raise ValueError("a label, k and k probabilities of each curve are expected")
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise flags.ValidationError(f"--compare={path}: not an --out JSON of xtr-analyze-tokens "
                                f"({type(e).__name__}: {e}).") from None
  return earlier


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  cli.check_output_files(out=_OUT.value, plot=_PLOT.value)
  if _COMPARE.value and not _PLOT.value:
    raise flags.ValidationError("--compare draws earlier curves into --plot: give --plot too.")
  compared = [_read_compare(path) for path in _COMPARE.value]
  data = _SPLIT_FLAGS.load()
  encoder, token_index = _INDEX_FLAGS.open(_SEARCHER.value)
  cli.corpus_matches_index(data.corpus_path, token_index)
  cli.check_index_covers_qrels(token_index.doc_ids, data.qrels, token_index.path)
  k = min(_K.value, token_index.num_indexed_tokens)
  result = {
      "label": _LABEL.value,
      "index": _INDEX_FLAGS.index.value,
      "checkpoint": _INDEX_FLAGS.checkpoint.value,
      "data_dir": _SPLIT_FLAGS.data_dir.value,
      "split": _SPLIT_FLAGS.split.value,
      **analyze(data, encoder, token_index, k, _SEARCHER.value),
      **run_record.provenance([_SPLIT_FLAGS.data_dir.value], _SPLIT_FLAGS.split.value)
  }
  io.write_results(_OUT.value, result)
  if _PLOT.value:
    plot({earlier["label"]: earlier for earlier in compared} | {_LABEL.value: result}, _PLOT.value)
  for rank in (1, 10, 100, k):
    if rank <= k:
      print(f"rank {rank}: P(gold) {result['gold'][rank - 1]:.3f} | "
            f"P(lexical) {result['lexical'][rank - 1]:.3f}")


def console_entry_point() -> None:
  cli.run(main, __name__, required=["data_dir", "index", "checkpoint", "out"])


if __name__ == "__main__":
  console_entry_point()
