"""BEIR-layout files, read and validated: corpus.jsonl, queries.jsonl and qrels/{split}.tsv.

corpus.jsonl holds {"_id", "title", "text"} records, queries.jsonl {"_id", "text"}, and
qrels/{split}.tsv the header `query-id<TAB>corpus-id<TAB>score` then one judgment a line.
Any of them may be gzipped (`corpus.jsonl.gz`); `resolve` finds whichever is there.
Every error names the file, the line and the field (or the byte of invalid UTF-8).
"""
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Mapping
import contextlib
import gzip
import json
import os
import random
import re
import sys
import unicodedata
import zlib

from xtr import io

QRELS_HEADER = ["query-id", "corpus-id", "score"]
_SCORE = re.compile(r"-?[0-9]+")  # A qrels score: ASCII digits ('1_0' and '١' are not).
_MAX_SCORE = 2**31 - 1  # pytrec_eval holds relevance in a C int.
MAX_LINE_BYTES = 16 << 20  # No BEIR document, query or judgment is near; a longer line is not one.
_SURROGATE = re.compile("[\ud800-\udfff]")  # What JSON's \ud800 escapes let into a str.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Unicode's category Cc.
_BOM = "\ufeff"  # A byte order mark, which some editors write at the start of UTF-8 files.


def resolve(data_dir: str, name: str) -> str:
  """`data_dir/name`, or `data_dir/name.gz` where only that exists.

  Raises:
    FileNotFoundError: naming both paths, if neither exists.
  """
  path = os.path.join(data_dir, name)
  for candidate in (path, path + ".gz"):
    if os.path.exists(candidate):
      return candidate
  raise FileNotFoundError(f"Neither {path} nor {path}.gz exists.")


def read_lines(path: str) -> Iterator[tuple[int, str]]:
  """(line number, line without its newline) of a UTF-8 text file, gunzipped if it ends with
  `.gz` (in any case); `-` reads stdin. A byte order mark (U+FEFF) that starts the file is dropped.

  Raises:
    ValueError: naming the file, line and byte of the first invalid UTF-8, the file and line
      where its gzip stream is damaged or cut short, or a line longer than MAX_LINE_BYTES (read
      no further: tokenizing 120 MB of text took gigabytes).
  """
  with contextlib.ExitStack() as stack:
    if path == "-":
      f, path = sys.stdin.buffer, "<stdin>"
    else:
      gzipped = path.lower().endswith(".gz")
      f = stack.enter_context(gzip.open(path, "rb") if gzipped else open(path, "rb"))
    for line_number, raw in enumerate(_raw_lines(f, path), start=1):
      try:
        line = raw.decode("utf-8").rstrip("\r\n")
      except UnicodeDecodeError as e:
        raise ValueError(f"{path}:{line_number}: invalid UTF-8 at byte {e.start + 1} of the line "
                         f"({raw[e.start:e.start + 4]!r}...)") from None
      yield line_number, line.removeprefix(_BOM) if line_number == 1 else line


def _raw_lines(f, path: str) -> Iterator[bytes]:
  """The lines of binary file `f` (named `path`); a line longer than MAX_LINE_BYTES, or a
  damaged or truncated gzip stream, is a ValueError naming the file and line."""
  line_number = 0
  try:
    for line_number, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
      if len(raw) > MAX_LINE_BYTES:
        raise ValueError(f"{path}:{line_number}: longer than {MAX_LINE_BYTES:,} bytes: not a "
                         "document, query or judgment line")
      yield raw
  except (EOFError, zlib.error, gzip.BadGzipFile) as e:
    raise ValueError(f"{path}:{line_number + 1}: not a valid gzip file ({e}); is it damaged or "
                     "cut short?") from None


def document_text(doc: Mapping[str, str]) -> str:
  """A document as BEIR gives it to dense retrievers: `(title + " " + text).strip()`."""
  return (doc.get("title", "") + " " + doc["text"]).strip()


def query_text(query: Mapping[str, str]) -> str:
  if not query["text"].strip():
    raise ValueError("empty field 'text'")
  return query["text"]


def search_query_text(query: Mapping[str, str]) -> str:
  """`query_text`, refusing control characters (NUL ...; tab is allowed): a query is one line
  of plain text."""
  text = query_text(query)
  check_plain_text(text)
  return text


def check_plain_text(text: str) -> None:
  """Refuses a control character other than tab (Unicode category Cc) or a lone surrogate
  (category Cs, what JSON's \\ud800 escapes let into a str), naming it and its position."""
  for position, char in enumerate(text, start=1):
    if unicodedata.category(char) in ("Cc", "Cs") and char != "\t":
      kind = "control character" if unicodedata.category(char) == "Cc" else "lone surrogate"
      raise ValueError(f"{kind} U+{ord(char):04X} at character {position}: a query is one line "
                       "of plain text; remove it")


