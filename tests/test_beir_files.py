"""Tests of the bundled data/scifact and of gzipped BEIR files (xtr/data/beir_files.py)."""
import dataclasses
import gzip
import os
import pathlib
import re

import pytest

from xtr.data import beir_files
from xtr.data.tasks import beir
from xtr.evaluation import beir_eval

SCIFACT = pathlib.Path(__file__).resolve().parents[1] / "data" / "scifact"


@pytest.mark.parametrize("name",
                         ["corpus.jsonl", "queries.jsonl", "qrels/train.tsv", "qrels/test.tsv"])
def test_bundled_scifact_is_beirs(scifact_dir, name):
  path = pathlib.Path(beir_files.resolve(SCIFACT, name))
  data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
  assert data == (scifact_dir / name).read_bytes()


def test_bundled_scifact_loads_like_the_plain_files(scifact_dir):
  assert beir_files.resolve(SCIFACT, "corpus.jsonl").endswith("corpus.jsonl.gz")
  for split in ("train", "test"):
    bundled, plain = beir_eval.load_beir(SCIFACT, split), beir_eval.load_beir(scifact_dir, split)
    assert bundled == dataclasses.replace(plain, corpus_path=bundled.corpus_path)
  bundled, plain = beir.load_pairs(SCIFACT, "train"), beir.load_pairs(scifact_dir, "train")
  assert (bundled.queries, bundled.docs) == (plain.queries, plain.docs)
  assert bundled.pairs.tolist() == plain.pairs.tolist()
  data = beir_eval.load_beir(SCIFACT, "test")
  assert (len(data.doc_ids), len(data.query_ids), sum(map(len,
                                                          data.qrels.values()))) == (5183, 300, 339)


def test_resolve_prefers_the_plain_file_and_names_both_when_missing(tmp_path):
  with pytest.raises(
      FileNotFoundError,
      match=re.escape(f"Neither {tmp_path}/corpus.jsonl nor {tmp_path}/corpus.jsonl.gz exists.")):
    beir_files.resolve(tmp_path, "corpus.jsonl")
  (tmp_path / "corpus.jsonl.gz").write_bytes(gzip.compress(b""))
  assert beir_files.resolve(tmp_path, "corpus.jsonl") == f"{tmp_path}/corpus.jsonl.gz"
  (tmp_path / "corpus.jsonl").write_text("")
  assert beir_files.resolve(tmp_path, "corpus.jsonl") == f"{tmp_path}/corpus.jsonl"


