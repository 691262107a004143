"""Tests of xtr/data/bm25.py and the BM25 hard negatives of xtr/data/tasks/beir.py."""
import collections
import hashlib
import math
import pathlib

import gin
import numpy as np
import pytest
import seqio
import tensorflow as tf

from xtr import io
from xtr.data import bm25
from xtr.data.tasks import beir
from xtr.evaluation import beir_eval

SCIFACT = pathlib.Path(__file__).resolve().parents[1] / "data" / "scifact"

DOCS = (
    "The cat sat on the mat with another cat.",
    "Dogs and cats: a study of cats, dogs and their owners over many, many years.",
    "A mat.",
    "Quantum chromodynamics of the strong interaction",
    "the and of",  # only stopwords: no tokens
    "Cat cat cat cat cat cat cat cat",
    "Owners of dogs walk more; owners of cats sleep more.",
)


@pytest.fixture(autouse=True)
def _clear_gin():
  yield
  gin.clear_config()


def _naive_bm25(query: str, docs: tuple[str, ...], k1: float, b: float) -> list[float]:
  """Lucene BM25 summed over the query tokens (repeats included), in plain Python."""
  doc_tokens = bm25.tokenize(docs)
  avgdl = sum(map(len, doc_tokens)) / len(docs)
  df = collections.Counter(t for tokens in doc_tokens for t in set(tokens))
  scores = []
  for tokens in doc_tokens:
    tf_ = collections.Counter(tokens)
    score = 0.0
    for t in bm25.tokenize([query])[0]:
      if tf_[t]:
        idf = math.log(1 + (len(docs) - df[t] + 0.5) / (df[t] + 0.5))
        score += idf * tf_[t] / (tf_[t] + k1 * (1 - b + b * len(tokens) / avgdl))
    scores.append(score)
  return scores


def test_tokenize_lowercases_and_drops_stopwords_and_single_characters():
  assert bm25.tokenize(["The cat's CAT, a dog-owner!",
                        "the and of"]) == [["cat", "cat", "dog", "owner"], []]


@pytest.mark.parametrize("k1, b", [(bm25.K1, bm25.B), (1.5, 0.75)])
@pytest.mark.parametrize(
    "query", ["cat", "cats and dogs owners", "Cat cat mat", "the", "zebra", "mat zebra strong"])
def test_scores_equal_naive_bm25(query, k1, b):
  index = bm25.Bm25([f"d{i}" for i in range(len(DOCS))], DOCS, k1=k1, b=b)
  np.testing.assert_allclose(index.scores(query), _naive_bm25(query, DOCS, k1, b), rtol=1e-6)


def test_top_k_and_search_rank_by_score_then_index():
  index = bm25.Bm25([f"d{i}" for i in range(len(DOCS))], DOCS)
  queries = ["cat mat", "owners", "zebra"]
  indices, scores = index.top_k(queries, 100)  # k is cut to N
  assert indices.shape == scores.shape == (3, len(DOCS))
  for q, query in enumerate(queries):
    naive = _naive_bm25(query, DOCS, bm25.K1, bm25.B)
    expected = sorted(range(len(DOCS)), key=lambda i: (-round(naive[i], 5), i))
    assert indices[q].tolist() == expected
    np.testing.assert_allclose(scores[q], [naive[i] for i in expected], rtol=1e-6)
  results = index.search(queries, 2)
  assert [[doc for doc, _ in r] for r in results] == [[f"d{i}" for i in indices[0, :2]],
                                                      [f"d{i}" for i in indices[1, :2]],
                                                      []]  # no 0 scores


def test_scifact_bm25_baseline():
  data = beir_eval.load_beir(SCIFACT, "test")
  results = bm25.Bm25(data.doc_ids, data.docs).search(data.queries, 100)
  metrics = beir_eval.evaluate(data.qrels, {q: dict(r) for q, r in zip(data.query_ids, results)})
  assert metrics["num_queries"] == 300
  assert 0.6 <= metrics["ndcg@10"] <= 0.72  # 0.657 (Anserini's flat BM25: 0.665, with stemming)
  assert 0.8 <= metrics["recall@100"] <= 0.95  # 0.876


