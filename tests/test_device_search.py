"""`--searcher=device`: token vectors resident on (8 simulated) devices, sharded over tokens,
against exact search on the host (`xtr.index.exact`), and f_XTR' on the device against the
numpy f_XTR' of `xtr.scoring.search_scores`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from xtr.index import device
from xtr.index import exact
from xtr.scoring import search_scores


def _corpus(num_tokens: int, dim: int = 16, seed: int = 0):
  """Unit token vectors in uneven chunks, each token's doc (10 tokens per doc) and position."""
  rng = np.random.default_rng(seed)
  vectors = rng.normal(size=(num_tokens, dim)).astype(np.float32)
  vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
  chunks = np.split(vectors, [num_tokens // 3, num_tokens // 3 + 7])
  tokens = np.arange(num_tokens, dtype=np.int32)
  queries = rng.normal(size=(9, dim)).astype(np.float32)
  return chunks, tokens // 10, tokens % 10, queries


def _located(tokens: np.ndarray, docs: np.ndarray, positions: np.ndarray):
  """Exact search's token indices [Q, k] (-1 = none) -> (doc, position) [Q, k], -1 for none."""
  found = tokens >= 0
  return (np.where(found, docs[np.maximum(tokens, 0)],
                   -1), np.where(found, positions[np.maximum(tokens, 0)], -1))


@pytest.mark.parametrize("num_devices,num_tokens,k,block", [(1, 1000, 50, 128), (8, 1000, 50, 64),
                                                            (8, 1001, 300, 16), (3, 37, 60, 8),
                                                            (8, 5, 4, 65536)])
def test_float32_device_search_equals_exact_search(num_devices, num_tokens, k, block):
  """Tokens split unevenly over devices and blocks, k beyond a device's or the corpus's tokens:
  the same scores, documents and positions as exact search, -inf / -1 past the corpus."""
  chunks, docs, positions, queries = _corpus(num_tokens)
  tokens = device.DeviceTokens(chunks, docs, positions,
                               device.DeviceConfig(dtype="float32", token_block=block),
                               jax.devices()[:num_devices])
  scores, found_docs, found_positions = map(np.asarray, tokens.search(queries, k))
  exact_scores, exact_tokens = exact.search(chunks, queries, k)
  np.testing.assert_allclose(scores, exact_scores, atol=1e-6)
  np.testing.assert_array_equal(np.isinf(scores), np.isinf(exact_scores))
  exact_docs, exact_positions = _located(exact_tokens, docs, positions)
  np.testing.assert_array_equal(found_docs, exact_docs)
  np.testing.assert_array_equal(found_positions, exact_positions)


def test_ties_keep_the_lower_token_across_devices():
  vectors = np.ones((64, 4), np.float32)  # Every token scores the same.
  tokens = np.arange(64, dtype=np.int32)
  resident = device.DeviceTokens([vectors], tokens, tokens,
                                 device.DeviceConfig(dtype="float32", token_block=4))
  _, docs, _ = resident.search(np.ones((2, 4), np.float32), 10)
  np.testing.assert_array_equal(np.asarray(docs), np.tile(np.arange(10), (2, 1)))


@pytest.mark.parametrize("dtype,max_error,min_recall", [("bfloat16", 0.02, 0.9),
                                                        ("int8", 0.03, 0.85)])
def test_compact_types_approximate_exact_search(dtype, max_error, min_recall):
  """bfloat16 and int8 (per-token scale) vectors: scores within rounding of the exact ones (unit
  vectors, so |score| <= |q|) and most of the exact top-k found, in about a half and a third of
  float32's memory (with the scales and the documents' table: 76 and 44 bytes against 140)."""
  chunks, docs, positions, queries = _corpus(4000, dim=32)
  queries /= np.linalg.norm(queries, axis=1, keepdims=True)
  resident = device.DeviceTokens(chunks, docs, positions,
                                 device.DeviceConfig(dtype=dtype, token_block=512))
  scores, found_docs, found_positions = map(np.asarray, resident.search(queries, 100))
  exact_scores, exact_tokens = exact.search(chunks, queries, 100)
  assert np.abs(scores - exact_scores).max() < max_error
  found = found_docs * 10 + found_positions
  recall = np.mean([len(np.intersect1d(f, e)) / 100 for f, e in zip(found, exact_tokens)])
  assert recall > min_recall
  float32 = device.DeviceTokens(chunks, docs, positions,
                                device.DeviceConfig(dtype="float32", token_block=512))
  assert resident.nbytes < float32.nbytes * (0.6 if dtype == "bfloat16" else 0.4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_the_host_assembles_one_devices_share_at_a_time(dtype, monkeypatch):
  """80,000 float16 tokens in chunks of 1,000 onto 8 devices: each copy to a device carries
  that device's share alone (the whole resident copy, and more, was assembled on the host
  before it was sharded). Checked on what `jax.device_put` is handed: the host's peak by
  tracemalloc varied from run to run (0.40-0.84 of the resident copy) with the host buffers
  that XLA:CPU keeps as device buffers."""
  vectors = np.random.default_rng(0).normal(size=(80000, 32)).astype(np.float16)
  tokens = np.arange(len(vectors), dtype=np.int32)
  chunks = np.split(vectors, range(1000, len(vectors), 1000))
  copied, device_put = [], jax.device_put

  def recorded(arrays, target=None, **kwargs):
    copied.append(sum(a.nbytes for a in jax.tree.leaves(arrays) if isinstance(a, np.ndarray)))
    return device_put(arrays, target, **kwargs)

  monkeypatch.setattr(jax, "device_put", recorded)
  resident = device.DeviceTokens(chunks, tokens // 10, tokens % 10,
                                 device.DeviceConfig(dtype=dtype))
  assert copied == [resident.nbytes // 8] * 8


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_search_memory_does_not_grow_with_the_tokens(dtype):
  """XLA's memory analysis of the search (2 devices, 256 query tokens, blocks of 4,096): its
  temporaries are the blocks' scores and the running top-k: within 1 % for 2^16 and 2^22 tokens.
  (bfloat16 on the CPU is not: XLA computes its dot in float32 and converts a device's whole
  share once per search; docs/performance.md.)"""
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), (device.AXIS,))
  sharded = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(device.AXIS))

  def temp_bytes(num_tokens):
    shapes = [((num_tokens, 64), dtype), ((num_tokens,), "float32"), ((num_tokens, 2), "int32")]
    arrays = [jax.ShapeDtypeStruct(s, jnp.dtype(t), sharding=sharded) for s, t in shapes]
    compiled = device._search.lower(  # pylint: disable=protected-access
        mesh, jax.ShapeDtypeStruct((256, 64), jnp.float32), *arrays, k=100, block=4096,
        num_tokens=num_tokens, width=1).compile()
    return compiled.memory_analysis().temp_size_in_bytes

  assert temp_bytes(2**22) < 1.01 * temp_bytes(2**16)  # 64 times the tokens (the blocks' starts).


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
def test_chunks_already_on_a_device_are_held_as_host_chunks_are(dtype):
  """Chunks given as `jax.Array`s (vectors made on the accelerator) are quantized and assembled
  there: the same search as from numpy chunks, on 8 devices (int8's scales may differ by an ulp:
  XLA divides by 127 as a multiplication)."""
  chunks, docs, positions, queries = _corpus(1001, dim=32)
  config = device.DeviceConfig(dtype=dtype, token_block=64)
  from_host = device.DeviceTokens(chunks, docs, positions, config)
  on_device = [jax.device_put(c, jax.devices()[3]) for c in chunks]
  from_device = device.DeviceTokens(on_device, docs, positions, config)
  assert from_device.nbytes == from_host.nbytes
  (scores, *found), (want_scores, *want_found) = (
      map(np.asarray, tokens.search(queries, 50)) for tokens in (from_device, from_host))
  np.testing.assert_allclose(scores, want_scores, rtol=1e-6)
  for got, want in zip(found, want_found):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "num_tokens,k,block,recall_target,width",
    [
        (20000, 50, 2048, 0.9, 32),  # 2T(1 - r)/k = 80, at most 2048 // 50 = 40: 32 divides 2048.
        (20000, 50, 2048, 0.999, 1),  # 0.8: exact.
        (20000, 50, 2048, None, 1),
        (10**8, 1000, 65536, 0.99, 64),  # 2,000 capped at 65: each block still yields k.
        (600, 50, 30, 0.5, 1),  # A block smaller than k.
    ])
