"""Tests of xtr/scoring.py against naive loops written from eq. 1 and eq. 4 of the paper."""
import functools

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
import pytest

from xtr import losses
from xtr import scoring

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
  doc_ids, scores = np.asarray(doc_ids), np.asarray(scores)
  count = len(expected)
  np.testing.assert_array_equal(doc_ids[:count], list(expected))
  np.testing.assert_allclose(scores[:count], list(expected.values()), rtol=1e-5, atol=1e-6)
  assert np.all(doc_ids[count:] == -1) and np.all(scores[count:] == -np.inf)


@pytest.mark.parametrize("impute", IMPUTE_MODES)
@pytest.mark.parametrize("seed", range(4))
def test_f_xtr_prime_matches_naive(impute, seed):
  scores, doc_ids, query_mask = _random_retrieval(seed)
  out_ids, out_scores = scoring.f_xtr_prime(scores, doc_ids, query_mask, impute=impute)
  assert out_ids.shape == out_scores.shape == (scores.size,)
  assert out_ids.dtype == jnp.int32 and out_scores.dtype == jnp.float32
  _assert_matches(out_ids, out_scores, _naive_f_xtr_prime(scores, doc_ids, query_mask, impute))


@pytest.mark.parametrize("impute", IMPUTE_MODES)
def test_f_xtr_prime_ignores_order_within_rows(impute):
  """m_i is the lowest valid score and maxima are segment maxima: rows need not be sorted."""
  scores, doc_ids, query_mask = _random_retrieval(7)
  order = np.random.default_rng(0).permuted(np.tile(np.arange(scores.shape[1]), (6, 1)), axis=1)
  shuffled = (np.take_along_axis(scores, order, 1), np.take_along_axis(doc_ids, order, 1))
  expected = scoring.f_xtr_prime(scores, doc_ids, query_mask, impute=impute)
  actual = scoring.f_xtr_prime(*shuffled, query_mask, impute=impute)
  np.testing.assert_array_equal(actual[0], expected[0])
  np.testing.assert_allclose(actual[1], expected[1], rtol=1e-6)


def test_f_xtr_prime_without_candidates():
  scores = np.full((3, 4), -np.inf, np.float32)
  doc_ids = np.full((3, 4), -1, np.int32)
  doc_ids[2] = 5  # Only a padding query token retrieved something.
  out_ids, out_scores = scoring.f_xtr_prime(scores, doc_ids, np.array([True, True, False]))
  assert np.all(np.asarray(out_ids) == -1) and np.all(np.asarray(out_scores) == -np.inf)


def test_f_xtr_prime_rejects_unknown_impute():
  with pytest.raises(ValueError, match="impute"):
    scoring.f_xtr_prime(*_random_retrieval(0), impute="mean")


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
  colbert = np.asarray(losses.f_colbert(q[None], q_mask[None], padded, mask))[0]
  retrieval = _brute_force_retrieval(q, docs, k_prime=int(mask.sum()))
  for impute in IMPUTE_MODES:
    out_ids, out_scores = scoring.f_xtr_prime(*retrieval, q_mask, impute=impute)
    np.testing.assert_array_equal(np.asarray(out_ids)[:len(docs)], np.arange(len(docs)))
    np.testing.assert_allclose(np.asarray(out_scores)[:len(docs)], colbert, rtol=1e-6, atol=1e-6)
    ranked, _ = scoring.top_documents(out_ids, out_scores, len(docs))
    np.testing.assert_array_equal(ranked, np.argsort(-colbert, kind="stable"))


@pytest.mark.parametrize("k_prime", [1, 5, 20, 40])
def test_f_xtr_prime_top_k_prime_imputation_upper_bounds_f_colbert(k_prime):
  """With exact retrieval, every token query token i did not retrieve scores <= its k'-th score
  m_i: a candidate's f_XTR' >= its f_ColBERT, and every other document's f_ColBERT is at most
  (1/n) sum_i m_i (the f_XTR' of a document that nobody retrieved)."""
  docs, padded, mask = _corpus(3)
  q = _unit(np.random.default_rng(4).normal(size=(4, padded.shape[-1])))
  q_mask = np.array([True, True, True, False])
  colbert = np.asarray(losses.f_colbert(q[None], q_mask[None], padded, mask))[0]
  retrieval = _brute_force_retrieval(q, docs, k_prime)
  out_ids, out_scores = map(np.asarray, scoring.f_xtr_prime(*retrieval, q_mask))
  candidates = out_ids[out_ids >= 0]
  assert np.all(out_scores[out_ids >= 0] >= colbert[candidates] - 1e-6)
  others = np.setdiff1d(np.arange(len(docs)), candidates)
  assert np.all(colbert[others] <= retrieval[0][q_mask, -1].mean() + 1e-6)


