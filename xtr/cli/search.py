"""`xtr-search`: rank a token index's documents for queries from a file or stdin.

  echo "what causes scurvy" | xtr-search --index=runs/smoke/index --checkpoint=runs/smoke \
    --top_k=10
  xtr-search --index=INDEX_DIR --checkpoint=MODEL_DIR --queries=QUERIES.jsonl --format=trec \
    --out=RUN.trec

Queries, by the file's extension in any case (gzipped or not): a .jsonl or .json file of {"_id",
"text"} (BEIR queries), a .tsv file of `id<TAB>text`, or plain text with one query per line (ids
are line numbers; a line that is a BEIR record or holds a tab is refused as a misnamed file); `-`
reads plain text from stdin (typed on a terminal: one query per line, Ctrl-D to end). Output:
JSONL ({"query_id", "query", "results": [{"doc_id", "score", "rank"}]}) or a TREC run file, both
ranked as trec_eval ranks (ties by doc id, descending).
`--verbose` times each query end to end (encoding alone, search, scoring) on stderr.
The model comes from the index (its manifest describes it as data); the checkpoint must be the
one the index was exported with.
"""
import json
import os
import sys
from typing import Sequence

from absl import app
from absl import flags
import numpy as np

from xtr import cli
from xtr import io
from xtr.data import beir_files
from xtr.evaluation import beir_eval
from xtr.retrieval import ranker
from xtr.scoring import registry

_INDEX_FLAGS = cli.IndexFlags("Token index directory (xtr-export --out).")
_QUERIES = flags.DEFINE_string("queries", "-",
                               "Queries file (.jsonl/.json, .tsv, text), - = stdin.")
_OUT = flags.DEFINE_string("out", "-", "Output file, - = stdout.")
_FORMAT = flags.DEFINE_enum("format", "jsonl", ("jsonl", "trec"), "Output format.")
_VERBOSE = flags.DEFINE_bool(
    "verbose", False, "Encode each query alone (as an interactive user's query is) and print "
    "its encoding, search + scoring and total time to stderr, with their medians.")
_SEARCH_CONFIG = cli.define_search_flags()


def _jsonl(queries: dict[str, str], rankings: list[list[tuple[str, float]]]) -> str:
  """JSON lines of the rankings, each in `beir_eval.trec_order` (ties broken by doc id), as the
  TREC format ranks them (in the ranker's order, tied documents had other ranks there)."""
  lines = []
  for (query_id, text), ranking in zip(queries.items(), rankings):
    ranked = beir_eval.trec_order(dict(ranking))
    results = [{"doc_id": d, "score": s, "rank": r} for r, (d, s) in enumerate(ranked, 1)]
    lines.append(json.dumps({"query_id": query_id, "query": text, "results": results}) + "\n")
  return "".join(lines)


def _read_queries(path: str) -> dict[str, str]:
  """`beir_files.read_queries(path)`, with a hint on stderr when it waits for a terminal."""
  if path == "-" and sys.stdin.isatty():
    print("xtr-search: reading queries from stdin, one per line; Ctrl-D to end.", file=sys.stderr,
          flush=True)
  return beir_files.read_queries(path)


def _print_times(query_ids: list[str], results: ranker.Results) -> None:
  """Per query and their medians: encoding, search + scoring, and end-to-end time."""
  total_ms = results.encode_ms + results.latency_ms
  for query_id, encode, search, total in zip(query_ids, results.encode_ms, results.latency_ms,
                                             total_ms):
    print(
        f"query {query_id}: encode {encode:.1f} ms + search and scoring {search:.1f} ms = "
        f"{total:.1f} ms", file=sys.stderr)
  print(
      f"median over {len(total_ms)} queries: encode {np.median(results.encode_ms):.1f} ms + "
      f"search and scoring {np.median(results.latency_ms):.1f} ms; end to end "
      f"{np.median(total_ms):.1f} ms", file=sys.stderr)


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  config = _SEARCH_CONFIG()
  if _VERBOSE.value and not registry.SCORINGS[config.scoring].retrieves:
    raise app.UsageError(f"--verbose times each query alone; --scoring={config.scoring} scores "
                         "every query at once. Drop one of them.")
  cli.check_output_file("out", _OUT.value)
  queries = _read_queries(_QUERIES.value)
  # ScaNN loads in a helper process while the model is restored (docs/performance.md).
  encoder, token_index = _INDEX_FLAGS.open(config.searcher, scann_helper=True)
  if _FORMAT.value == "trec":
    beir_eval.check_trec_ids(queries, token_index.doc_ids)
  results = ranker.search(encoder, token_index, list(queries.values()), config,
                          encode_alone=_VERBOSE.value)
  if _VERBOSE.value:
    _print_times(list(queries), results)
  if _FORMAT.value == "trec":
    run = {query_id: dict(ranking) for query_id, ranking in zip(queries, results.rankings)}
    beir_eval.write_trec_run(run, _OUT.value, tag=f"xtr-{config.scoring}")
  else:
    with io.atomic_open(_OUT.value) as f:
      f.write(_jsonl(queries, results.rankings))
  _exit_without_teardown()


def _exit_without_teardown() -> None:
  """Ends the process once its output is out: the interpreter's teardown (JAX's, XLA's and
  ScaNN's objects, ~1,300 modules) took 0.3-0.7 s more on 2 cores and has nothing to clean up
  after a search (docs/performance.md, "Cold start")."""
  sys.stdout.flush()
  sys.stderr.flush()
  os._exit(0)


def console_entry_point() -> None:
  cli.run(main, __name__, required=["index", "checkpoint"])


if __name__ == "__main__":
  console_entry_point()
