"""Tests for tasks/: sources, negatives and tokenization, checked against the raw files."""
import csv
import gzip
import json
import pathlib
import re

import gin
import numpy as np
import pytest
import seqio
import tensorflow as tf

from tests.test_tokenization import tf_ids
from xtr.data import pipeline
from xtr.data import tasks
from xtr.data.tasks import beir
from xtr.data.tasks import msmarco
from xtr.text import vocabularies

LENGTHS = {"query": 32, "positive": 256, "negative": 256}
SHORT = {"query": 8, "positive": 24, "negative": 24}  # most texts get trimmed


@pytest.fixture(scope="module")
def vocab(t5_spm_path):
  return seqio.SentencePieceVocabulary(str(t5_spm_path), extra_ids=100)


@pytest.fixture(autouse=True)
def _clear_gin():
  yield
  gin.clear_config()


def _raw_triples(path: pathlib.Path) -> list[list[str]]:
  return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


def _raw_beir_pairs(data_dir: pathlib.Path, split: str) -> list[tuple[str, str]]:
  """(query text, title + " " + text) of each score > 0 qrels row, read independently."""

  def read(name):
    with open(data_dir / name, encoding="utf-8") as f:
      return {r["_id"]: r for r in map(json.loads, f)}

  corpus, queries = read("corpus.jsonl"), read("queries.jsonl")
  with open(data_dir / "qrels" / f"{split}.tsv", encoding="utf-8") as f:
    rows = list(csv.DictReader(f, delimiter="\t"))
  return [(queries[r["query-id"]]["text"],
           f"{corpus[r['corpus-id']]['title']} {corpus[r['corpus-id']]['text']}".strip())
          for r in rows
          if int(r["score"]) > 0]


def _texts(ds: tf.data.Dataset) -> list[tuple[str, str, str]]:
  return [
      tuple(ex[k].decode("utf-8")
            for k in ("query", "positive", "negative"))
      for ex in ds.as_numpy_iterator()
  ]


def _unpadded(ids: np.ndarray) -> list[int]:
  return np.trim_zeros(ids, "b").tolist()


def test_msmarco_source_matches_raw_file(msmarco_triples_path):
  gin.bind_parameter("tasks.msmarco.triples_files.path", str(msmarco_triples_path))
  triples = _texts(msmarco.TriplesSource().get_dataset(shuffle=False))
  raw = _raw_triples(msmarco_triples_path)
  assert len(triples) == len(raw) == 100
  assert triples == [tuple(r) for r in raw]
  assert "We don\u00e2\x80\x99t know" in triples[0][1]  # the mojibake survives byte for byte


@pytest.fixture(scope="module", params=["t5", "bert"])
def any_vocab(request, vocab, minilm_dir):
  return vocab if request.param == "t5" else vocabularies.bert_vocabulary(minilm_dir)


@pytest.mark.parametrize("lengths", [LENGTHS, SHORT])
def test_task_ids_equal_encode_batch(any_vocab, msmarco_triples_path, scifact_dir, lengths):
  gin.bind_parameter("tasks.msmarco.triples_files.path", str(msmarco_triples_path))
  gin.bind_parameter("tasks.beir.load_pairs.data_dir", str(scifact_dir))
  tasks.register_tasks(any_vocab)
  raw = {
      "msmarco_triples": _raw_triples(msmarco_triples_path),
      "beir_pairs": _raw_beir_pairs(scifact_dir, "train")
  }  # (query, positive): no negative
  prefix, suffix = vocabularies.special_tokens(any_vocab)
  for task_name, rows in raw.items():
    ds = seqio.get_mixture_or_task(task_name).get_dataset(lengths, shuffle=False, seed=0)
    examples = list(ds.as_numpy_iterator())
    assert len(examples) == len(rows)
    for i, name in enumerate(("query", "positive", "negative")[:len(rows[0])]):
      expected = tf_ids(any_vocab, [r[i] for r in rows], lengths[name])
      assert [ex[name].tolist() for ex in examples] == [_unpadded(e) for e in expected]
    for ex in examples:
      for name, ids in ex.items():
        assert ids.dtype == np.int32 and len(ids) <= lengths[name]
        assert ids[:len(prefix)].tolist() == list(prefix)
        assert ids[len(ids) - len(suffix):].tolist() == list(suffix)
    if lengths is SHORT:  # the trim is exercised
      assert any(len(ex["positive"]) == lengths["positive"] for ex in examples)