@pytest.fixture(scope="module")
def scifact_train():
  return beir.load_pairs(SCIFACT, "train")


def _forge(top: np.ndarray, damage: str) -> np.ndarray:
  """The cached ranks `top` damaged as `damage` says."""
  forged = top.copy()
  if damage == "permuted row":
    forged[0] = np.roll(forged[0], 1)
  elif damage == "past the corpus":
    forged[0, 0] = 10**6
  elif damage == "another depth":
    forged = forged[:, :3]
  return forged


@pytest.mark.parametrize(
    "damage", ["permuted row", "past the corpus", "another depth", "truncated", "no checksum"])
def test_damaged_cached_ranks_are_mined_again(scifact_train, tmp_path, damage, caplog):
  """A cache file was read back as it was: a row of other documents drew other negatives, ids
  past the corpus failed later in tf.gather, a truncated file was an unnamed ValueError; a
  symlink in its place is neither read nor written through."""
  top = beir.bm25_top_docs(scifact_train, 30, tmp_path)
  (path,) = tmp_path.glob("*.npy")
  if damage == "truncated":
    path.write_bytes(path.read_bytes()[:1000])
  elif damage == "no checksum":
    (tmp_path / f"{path.name}.sha256").unlink()
  else:
    recorded = (tmp_path / f"{path.name}.sha256").read_bytes()
    np.save(path, _forge(top, damage))
    if damage != "permuted row":  # A checksum that matches: the shape and range are checked.
      recorded = hashlib.sha256(path.read_bytes()).hexdigest().encode()
    (tmp_path / f"{path.name}.sha256").write_bytes(recorded)
  with caplog.at_level("WARNING"):
    again = beir.bm25_top_docs(scifact_train, 30, tmp_path)
  np.testing.assert_array_equal(again, top)
  assert f"The cached BM25 ranks {path} are damaged" in caplog.text
  caplog.clear()
  np.testing.assert_array_equal(beir.bm25_top_docs(scifact_train, 30, tmp_path), top)
  assert not caplog.text  # Mined again, it was cached again.
  elsewhere = tmp_path / "elsewhere.npy"
  path.rename(elsewhere)
  path.symlink_to(elsewhere)
  with pytest.raises(io.UnsafeFileError, match=f"{path} is a symbolic link"):
    beir.bm25_top_docs(scifact_train, 30, tmp_path)
  np.testing.assert_array_equal(np.load(elsewhere), top)


def _candidates(data: beir.BeirPairs, top: np.ndarray) -> list[list[int]]:
  """Each query's top documents that are matched (>= 0) and not its positives, in BM25 order."""
  positives = collections.defaultdict(set)
  for q, d in data.pairs.tolist():
    positives[q].add(d)
  return [[d for d in row if d >= 0 and d not in positives[q]] for q, row in enumerate(top.tolist())
         ]


def test_bm25_top_docs_are_mined_once_and_cached(scifact_train, tmp_path, monkeypatch):
  calls, mine = [], beir._mine_bm25

  def counted_mine(*args):
    calls.append(args)
    return mine(*args)

  monkeypatch.setattr(beir, "_mine_bm25", counted_mine)
  top = beir.bm25_top_docs(scifact_train, 30, tmp_path)
  assert len(calls) == 1 and top.shape == (809, 30) and top.dtype == np.int64
  assert sorted(p.suffix for p in tmp_path.iterdir()) == [".npy", ".sha256"]  # no temporary
  np.testing.assert_array_equal(beir.bm25_top_docs(scifact_train, 30, tmp_path), top)
  assert len(calls) == 1  # read back, not mined again
  beir.bm25_top_docs(scifact_train, 10, tmp_path)
  assert len(calls) == 2 and len(list(tmp_path.iterdir())) == 4  # another depth: another key

  doc_ids = [str(i) for i in range(len(scifact_train.docs))]
  indices, scores = bm25.Bm25(doc_ids, scifact_train.docs).top_k(scifact_train.queries, 30)
  np.testing.assert_array_equal(top, np.where(scores > 0, indices, -1))
  assert (top == -1).any()  # a train query matches only 6 documents


