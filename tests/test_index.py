"""Token index: writer + resume, exact and ScaNN search, shard fan-out, integrity checks.

Most tests use small integer-valued vectors: their dot products are exact in float32 (and the
vectors exact in float16), so exact search must match numpy bit for bit, ties included.
"""
import dataclasses
import itertools
import math
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading

import gin
import numpy as np
import pytest

from xtr.index import files
from xtr.index import reader
from xtr.index import scann
from xtr.index import writer as index_writer
from xtr.retrieval import ranker

REPO = pathlib.Path(__file__).resolve().parents[1]
MODEL = {"backbone": "t5", "embed_dim": 32}  # Stored, not read: search reads it (test_retrieval).
FINGERPRINT = "ckpt-1234"


def _corpus(num_docs: int, first: int = 0, total: int | None = None) -> dict:
  return {
      "path": "corpus.jsonl",
      "sha256": "c0ffee",
      "docs": [first, first + num_docs],
      "total_docs": num_docs if total is None else total
  }


def _integer_docs(num_docs: int, dim: int = 32, seed: int = 0) -> list[np.ndarray]:
  """Docs of 0 to 12 tokens with integer entries in [-8, 8] (every 7th doc is empty)."""
  rng = np.random.default_rng(seed)
  lengths = np.where(np.arange(num_docs) % 7 == 3, 0, rng.integers(1, 13, num_docs))
  return [rng.integers(-8, 9, (n, dim)).astype(np.float32) for n in lengths]


def _ids(num_docs: int, prefix: str = "doc") -> list[str]:
  return [f"{prefix}-{i}" for i in range(num_docs)]


def _new_writer(path, num_docs: int, dim: int = 32, dtype: str = "float32",
                fingerprint: str = FINGERPRINT, docs_per_chunk: int = 4, first_doc: int = 0,
                total_docs: int | None = None, store_vectors: bool = True,
                repair: bool = False) -> index_writer.IndexWriter:
  return index_writer.IndexWriter(str(path), dim, dtype, MODEL, fingerprint, docs_per_chunk,
                                  _corpus(num_docs, first_doc, total_docs),
                                  store_vectors=store_vectors, repair=repair)


