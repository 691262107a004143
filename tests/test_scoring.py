"""Tests of xtr/scoring/search_scores.py against naive loops written from eq. 1 and eq. 4 of the
paper."""
import numpy as np
import pytest

from xtr.scoring import functions
from xtr.scoring import search_scores

IMPUTE_MODES = ["top_k_prime", "zero", 0.2, -0.5, "none"]


def _unit(x: np.ndarray) -> np.ndarray:
  return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _random_retrieval(seed: int, n: int = 6, k_prime: int = 10, num_docs: int = 7):
  """Token retrieval results as an index returns them: rows sorted descending, documents repeated
  within and across rows, some rows ending in (-inf, -1) padding, and padding query tokens whose
  rows hold real-looking entries that must be ignored. Every valid row keeps >= 1 entry."""
  rng = np.random.default_rng(seed)
  scores = -np.sort(-rng.normal(size=(n, k_prime)).astype(np.float32), axis=1)
  doc_ids = rng.integers(0, num_docs, (n, k_prime)).astype(np.int32)
  for i in range(n):
    kept = rng.integers(1, k_prime + 1) if rng.random() < 0.5 else k_prime
    scores[i, kept:], doc_ids[i, kept:] = -np.inf, -1
  query_mask = rng.random(n) < 0.7
  query_mask[0] = True
  return scores, doc_ids, query_mask


def _naive_f_xtr_prime(scores, doc_ids, query_mask, impute) -> dict:
  """Eq. 4 in loop form: {candidate document: score}."""
  tokens = np.flatnonzero(query_mask)
  rows = {i: [(float(s), int(d)) for s, d in zip(scores[i], doc_ids[i]) if d >= 0] for i in tokens}
  candidates = sorted({d for i in tokens for _, d in rows[i]})
  result = {}
  for doc in candidates:
    terms = []
    for i in tokens:
      hits = [s for s, d in rows[i] if d == doc]
      if hits:
        terms.append(max(hits))
      elif impute == "top_k_prime":
        terms.append(rows[i][-1][0])  # The last valid retrieved score of token i.
      elif impute == "zero":
        terms.append(0.0)
      elif impute != "none":
        terms.append(float(impute))
    result[doc] = sum(terms) / len(terms)
  return result


