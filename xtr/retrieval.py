"""Ranking a corpus for queries: token retrieval from the index, then scoring.

  scoring="xtr":     token retrieval -> f_XTR' from the retrieved scores alone (eq. 4, with
                     imputation); no gathering stage.
  scoring="colbert": ColBERT's three stages: token retrieval -> gather all token vectors of every
                     candidate from the index -> exact f_ColBERT.
  scoring="exact":   exact f_ColBERT (MaxSim) over the whole corpus: an upper bound for both, for
                     small corpora.
"""
import dataclasses
import sys
import time
from typing import Sequence

import numpy as np
import tqdm

from xtr import encoding
from xtr import scoring as scoring_lib
from xtr.index import reader

SCORINGS = ("xtr", "colbert", "exact")


@dataclasses.dataclass(frozen=True)
class SearchConfig:
  """How queries are answered.

  Attributes:
    top_k: documents returned per query.
    k_prime: document tokens retrieved per query token (k').
    scoring: "xtr", "colbert" or "exact" (see the module docstring).
    impute: f_XTR''s score for query tokens that retrieved nothing of a document:
      "top_k_prime" (the paper's m_i), "zero", a float, or "none".
    searcher: "scann" (the index's ScaNN searcher) or "bruteforce" (exact token retrieval).
  """
  top_k: int = 100
  k_prime: int = 1000
  scoring: str = "xtr"
  impute: str | float = "top_k_prime"
  searcher: str = "scann"

  def __post_init__(self):
    if self.scoring not in SCORINGS:
      raise ValueError(f"scoring must be one of {SCORINGS}, got {self.scoring!r}")


@dataclasses.dataclass
class Results:
  """Ranked documents of each query and the search + scoring time of each (encoding excluded).

  unknown_only: indices of the queries whose tokens are all unknown to the vocabulary (e.g.
    emoji or CJK with an English vocabulary): their rankings carry no information.
  """
  rankings: list[list[tuple[str, float]]]
  latency_ms: np.ndarray  # [Q]
  unknown_only: list[int] = dataclasses.field(default_factory=list)


def search(encoder: encoding.Encoder, token_index: reader.TokenIndex,
           queries: Sequence[str], config: SearchConfig) -> Results:
  """Ranks the index's documents for each query; warns of queries of unknown tokens only."""
  unknown = encoder.unknown_only(queries, encoder.query_max_length)
  for i in unknown:
    print(f"Warning: query {i + 1} ({queries[i]!r}) has only tokens that the vocabulary does not "
          "know: its ranking carries no information.", file=sys.stderr, flush=True)
  q, q_mask = encoder.encode_queries(queries)  # [Q, n, D], [Q, n]
  if config.scoring == "exact":
    return dataclasses.replace(_exact(token_index, q, q_mask, config), unknown_only=unknown)
  _rank_one(token_index, q[0], q_mask[0], config)  # Compiles, so that no latency includes it.
  rankings, latency_ms = [], []
  for vectors, mask in tqdm.tqdm(zip(q, q_mask), total=len(q), desc="search", unit="query"):
    start = time.perf_counter()
    doc_index, scores = _rank_one(token_index, vectors, mask, config)
    latency_ms.append(1000 * (time.perf_counter() - start))
    rankings.append(_named(token_index.doc_ids, doc_index, scores))
  return Results(rankings, np.asarray(latency_ms), unknown)


def _rank_one(token_index: reader.TokenIndex, q: np.ndarray, q_mask: np.ndarray,
              config: SearchConfig) -> tuple[np.ndarray, np.ndarray]:
  """One query (q [n, D], q_mask [n]) -> its top_k (doc_index [top_k], scores [top_k])."""
  token_scores, token_docs = token_index.search(q[q_mask], config.k_prime, config.searcher)
  if config.scoring == "xtr":
    # Padded to n rows so that every query compiles to the same shapes.
    n = len(q_mask)
    padded_scores = np.full((n, config.k_prime), -np.inf, np.float32)
    padded_docs = np.full((n, config.k_prime), -1, np.int32)
    padded_scores[:len(token_scores)], padded_docs[:len(token_docs)] = token_scores, token_docs
    doc_ids, scores = scoring_lib.f_xtr_prime(
        padded_scores, padded_docs, np.arange(n) < len(token_scores), config.impute)
  else:
    doc_ids = np.unique(token_docs[token_docs >= 0])
    valid_q = q[q_mask]
    scores = scoring_lib.colbert_rerank(valid_q, np.ones(len(valid_q), bool),
                                        token_index.doc_vectors(doc_ids))
  top_ids, top_scores = scoring_lib.top_documents(doc_ids, scores, config.top_k)
  return np.asarray(top_ids), np.asarray(top_scores)


def _exact(token_index: reader.TokenIndex, q: np.ndarray, q_mask: np.ndarray,
           config: SearchConfig) -> Results:
  """Exact MaxSim of every query against every document of the index (all in memory)."""
  docs = token_index.doc_vectors(range(token_index.num_docs))
  return exact_search(token_index.doc_ids, docs, q, q_mask, config.top_k)


def exact_search(doc_ids: Sequence[str], docs: Sequence[np.ndarray], q: np.ndarray,
                 q_mask: np.ndarray, top_k: int) -> Results:
  """Exact MaxSim top_k of queries (q [Q, n, D], q_mask [Q, n]) over docs ([len_i, D] each)."""
  length = max(len(d) for d in docs)
  doc_vectors = np.zeros((len(docs), length, q.shape[-1]), np.float32)
  doc_mask = np.zeros((len(docs), length), bool)
  for i, d in enumerate(docs):
    doc_vectors[i, :len(d)], doc_mask[i, :len(d)] = d, True
  scoring_lib.exact_maxsim(q, q_mask, doc_vectors[:1], doc_mask[:1], top_k)  # Compiles.
  start = time.perf_counter()
  doc_index, scores = scoring_lib.exact_maxsim(q, q_mask, doc_vectors, doc_mask, top_k)
  per_query = 1000 * (time.perf_counter() - start) / len(q)
  rankings = [_named(doc_ids, np.asarray(d), np.asarray(s)) for d, s in zip(doc_index, scores)]
  return Results(rankings, np.full(len(q), per_query))


def _named(doc_ids: Sequence[str], doc_index: np.ndarray,
           scores: np.ndarray) -> list[tuple[str, float]]:
  """Drops padding (-1) and maps doc indices to corpus ids."""
  return [(doc_ids[d], float(s)) for d, s in zip(doc_index, scores) if d >= 0]