@pytest.mark.parametrize("line, problem", [
    ("only a query\tand a positive", "expected 3 tab-separated fields (query, positive, "
     "negative), got 2"),
    ("q\tp\tn\textra", "expected 3 tab-separated fields (query, positive, negative), got 4"),
    (" \tp\tn", "empty query"),
    ("q\tp\t", "empty negative"),
])
def test_msmarco_malformed_line_names_file_and_line(vocab, tmp_path, line, problem):
  path = tmp_path / "triples.tsv"
  path.write_text(f"q1\tp1\tn1\nq2\tp2\tn2\n{line}\nq4\tp4\tn4\n", encoding="utf-8")
  gin.bind_parameter("tasks.msmarco.triples_files.path", str(path))
  tasks.register_tasks(vocab)
  ds = seqio.get_mixture_or_task("msmarco_triples").get_dataset(LENGTHS, shuffle=True, seed=0)
  with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(f"{path}:3: {problem}")):
    list(ds.as_numpy_iterator())


def test_msmarco_malformed_line_is_a_value_error_of_the_training_iterator(vocab, tmp_path):
  """What the trainer's `pipeline.next_batch` raises (xtr-train: one line, exit status 2), not
  TensorFlow's InvalidArgumentError."""
  path = tmp_path / "triples.tsv"
  path.write_text("q1\tp1\tn1\n" * 5 + "q6\tonly a positive\n", encoding="utf-8")
  gin.bind_parameter("tasks.msmarco.triples_files.path", str(path))
  iterator = iter(
      pipeline.get_dataset("msmarco_triples", vocab, LENGTHS, batch_size=2, seed=0, shuffle=False))
  with pytest.raises(ValueError) as raised:
    for _ in range(4):
      pipeline.next_batch(iterator)
  assert str(raised.value) == (f"{path}:6: expected 3 tab-separated fields (query, positive, "
                               "negative), got 2")


def test_msmarco_reads_gzip_and_drops_a_leading_byte_order_mark(tmp_path):
  text = "\ufeffq1\tp1\tn1\n\ufeffq2\tp2\tn2\n"
  (tmp_path / "a.tsv").write_text(text, encoding="utf-8")
  (tmp_path / "b.tsv.gz").write_bytes(gzip.compress(text.encode()))
  for name in ("a.tsv", "b.tsv.gz"):
    gin.bind_parameter("tasks.msmarco.triples_files.path", str(tmp_path / name))
    # Only the first line's mark is a byte order mark; a later one is text.
    assert _texts(msmarco.TriplesSource().get_dataset(shuffle=False)) == [("q1", "p1", "n1"),
                                                                          ("\ufeffq2", "p2", "n2")]


def test_msmarco_invalid_utf8_names_file_line_and_byte(vocab, tmp_path):
  path = tmp_path / "triples.tsv"
  # Line 2 holds a real U+FFFD (valid); line 3 a truncated 3-byte sequence at its 5th byte.
  path.write_bytes(b"q1\tp1\tn1\nq2\tp2\tn2 \xef\xbf\xbd ok\nq3\tp\xe2\x82 3\tn3\n")
  gin.bind_parameter("tasks.msmarco.triples_files.path", str(path))
  tasks.register_tasks(vocab)
  ds = seqio.get_mixture_or_task("msmarco_triples").get_dataset(LENGTHS, shuffle=False)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=re.escape(f"{path}:3: invalid UTF-8 at byte 5 of the line")):
    list(ds.as_numpy_iterator())


@pytest.mark.parametrize("num_files, num_shards", [(4, 8), (3, 8), (6, 16), (8, 4), (8, 8)])
def test_msmarco_hosts_read_every_example_once(tmp_path, num_files, num_shards):
  """Each host (shard) shuffles with its own seed (`pipeline.get_dataset`); with fewer files
  than hosts, the hosts' shares used to overlap (4 files, 8 hosts: 24 of 96 examples read
  twice or more, 48 never)."""
  for f in range(num_files):
    (tmp_path / f"triples-{f}.tsv").write_text("".join(f"q{f}.{i}\tp\tn\n" for i in range(24)))
  gin.bind_parameter("tasks.msmarco.triples_files.path", str(tmp_path / "triples-*.tsv"))
  read = [
      q for shard in range(num_shards) for q, _, _ in _texts(msmarco.TriplesSource().get_dataset(
          shuffle=True, seed=100 + shard, shard_info=seqio.ShardInfo(shard, num_shards)))
  ]
  assert sorted(read) == sorted(f"q{f}.{i}" for f in range(num_files) for i in range(24))


