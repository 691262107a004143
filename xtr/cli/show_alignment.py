"""`xtr-show-alignment`: an ALIGNER model's salience and alignment on one query and document,
rendered as the paper's Table 4 (HTML, or Markdown for a results page).

  xtr-show-alignment --data_dir=data/scifact --split=test --index=INDEX_DIR --checkpoint=MODEL \
    --query_id=1 [--doc_id=DOC] --out=example.html   (or example.md) [--record=example.json]

Highlights the query tokens that query pruning keeps (top --beta_q by salience u^q) and the
document tokens that index pruning keeps (top --beta_d by u^d), and marks the --num_aligned most
salient query tokens with the document token each one aligns to (top-1 by S_ij = q_i·d_j), one
colour and number per pair; a table lists each pair's S_ij, u^q_i and u^d_j. The document
defaults to the query's most relevant judged document. Text from the corpus is escaped.
--record also writes the run record of the rendering (`xtr.evaluation.run_record`: the rendering
with its command, commit, gin config, data sha256 and date), as docs/runs/ keeps it.
"""
import os
from typing import Sequence

from absl import flags

from xtr import cli
from xtr import io
from xtr.analysis import render
from xtr.evaluation import beir_eval
from xtr.evaluation import run_record
from xtr.models import salience
from xtr.text import tokenization

_SPLIT_FLAGS = cli.SplitFlags("qrels split of the query (for its gold document).")
_INDEX_FLAGS = cli.IndexFlags()
_QUERY_ID = flags.DEFINE_string("query_id", None, "The query (an id of queries.jsonl).")
_DOC_ID = flags.DEFINE_string(
    "doc_id", None, "The document (default: the query's most relevant "
    "judged document in --split).")
_BETA_Q = cli.define_fraction("beta_q", 0.5, "Highlight the top β_q of the query's tokens.")
_BETA_D = cli.define_fraction("beta_d", 0.2, "Highlight the top β_d of the document's tokens.")
_NUM_ALIGNED = cli.define_count(
    "num_aligned", 3, "Most salient query tokens whose top-1 "
    "aligned document token is marked.")
_OUT = flags.DEFINE_string("out", None, "The rendering to write: .html or .md.")
_RECORD = flags.DEFINE_string("record", None, "Also write the rendering's run record (JSON) here.")


def _gold_doc(data: beir_eval.BeirData, query_id: str) -> str:
  """--doc_id, or the query's most relevant judged document (ties: first in the qrels)."""
  doc_id = _DOC_ID.value or data.most_relevant(query_id)
  if doc_id is None:
    raise flags.ValidationError(f"--query_id={query_id} has no relevant document in qrels/"
                                f"{_SPLIT_FLAGS.split.value}.tsv: name one with --doc_id.")
  if doc_id not in data.doc_ids:
    raise flags.ValidationError(f"--doc_id={doc_id} is not a document of {data.corpus_path}.")
  return doc_id


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  if os.path.splitext(_OUT.value)[1] not in (".html", ".md"):
    raise flags.ValidationError(f"--out={_OUT.value}: write .html or .md.")
  cli.check_output_files(out=_OUT.value, record=_RECORD.value)
  data = _SPLIT_FLAGS.load()
  query_text = dict(zip(data.query_ids, data.queries)).get(_QUERY_ID.value)
  if query_text is None:
    raise flags.ValidationError(
        f"--query_id={_QUERY_ID.value} is not a query of "
        f"qrels/{_SPLIT_FLAGS.split.value}.tsv in {_SPLIT_FLAGS.data_dir.value}.")
  doc_id = _gold_doc(data, _QUERY_ID.value)
  encoder, token_index = _INDEX_FLAGS.open()
  if not token_index.has_salience:
    raise flags.ValidationError(
        f"--checkpoint={_INDEX_FLAGS.checkpoint.value} has no salience heads: "
        "nothing to show (train with xtr_encoder.XTREncoder.salience).")
  if doc_id not in token_index.doc_ids:
    raise flags.ValidationError(
        f"--doc_id={doc_id} is not a document of --index={_INDEX_FLAGS.index.value}.")
  doc_index = token_index.doc_ids.index(doc_id)
  q, q_mask, u_q = (a[0] for a in encoder.encode_queries([query_text]))
  d = token_index.doc_vectors([doc_index])[0]
  u_d = token_index.doc_saliences([doc_index])[0]
  ids = {
      role: tokenization.encode_batch(encoder.tokenizer, [text], length)[0]
      for role, text, length in (("query", query_text, encoder.query_max_length),
                                 ("doc", data.docs[data.doc_ids.index(doc_id)],
                                  encoder.doc_max_length))
  }
  doc_ids = ids["doc"][ids["doc"] != encoder.tokenizer.pad_id]
  if len(doc_ids) != len(d):
    raise ValueError(
        f"document {doc_id} has {len(d)} tokens in --index={_INDEX_FLAGS.index.value} but "
        f"{len(doc_ids)} when tokenized: the index was not built from this corpus.")
  s = q[q_mask] @ d.T
  pairs = render.salient_alignments(s, u_q[q_mask], _NUM_ALIGNED.value)
  query = {
      "id": _QUERY_ID.value,
      "pieces": encoder.tokenizer.pieces(ids["query"][q_mask]),
      "u": u_q[q_mask],
      "kept": salience.kept(u_q[q_mask], _BETA_Q.value),
      "beta": _BETA_Q.value
  }
  doc = {
      "id": doc_id,
      "pieces": encoder.tokenizer.pieces(doc_ids),
      "u": u_d,
      "kept": salience.kept(u_d, _BETA_D.value),
      "beta": _BETA_D.value
  }
  rendering = render.render(query, doc, pairs, s, markdown=_OUT.value.endswith(".md"))
  with io.atomic_open(_OUT.value) as f:
    f.write(rendering)
  if _RECORD.value:
    io.write_results(
        _RECORD.value,
        run_record.record({
            "query_id": _QUERY_ID.value,
            "doc_id": doc_id,
            "rendering": rendering
        }, [_SPLIT_FLAGS.data_dir.value], _SPLIT_FLAGS.split.value))
  print(f"Wrote {_OUT.value}: query {_QUERY_ID.value}, document {doc_id}, pairs " +
        ", ".join(f"{query['pieces'][i]}→{doc['pieces'][j]}" for i, j in pairs))


def console_entry_point() -> None:
  cli.run(main, __name__, required=["data_dir", "index", "checkpoint", "query_id", "out"])


if __name__ == "__main__":
  console_entry_point()
