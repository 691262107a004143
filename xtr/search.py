"""`xtr-search`: rank a token index's documents for queries from a file or stdin.

  echo "what causes scurvy" | xtr-search --index=INDEX_DIR --checkpoint=runs/demo --top_k=10
  xtr-search --index=INDEX_DIR --checkpoint=... --queries=queries.jsonl --format=trec --out=run.trec

Queries: a .jsonl file of {"_id", "text"} (BEIR queries), a .tsv file of `id<TAB>text`, or plain
text with one query per line (ids are line numbers); `-` reads plain text from stdin. Output:
JSONL ({"query_id", "query", "results": [{"doc_id", "score", "rank"}]}) or a TREC run file.
The model comes from the index (its stored gin config); the checkpoint must be the one the index
was exported with.
"""
import json
import sys
from typing import Sequence

from absl import app
from absl import flags

from xtr import beir_files
from xtr import cli
from xtr import evaluation
from xtr import retrieval

_INDEX = flags.DEFINE_string("index", None, "Token index directory (xtr-export --out).")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None,
                                  "The checkpoint the index was built with.")
_QUERIES = flags.DEFINE_string("queries", "-",
                                "Queries file (.jsonl, .tsv, text), - = stdin.")
_OUT = flags.DEFINE_string("out", "-", "Output file, - = stdout.")
_FORMAT = flags.DEFINE_enum("format", "jsonl", ("jsonl", "trec"), "Output format.")
_SEARCH_CONFIG = cli.define_search_flags()


def read_queries(path: str) -> dict[str, str]:
  """{query id: text} from a .jsonl or .tsv file, or text lines (a file or - for stdin)."""
  if path.endswith(".jsonl"):
    return beir_files.read_jsonl(path, beir_files.query_text)
  lines = (sys.stdin if path == "-" else open(path, encoding="utf-8")).read().splitlines()
  if not path.endswith(".tsv"):
    return {str(i): line for i, line in enumerate(lines, start=1) if line.strip()}
  queries = {}
  for line_number, line in enumerate(lines, start=1):
    fields = line.split("\t")
    if len(fields) != 2 or not fields[1].strip():
      raise ValueError(f"{path}:{line_number}: expected `id<TAB>text`, got {line!r}")
    if fields[0] in queries:
      raise ValueError(f"{path}:{line_number}: duplicate query id {fields[0]!r}")
    queries[fields[0]] = fields[1]
  return queries


def _jsonl(queries: dict[str, str], rankings: list[list[tuple[str, float]]]) -> str:
  return "".join(json.dumps({
      "query_id": query_id, "query": text,
      "results": [{"doc_id": d, "score": s, "rank": r} for r, (d, s) in enumerate(ranking, 1)]
  }) + "\n" for (query_id, text), ranking in zip(queries.items(), rankings))


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  cli.quiet_logging()
  config = _SEARCH_CONFIG()
  queries = read_queries(_QUERIES.value)
  encoder, token_index = cli.open_for_search(_INDEX.value, _CHECKPOINT.value)
  results = retrieval.search(encoder, token_index, list(queries.values()), config)
  if _FORMAT.value == "trec":
    run = {query_id: dict(ranking) for query_id, ranking in zip(queries, results.rankings)}
    if _OUT.value == "-":
      raise app.UsageError("--format=trec needs --out=FILE.")
    evaluation.write_trec_run(run, _OUT.value, tag=f"xtr-{config.scoring}")
  elif _OUT.value == "-":
    sys.stdout.write(_jsonl(queries, results.rankings))
  else:
    with evaluation.atomic_open(_OUT.value) as f:
      f.write(_jsonl(queries, results.rankings))


def console_entry_point() -> None:
  flags.mark_flags_as_required(["index", "checkpoint"])
  app.run(main)


if __name__ == "__main__":
  console_entry_point()