def _write_chunks(writer: index_writer.IndexWriter, doc_ids, docs, docs_per_chunk: int) -> None:
  for chunk in range(writer.completed_chunks(), -(-len(docs) // docs_per_chunk)):
    part = slice(chunk * docs_per_chunk, (chunk + 1) * docs_per_chunk)
    writer.write_chunk(chunk, doc_ids[part], docs[part])


def _export(path, doc_ids, docs, docs_per_chunk=4, dtype="float32", **settings) -> dict:
  writer = _new_writer(path, len(doc_ids), docs[0].shape[1], dtype, docs_per_chunk=docs_per_chunk,
                       **settings)
  _write_chunks(writer, doc_ids, docs, docs_per_chunk)
  return writer.finalize()


def _files(root) -> dict[str, bytes]:
  root = pathlib.Path(root)
  return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _numpy_search(queries, docs, k):
  """Reference exact search: stable sort of all tokens by descending dot product.

  Returns (scores, doc index, position of the token in its doc), padded with -inf / -1 / -1.
  """
  tokens = np.concatenate(docs)
  token_doc = np.concatenate([np.full(len(d), i) for i, d in enumerate(docs)])
  token_position = np.concatenate([np.arange(len(d)) for d in docs])
  scores = (queries.astype(np.float64) @ tokens.astype(np.float64).T).astype(np.float32)
  order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
  pad = ((0, 0), (0, max(0, k - tokens.shape[0])))
  return (np.pad(np.take_along_axis(scores, order, 1), pad,
                 constant_values=-np.inf), np.pad(token_doc[order], pad, constant_values=-1),
          np.pad(token_position[order], pad, constant_values=-1))


def _clustered(num: int, seed: int, dim=128, num_centers=200, noise=0.5) -> np.ndarray:
  """[num, dim] unit vectors around fixed random centers: center + noise * N(0, I / dim)."""
  centers = np.random.default_rng(0).normal(size=(num_centers, dim))
  centers /= np.linalg.norm(centers, axis=1, keepdims=True)
  rng = np.random.default_rng(seed)
  x = centers[rng.integers(0, num_centers, num)] + noise * rng.normal(size=(num, dim)) / dim**0.5
  return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_scann_recall_at_default_settings(tmp_path):
  # One token per doc, so doc indices are token ids and recall is exact token recall. Noise 0.5
  # puts a query's k'-th best token at cosine ~0.79 (its best at ~0.85). Measured recall: 0.95.
  vectors = _clustered(30_000, seed=1)
  queries = _clustered(200, seed=2)
  manifest = _export(tmp_path, _ids(len(vectors)), list(vectors[:, None]), docs_per_chunk=10_000)
  assert manifest["scann"]["num_leaves"] == 174  # ceil(sqrt(30000))
  k_prime = 100
  true_top = np.argsort(-(queries @ vectors.T), axis=1)[:, :k_prime]
  scores, docs = reader.open_index(str(tmp_path)).search(queries, k_prime, searcher="scann")
  recall = np.mean([len(set(d) & set(t)) / k_prime for d, t in zip(docs, true_top)])
  assert recall >= 0.9
  assert np.all(np.diff(scores, axis=1) <= 0)
  exact = np.take_along_axis(queries @ vectors.T, docs.astype(int), axis=1)
  np.testing.assert_allclose(scores, exact, atol=0.05)  # AH scores approximate dot products.


@pytest.mark.parametrize("gin_file", sorted((REPO / "gin" / "scann").glob("*.gin")),
                         ids=lambda path: path.stem)
def test_shipped_scann_settings_size_the_tree_and_find_the_tokens(tmp_path, gin_file):
  """gin/scann/*.gin: the tree has min(num_leaves, ceil(leaves_factor * sqrt(T))) leaves, the
  manifest records every setting, and token recall stays high (measured on these clustered
  128-d tokens: fast 0.958, compact 0.905, fastest 0.891 (a sixth of the leaves searched),
  fastest_spherical 0.889; compact_384 0.847 and fastest_384 0.831 — 6 and 3 dimensions per
  block, meant for 384-d tokens, are coarse at 128; reorder_384 0.991, its 6 dimensions per block
  rescored with int8 vectors; the default's 0.950 above)."""
  vectors, queries = _clustered(30_000, seed=1), _clustered(200, seed=2)
  with gin.unlock_config():
    gin.parse_config_file(str(gin_file))
  try:
    config = scann.ScannConfig()
    manifest = _export(tmp_path, _ids(len(vectors)), list(vectors[:, None]), docs_per_chunk=10_000)
  finally:
    gin.clear_config()
  assert config != scann.ScannConfig()
  assert manifest["scann"] == dataclasses.asdict(config) | {
      "scoring": "asymmetric_hashing",
      "num_leaves": min(config.num_leaves, math.ceil(config.leaves_factor * 30_000**0.5)),
      "num_leaves_to_search": config.num_leaves_to_search,
      "training_sample_size": 30_000
  }
  k_prime = 100
  true_top = np.argsort(-(queries @ vectors.T), axis=1)[:, :k_prime]
  _, docs = reader.open_index(str(tmp_path)).search(queries, k_prime, searcher="scann")
  min_recall = {
      "compact_384": 0.8,
      "fastest_384": 0.8,
      "fastest": 0.85,
      "fastest_spherical": 0.85
  }.get(gin_file.stem, 0.9)
  assert np.mean([len(set(d) & set(t)) / k_prime for d, t in zip(docs, true_top)]) >= min_recall


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_bruteforce_equals_numpy(tmp_path, dtype):
  docs = _integer_docs(3000)  # ~16.5k tokens: two exact-search blocks, blocks span chunks.
  _export(tmp_path, _ids(len(docs)), docs, docs_per_chunk=700, dtype=dtype)
  queries = np.random.default_rng(1).integers(-8, 9, (50, 32)).astype(np.float32)
  got = reader.open_index(str(tmp_path)).search_tokens(queries, 300, "bruteforce")
  for got_array, expected in zip(got, _numpy_search(queries, docs, 300)):
    np.testing.assert_array_equal(got_array, expected)
  assert [a.dtype for a in got] == [np.float32, np.int32, np.int32]


@pytest.mark.parametrize("searcher", ["scann", "bruteforce"])
@pytest.mark.parametrize(
    "num_docs, scoring",
    [
        (1, "brute_force"),  # 11 tokens
        (3, "asymmetric_hashing")
    ])  # 26 tokens
def test_pads_when_k_prime_exceeds_tokens(tmp_path, searcher, num_docs, scoring):
  docs = _integer_docs(num_docs)
  assert _export(tmp_path, _ids(num_docs), docs)["scann"]["scoring"] == scoring
  num_tokens = sum(map(len, docs))
  queries = np.random.default_rng(1).integers(-8, 9, (4, 32)).astype(np.float32)
  scores, doc_index = reader.open_index(str(tmp_path)).search(queries, 40, searcher)
  assert scores.shape == doc_index.shape == (4, 40)
  assert np.all(scores[:, :num_tokens] > -np.inf) and np.all(scores[:, num_tokens:] == -np.inf)
  assert np.all(doc_index[:, num_tokens:] == -1)
  token_docs = sorted(np.repeat(np.arange(num_docs), [len(d) for d in docs]))
  for row in doc_index:
    assert sorted(row[:num_tokens]) == token_docs


def test_scann_config_from_gin_with_reordering(tmp_path):
  docs = _integer_docs(9)
  with gin.unlock_config():
    gin.parse_config(["ScannConfig.num_leaves = 3", "ScannConfig.reorder_k = 20"])
  try:
    settings = _export(tmp_path, _ids(9), docs)["scann"]
  finally:
    gin.clear_config()
  assert (settings["num_leaves"], settings["num_leaves_to_search"], settings["reorder_k"]) == (3, 3,
                                                                                               20)
  # Reordering rescores exactly: each score is the dot product with a token of the doc returned.
  queries = np.random.default_rng(1).integers(-8, 9, (5, 32)).astype(np.float32)
  scores, doc_index = reader.open_index(str(tmp_path)).search(queries, 30, "scann")
  for query, row_scores, row_docs in zip(queries, scores, doc_index):
    for score, doc in zip(row_scores, row_docs):
      assert score in docs[doc] @ query


def test_searching_every_scann_leaf_finds_at_least_what_one_leaf_finds(tmp_path):
  """leaves_to_search: 1 partition, the built default, or all of them; recall against exact
  search grows with it, and all leaves miss only what quantization misses."""
  docs = [_clustered(12, seed) for seed in range(300)]
  with gin.unlock_config():
    gin.parse_config(["ScannConfig.num_leaves = 30", "ScannConfig.num_leaves_to_search = 3"])
  try:
    _export(tmp_path, _ids(300), docs)
  finally:
    gin.clear_config()
  index = reader.open_index(str(tmp_path))
  queries = _clustered(50, seed=1000)
  exact = index.search_tokens(queries, 20, "bruteforce")
  recall = lambda leaves: np.mean([
      len({*zip(*a)} & {*zip(*b)}) / 20
      for a, b in zip(zip(*index.search_tokens(queries, 20, "scann", leaves)[1:]), zip(*exact[1:]))
  ])
  assert recall(1) < recall(None) < recall(30)
  assert recall(30) > 0.9
  with pytest.raises(ValueError, match="leaves_to_search must be a positive integer"):
    ranker.SearchConfig(leaves_to_search=0)


def test_doc_vectors_gathers_written_vectors(tmp_path):
  docs = _integer_docs(30)
  _export(tmp_path, _ids(30), docs, docs_per_chunk=7, dtype="float16")
  token_index = reader.open_index(str(tmp_path))
  wanted = [29, 3, 0, 17, 3, 10]  # doc 3 (and 10, 17) are empty
  for doc, vectors in zip(wanted, token_index.doc_vectors(wanted)):
    assert vectors.dtype == np.float32
    np.testing.assert_array_equal(vectors, docs[doc])
  assert token_index.doc_ids == _ids(30)
  assert token_index.num_tokens == sum(map(len, docs)) and token_index.num_docs == 30
  with pytest.raises(IndexError, match=r"\[0, 30\)"):
    token_index.doc_vectors([30])


def test_fan_out_over_shards_equals_single_index(tmp_path):
  docs, doc_ids = _integer_docs(23), _ids(23)
  _export(tmp_path / "single", doc_ids, docs, docs_per_chunk=5)
  bounds = [0, 10, 14, 23]
  for shard in range(3):
    part = slice(bounds[shard], bounds[shard + 1])
    _export(files.shard_path(str(tmp_path / "sharded"), shard, 3), doc_ids[part], docs[part],
            docs_per_chunk=3, first_doc=bounds[shard], total_docs=23)
  single = reader.open_index(str(tmp_path / "single"))
  sharded = reader.open_index(str(tmp_path / "sharded"))
  assert sharded.doc_ids == doc_ids
  np.testing.assert_array_equal(sharded.doc_lengths, [len(d) for d in docs])
  assert (sharded.num_docs, sharded.num_tokens) == (single.num_docs, single.num_tokens)
  reader.check_compatible(sharded.manifest, 32, FINGERPRINT)
  rng = np.random.default_rng(1)
  queries = rng.integers(-8, 9, (20, 32)).astype(np.float32)
  gin.bind_parameter("xtr.index.device.DeviceConfig.dtype", "float32")
  for k_prime, searcher in itertools.product((7, 200), ("bruteforce", "device")):
    for got, expected in zip(sharded.search_tokens(queries, k_prime, searcher),
                             _numpy_search(queries, docs, k_prime)):
      np.testing.assert_array_equal(got, expected)
  gin.clear_config()
  wanted = [22, 0, 13, 10, 9, 5, 14, 3, 22] + list(range(23))  # across shards, out of order
  for got, doc in zip(sharded.doc_vectors(wanted), wanted):
    np.testing.assert_array_equal(got, docs[doc])
  # ScaNN: a query equal to a document token (|q|^2 ~ 700 vs |q.d| ~ 100) finds its doc first.
  tokens = np.concatenate(docs)
  token_docs = np.repeat(np.arange(23), [len(d) for d in docs])
  token_positions = np.concatenate([np.arange(len(d)) for d in docs])
  picks = rng.choice(len(tokens), 30, replace=False)
  _, doc_index, position = sharded.search_tokens(tokens[picks], 5, "scann")
  np.testing.assert_array_equal(doc_index[:, 0], token_docs[picks])
  np.testing.assert_array_equal(position[:, 0], token_positions[picks])


def test_shards_are_searched_at_once(tmp_path, monkeypatch):
  """Two shards' searches meet at a barrier: they run on two threads at the same time."""
  docs, doc_ids = _integer_docs(8), _ids(8)
  for shard in range(2):
    part = slice(4 * shard, 4 * shard + 4)
    _export(files.shard_path(str(tmp_path), shard, 2), doc_ids[part], docs[part], docs_per_chunk=4,
            first_doc=4 * shard, total_docs=8)
  barrier, search_exact = threading.Barrier(2, timeout=30), reader._Shard.search_exact  # pylint: disable=protected-access

  def meeting(shard, queries, k):
    barrier.wait()
    return search_exact(shard, queries, k)

  monkeypatch.setattr(reader, "FANOUT_THREADS", 2)
  monkeypatch.setattr(reader._Shard, "search_exact", meeting)  # pylint: disable=protected-access
  queries = np.ones((1, 32), np.float32)
  scores, _, _ = reader.open_index(str(tmp_path)).search_tokens(queries, 3, "bruteforce")
  assert np.isfinite(scores).all()


_KILLED_EXPORT = """
import os, signal, sys
from tests.test_index import _ids, _integer_docs, _write_chunks
from xtr.index import files
from xtr.index import reader
from tests.test_index import _new_writer

real_replace = os.replace

def replace(src, dst):  # SIGKILL just before chunk 2's doc index is renamed into place.
  if dst.endswith("doc_index-00002.npy"):
    os.kill(os.getpid(), signal.SIGKILL)
  real_replace(src, dst)

os.replace = replace
writer = _new_writer(sys.argv[1], 22, dtype="float16")
_write_chunks(writer, _ids(22), _integer_docs(22), 4)
"""


def test_export_killed_with_sigkill_resumes_to_identical_files(tmp_path):
  docs, doc_ids = _integer_docs(22), _ids(22)
  reference = tmp_path / "reference"
  _export(reference, doc_ids, docs, dtype="float16")
  out = tmp_path / "killed"
  process = subprocess.run(
      [sys.executable, "-c", _KILLED_EXPORT, str(out)], cwd=REPO, capture_output=True, check=False)
  assert process.returncode == -signal.SIGKILL, process.stderr.decode()[-2000:]
  assert not (out / files.MANIFEST).exists()
  assert (out / "chunks/vectors-00002.npy").exists()  # chunk 2 is half done:
  assert (out / "chunks/doc_index-00002.npy.tmp").exists()  # its temporary is left behind
  with pytest.raises(ValueError, match=f"{out} is an incomplete token index"):
    reader.open_index(str(out))
  (out / "chunks/vectors-00003.npy.tmp").write_bytes(b"\x93NUMPY half-written")

  writer = _new_writer(out, 22, dtype="float16")
  assert writer.completed_chunks() == 2
  _write_chunks(writer, doc_ids, docs, 4)
  assert not (out / files.MANIFEST).exists()  # the manifest only comes with finalize
  writer.finalize()
  assert _files(out) == _files(reference)  # byte-identical, ScaNN included
  queries = np.random.default_rng(1).integers(-8, 9, (8, 32)).astype(np.float32)
  for searcher in ("scann", "bruteforce"):
    for got, expected in zip(
        reader.open_index(str(out)).search(queries, 10, searcher),
        reader.open_index(str(reference)).search(queries, 10, searcher)):
      np.testing.assert_array_equal(got, expected)


def test_an_index_without_vectors_searches_as_the_stored_one(tmp_path):
  """store_vectors=False: the same ScaNN files and token retrieval as a float16 index, no vector
  or doc index files, and whatever needs the vectors refused by name."""
  docs, doc_ids = _integer_docs(40, dim=128), _ids(40)
  stored = _export(tmp_path / "stored", doc_ids, docs, dtype="float16")
  manifest = _export(tmp_path / "none", doc_ids, docs, dtype="float16", store_vectors=False)
  assert manifest["vectors_stored"] is False and "vectors_stored" not in stored
  unstored = lambda: list((tmp_path / "none/chunks").glob("vectors-*")) + list(
      (tmp_path / "none/chunks").glob("doc_index-*"))
  assert not unstored()
  scann_files = lambda root: {k: v for k, v in _files(root).items() if k.startswith("scann/")}
  assert scann_files(tmp_path / "none") == scann_files(tmp_path / "stored")
  sizes = files.bytes_by_kind(manifest)
  assert sizes["vectors"] == sizes["doc_index"] == 0
  assert sizes["scann"] == files.bytes_by_kind(stored)["scann"]
  assert files.bytes_by_kind(stored)["vectors"] == 2 * 128 * stored["num_tokens"] + 128 * 10
  index = reader.open_index(str(tmp_path / "none"), "full")
  index.verify()
  assert not index.has_vectors
  queries = np.random.default_rng(1).integers(-8, 9, (8, 128)).astype(np.float32)
  for got, expected in zip(index.search(queries, 10),
                           reader.open_index(str(tmp_path / "stored")).search(queries, 10)):
    np.testing.assert_array_equal(got, expected)
  for refused in (lambda: index.doc_vectors([0]), lambda: index.search(queries, 10, "bruteforce"),
                  lambda: index.search(queries, 10, "device")):
    with pytest.raises(ValueError, match="exported with --store_vectors=none"):
      refused()
  with pytest.raises(ValueError, match="--store_vectors=none: it has no token vectors"):
    index_writer.reprune(str(tmp_path / "none"), str(tmp_path / "repruned"), None)
  (tmp_path / "none/chunks/vectors-00003.npy").write_bytes(b"left by a kill")
  (tmp_path / "none/chunks/doc_index-00003.npy").write_bytes(b"left by a kill")
  index_writer.drop_unstored_vectors(str(tmp_path / "none"), manifest)
  assert not unstored()
  writer = _new_writer(tmp_path / "none", 40, 128, "float16", store_vectors=False, repair=True)
  assert "re-encoding from chunk 0 of 10" in writer.repair_report
  assert not list((tmp_path / "none/chunks").glob("chunk-*"))  # all re-encoded, then rebuilt
  _write_chunks(writer, doc_ids, docs, 4)
  assert writer.finalize() == manifest


def test_interrupted_finalize_resumes_to_identical_files(tmp_path, monkeypatch):
  docs, doc_ids = _integer_docs(9), _ids(9)
  _export(tmp_path / "reference", doc_ids, docs)
  out = tmp_path / "interrupted"
  writer = _new_writer(out, 9)
  _write_chunks(writer, doc_ids, docs, 4)
  real_replace = os.replace

  def replace(src, dst):
    if str(dst).endswith("doc_offsets.npy"):
      raise KeyboardInterrupt
    real_replace(src, dst)

  with monkeypatch.context() as patch:
    patch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
      writer.finalize()
  assert (out / "scann").is_dir() and not (out / files.MANIFEST).exists()
  _new_writer(out, 9).finalize()
  assert _files(out) == _files(tmp_path / "reference")


def test_resume_refuses_other_settings(tmp_path):
  writer = _new_writer(tmp_path, 1)
  writer.write_chunk(0, ["a"], [np.ones((2, 32), np.float32)])
  with pytest.raises(ValueError, match=r"chunk 0 written out of order: the next chunk .* is 1"):
    writer.write_chunk(0, ["a"], [np.ones((2, 32), np.float32)])
  with pytest.raises(ValueError, match=r"doc 'b': vectors of shape \(2, 16\), expected"):
    writer.write_chunk(1, ["b"], [np.ones((2, 16), np.float32)])
  del writer  # as if the export died
  with pytest.raises(ValueError, match=r"writer\.json.*other settings \(dim, fingerprint"):
    _new_writer(tmp_path, 1, dim=16, fingerprint="other")
  _new_writer(tmp_path, 1).finalize()
  with pytest.raises(index_writer.IndexComplete, match="already a complete index .* nothing to"):
    _new_writer(tmp_path, 1)


def test_check_compatible(tmp_path):
  _export(tmp_path, _ids(5), _integer_docs(5))
  token_index = reader.open_index(str(tmp_path))
  reader.check_compatible(token_index.manifest, 32, FINGERPRINT)
  with pytest.raises(ValueError, match=r"token dim 32 \(index\) vs 128 \(query model\)"):
    reader.check_compatible(token_index.manifest, 128, FINGERPRINT)
  with pytest.raises(ValueError, match=r"fingerprint 'ckpt-1234' \(index\) vs 'ckpt-9' \(query"):
    reader.check_compatible(token_index.manifest, 32, "ckpt-9")
  with pytest.raises(ValueError, match="index dim 32 vs query dim 128"):
    token_index.search(np.zeros((3, 128), np.float32), 10)


def test_damaged_index_errors_name_the_file(tmp_path):
  _export(tmp_path, _ids(9), _integer_docs(9))
  reader.open_index(str(tmp_path)).verify()
  chunk = tmp_path / "chunks/vectors-00001.npy"
  data = bytearray(chunk.read_bytes())
  data[-1] ^= 1
  chunk.write_bytes(bytes(data))
  with pytest.raises(files.DamagedIndexError, match=f"{chunk} is damaged: its sha256 differs"):
    reader.open_index(str(tmp_path)).verify()
  chunk.write_bytes(bytes(data[:-64]))
  with pytest.raises(files.DamagedIndexError, match=f"{chunk} is damaged: .* bytes, the manifest"):
    reader.open_index(str(tmp_path))
  chunk.unlink()
  with pytest.raises(FileNotFoundError, match=f"{chunk} is missing"):
    reader.open_index(str(tmp_path))
  (tmp_path / files.MANIFEST).unlink()
  with pytest.raises(ValueError, match="incomplete token index"):
    reader.open_index(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="no token index"):
    reader.open_index(str(tmp_path / "chunks"))


def test_shards_must_be_a_complete_consistent_set(tmp_path):
  docs = _integer_docs(7)
  shard = lambda s: files.shard_path(str(tmp_path), s, 3)
  _export(shard(0), _ids(3), docs[:3], total_docs=7)
  _export(shard(2), _ids(3, "b"), docs[4:], first_doc=4, total_docs=7)
  with pytest.raises(ValueError, match=r"missing \['shard-00001-of-00003'\]"):
    reader.open_index(str(tmp_path))
  for problem, kwargs in ((r"differs .* in fingerprint", {
      "fingerprint": "other-checkpoint"
  }), (r"holds corpus documents \[2, 3\], expected \[3, 4\]: the shards do "
       "not tile one corpus", {
           "first_doc": 2
       })):
    shutil.rmtree(shard(1), ignore_errors=True)
    writer = _new_writer(shard(1), 1, total_docs=7, **{"first_doc": 3, **kwargs})
    writer.write_chunk(0, ["c"], [docs[0]])  # (docs[3] is empty)
    writer.finalize()
    with pytest.raises(ValueError, match=r"shard-00001-of-00003 " + problem):
      reader.open_index(str(tmp_path))


def test_searching_an_index_imports_neither_tensorflow_nor_scann_package(tmp_path):
  """ScaNN's package `__init__` imports TensorFlow (~620 MB); a search loads only ScaNN's pybind
  extension, and finds what a process that imported the package finds."""
  docs, doc_ids = _integer_docs(40, dim=128), _ids(40)
  _export(tmp_path, doc_ids, docs, dtype="float16")
  queries = np.random.default_rng(1).integers(-8, 9, (8, 128)).astype(np.float32)
  np.save(tmp_path / "queries.npy", queries)
  search = (f"import sys, numpy as np; from xtr.index import reader; "
            f"i = reader.open_index({str(tmp_path)!r}); "
            f"s, d = i.search(np.load({str(tmp_path / 'queries.npy')!r}), 10); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & "
            "{'tensorflow', 'seqio', 'scann'})); print(d.tolist())")
  done = subprocess.run([sys.executable, "-c", search], capture_output=True, text=True, check=True,
                        cwd=REPO)
  imported, found = done.stdout.splitlines()
  assert imported == "[]"
  assert found == str(reader.open_index(str(tmp_path)).search(queries, 10)[1].tolist())
