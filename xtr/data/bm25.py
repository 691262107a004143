"""BM25 over BEIR texts (bm25s): the lexical baseline and the miner of hard negatives.

Scores are bm25s' "lucene" variant (Kamphuis et al. 2020) with Anserini's BEIR settings
k1 = 0.9, b = 0.4:
  score(q, d) = sum_{t in q} idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl)),
  idf(t) = log(1 + (N - df(t) + 0.5) / (df(t) + 0.5)),
the sum running over the query's tokens, repeats included. Tokens are `bm25s.tokenize`'s:
lowercased words of two or more characters (scikit-learn's `\\b\\w\\w+\\b`) minus bm25s' English
stopwords, as in bm25s' BEIR recipe, but not stemmed (the recipe's PyStemmer is not a
dependency). |d| and avgdl count tokens after stopword removal.
"""
from collections.abc import Iterable
from collections.abc import Sequence

import numpy as np

K1 = 0.9
B = 0.4


def _bm25s():
  """bm25s, imported on first use: its import runs a JAX computation, which would start JAX's
  backend before `jax.distributed.initialize()` can run in a multi-host `xtr-train`."""
  import bm25s  # pylint: disable=import-outside-toplevel
  return bm25s


def tokenize(texts: Iterable[str]) -> list[list[str]]:
  """The BM25 tokens of each text (see the module docstring)."""
  return _bm25s().tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


class Bm25:
  """A BM25 index of `docs`, where `doc_ids[i]` names `docs[i]`."""

  def __init__(self, doc_ids: Sequence[str], docs: Sequence[str], k1: float = K1, b: float = B):
    if len(doc_ids) != len(docs):
      raise ValueError(f"{len(doc_ids)} doc ids for {len(docs)} docs")
    self.doc_ids = tuple(doc_ids)
    self._index = _bm25s().BM25(k1=k1, b=b, method="lucene")
    self._index.index(tokenize(docs), show_progress=False)

  def scores(self, query: str) -> np.ndarray:
    """[N] float32: the BM25 score of every document for `query` (0 where no token matches)."""
    token_ids = self._index.get_tokens_ids(tokenize([query])[0])
    return self._index.get_scores_from_ids(token_ids)

  def top_k(self, queries: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The min(k, N) best documents of each query, best first, ties to the lower index.

    Returns:
      indices: [Q, min(k, N)] int64 document indices.
      scores: [Q, min(k, N)] float32 their scores.
    """
    k = min(k, len(self.doc_ids))
    indices = np.zeros((len(queries), k), np.int64)
    scores = np.zeros((len(queries), k), np.float32)
    for q, query in enumerate(queries):
      s = self.scores(query)
      kth_best = np.partition(s, len(s) - k)[len(s) - k]
      candidates = np.flatnonzero(s >= kth_best)
      indices[q] = candidates[np.lexsort((candidates, -s[candidates]))[:k]]
      scores[q] = s[indices[q]]
    return indices, scores

  def search(self, queries: Sequence[str], k: int) -> list[list[tuple[str, float]]]:
    """[(doc id, score)] of each query's top-k documents, best first, as a BM25 engine gives them:
    documents that match no query token (score 0) are left out."""
    indices, scores = self.top_k(queries, k)
    return [[(self.doc_ids[i], float(s))
             for i, s in zip(row, row_scores)
             if s > 0]
            for row, row_scores in zip(indices, scores)]