def test_bm25_negative_is_a_seeded_uniform_draw_of_the_candidates(scifact_train, tmp_path):
  candidates = _candidates(scifact_train, beir.bm25_top_docs(scifact_train, 20, tmp_path))
  sample = tf.function(beir.bm25_negative(scifact_train, depth=20, cache_dir=tmp_path))
  for query in (0, 1, 2, int(np.argmin([len(c) for c in candidates]))):
    drawn = []
    for s in range(100):
      seed = tf.constant([s, 3], tf.int64)
      r = tf.random.stateless_uniform([], seed, minval=0, maxval=len(candidates[query]),
                                      dtype=tf.int64)
      negative = int(sample(tf.constant(query, tf.int64), seed))
      assert negative == candidates[query][int(r)]
      drawn.append(negative)
    assert set(drawn) == set(candidates[query])


def test_bm25_negatives_through_gin(scifact_train, tmp_path):
  gin.parse_config(f"""
      tasks.beir.load_pairs.data_dir = '{SCIFACT}'
      tasks.beir.to_triples.negative_sampler = @tasks.beir.bm25_negative
      tasks.beir.bm25_negative.depth = 10
      tasks.beir.bm25_negative.cache_dir = '{tmp_path}'
  """)

  def negatives(seed):
    with seqio.utils.map_seed_manager(seed):
      ds = beir.to_triples(beir.pairs_dataset("train", shuffle_files=False))
      return [ex["negative"].decode() for ex in ds.as_numpy_iterator()]

  candidates = _candidates(scifact_train, beir.bm25_top_docs(scifact_train, 10, tmp_path))
  first = negatives(0)
  assert len(first) == 919
  for (q, _), negative in zip(scifact_train.pairs, first):
    assert negative in {scifact_train.docs[d] for d in candidates[q]}
  assert negatives(0) == first and negatives(1) != first


def test_a_bm25_negative_is_never_a_twin_of_a_positive(tmp_path):
  """A corpus holding "The cat sat ..." twice: with the first a positive of 'cat mat', its twin
  (BM25's best match after it) was drawn as the query's negative."""
  docs = DOCS + (DOCS[0],)
  data = beir.BeirPairs(queries=("cat mat",), docs=docs, pairs=np.array([[0, 0]], np.int64))
  top = beir.bm25_top_docs(data, 5, str(tmp_path))[0]
  assert len(docs) - 1 in top.tolist()
  sample = tf.function(beir.bm25_negative(data, depth=5, cache_dir=tmp_path))
  drawn = {int(sample(tf.constant(0, tf.int64), tf.constant([i, 7], tf.int64))) for i in range(200)}
  assert drawn == set(top[top >= 0].tolist()) - {0, len(docs) - 1}


def test_bm25_negative_without_candidates_is_uniform_or_names_the_query(tmp_path):
  """'quantum' matches no document: its negatives are uniform over its non-positives (every one
  drawn in 400 draws), while 'cat mat' keeps drawing from its BM25 candidates only."""
  data = beir.BeirPairs(queries=("cat mat", "quantum"), docs=DOCS, pairs=np.array([[0, 0], [1, 3]],
                                                                                  np.int64))
  with pytest.raises(ValueError, match="'quantum': its top-5 BM25 documents are all positives"):
    beir.bm25_negative(data, depth=5, cache_dir=tmp_path, without_candidates="error")
  sample = tf.function(beir.bm25_negative(data, depth=5, cache_dir=tmp_path))
  draw = lambda q, i: int(sample(tf.constant(q, tf.int64), tf.constant([i, 7], tf.int64)))
  quantum = {draw(1, i) for i in range(400)}
  assert quantum == set(range(len(DOCS))) - {3}
  top = beir.bm25_top_docs(data, 5, str(tmp_path))[0]
  assert {draw(0, i) for i in range(400)} <= set(top[(top >= 0) & (top != 0)].tolist())