def test_msmarco_empty_file_is_named(tmp_path):
  (tmp_path / "triples-0.tsv").write_text("q\tp\tn\n")
  (tmp_path / "triples-1.tsv").write_text("")
  gin.bind_parameter("tasks.msmarco.triples_files.path", str(tmp_path / "triples-*.tsv"))
  with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'triples-1.tsv'} is empty")):
    msmarco.triples_files()


def test_beir_pairs_match_raw_files(scifact_dir):
  data = beir.load_pairs(scifact_dir, "train")
  expected = _raw_beir_pairs(scifact_dir, "train")
  assert len(expected) == 919
  assert [(data.queries[q], data.docs[d]) for q, d in data.pairs] == expected
  with open(scifact_dir / "corpus.jsonl", encoding="utf-8") as f:
    assert len(data.docs) == sum(1 for _ in f) == 5183


def test_beir_triples_have_texts_and_true_negatives(scifact_dir):
  gin.bind_parameter("tasks.beir.load_pairs.data_dir", str(scifact_dir))
  with seqio.utils.map_seed_manager(0):
    triples = _texts(beir.to_triples(beir.pairs_dataset("train", shuffle_files=False)))
  expected = _raw_beir_pairs(scifact_dir, "train")
  assert [t[:2] for t in triples] == expected
  positives = {}
  for query, positive in expected:
    positives.setdefault(query, set()).add(positive)
  docs = set(beir.load_pairs().docs)
  assert all(neg in docs and neg not in positives[query] for query, _, neg in triples)
  assert len({neg for _, _, neg in triples}) > 0.9 * len(triples)


def test_uniform_negative_is_the_rth_non_positive():
  data = beir.BeirPairs(queries=("q0", "q1", "q2"), docs=tuple(f"d{i}" for i in range(6)),
                        pairs=np.array([[0, 3], [1, 5], [0, 1], [2, 0], [2, 1]], np.int64))
  non_positives = {0: [0, 2, 4, 5], 1: [0, 1, 2, 3, 4], 2: [2, 3, 4, 5]}
  sample = beir.uniform_negative(data)
  for query, candidates in non_positives.items():
    drawn = []
    for s in range(200):
      seed = tf.constant([s, 7], tf.int64)
      r = tf.random.stateless_uniform([], seed, minval=0, maxval=len(candidates), dtype=tf.int64)
      negative = int(sample(tf.constant(query, tf.int64), seed))
      assert negative == candidates[int(r)]
      drawn.append(negative)
    counts = np.bincount(drawn, minlength=6)[candidates]
    assert counts.min() > 0.5 * 200 / len(candidates)


def test_a_twin_of_a_positive_is_never_a_negative():
  """Documents 1 and 4 share a text (as 80 of NFCorpus's do): with document 1 a positive of
  q0, document 4 was drawn as q0's negative, the same text pushed up and down."""
  data = beir.BeirPairs(queries=("q0", "q1"), docs=("d0", "twin", "d2", "d3", "twin", "d5"),
                        pairs=np.array([[0, 1], [1, 3]], np.int64))
  np.testing.assert_array_equal(beir.excluded_pairs(data), [[0, 1], [0, 4], [1, 3]])
  sample = beir.uniform_negative(data)
  drawn = {
      query: {
          int(sample(tf.constant(query, tf.int64), tf.constant([s, 7], tf.int64)))
          for s in range(200)
      } for query in (0, 1)
  }
  assert drawn == {0: {0, 2, 3, 5}, 1: {0, 1, 2, 4, 5}}


def test_beir_task_negatives_are_seeded_and_fresh_each_epoch(vocab, scifact_dir):
  gin.bind_parameter("tasks.beir.load_pairs.data_dir", str(scifact_dir))
  tasks.register_tasks(vocab)
  task = seqio.get_mixture_or_task("beir_pairs")

  def negatives(seed):
    ds = task.get_dataset(LENGTHS, shuffle=False, seed=seed, num_epochs=2)
    return [ex["negative"].tolist() for ex in ds.as_numpy_iterator()]

  first = negatives(0)
  assert len(first) == 2 * 919
  assert first == negatives(0)
  assert first != negatives(1)
  assert sum(a != b for a, b in zip(first[:919], first[919:])) > 900  # resampled per epoch


def _write_beir(root: pathlib.Path, corpus: str, queries: str, qrels: str) -> pathlib.Path:
  (root / "qrels").mkdir(parents=True)
  (root / "corpus.jsonl").write_text(corpus, encoding="utf-8")
  (root / "queries.jsonl").write_text(queries, encoding="utf-8")
  (root / "qrels" / "train.tsv").write_text(qrels, encoding="utf-8")
  return root