def read_jsonl(path: str, to_text: Callable[[Mapping[str, str]], str]) -> dict[str, str]:
  """{_id: to_text(record)} in file order; every record needs string `_id` and `text`."""
  texts, first_line = {}, {}
  for line_number, line in read_lines(path):
    where = f"{path}:{line_number}"
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise ValueError(f"{where}: invalid JSON ({e.msg})") from None
    except RecursionError:
      raise ValueError(f"{where}: JSON nested too deeply to parse") from None
    if not isinstance(record, dict):
      raise ValueError(f"{where}: expected a JSON object")
    for field in ("_id", "text") + (("title",) if "title" in record else ()):
      if not isinstance(record.get(field), str):
        raise ValueError(f"{where}: field '{field}' is missing or not a string")
      if field == "_id" and not record[field].strip():
        raise ValueError(f"{where}: field '_id' is empty")
      if field == "_id" and (control := _CONTROL.search(record[field])):
        raise ValueError(f"{where}: field '_id' holds the control character "
                         f"U+{ord(control.group()):04X}: an id is one line of text without tabs "
                         "(qrels and --delete files hold one per line)")
      if _SURROGATE.search(record[field]):
        raise ValueError(f"{where}: field '{field}' holds a lone surrogate (a \\ud800-\\udfff "
                         "escape that is not half of a pair): it is not text")
      if "\0" in record[field]:
        raise ValueError(f"{where}: field '{field}' holds a NUL (U+0000) at character "
                         f"{record[field].index(chr(0)) + 1}, where the tokenizer ends the text "
                         "(as TensorFlow's does); remove it")
    record_id = record["_id"]
    if record_id in texts:
      raise ValueError(f"{where}: duplicate _id '{record_id}' (first on line "
                       f"{first_line[record_id]})")
    try:
      texts[record_id] = to_text(record)
    except ValueError as e:
      raise ValueError(f"{where}: {e}") from None
    first_line[record_id] = line_number
  return texts


def read_queries(path: str) -> dict[str, str]:
  """{query id: text} from a file whose extension (in any case, before an optional `.gz`) says
  its format: .jsonl or .json, BEIR's {"_id", "text"} records; .tsv, `id<TAB>text` lines; any
  other (a file or - for stdin), one query a line, ids the line numbers.

  Raises:
    ValueError: naming the file and line of a malformed query or of a control character in
      one (`check_plain_text`), of a plain-text line that is a BEIR query record or holds a tab
      (`_check_plain_query`: the file is misnamed), or if there is no query.
  """
  kind = _query_file_kind(path)
  if kind == "jsonl":
    return _nonempty(read_jsonl(path, search_query_text), path)
  queries = {}
  for line_number, line in read_lines(path):
    where = f"{'<stdin>' if path == '-' else path}:{line_number}"
    if kind == "tsv":
      query_id, text = _tsv_query(line, where)
    else:
      query_id, text = str(line_number), line
      _check_plain_query(line, where, path)
    if query_id in queries:
      raise ValueError(f"{where}: duplicate query id {query_id!r}")
    try:
      check_plain_text(text)
    except ValueError as e:
      raise ValueError(f"{where}: {e}") from None
    if text.strip():
      queries[query_id] = text
  return _nonempty(queries, path)


def _query_file_kind(path: str) -> str:
  """"jsonl" (.jsonl or .json), "tsv" (.tsv) or "text" (any other name, and - for stdin): the
  format `read_queries` reads `path` in, by its extension in any case, `.gz` set aside."""
  extension = os.path.splitext(path.lower().removesuffix(".gz"))[1]
  return {".jsonl": "jsonl", ".json": "jsonl", ".tsv": "tsv"}.get(extension, "text")


def _check_plain_query(line: str, where: str, path: str) -> None:
  """Refuses a line of a plain-text queries file (`path`) that is a BEIR query record or holds
  a tab (`id<TAB>text`?): read as text, the record or the id would be part of the query, and
  the line number its id."""

  def rename(extension: str) -> str:
    if path == "-":
      return f"to read it so, write the queries to a {extension} file"
    return f"to read it so, name the file {extension} (not {os.path.basename(path)})"

  if line.lstrip().startswith("{"):
    try:
      record = json.loads(line)
    except (ValueError, RecursionError):
      record = None
    if isinstance(record, dict) and "_id" in record and "text" in record:
      raise ValueError(f"{where}: a BEIR query record ({{\"_id\", \"text\"}}) in a plain-text "
                       f"queries file, whose lines are queries; {rename('.jsonl')}")
  if "\t" in line and line.strip():
    raise ValueError(f"{where}: a tab in a plain-text query (an `id<TAB>text` line?); "
                     f"{rename('.tsv')}, or replace the tab by a space")


def _tsv_query(line: str, where: str) -> tuple[str, str]:
  """(id, text) of an `id<TAB>text` line."""
  fields = line.split("\t")
  if len(fields) != 2 or not fields[1].strip():
    raise ValueError(f"{where}: expected `id<TAB>text`, got {line!r}")
  return fields[0], fields[1]


