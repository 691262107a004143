"""Tests for xtr/data/pipeline.py: batch contract, seeded shuffling, host sharding, iterator
resume."""
import pathlib

import gin
import numpy as np
import pytest
import seqio
import tensorflow as tf

from tests.test_tokenization import tf_ids
from xtr.data import pipeline

LENGTHS = {"query": 32, "positive": 256, "negative": 256}


@pytest.fixture(scope="module")
def vocab(t5_spm_path):
  return seqio.SentencePieceVocabulary(str(t5_spm_path), extra_ids=100)


@pytest.fixture(autouse=True)
def _data_paths(msmarco_triples_path, scifact_dir):
  gin.bind_parameter("tasks.msmarco.triples_files.path", str(msmarco_triples_path))
  gin.bind_parameter("tasks.beir.load_pairs.data_dir", str(scifact_dir))
  gin.bind_parameter("tasks.register_tasks.mixtures",
                     {"mixture": {
                         "msmarco_triples": 1.0,
                         "beir_pairs": 2.0
                     }})
  yield
  gin.clear_config()


def _raw_triples(path: pathlib.Path) -> list[list[str]]:
  return [line.split("\t") for line in path.read_text(encoding="utf-8").splitlines()]


def _batches(iterator, n: int) -> list[dict[str, np.ndarray]]:
  return [{k: np.asarray(v) for k, v in next(iterator).items()} for _ in range(n)]


def _assert_same(a: list[dict[str, np.ndarray]], b: list[dict[str, np.ndarray]]) -> None:
  assert len(a) == len(b)
  for x, y in zip(a, b):
    assert x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)


@pytest.mark.parametrize("num_shards", [1, 2])
def test_batches_are_the_encoded_rows(vocab, msmarco_triples_path, num_shards):
  batch_size = 8
  per_host = []
  for shard_id in range(num_shards):
    ds = pipeline.get_dataset("msmarco_triples", vocab, LENGTHS, batch_size, seed=0, shuffle=False,
                              shard_id=shard_id, num_shards=num_shards)
    per_host.append(_batches(ds.as_numpy_iterator(), 2))
  raw = _raw_triples(msmarco_triples_path)
  for shard_id, batches in enumerate(per_host):
    rows = raw[shard_id::num_shards][:2 * batch_size]  # each host reads every num_shards-th row
    for b, batch in enumerate(batches):
      part = rows[b * batch_size:(b + 1) * batch_size]
      assert batch["query_tokens"].shape == (batch_size, 32)
      assert batch["doc_tokens"].shape == (batch_size, 2, 256)
      assert batch["query_tokens"].dtype == batch["doc_tokens"].dtype == np.int32
      np.testing.assert_array_equal(batch["query_tokens"], tf_ids(vocab, [r[0] for r in part], 32))
      for d in range(2):  # doc 0 is the positive, doc 1 the negative
        np.testing.assert_array_equal(batch["doc_tokens"][:, d],
                                      tf_ids(vocab, [r[1 + d] for r in part], 256))


def _split_triples(path: pathlib.Path, out_dir: pathlib.Path, num_files: int) -> list[str]:
  """Writes `path` as `num_files` files of consecutive lines; returns each file's lines."""
  lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
  size = len(lines) // num_files
  parts = [lines[i * size:(i + 1) * size] for i in range(num_files)]
  for i, part in enumerate(parts):
    (out_dir / f"triples-{i:03d}.tsv").write_text("".join(part), encoding="utf-8")
  return parts


def test_hosts_read_only_their_files(vocab, msmarco_triples_path, tmp_path):
  """Four files over two hosts: host h reads files h and h + 2, one line of each in turn, and
  never opens the other host's files (a broken line there stops only that host)."""
  parts = _split_triples(msmarco_triples_path, tmp_path, 4)
  with open(tmp_path / "triples-003.tsv", "a", encoding="utf-8") as f:
    f.write("a query without documents\n")
  gin.bind_parameter("tasks.msmarco.triples_files.path", str(tmp_path / "triples-*.tsv"))

  def host(shard_id: int):
    return pipeline.get_dataset("msmarco_triples", vocab, LENGTHS, 10, seed=0, shuffle=False,
                                shard_id=shard_id, num_shards=2).as_numpy_iterator()

  rows = [line.rstrip("\n").split("\t") for pair in zip(parts[0], parts[2]) for line in pair]
  queries = np.concatenate([b["query_tokens"] for b in _batches(host(0), 10)])
  expected = tf_ids(vocab, [r[0] for r in rows], 32)
  np.testing.assert_array_equal(queries, np.concatenate([expected, expected]))  # 2 epochs
  with pytest.raises(tf.errors.InvalidArgumentError, match="triples-003.tsv:26: expected 3"):
    _batches(host(1), 10)


