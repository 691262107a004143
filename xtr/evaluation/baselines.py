"""Zero-shot baselines beside XTR: BM25, and an untuned pretrained encoder used as a
single-vector retriever (mean pooling) and as a multi-vector one (MaxSim over raw token vectors)."""
import time
from typing import Any
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from xtr.data import bm25
from xtr.evaluation import beir_eval
from xtr.models import xtr_encoder
from xtr.retrieval import ranker
from xtr.text import tokenization


def bm25_search(data: beir_eval.BeirData, top_k: int) -> ranker.Results:
  """BM25 (k1 = 0.9, b = 0.4) over the full documents."""
  index = bm25.Bm25(data.doc_ids, data.docs)
  rankings, latency_ms = [], []
  for query in data.queries:
    start = time.perf_counter()
    rankings.append(index.search([query], top_k)[0])
    latency_ms.append(1000 * (time.perf_counter() - start))
  return ranker.Results(rankings, np.asarray(latency_ms))


def encode_untuned(backbone: nn.Module, params: Any, vocabulary: Any, texts: Sequence[str],
                   max_length: int, batch_size: int = 32) -> tuple[np.ndarray, list[np.ndarray]]:
  """One pass of a pretrained backbone over `texts`, for both zero-shot baselines.

  vocabulary: the backbone's vocabulary or its `tokenization` tokenizer.

  Returns:
    pooled: [N, H] L2-normalized means of the hidden states over each text's tokens (the
      sentence-transformers pooling).
    tokens: per text, its L2-normalized hidden states [len_i, H] (padding dropped).
  """

  @jax.jit
  def encode(ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    mask = ids != xtr_encoder.PAD_ID
    hidden = backbone.apply({"params": params}, ids, mask).astype(jnp.float32)
    mean = jnp.sum(hidden * mask[..., None], axis=1) / jnp.maximum(jnp.sum(mask, 1), 1)[:, None]
    normalize = lambda x: x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
    return normalize(mean), normalize(hidden)

  tokenizer = tokenization.of(vocabulary)
  pooled, tokens = [], []
  for start in tqdm.tqdm(range(0, len(texts), batch_size), desc="encode (untuned)", unit="batch"):
    ids = np.zeros((batch_size, max_length), np.int32)
    chunk = tokenization.encode_batch(tokenizer, texts[start:start + batch_size], max_length)
    ids[:len(chunk)] = chunk
    batch_pooled, batch_tokens = jax.device_get(encode(ids))
    pooled.append(batch_pooled[:len(chunk)])
    tokens += [t[row != 0] for t, row in zip(batch_tokens, chunk)]
  return np.concatenate(pooled), tokens


def untuned_search(backbone: nn.Module, params: Any, vocabulary: Any, data: beir_eval.BeirData,
                   top_k: int, query_max_length: int = 32,
                   doc_max_length: int = 256) -> dict[str, ranker.Results]:
  """The pretrained encoder as a single-vector retriever (exact dot product of mean-pooled
  embeddings) and as a multi-vector one (exact MaxSim over its raw token vectors).

  Returns:
    {"single_vector": results, "maxsim": results}.
  """
  doc_pooled, doc_tokens = encode_untuned(backbone, params, vocabulary, data.docs, doc_max_length)
  query_pooled, query_tokens = encode_untuned(backbone, params, vocabulary, data.queries,
                                              query_max_length)
  q = np.zeros((len(query_tokens), query_max_length, doc_pooled.shape[-1]), np.float32)
  q_mask = np.zeros(q.shape[:2], bool)
  for i, tokens in enumerate(query_tokens):
    q[i, :len(tokens)], q_mask[i, :len(tokens)] = tokens, True
  return {
      "single_vector": _dot_product_search(data.doc_ids, doc_pooled, query_pooled, top_k),
      "maxsim": ranker.exact_search(data.doc_ids, doc_tokens, q, q_mask, top_k)
  }


def _dot_product_search(doc_ids: Sequence[str], docs: np.ndarray, queries: np.ndarray,
                        top_k: int) -> ranker.Results:
  """Exact top_k of docs [N, H] by dot product with each query [Q, H]."""
  rankings, latency_ms = [], []
  for query in queries:
    start = time.perf_counter()
    scores = docs @ query
    top = np.argsort(-scores, kind="stable")[:top_k]
    latency_ms.append(1000 * (time.perf_counter() - start))
    rankings.append([(doc_ids[i], float(scores[i])) for i in top])
  return ranker.Results(rankings, np.asarray(latency_ms))