def _nonempty(queries: dict[str, str], path: str) -> dict[str, str]:
  """`queries`, refused if there is none."""
  if not queries:
    raise ValueError(f"{'stdin' if path == '-' else path} holds no query (it is empty or blank).")
  return queries


def read_qrels(path: str, queries: Mapping[str, str],
               corpus: Mapping[str, str]) -> dict[str, dict[str, int]]:
  """{query-id: {corpus-id: score}} as BEIR reads it; a score is an integer in the range of a
  C int (pytrec_eval's), and a pair repeated with another score is refused."""
  qrels, first_line = {}, {}
  lines = read_lines(path)
  header = next(lines, (1, ""))[1].split("\t")
  if header != QRELS_HEADER:
    raise ValueError(f"{path}:1: expected the header {chr(9).join(QRELS_HEADER)!r}, "
                     f"got {chr(9).join(header)!r}")
  for line_number, line in lines:
    where = f"{path}:{line_number}"
    fields = line.split("\t")
    if len(fields) != 3:
      raise ValueError(f"{where}: expected 3 tab-separated fields (query-id, corpus-id, "
                       f"score), got {len(fields)}")
    query_id, doc_id, score = fields
    if query_id not in queries:
      raise ValueError(f"{where}: query-id '{query_id}' is not in queries.jsonl")
    if doc_id not in corpus:
      raise ValueError(f"{where}: corpus-id '{doc_id}' is not in corpus.jsonl")
    if not _SCORE.fullmatch(score) or abs(int(score)) > _MAX_SCORE:
      raise ValueError(f"{where}: score {score!r} is not a base-10 integer within "
                       f"±{_MAX_SCORE:,}")
    judged = qrels.setdefault(query_id, {})
    if judged.get(doc_id, int(score)) != int(score):
      raise ValueError(f"{where}: query-id '{query_id}', corpus-id '{doc_id}' judged {score} "
                       f"here and {judged[doc_id]} on line {first_line[query_id, doc_id]}")
    judged[doc_id] = int(score)
    first_line.setdefault((query_id, doc_id), line_number)
  return qrels


def carve_dev_split(data_dir: str, out_dir: str, split: str = "train", fraction: float = 0.2,
                    seed: int = 0) -> None:
  """Writes a BEIR dir whose qrels/train.tsv and qrels/dev.tsv split `split`'s queries.

  A seeded `fraction` of the queries of `data_dir`'s qrels/{split}.tsv (all their rows) go to
  dev, the rest to train, so that a recipe can be tuned without touching the test split.
  corpus.jsonl and queries.jsonl are linked, not copied.

  Raises:
    FileExistsError: naming a qrels/train.tsv or qrels/dev.tsv (or .gz) already in `out_dir`,
      before anything is written: carved into `data_dir` itself, the source split was replaced
      by its subset (or, gzipped, hidden by it, `resolve` reading the plain file first).
  """
  source = resolve(data_dir, os.path.join("qrels", f"{split}.tsv"))
  targets = {name: os.path.join(out_dir, "qrels", f"{name}.tsv") for name in ("train", "dev")}
  for path in targets.values():
    for existing in (path, path + ".gz"):
      if os.path.lexists(existing):
        raise FileExistsError(f"{existing} exists: carve_dev_split never replaces a split (nor "
                              "hides a gzipped one); choose an out_dir without qrels/train.tsv "
                              "and qrels/dev.tsv.")
  header, *rows = [line for _, line in read_lines(source)]
  query_ids = sorted({row.split("\t")[0] for row in rows})
  rng = random.Random(seed)
  dev = set(rng.sample(query_ids, round(fraction * len(query_ids))))
  os.makedirs(os.path.join(out_dir, "qrels"), exist_ok=True)
  for name in ("corpus.jsonl", "queries.jsonl"):
    path = resolve(data_dir, name)
    link = os.path.join(out_dir, os.path.basename(path))
    if not os.path.exists(link):
      os.symlink(os.path.abspath(path), link)
  for name, keep in (("train", lambda q: q not in dev), ("dev", lambda q: q in dev)):
    lines = [header, *(row for row in rows if keep(row.split("\t")[0]))]
    with io.naming(targets[name]), io.create(targets[name]) as f:  # Never replaces a file.
      f.write(("\n".join(lines) + "\n").encode())


def read_split(data_dir: str,
               split: str) -> tuple[dict[str, str], dict[str, str], dict[str, dict[str, int]], str]:
  """(corpus {id: document_text}, queries {id: text}, qrels {query id: {doc id: score}}, the
  qrels path) of `data_dir`'s corpus, queries and qrels/{split}.tsv, each validated."""
  corpus = read_jsonl(resolve(data_dir, "corpus.jsonl"), document_text)
  queries = read_jsonl(resolve(data_dir, "queries.jsonl"), query_text)
  qrels_path = resolve(data_dir, os.path.join("qrels", f"{split}.tsv"))
  return corpus, queries, read_qrels(qrels_path, queries, corpus), qrels_path