def test_a_pattern_without_files_names_it(vocab, tmp_path):
  gin.bind_parameter("tasks.msmarco.triples_files.path", str(tmp_path / "missing-*.tsv"))
  with pytest.raises(ValueError, match="no file matches .*missing-\\*.tsv"):
    pipeline.get_dataset("msmarco_triples", vocab, LENGTHS, 10, seed=0)


def test_epochs_repeat_forever_without_remainders(vocab):
  ds = pipeline.get_dataset("msmarco_triples", vocab, LENGTHS, 32, seed=0, shuffle=False)
  queries = [row for b in _batches(ds.as_numpy_iterator(), 25) for row in b["query_tokens"]]
  assert len(queries) == 800  # 8 epochs of 100 rows, epochs run into each other
  np.testing.assert_array_equal(queries[:100], queries[100:200])
  np.testing.assert_array_equal(queries[:100], queries[700:])


@pytest.mark.parametrize("task_name", ["msmarco_triples", "beir_pairs", "mixture"])
def test_shuffle_is_seeded(vocab, task_name):

  def first_batches(seed, shuffle=True):
    ds = pipeline.get_dataset(task_name, vocab, LENGTHS, 16, seed=seed, shuffle=shuffle,
                              shuffle_buffer_size=64)
    return _batches(ds.as_numpy_iterator(), 3)

  _assert_same(first_batches(0), first_batches(0))
  assert not np.array_equal(
      first_batches(0)[0]["query_tokens"],
      first_batches(1)[0]["query_tokens"])
  assert not np.array_equal(
      first_batches(0)[0]["query_tokens"],
      first_batches(0, shuffle=False)[0]["query_tokens"])


def test_hosts_draw_their_own_negatives(vocab):
  """BEIR pairs on two hosts (shards 0 and 1 of 2, 8 rows each): row r of one host's batch and row
  r of the other's hold other negatives (before the shard was mixed into the seed, seqio's
  per-example seeds were the same on both hosts: 19 of the 40 rows shared one)."""

  def host(shard_id: int):
    ds = pipeline.get_dataset("beir_pairs", vocab, LENGTHS, 8, seed=0, shard_id=shard_id,
                              num_shards=2)
    return np.concatenate([b["doc_tokens"][:, 1] for b in _batches(ds.as_numpy_iterator(), 5)])

  shared = [np.array_equal(a, b) for a, b in zip(host(0), host(1))]
  assert sum(shared) <= 2, f"{sum(shared)} of 40 rows share their negative"


@pytest.mark.parametrize("task_name", ["msmarco_triples", "beir_pairs", "mixture"])
def test_iterator_checkpoint_resumes_exactly(vocab, tmp_path, task_name):

  def iterator():
    return iter(pipeline.get_dataset(task_name, vocab, LENGTHS, 16, seed=3, shuffle_buffer_size=64))

  it = iterator()
  _batches(it, 3)
  path = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "host_0"))
  expected = _batches(it, 3)
  resumed = iterator()
  tf.train.Checkpoint(iterator=resumed).read(path).assert_consumed()
  _assert_same(_batches(resumed, 3), expected)


def test_feature_converter_needs_one_document_length():
  with pytest.raises(ValueError, match="positive and negative need one length"):
    pipeline.RetrievalFeatureConverter().get_model_feature_lengths({
        "query": 32,
        "positive": 256,
        "negative": 128
    })


@pytest.mark.parametrize("fields, message", [
    (dict(batch_size=0), r"DatasetConfig.batch_size=0 must be positive"),
    (dict(batch_size=16.0), r"DatasetConfig.batch_size = 16.0: expected int, got float"),
    (dict(task_feature_lengths={
        "query": 32,
        "positive": 64
    }), r"needs exactly query, positive"),
])
def test_dataset_config_refuses_bad_fields(fields, message):
  with pytest.raises(ValueError, match=message):
    pipeline.DatasetConfig(**fields)