def test_bin_width(num_tokens, k, block, recall_target, width):
  assert device.bin_width(num_tokens, k, block, recall_target) == width


@pytest.mark.parametrize("num_tokens, token_block", [(20000, 2048), (8 * 2503, 65536)])
def test_a_recall_target_finds_that_share_of_the_exact_top_k(num_tokens, token_block):
  """Bins of 32 tokens on 8 devices (expected loss k·w/2T = 4 %): the tokens found are real
  tokens with their exact scores, in order, and at least 90 % of the exact top-k; a target of 1
  is exact search. A device's share of a prime number of tokens (2,503), its one block, is
  padded so that it still has bins (3,072 tokens: 48 per bin)."""
  chunks, docs, positions, queries = _corpus(num_tokens)
  exact_scores, exact_tokens = exact.search(chunks, queries, 50)
  for target in (1.0, 0.9):
    config = device.DeviceConfig(dtype="float32", recall_target=target, token_block=token_block)
    scores, found_docs, found_positions = map(
        np.asarray,
        device.DeviceTokens(chunks, docs, positions, config).search(queries, 50))
    found = found_docs * 10 + found_positions
    recall = np.mean([len(np.intersect1d(f, e)) / 50 for f, e in zip(found, exact_tokens)])
    vectors = np.concatenate(chunks)
    np.testing.assert_allclose(scores, np.einsum("qd,qkd->qk", queries, vectors[found]), atol=1e-5)
    assert (np.diff(scores, axis=1) <= 0).all()
    if target == 1.0:
      np.testing.assert_allclose(scores, exact_scores, atol=1e-6)
    else:
      assert 0.9 <= recall < 1