@pytest.mark.parametrize("impute", ["top_k_prime", "none"])
def test_f_xtr_prime_batch_matches_per_query(impute):
  batch = [_random_retrieval(seed) for seed in range(3)]
  out_ids, out_scores = scoring.f_xtr_prime_batch(*map(np.stack, zip(*batch)), impute=impute)
  assert out_ids.shape == out_scores.shape == (3, batch[0][0].size)
  for b, retrieval in enumerate(batch):
    ids, scores = scoring.f_xtr_prime(*retrieval, impute=impute)
    np.testing.assert_array_equal(out_ids[b], ids)
    np.testing.assert_allclose(out_scores[b], scores, rtol=1e-6)


def _naive_top_documents(doc_ids, scores, k):
  ranked = sorted((-s, position, d) for position, (d, s) in enumerate(zip(doc_ids, scores))
                  if d >= 0)[:k]
  padding = k - len(ranked)
  return ([d for _, _, d in ranked] + [-1] * padding,
          [-s for s, _, _ in ranked] + [-np.inf] * padding)


@pytest.mark.parametrize("k", [1, 3, 9, 12])
def test_top_documents(k):
  rng = np.random.default_rng(k)
  doc_ids = np.where(rng.random((2, 10)) < 0.7, rng.permutation(20)[:10], -1).astype(np.int32)
  scores = np.round(rng.normal(size=(2, 10)), 1).astype(np.float32)  # Ties included.
  out_ids, out_scores = scoring.top_documents(doc_ids, scores, k)
  assert out_ids.shape == out_scores.shape == (2, k)
  for b in range(2):
    expected_ids, expected_scores = _naive_top_documents(doc_ids[b], scores[b], k)
    np.testing.assert_array_equal(out_ids[b], expected_ids)
    np.testing.assert_array_equal(out_scores[b], np.float32(expected_scores))
    single = scoring.top_documents(doc_ids[b], scores[b], k)
    np.testing.assert_array_equal(single[0], expected_ids)


def test_top_candidates_ranks_any_count_with_one_compilation_per_bucket():
  rng = np.random.default_rng(0)
  scoring.top_candidates(np.arange(129), np.zeros(129, np.float32), 10)  # the (128, 256] bucket
  compiled = scoring.top_documents._cache_size()  # pylint: disable=protected-access
  for count in list(range(129, 257, 7)) + [3]:  # [3]: fewer candidates than k, another bucket
    doc_ids = rng.permutation(1000)[:count]
    scores = np.round(rng.normal(size=count), 1).astype(np.float32)  # Ties included.
    top_ids, top_scores = scoring.top_candidates(doc_ids, scores, 10)
    expected_ids, expected_scores = _naive_top_documents(doc_ids, scores, 10)
    np.testing.assert_array_equal(top_ids, expected_ids)
    np.testing.assert_array_equal(top_scores, np.float32(expected_scores))
  assert scoring.top_documents._cache_size() == compiled + 1  # pylint: disable=protected-access


def test_xtr_candidates_of_any_query_length_equal_the_fully_padded_query():
  """n' retrieving tokens padded to a multiple of 8 score as the same tokens padded to 32 rows,
  and 1..32 tokens compile 4 shapes."""
  rng = np.random.default_rng(0)
  scoring.xtr_candidates(*_random_retrieval(0, n=1)[:2], "top_k_prime")
  compiled = scoring.f_xtr_prime._cache_size()  # pylint: disable=protected-access
  for n in range(1, 33):
    scores, doc_ids, _ = _random_retrieval(int(rng.integers(1000)), n=n)
    ids, out = map(np.asarray, scoring.xtr_candidates(scores, doc_ids, "top_k_prime"))
    padded_scores = np.full((32, scores.shape[1]), -np.inf, np.float32)
    padded_ids = np.full((32, scores.shape[1]), -1, np.int32)
    padded_scores[:n], padded_ids[:n] = scores, doc_ids
    expected_ids, expected = map(np.asarray, scoring.f_xtr_prime(
        padded_scores, padded_ids, np.arange(32) < n, "top_k_prime"))
    keep = expected_ids >= 0
    np.testing.assert_array_equal(ids[ids >= 0], expected_ids[keep])
    np.testing.assert_allclose(out[ids >= 0], expected[keep], rtol=1e-6)
  assert scoring.f_xtr_prime._cache_size() == compiled + 3  # pylint: disable=protected-access


