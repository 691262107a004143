"""Tests of xtr/scoring/functions.py against naive loop references written from eqs. 1-2 of the
paper."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xtr.scoring import functions
from xtr.training import losses


def _unit(x: np.ndarray) -> np.ndarray:
  return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def _random_mask(rng: np.random.Generator, rows: int, length: int) -> np.ndarray:
  """Random [rows, length] mask with at least one valid token per row (valid tokens need not be a
  prefix: the losses must only look at the mask)."""
  mask = rng.random((rows, length)) < 0.6
  mask[np.arange(rows), rng.integers(0, length, rows)] = True
  return mask


def _random_batch(seed: int, b: int = 2, n: int = 4, c: int = 5, m: int = 6, dim: int = 8):
  """Random unit vectors everywhere (padding included: only masks may hide them)."""
  rng = np.random.default_rng(seed)
  q = _unit(rng.normal(size=(b, n, dim)))
  d = _unit(rng.normal(size=(c, m, dim)))
  return q, _random_mask(rng, b, n), d, _random_mask(rng, c, m)


def _naive_retrieval(q, q_mask, d, d_mask, k_train, excluded=None) -> np.ndarray:
  """A of eq. 2: for each valid query token, its k_train best valid tokens of the whole batch,
  leaving out the documents `excluded` [B, C] for its query."""
  b, n = q_mask.shape
  c, m = d_mask.shape
  retrieved = np.zeros((b, n, c, m), dtype=bool)
  for bi in range(b):
    for i in np.flatnonzero(q_mask[bi]):
      candidates = [(-float(np.dot(q[bi, i], d[ci, j])), ci, j) for ci in range(c)
                    if excluded is None or not excluded[bi, ci] for j in np.flatnonzero(d_mask[ci])]
      for _, ci, j in sorted(candidates)[:k_train]:
        retrieved[bi, i, ci, j] = True
  return retrieved


def _reference_f_colbert(q, q_mask, d, d_mask):
  """Eq. 1 in loop form (jnp scalars, so that jax.grad can differentiate it)."""
  rows = []
  for bi in range(q_mask.shape[0]):
    valid_i = np.flatnonzero(q_mask[bi])
    row = []
    for ci in range(d_mask.shape[0]):
      total = 0.0
      for i in valid_i:
        total += jnp.max(
            jnp.stack([jnp.dot(q[bi, i], d[ci, j]) for j in np.flatnonzero(d_mask[ci])]))
      row.append(total / len(valid_i))
    rows.append(jnp.stack(row))
  return jnp.stack(rows)


def _reference_f_xtr(q, q_mask, d, d_mask, retrieved):
  """Eq. 2 in loop form: (1/Z) sum_i max_j A_ij q_i.d_j, with A given as a constant."""
  rows = []
  for bi in range(q_mask.shape[0]):
    row = []
    for ci in range(d_mask.shape[0]):
      total, z = 0.0, 0
      for i in np.flatnonzero(q_mask[bi]):
        if not retrieved[bi, i, ci].any():
          continue
        z += 1
        terms = [
            jnp.dot(q[bi, i], d[ci, j]) if retrieved[bi, i, ci, j] else jnp.float32(0.0)
            for j in np.flatnonzero(d_mask[ci])
        ]
        total += jnp.max(jnp.stack(terms))
      row.append(jnp.asarray(total / max(z, 1), dtype=jnp.float32))
    rows.append(jnp.stack(row))
  return jnp.stack(rows)


def _reference_cross_entropy(scores, positive_index):
  """Loop form -log softmax(scores[b])[positive_index[b]], averaged over queries."""
  total = 0.0
  for bi, p in enumerate(positive_index):
    total += jax.scipy.special.logsumexp(scores[bi]) - scores[bi, p]
  return total / len(positive_index)


def _positives(b: int, c: int) -> np.ndarray:
  return np.arange(b) * (c // b)


@pytest.mark.parametrize("seed", [0, 1])
def test_f_colbert_values_and_gradients_match_loop_reference(seed):
  q, q_mask, d, d_mask = _random_batch(seed)
  positive_index = _positives(q_mask.shape[0], d_mask.shape[0])
  np.testing.assert_allclose(functions.f_colbert(q, q_mask, d, d_mask),
                             _reference_f_colbert(q, q_mask, d, d_mask), atol=1e-5)

  def loss(q, d):
    return jnp.mean(
        losses.in_batch_cross_entropy(functions.f_colbert(q, q_mask, d, d_mask), positive_index))

  def reference_loss(q, d):
    return _reference_cross_entropy(_reference_f_colbert(q, q_mask, d, d_mask), positive_index)

  grads = jax.grad(loss, argnums=(0, 1))(q, d)
  reference_grads = jax.grad(reference_loss, argnums=(0, 1))(q, d)
  for grad, reference in zip(grads, reference_grads):
    np.testing.assert_allclose(grad, reference, atol=1e-5)


@pytest.mark.parametrize("k_train", [1, 4, 100])
def test_excluded_documents_take_no_retrieval_slots(k_train):
  """A copy of query 0's positive (a false negative) scores like it token for token: excluded, it
  takes none of query 0's k_train slots, which go to the next tokens as in a loop; other queries
  still retrieve from it."""
  q, q_mask, d, d_mask = _random_batch(5)
  c = d_mask.shape[0]
  d[c - 1], d_mask[c - 1] = d[0], d_mask[0]
  excluded = np.zeros((q_mask.shape[0], c), bool)
  excluded[0, c - 1] = True
  retrieved = np.asarray(
      functions.retrieval_mask(functions.token_scores(q, d), q_mask, d_mask, k_train, excluded))
  np.testing.assert_array_equal(retrieved, _naive_retrieval(q, q_mask, d, d_mask, k_train,
                                                            excluded))
  assert not retrieved[0, :, c - 1].any()
  if k_train == 100:  # Every valid token: the copy's too, for the other queries.
    assert retrieved[1:, :, c - 1].any()
  assert retrieved[0].sum() == np.sum(q_mask[0]) * min(k_train, np.sum(d_mask[:-1]))


@pytest.mark.parametrize("seed,k_train", [(0, 1), (1, 3), (2, 7), (3, 100)])
def test_f_xtr_values_and_gradients_match_loop_reference(seed, k_train):
  q, q_mask, d, d_mask = _random_batch(seed)
  positive_index = _positives(q_mask.shape[0], d_mask.shape[0])
  retrieved = _naive_retrieval(q, q_mask, d, d_mask, k_train)
  np.testing.assert_array_equal(
      functions.retrieval_mask(functions.token_scores(q, d), q_mask, d_mask, k_train), retrieved)
  np.testing.assert_allclose(functions.f_xtr(q, q_mask, d, d_mask, k_train),
                             _reference_f_xtr(q, q_mask, d, d_mask, retrieved), atol=1e-5)

  def loss(q, d):
    scores = functions.f_xtr(q, q_mask, d, d_mask, k_train)
    return jnp.mean(losses.in_batch_cross_entropy(scores, positive_index))

  def reference_loss(q, d):
    scores = _reference_f_xtr(q, q_mask, d, d_mask, retrieved)
    return _reference_cross_entropy(scores, positive_index)

  grads = jax.grad(loss, argnums=(0, 1))(q, d)
  reference_grads = jax.grad(reference_loss, argnums=(0, 1))(q, d)
  for grad, reference in zip(grads, reference_grads):
    np.testing.assert_allclose(grad, reference, atol=1e-5)


def test_f_xtr_counts_negative_retrieved_scores_as_eq2_does():
  """max_j A_ij q.d_j: a retrieved negative score loses to a non-retrieved token's 0, unless every
  token of the document was retrieved."""

  def token(score):
    return [score, np.sqrt(1 - score**2)]

  q = np.array([[[1.0, 0.0]]], np.float32)  # one query token
  d = np.array(
      [
          [token(-0.6), token(-0.8), token(1.0)],  # the last one is padding
          [token(-0.9), token(-1.0), token(-0.95)]
      ],
      np.float32)
  q_mask = np.array([[True]])
  d_mask = np.array([[True, True, False], [True, True, True]])
  expected = {
      1: [0.0, 0.0],  # document 0's unretrieved -0.8 token counts 0 > -0.6
      2: [-0.6, 0.0],  # all of document 0 retrieved; nothing of document 1 (Z = 0)
      3: [-0.6, 0.0],  # document 1's -0.9 retrieved, its other tokens count 0
      5: [-0.6, -0.9]
  }  # everything retrieved: f_ColBERT
  for k_train, scores in expected.items():
    np.testing.assert_allclose(functions.f_xtr(q, q_mask, d, d_mask, k_train), [scores], atol=1e-6)


def test_paper_failure_case_colbert_rewards_what_xtr_penalizes():
  """Section 3: f_ColBERT ranks D+ first although no query token retrieves any token of D+; with
  k_train=1 f_XTR(Q, D+) = 0 and the loss is above chance, pushing retrieval towards D+."""
  n = 4
  eye = np.eye(n + 1, dtype=np.float32)
  q = eye[None, :n]  # query tokens e_1..e_4
  # D+: one token per query token, each 0.85 similar to it.
  positive = _unit(0.85 * eye[:n] + np.sqrt(1 - 0.85**2) * eye[n])
  # Negative k: one token 0.9 similar to e_k (so it wins e_k's top-1), dissimilar to the others.
  negatives = 0.9 * eye[:n] - np.sqrt(0.19 / (n - 1)) * (1 - eye[:n, :n]) @ eye[:n]
  d = np.zeros((1 + n, n, n + 1), np.float32)
  d[0] = positive
  d[1:, 0] = _unit(negatives)
  d_mask = np.zeros((1 + n, n), bool)
  d_mask[0] = True
  d_mask[1:, 0] = True
  q_mask = np.ones((1, n), bool)
  positive_index = np.array([0])

  colbert = functions.f_colbert(q, q_mask, d, d_mask)
  xtr = functions.f_xtr(q, q_mask, d, d_mask, k_train=1)
  retrieved = functions.retrieval_mask(functions.token_scores(q, d), q_mask, d_mask, 1)
  chance = np.log(1 + n)

  assert not losses.positive_token_hits(retrieved, q_mask, positive_index).any()
  assert losses.in_batch_accuracy(colbert, positive_index)[0] == 1.0
  assert losses.in_batch_cross_entropy(colbert, positive_index) < chance
  assert xtr[0, 0] == 0.0
  np.testing.assert_allclose(xtr[0, 1:], 0.9, atol=1e-6)
  assert losses.in_batch_accuracy(xtr, positive_index)[0] == 0.0
  assert (losses.in_batch_cross_entropy(xtr, positive_index)
          > 2 * losses.in_batch_cross_entropy(colbert, positive_index))
  assert losses.in_batch_cross_entropy(xtr, positive_index) > chance


@pytest.mark.parametrize("seed", [4, 5])
def test_f_xtr_equals_f_colbert_when_every_token_is_retrieved(seed):
  q, q_mask, d, d_mask = _random_batch(seed)
  k_train = int(d_mask.sum())  # exactly all valid tokens; holds for any larger k_train too
  colbert = functions.f_colbert(q, q_mask, d, d_mask)
  np.testing.assert_allclose(functions.f_xtr(q, q_mask, d, d_mask, k_train), colbert, atol=1e-6)
  np.testing.assert_allclose(functions.f_xtr(q, q_mask, d, d_mask, d_mask.size + 3), colbert,
                             atol=1e-6)
  # Non-negative vectors, so every similarity is >= 0.
  q_pos, d_pos = np.abs(q), np.abs(d)
  np.testing.assert_allclose(functions.f_xtr(q_pos, q_mask, d_pos, d_mask, k_train),
                             functions.f_colbert(q_pos, q_mask, d_pos, d_mask), atol=1e-6)


@pytest.mark.parametrize("k_train", [1, 4, 50])
def test_padding_is_never_retrieved_and_not_counted(k_train):
  q, q_mask, d, d_mask = _random_batch(6)
  # Padding document tokens copy query tokens: they would be every query token's best match.
  d_adversarial = d.copy()
  for ci, j in zip(*np.nonzero(~d_mask)):
    d_adversarial[ci, j] = q[0, j % q.shape[1]]
  scores = functions.token_scores(q, d_adversarial)
  retrieved = np.asarray(functions.retrieval_mask(scores, q_mask, d_mask, k_train))
  assert not retrieved[..., ~d_mask].any()
  assert not retrieved[~q_mask].any()
  np.testing.assert_array_equal(retrieved.sum(axis=(2, 3))[q_mask], min(k_train, int(d_mask.sum())))
  expected = functions.f_xtr(q, q_mask, d, d_mask, k_train)
  np.testing.assert_allclose(functions.f_xtr(q, q_mask, d_adversarial, d_mask, k_train), expected,
                             atol=1e-6)
  # Z counts valid query tokens only: each query alone, padding tokens dropped, gives the same row.
  for bi in range(q.shape[0]):
    valid = q_mask[bi]
    alone = functions.f_xtr(q[bi:bi + 1, valid], valid[None, valid], d, d_mask, k_train)
    np.testing.assert_allclose(alone[0], expected[bi], atol=1e-6)


def test_retrieval_takes_exactly_k_train_tokens_under_ties():
  q, q_mask, d, d_mask = _random_batch(7, c=4)
  d[1], d_mask[1] = d[0], d_mask[0]  # document 1 duplicates document 0: every score ties
  retrieved = np.asarray(functions.retrieval_mask(functions.token_scores(q, d), q_mask, d_mask, 3))
  np.testing.assert_array_equal(retrieved.sum(axis=(2, 3)), 3 * q_mask)


@pytest.mark.parametrize("k_train", [1, 5])
def test_positive_token_hits_match_naive_count(k_train):
  q, q_mask, d, d_mask = _random_batch(8, b=3, c=6)
  positive_index = np.array([0, 2, 5])
  retrieved = _naive_retrieval(q, q_mask, d, d_mask, k_train)
  expected = np.zeros(q_mask.shape, bool)
  for bi in range(3):
    for i in np.flatnonzero(q_mask[bi]):
      expected[bi, i] = retrieved[bi, i, positive_index[bi]].any()
  scores = functions.token_scores(q, d)
  hits = losses.positive_token_hits(functions.retrieval_mask(scores, q_mask, d_mask, k_train),
                                    q_mask, positive_index)
  np.testing.assert_array_equal(hits, expected)
  assert 0 < expected.sum() < q_mask.sum()


def test_cross_entropy_and_accuracy_match_numpy():
  rng = np.random.default_rng(9)
  scores = rng.normal(size=(4, 10)).astype(np.float32)
  positive_index = np.array([0, 3, 9, 5])
  scores[1, 7] = scores[1, 3]  # a tie with the positive is not a success
  scores[2, 9] = scores[2].max() + 1.0
  shifted = scores - scores.max(axis=1, keepdims=True)
  log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
  expected_losses = -log_probs[np.arange(4), positive_index]
  expected_accuracy = [
      all(scores[bi, p] > scores[bi, cj]
          for cj in range(10)
          if cj != p)
      for bi, p in enumerate(positive_index)
  ]
  np.testing.assert_allclose(losses.in_batch_cross_entropy(scores, positive_index), expected_losses,
                             rtol=1e-6)
  np.testing.assert_array_equal(losses.in_batch_accuracy(scores, positive_index), expected_accuracy)
  assert 0 < sum(expected_accuracy) < 4


def test_cross_entropy_gives_minus_infinity_no_probability():
  scores = np.array([[0.5, -np.inf, 0.2, -np.inf]], np.float32)
  positive_index = np.array([2])
  loss, grad = jax.value_and_grad(lambda s: losses.in_batch_cross_entropy(s, positive_index)[0])(
      scores)
  np.testing.assert_allclose(loss, np.log(np.exp(0.5) + np.exp(0.2)) - 0.2, rtol=1e-6)
  np.testing.assert_array_equal(grad[0, [1, 3]], 0.0)
  assert np.isfinite(grad).all()


def test_jit_shapes_and_float32_scores_from_bfloat16():
  q, q_mask, d, d_mask = _random_batch(10, b=3, n=5, c=7, m=4)
  q16, d16 = jnp.asarray(q, jnp.bfloat16), jnp.asarray(d, jnp.bfloat16)
  positive_index = np.array([0, 3, 6])
  f_xtr = jax.jit(functions.f_xtr, static_argnames="k_train")
  for scores, eager in [(jax.jit(functions.f_colbert)(q16, q_mask, d16, d_mask),
                         functions.f_colbert(q16, q_mask, d16, d_mask)),
                        (f_xtr(q16, q_mask, d16, d_mask,
                               k_train=6), functions.f_xtr(q16, q_mask, d16, d_mask, 6))]:
    assert scores.shape == (3, 7) and scores.dtype == jnp.float32
    np.testing.assert_allclose(scores, eager, atol=1e-6)

  @functools.partial(jax.jit, static_argnames="k_train")
  def loss_and_grads(q, d, k_train):

    def loss(q, d):
      return jnp.mean(
          losses.in_batch_cross_entropy(functions.f_xtr(q, q_mask, d, d_mask, k_train),
                                        positive_index))

    return jax.value_and_grad(loss, argnums=(0, 1))(q, d)

  value, (grad_q, grad_d) = loss_and_grads(q16, d16, k_train=6)
  assert value.shape == () and np.isfinite(value)
  assert grad_q.shape == q.shape and grad_d.shape == d.shape
  assert grad_q.dtype == jnp.bfloat16