@pytest.mark.parametrize("field,value", [("dtype", "float16"), ("recall_target", 0.0),
                                         ("recall_target", 1.5), ("token_block", 0)])
def test_device_config_refuses_bad_values_naming_them(field, value):
  with pytest.raises(ValueError, match=f"DeviceConfig.{field}"):
    device.DeviceConfig(**{field: value})


def _retrieval(seed: int, n: int = 6, k_prime: int = 40, num_docs: int = 25):
  """One query's retrieval: [n, k'] descending scores, docs with some -1 tails, and a mask."""
  rng = np.random.default_rng(seed)
  scores = -np.sort(-rng.normal(size=(n, k_prime)), axis=1).astype(np.float32)
  docs = rng.integers(0, num_docs, size=(n, k_prime)).astype(np.int32)
  docs[1, k_prime - 7:], scores[1, k_prime - 7:] = -1, -np.inf
  docs[2], scores[2] = -1, -np.inf  # A query token that retrieved nothing.
  mask = np.ones(n, bool)
  mask[-1] = False
  return scores, docs, mask


@pytest.mark.parametrize("impute", ["top_k_prime", "zero", "none", -0.25])
@pytest.mark.parametrize("top_k", [5, 400])
def test_f_xtr_prime_on_device_equals_the_numpy_one(impute, top_k):
  retrievals = [_retrieval(seed) for seed in range(4)]
  stacked = [jnp.asarray(np.stack(parts)) for parts in zip(*retrievals)]
  doc_index, scores = map(np.asarray,
                          search_scores.f_xtr_prime_top(*stacked, impute=impute, top_k=top_k))
  for (token_scores, token_docs, mask), got_docs, got_scores in zip(retrievals, doc_index, scores):
    want_docs, want_scores = search_scores.top_candidates(
        *search_scores.f_xtr_prime(token_scores, token_docs, mask, impute), top_k)
    np.testing.assert_array_equal(got_docs, want_docs)
    np.testing.assert_allclose(got_scores, want_scores, atol=1e-6)