_CORPUS = ('{"_id": "d1", "title": "T1", "text": "one"}\n'
           '{"_id": "d2", "title": "", "text": "two"}\n'
           '{"_id": "d3", "text": "three"}\n')
_QUERIES = '{"_id": "q1", "text": "first?"}\n{"_id": "q2", "text": "second?"}\n'
_QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td3\t2\nq2\td2\t0\n"


def test_beir_small_dir_reads_as_beir_does(tmp_path):
  data = beir.load_pairs(_write_beir(tmp_path, _CORPUS, _QUERIES, _QRELS))
  assert data.docs == ("T1 one", "two", "three")
  assert data.queries == ("first?", "second?")
  assert data.pairs.tolist() == [[0, 0], [1, 2]]


@pytest.mark.parametrize("file, corpus, queries, qrels, message", [
    ("corpus.jsonl", _CORPUS.replace('"d2", ', '"d2" '), _QUERIES, _QRELS, ":2: invalid JSON"),
    ("corpus.jsonl", _CORPUS.replace('"_id": "d3"', '"_id": "d1"'), _QUERIES, _QRELS,
     ":3: duplicate _id 'd1' (first on line 1)"),
    ("corpus.jsonl", _CORPUS.replace('"title": "T1"', '"title": 5'), _QUERIES, _QRELS,
     ":1: field 'title' is missing or not a string"),
    ("queries.jsonl", _CORPUS, _QUERIES.replace('"text": "second?"', '"txt": "second?"'), _QRELS,
     ":2: field 'text' is missing or not a string"),
    ("queries.jsonl", _CORPUS, _QUERIES.replace("first?", " "), _QRELS, ":1: empty field 'text'"),
    ("queries.jsonl", _CORPUS, "[1, 2]\n", _QRELS, ":1: expected a JSON object"),
    ("queries.jsonl", _CORPUS, "[" * 100_000 + "\n", _QRELS, ":1: JSON nested too deeply"),
    ("qrels/train.tsv", _CORPUS, _QUERIES, _QRELS.replace(
        "q2\td3", "q2\td9"), ":3: corpus-id 'd9' is not in corpus.jsonl"),
    ("qrels/train.tsv", _CORPUS, _QUERIES, _QRELS.replace(
        "q1\td1", "q7\td1"), ":2: query-id 'q7' is not in queries.jsonl"),
    ("qrels/train.tsv", _CORPUS, _QUERIES, _QRELS.replace("\t2\n", " 2\n"),
     ":3: expected 3 tab-separated fields (query-id, corpus-id, score), got 2"),
    ("qrels/train.tsv", _CORPUS, _QUERIES, _QRELS.replace(
        "\t2\n", "\tyes\n"), ":3: score 'yes' is not a base-10 integer"),
    ("qrels/train.tsv", _CORPUS, _QUERIES, _QRELS.replace(
        "\t2\n", "\t1_0\n"), ":3: score '1_0' is not a base-10 integer"),
    ("qrels/train.tsv", _CORPUS, _QUERIES, _QRELS.replace(
        "\t2\n", "\t\u0661\n"), ":3: score '\u0661' is not a base-10 integer"),
    ("qrels/train.tsv", _CORPUS, _QUERIES, _QRELS.replace(
        "\t2\n", "\t4294967297\n"), ":3: score '4294967297' is not a base-10 integer"),
    ("qrels/train.tsv", _CORPUS, _QUERIES, _QRELS.replace(
        "\t2\n", "\t2.0\n"), ":3: score '2.0' is not a base-10 integer"),
    ("qrels/train.tsv", _CORPUS, _QUERIES, _QRELS + "q2\td2\t0\nq1\td1\t2\n",
     ":6: query-id 'q1', corpus-id 'd1' judged 2 here and 1 on line 2"),
    ("corpus.jsonl", _CORPUS.replace('"_id": "d2"',
                                     '"_id": " "'), _QUERIES, _QRELS, ":2: field '_id' is empty"),
    ("corpus.jsonl", _CORPUS.replace(
        '"three"', '"thr\\ud800ee"'), _QUERIES, _QRELS, ":3: field 'text' holds a lone surrogate"),
    ("queries.jsonl", _CORPUS, _QUERIES.replace(
        '"q2"', '"\\udfffq2"'), _QRELS, ":2: field '_id' holds a lone surrogate"),
    ("qrels/train.tsv", _CORPUS, _QUERIES, _QRELS.replace("query-id\t",
                                                          ""), ":1: expected the header"),
])
def test_beir_bad_input_names_file_line_and_field(tmp_path, file, corpus, queries, qrels, message):
  data_dir = _write_beir(tmp_path, corpus, queries, qrels)
  with pytest.raises(ValueError, match=re.escape(f"{data_dir / file}{message}")):
    beir.load_pairs(data_dir)