def test_gzipped_file_errors_name_the_file_and_line(tmp_path):
  (tmp_path / "qrels").mkdir()
  (tmp_path / "corpus.jsonl.gz").write_bytes(
      gzip.compress(b'{"_id": "d1", "title": "", "text": "one"}\n{"_id": "d2", "text": 2}\n'))
  (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "query"}\n')
  (tmp_path / "qrels" / "test.tsv.gz").write_bytes(
      gzip.compress(b"query-id\tcorpus-id\tscore\nq1\td1\t1\n"))
  with pytest.raises(
      ValueError,
      match=re.escape(f"{tmp_path}/corpus.jsonl.gz:2: field 'text' is missing or not a string")):
    beir_eval.load_beir(tmp_path, "test")
  (tmp_path / "corpus.jsonl.gz").write_bytes(
      gzip.compress(b'{"_id": "d1", "title": "", "text": "one"}\n'))
  (tmp_path / "qrels" / "test.tsv.gz").write_bytes(
      gzip.compress(b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td9\t1\n"))
  with pytest.raises(
      ValueError,
      match=re.escape(f"{tmp_path}/qrels/test.tsv.gz:3: corpus-id 'd9' is not in corpus.jsonl")):
    beir_eval.load_beir(tmp_path, "test")


@pytest.mark.parametrize("damage", ["truncated", "corrupt", "plain"])
def test_a_damaged_gzip_file_is_named_with_its_line(tmp_path, damage):
  lines = b"".join(b'{"_id": "d%d", "text": "document %d"}\n' % (i, i) for i in range(2000))
  data = {
      "truncated": gzip.compress(lines)[:-100],
      "corrupt": gzip.compress(lines)[:20] + b"\xff" * 20 + gzip.compress(lines)[40:],
      "plain": lines
  }[damage]
  (tmp_path / "corpus.jsonl.gz").write_bytes(data)
  with pytest.raises(
      ValueError, match=re.escape(f"{tmp_path}/corpus.jsonl.gz:") +
      r"\d+: not a valid gzip file \(.+\); is it damaged or cut short\?$"):
    beir_files.read_jsonl(str(tmp_path / "corpus.jsonl.gz"), beir_files.document_text)


def test_a_line_too_long_for_any_document_is_refused_before_it_is_read_whole(tmp_path, monkeypatch):
  """A 120 MB corpus line took gigabytes to tokenize, and aborted an export under a memory limit."""
  monkeypatch.setattr(beir_files, "MAX_LINE_BYTES", 1000)
  lines = ['{"_id": "d1", "text": "short"}', '{"_id": "d2", "text": "%s"}' % ("x" * 2000)]
  for name, data in (("c.jsonl", "\n".join(lines).encode()),
                     ("c.jsonl.gz", gzip.compress("\n".join(lines).encode()))):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(ValueError,
                       match=re.escape(f"{tmp_path / name}:2: longer than 1,000 bytes")):
      beir_files.read_jsonl(str(tmp_path / name), beir_files.document_text)


@pytest.mark.parametrize("name", ["Q.JSONL", "q.json", "q.Jsonl", "Q.JSONL.GZ", "q.json.gz"])
def test_a_queries_file_is_read_by_its_extension_in_any_case(tmp_path, name):
  """Before: Q.JSONL and q.json were read as plain text, each JSON line a query, its line number
  the id (a wrong run file, exit 0)."""
  records = '{"_id": "q7", "text": "vitamin c scurvy"}\n{"_id": "q9", "text": "sugar tea"}\n'
  (tmp_path / "q.jsonl").write_text(records)
  data = gzip.compress(records.encode()) if name.lower().endswith(".gz") else records.encode()
  (tmp_path / name).write_bytes(data)
  expected = beir_files.read_queries(str(tmp_path / "q.jsonl"))
  assert expected == {"q7": "vitamin c scurvy", "q9": "sugar tea"}
  assert beir_files.read_queries(str(tmp_path / name)) == expected


@pytest.mark.parametrize("name", ["Q.TSV", "q.Tsv.gz"])
def test_a_tsv_queries_file_is_read_by_its_extension_in_any_case(tmp_path, name):
  lines = "q7\tvitamin c scurvy\nq9\tsugar tea\n"
  data = gzip.compress(lines.encode()) if name.lower().endswith(".gz") else lines.encode()
  (tmp_path / name).write_bytes(data)
  assert beir_files.read_queries(str(tmp_path / name)) == {
      "q7": "vitamin c scurvy",
      "q9": "sugar tea"
  }


@pytest.mark.parametrize("load", [beir_eval.load_beir, beir.load_pairs])
@pytest.mark.parametrize("name", ["queries.jsonl", "corpus.jsonl"])
def test_a_nul_in_a_beir_text_is_refused_naming_file_line_and_field(tmp_path, load, name):
  """Before: evaluation, training and export took the text up to its NUL (where the tokenizer,
  as TensorFlow's, ends it), silently."""
  (tmp_path / "qrels").mkdir()
  for file, prefix in (("corpus.jsonl", "d"), ("queries.jsonl", "q")):
    second = "vitamin c\\u0000 scurvy" if file == name else "scurvy"
    (tmp_path / file).write_text(f'{{"_id": "{prefix}1", "text": "scurvy"}}\n'
                                 f'{{"_id": "{prefix}2", "text": "{second}"}}\n')
  (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
  with pytest.raises(
      ValueError, match=re.escape(f"{tmp_path}/{name}:2: field 'text' holds a NUL (U+0000) at "
                                  "character 10, where the tokenizer ends the text")):
    load(tmp_path, "test")


def _carvable(directory: pathlib.Path, train_name: str) -> pathlib.Path:
  """A BEIR dir of the bundled SciFact's corpus, queries and train qrels (as `train_name`)."""
  (directory / "qrels").mkdir(parents=True)
  for name in ("corpus.jsonl.gz", "queries.jsonl.gz"):
    (directory / name).symlink_to(SCIFACT / name)
  train = (SCIFACT / "qrels" / "train.tsv").read_bytes()
  data = gzip.compress(train) if train_name.endswith(".gz") else train
  (directory / "qrels" / train_name).write_bytes(data)
  return directory


@pytest.mark.parametrize("train_name", ["train.tsv", "train.tsv.gz"])
def test_carve_dev_split_never_replaces_or_hides_a_split(tmp_path, train_name):
  """Before: carved into its own data_dir, train.tsv was overwritten by its 80% subset, and a
  train.tsv.gz was hidden by it (`resolve` reads the plain file first), silently."""
  data = _carvable(tmp_path / "data", train_name)
  source = (data / "qrels" / train_name).read_bytes()
  with pytest.raises(
      FileExistsError, match=re.escape(f"{data}/qrels/{train_name} exists: "
                                       "carve_dev_split never replaces a split")):
    beir_files.carve_dev_split(str(data), str(data))
  assert os.listdir(data / "qrels") == [train_name]
  assert (data / "qrels" / train_name).read_bytes() == source
  out = tmp_path / "out"
  beir_files.carve_dev_split(str(data), str(out))
  carved = {name: (out / "qrels" / name).read_bytes() for name in ("train.tsv", "dev.tsv")}
  with pytest.raises(FileExistsError, match=re.escape(f"{out}/qrels/train.tsv exists")):
    beir_files.carve_dev_split(str(data), str(out), seed=1)
  assert {name: (out / "qrels" / name).read_bytes() for name in carved} == carved


def test_carve_dev_split_creates_its_files_anew(tmp_path, monkeypatch):
  """A dev.tsv that appears once the checks are done (a dangling symlink before them) is
  neither replaced nor followed: the files are created exclusively."""
  data, out = _carvable(tmp_path / "data", "train.tsv"), tmp_path / "out"
  (out / "qrels").mkdir(parents=True)
  (out / "qrels" / "dev.tsv").symlink_to(tmp_path / "target")
  with pytest.raises(FileExistsError, match=re.escape(f"{out}/qrels/dev.tsv exists")):
    beir_files.carve_dev_split(str(data), str(out))
  (out / "qrels" / "dev.tsv").unlink()
  read_lines = beir_files.read_lines

  def planting(path):
    (out / "qrels" / "dev.tsv").write_text("planted\n")
    return read_lines(path)

  monkeypatch.setattr(beir_files, "read_lines", planting)
  with pytest.raises(FileExistsError, match=re.escape(f"'{out}/qrels/dev.tsv'")):
    beir_files.carve_dev_split(str(data), str(out))
  assert (out / "qrels" / "dev.tsv").read_text() == "planted\n"
  assert not (tmp_path / "target").exists()