def test_jit_composes():
  """The scoring stage jits end to end with static impute and k."""
  scores, doc_ids, query_mask = _random_retrieval(1)

  @functools.partial(jax.jit, static_argnames=("impute",))
  def rank(scores, doc_ids, query_mask, impute):
    return scoring.top_documents(*scoring.f_xtr_prime(scores, doc_ids, query_mask, impute), k=3)

  for impute in IMPUTE_MODES:
    expected = _naive_top_documents(
        *zip(*_naive_f_xtr_prime(scores, doc_ids, query_mask, impute).items()), k=3)
    ranked_ids, ranked_scores = rank(scores, doc_ids, query_mask, impute)
    np.testing.assert_array_equal(ranked_ids, expected[0])
    np.testing.assert_allclose(ranked_scores, expected[1], rtol=1e-5, atol=1e-6)


def _largest_intermediate(jaxpr) -> int:
  sizes = [int(np.prod(v.aval.shape)) for eqn in jaxpr.eqns for v in eqn.outvars]
  sizes += [_largest_intermediate(sub) for sub in jex.core.subjaxprs(jaxpr)]
  return max(sizes, default=0)


def test_f_xtr_prime_memory_is_linear_in_retrieved_tokens():
  """No intermediate is larger than the M = n * k' retrieved tokens (no dense [n, M] matrix)."""
  n, k_prime = 32, 1000
  args = (np.zeros((n, k_prime), np.float32), np.zeros((n, k_prime), np.int32), np.ones(n, bool))
  for impute in IMPUTE_MODES:
    jaxpr = jax.make_jaxpr(functools.partial(scoring.f_xtr_prime, impute=impute))(*args)
    assert _largest_intermediate(jaxpr.jaxpr) <= n * k_prime


def _naive_colbert(q, q_mask, doc) -> float:
  """Eq. 1 in loop form, in float64."""
  maxima = [max(float(np.dot(q[i].astype(np.float64), t)) for t in doc)
            for i in np.flatnonzero(q_mask)]
  return sum(maxima) / len(maxima)


def test_colbert_rerank_matches_naive():
  rng = np.random.default_rng(0)
  docs = [_unit(rng.normal(size=(length, 8))) for length in [1, 3, 70, 9, 2, 16, 33, 5, 8, 4]]
  q = _unit(rng.normal(size=(5, 8)))
  q_mask = np.array([True, False, True, True, True])
  scores = scoring.colbert_rerank(q, q_mask, docs, docs_per_step=4)
  assert isinstance(scores, np.ndarray) and scores.shape == (len(docs),)
  np.testing.assert_allclose(scores, [_naive_colbert(q, q_mask, d) for d in docs], atol=1e-6)
  assert scoring.colbert_rerank(q, q_mask, []).shape == (0,)


@pytest.mark.parametrize("k, query_tokens_per_step", [(5, 8192), (15, 8192), (5, 8)])
def test_exact_maxsim_matches_naive(k, query_tokens_per_step):
  docs, padded, mask = _corpus(5, num_docs=11)
  rng = np.random.default_rng(6)
  q = _unit(rng.normal(size=(3, 4, padded.shape[-1])))
  q_mask = np.array([[True] * 4, [True, True, False, False], [False, True, True, True]])
  doc_index, scores = scoring.exact_maxsim(q, q_mask, padded, mask, k, docs_per_step=4,
                                               query_tokens_per_step=query_tokens_per_step)
  assert doc_index.shape == scores.shape == (3, k)
  for b in range(3):
    naive = np.array([_naive_colbert(q[b], q_mask[b], d) for d in docs])
    best = np.argsort(-naive, kind="stable")[:k]
    padding = k - len(best)
    np.testing.assert_array_equal(doc_index[b], np.concatenate([best, [-1] * padding]))
    np.testing.assert_allclose(scores[b, :len(best)], naive[best], atol=1e-6)
    assert np.all(scores[b, len(best):] == -np.inf)