@pytest.mark.parametrize("rows", ["q1\td1\t0\n", ""])  # no positive; an empty split
def test_beir_without_positives_is_an_error(tmp_path, rows):
  data_dir = _write_beir(tmp_path, _CORPUS, _QUERIES, "query-id\tcorpus-id\tscore\n" + rows)
  with pytest.raises(ValueError, match=re.escape(f"{data_dir}/qrels/train.tsv: no row has")):
    beir.load_pairs(data_dir)


def test_beir_invalid_utf8_names_file_line_and_byte(tmp_path):
  data_dir = _write_beir(tmp_path, _CORPUS, _QUERIES, _QRELS)
  corpus = (data_dir / "corpus.jsonl").read_bytes().splitlines(keepends=True)
  corpus[1] = corpus[1].replace(b"two", b"tw\xff")
  (data_dir / "corpus.jsonl").write_bytes(b"".join(corpus))
  column = corpus[1].index(b"\xff") + 1
  with pytest.raises(
      ValueError, match=re.escape(
          f"{data_dir / 'corpus.jsonl'}:2: invalid UTF-8 at byte {column} of the line")):
    beir.load_pairs(data_dir)


def test_register_tasks_replaces_the_vocabulary(vocab, t5_spm_path):
  tasks.register_tasks(seqio.SentencePieceVocabulary(str(t5_spm_path), extra_ids=0))
  tasks.register_tasks(vocab)
  for name in ("msmarco_triples", "beir_pairs"):
    features = seqio.get_mixture_or_task(name).output_features
    assert sorted(features) == ["negative", "positive", "query"]
    assert all(f.vocabulary is vocab for f in features.values())


def test_mixture_draws_each_collection_at_its_rate(vocab, tmp_path):
  """Two BEIR collections, each its own task, mixed 3:1: the share of each in 4,000 examples
  matches its rate (within 4 standard deviations), and every example is a pair of its own."""
  dirs = {}
  for name in ("alpha", "beta"):
    corpus = "".join(
        json.dumps({
            "_id": f"d{i}",
            "title": "",
            "text": f"{name} document {i}"
        }) + "\n" for i in range(6))
    queries = "".join(
        json.dumps({
            "_id": f"q{i}",
            "text": f"{name} query {i}"
        }) + "\n" for i in range(3))
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(3))
    dirs[name] = _write_beir(tmp_path / name, corpus, queries, qrels)
  gin.bind_parameter("tasks.register_tasks.beir_tasks", {
      f"beir_{name}": str(path) for name, path in dirs.items()
  })
  gin.bind_parameter("tasks.register_tasks.mixtures",
                     {"alpha_beta": {
                         "beir_alpha": 3.0,
                         "beir_beta": 1.0
                     }})
  tasks.register_tasks(vocab)
  ds = seqio.get_mixture_or_task("alpha_beta").get_dataset(LENGTHS, shuffle=True, seed=0)
  examples = [{
      k: vocab.decode(_unpadded(ex[k])) for k in ("query", "positive", "negative")
  } for ex in ds.take(4000).as_numpy_iterator()]
  alpha = [ex["query"].startswith("alpha") for ex in examples]
  assert abs(np.mean(alpha) - 0.75) < 4 * np.sqrt(0.75 * 0.25 / len(examples))
  for ex in examples:
    name, number = ex["query"].split()[0], ex["query"].split()[-1]
    assert ex["positive"] == f"{name} document {number}"
    assert ex["negative"].startswith(name) and ex["negative"] != ex["positive"]


@pytest.mark.parametrize("file, corpus, queries, control", [
    ("corpus.jsonl", _CORPUS.replace('"d2"', '"d2\\n"'), _QUERIES, "U+000A"),
    ("queries.jsonl", _CORPUS, _QUERIES.replace('"q2"', '"q\\t2"'), "U+0009"),
])
def test_an_id_is_one_line_without_tabs(tmp_path, file, corpus, queries, control):
  """An id with a line break was exported, but no line of a --delete file or qrels names it."""
  data_dir = _write_beir(tmp_path, corpus, queries, _QRELS)
  message = f"{data_dir / file}:2: field '_id' holds the control character {control}"
  with pytest.raises(ValueError, match=re.escape(message)):
    beir.load_pairs(data_dir)