def _assert_matches(doc_ids, scores, expected: dict):
  assert doc_ids.dtype == np.int32 and scores.dtype == np.float32
  np.testing.assert_array_equal(doc_ids, list(expected))
  np.testing.assert_allclose(scores, list(expected.values()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("impute", IMPUTE_MODES)
@pytest.mark.parametrize("seed", range(4))
def test_f_xtr_prime_matches_naive(impute, seed):
  scores, doc_ids, query_mask = _random_retrieval(seed)
  out_ids, out_scores = search_scores.f_xtr_prime(scores, doc_ids, query_mask, impute=impute)
  _assert_matches(out_ids, out_scores, _naive_f_xtr_prime(scores, doc_ids, query_mask, impute))


@pytest.mark.parametrize("n, k_prime, num_docs", [(1, 1, 3), (1, 37, 5), (13, 300, 400),
                                                  (5, 64, 2**31 - 1)])
def test_f_xtr_prime_matches_naive_at_other_sizes(n, k_prime, num_docs):
  """Single tokens and k' = 1, k' not a power of two, many candidates, and doc ids up to the
  int32 maximum."""
  scores, doc_ids, query_mask = _random_retrieval(n + k_prime, n, k_prime, num_docs)
  for impute in ("top_k_prime", "none"):
    _assert_matches(*search_scores.f_xtr_prime(scores, doc_ids, query_mask, impute=impute),
                    _naive_f_xtr_prime(scores, doc_ids, query_mask, impute))


def test_f_xtr_prime_orders_documents_beyond_16_bits():
  """Doc ids that share their low or their high 16 bits (the two digits of the radix sort),
  repeated within and across rows."""
  table = np.array([3, 65535, 65536, 65539, 131075, 196611, 2**31 - 65533, 2**31 - 1], np.int32)
  scores, doc_ids, query_mask = _random_retrieval(7, 9, 50, len(table))
  doc_ids = np.where(doc_ids >= 0, table[np.maximum(doc_ids, 0)], -1)
  for impute in ("top_k_prime", "none"):
    _assert_matches(*search_scores.f_xtr_prime(scores, doc_ids, query_mask, impute=impute),
                    _naive_f_xtr_prime(scores, doc_ids, query_mask, impute))


def test_f_xtr_prime_without_candidates():
  scores = np.full((3, 4), -np.inf, np.float32)
  doc_ids = np.full((3, 4), -1, np.int32)
  doc_ids[2] = 5  # Only a padding query token retrieved something.
  out_ids, out_scores = search_scores.f_xtr_prime(scores, doc_ids, np.array([True, True, False]))
  assert out_ids.shape == out_scores.shape == (0,)


def test_f_xtr_prime_rejects_unknown_impute():
  with pytest.raises(ValueError, match="impute"):
    search_scores.f_xtr_prime(*_random_retrieval(0), impute="mean")


def _corpus(seed: int, num_docs: int = 12, max_len: int = 7, dim: int = 8):
  """Random unit-vector documents: a list of [len_j, D] and the padded [N, m, D] / [N, m] form."""
  rng = np.random.default_rng(seed)
  docs = [_unit(rng.normal(size=(rng.integers(1, max_len + 1), dim))) for _ in range(num_docs)]
  padded = np.zeros((num_docs, max_len, dim), np.float32)
  mask = np.zeros((num_docs, max_len), bool)
  for j, d in enumerate(docs):
    padded[j, :len(d)], mask[j, :len(d)] = d, True
  return docs, padded, mask


def _brute_force_retrieval(q: np.ndarray, docs, k_prime: int):
  """Exact top-k' token retrieval over all corpus tokens, in numpy."""
  tokens = np.concatenate(docs)
  doc_of_token = np.repeat(np.arange(len(docs)), [len(d) for d in docs]).astype(np.int32)
  all_scores = q @ tokens.T
  order = np.argsort(-all_scores, axis=1, kind="stable")[:, :k_prime]
  return np.take_along_axis(all_scores, order, 1), doc_of_token[order]


@pytest.mark.parametrize("seed", range(2))
def test_f_xtr_prime_with_all_tokens_retrieved_is_f_colbert(seed):
  """With k' = every corpus token, each query token retrieves every token of every document, so
  A_ij = 1 everywhere: every document is a candidate, no similarity is imputed and
  max_j A_ij q_i.d_j is the exact max. f_XTR' is then f_ColBERT for every imputation mode (the
  top-k' m_i is the global minimum score, but it is never used)."""
  docs, padded, mask = _corpus(seed)
  rng = np.random.default_rng(100 + seed)
  q = _unit(rng.normal(size=(5, padded.shape[-1])))
  q_mask = np.array([True, True, False, True, True])
  colbert = np.asarray(functions.f_colbert(q[None], q_mask[None], padded, mask))[0]
  retrieval = _brute_force_retrieval(q, docs, k_prime=int(mask.sum()))
  for impute in IMPUTE_MODES:
    out_ids, out_scores = search_scores.f_xtr_prime(*retrieval, q_mask, impute=impute)
    np.testing.assert_array_equal(out_ids, np.arange(len(docs)))
    np.testing.assert_allclose(out_scores, colbert, rtol=1e-6, atol=1e-6)
    ranked, _ = search_scores.top_candidates(out_ids, out_scores, len(docs))
    np.testing.assert_array_equal(ranked, np.argsort(-colbert, kind="stable"))


@pytest.mark.parametrize("k_prime", [1, 5, 20, 40])
def test_f_xtr_prime_top_k_prime_imputation_upper_bounds_f_colbert(k_prime):
  """With exact retrieval, every token query token i did not retrieve scores <= its k'-th score
  m_i: a candidate's f_XTR' >= its f_ColBERT, and every other document's f_ColBERT is at most
  (1/n) sum_i m_i (the f_XTR' of a document that nobody retrieved)."""
  docs, padded, mask = _corpus(3)
  q = _unit(np.random.default_rng(4).normal(size=(4, padded.shape[-1])))
  q_mask = np.array([True, True, True, False])
  colbert = np.asarray(functions.f_colbert(q[None], q_mask[None], padded, mask))[0]
  retrieval = _brute_force_retrieval(q, docs, k_prime)
  candidates, out_scores = search_scores.f_xtr_prime(*retrieval, q_mask)
  assert np.all(out_scores >= colbert[candidates] - 1e-6)
  others = np.setdiff1d(np.arange(len(docs)), candidates)
  assert np.all(colbert[others] <= retrieval[0][q_mask, -1].mean() + 1e-6)


def _naive_top_documents(doc_ids, scores, k):
  ranked = sorted(
      (-s, position, d) for position, (d, s) in enumerate(zip(doc_ids, scores)) if d >= 0)[:k]
  padding = k - len(ranked)
  return ([d for _, _, d in ranked] + [-1] * padding,
          [-s for s, _, _ in ranked] + [-np.inf] * padding)


@pytest.mark.parametrize("count", [0, 3, 10, 11, 257])
@pytest.mark.parametrize("k", [1, 10])
def test_top_candidates(count, k):
  """Against a full sort, with ties (scores rounded to 0.1) at the k-th place and fewer
  candidates than k."""
  rng = np.random.default_rng(count + k)
  doc_ids = np.sort(rng.permutation(1000)[:count]).astype(np.int32)
  scores = np.round(rng.normal(size=count), 1).astype(np.float32)
  top_ids, top_scores = search_scores.top_candidates(doc_ids, scores, k)
  expected_ids, expected_scores = _naive_top_documents(doc_ids, scores, k)
  np.testing.assert_array_equal(top_ids, expected_ids)
  np.testing.assert_array_equal(top_scores, np.float32(expected_scores))


def test_top_candidates_rank_a_nan_score_first():
  """A NaN score (a damaged index's vectors) used to drop valid candidates (the k-th's
  threshold compared False with it): it ranks first, where the ranker refuses it."""
  top_ids, top_scores = search_scores.top_candidates(np.array([3, 7, 9, 12]),
                                                     np.array([1.0, np.nan, 5.0, 2.0]), 2)
  np.testing.assert_array_equal(top_ids, [7, 9])
  np.testing.assert_array_equal(top_scores, np.float32([np.nan, 5.0]))


def _naive_colbert(q, q_mask, doc) -> float:
  """Eq. 1 in loop form, in float64."""
  maxima = [
      max(float(np.dot(q[i].astype(np.float64), t)) for t in doc) for i in np.flatnonzero(q_mask)
  ]
  return sum(maxima) / len(maxima)


def test_colbert_rerank_matches_naive():
  rng = np.random.default_rng(0)
  docs = [_unit(rng.normal(size=(length, 8))) for length in [1, 3, 70, 9, 2, 16, 33, 5, 8, 4]]
  q = _unit(rng.normal(size=(5, 8)))
  q_mask = np.array([True, False, True, True, True])
  scores = search_scores.colbert_rerank(q, q_mask, docs, docs_per_step=4)
  assert isinstance(scores, np.ndarray) and scores.shape == (len(docs),)
  np.testing.assert_allclose(scores, [_naive_colbert(q, q_mask, d) for d in docs], atol=1e-6)
  assert search_scores.colbert_rerank(q, q_mask, []).shape == (0,)


@pytest.mark.parametrize("k, query_tokens_per_step", [(5, 8192), (15, 8192), (5, 8)])
def test_exact_maxsim_matches_naive(k, query_tokens_per_step):
  docs, padded, mask = _corpus(5, num_docs=11)
  rng = np.random.default_rng(6)
  q = _unit(rng.normal(size=(3, 4, padded.shape[-1])))
  q_mask = np.array([[True] * 4, [True, True, False, False], [False, True, True, True]])
  doc_index, scores = search_scores.exact_maxsim(q, q_mask, padded, mask, k, docs_per_step=4,
                                                 query_tokens_per_step=query_tokens_per_step)
  assert doc_index.shape == scores.shape == (3, k)
  for b in range(3):
    naive = np.array([_naive_colbert(q[b], q_mask[b], d) for d in docs])
    best = np.argsort(-naive, kind="stable")[:k]
    padding = k - len(best)
    np.testing.assert_array_equal(doc_index[b], np.concatenate([best, [-1] * padding]))
    np.testing.assert_allclose(scores[b, :len(best)], naive[best], atol=1e-6)
    assert np.all(scores[b, len(best):] == -np.inf)


@pytest.mark.parametrize("impute", [1e4, -1e4, 1234.567])
@pytest.mark.parametrize("seed", range(3))
def test_a_large_constant_imputation_keeps_the_similarities(impute, seed):
  """A constant as large as SearchConfig allows, with documents that every query token retrieved
  (their scores do not depend on it) and others: numpy and XLA f_XTR' equal the float64
  definition. Before, (sum_i m_i + sum (max - m_i)) / n cancelled in float32 (at 1e8, every
  score was 0 or a multiple of c)."""
  scores, doc_ids, query_mask = _random_retrieval(seed, n=8, k_prime=6, num_docs=3)
  expected = _naive_f_xtr_prime(scores, doc_ids, query_mask, impute)
  _assert_matches(*search_scores.f_xtr_prime(scores, doc_ids, query_mask, impute=impute), expected)
  top_docs, top_scores = search_scores.f_xtr_prime_top(scores[None], doc_ids[None],
                                                       query_mask[None], impute, len(expected))
  order = np.argsort(top_docs[0])
  _assert_matches(np.asarray(top_docs[0])[order], np.asarray(top_scores[0])[order], expected)
