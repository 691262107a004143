"""Zero-shot baselines against transformers' BertModel with the real MiniLM weights."""
import json

import numpy as np
import pytest
import torch
import transformers

from xtr.data import beir_files
from xtr.evaluation import baselines
from xtr.evaluation import beir_eval
from xtr.models import bert
from xtr.models import hf_weights
from xtr.text import tokenization
from xtr.text import vocabularies

NUM_DOCS = 12


@pytest.fixture(scope="module")
def minilm(minilm_dir):
  config = hf_weights.bert_config_from_hf(json.loads((minilm_dir / "config.json").read_text()))
  params = hf_weights.load_bert_backbone(minilm_dir, config)
  reference = transformers.BertModel.from_pretrained(minilm_dir, add_pooling_layer=False).eval()
  return bert.BertEncoder(config), params, vocabularies.bert_vocabulary(minilm_dir), reference


@pytest.fixture(scope="module")
def tiny_beir(scifact_dir):
  """3 SciFact test queries over their judged docs and a few others."""
  full = beir_eval.load_beir(str(scifact_dir), "test")
  query_ids = full.query_ids[:3]
  judged = {d for q in query_ids for d in full.qrels[q]}
  doc_ids = [d for d in full.doc_ids if d in judged]
  doc_ids += [d for d in full.doc_ids if d not in judged][:NUM_DOCS - len(doc_ids)]
  docs = dict(zip(full.doc_ids, full.docs))
  queries = dict(zip(full.query_ids, full.queries))
  qrels = {q: full.qrels[q] for q in query_ids}
  return beir_eval.BeirData(doc_ids=tuple(doc_ids), docs=tuple(docs[d] for d in doc_ids),
                            query_ids=query_ids, queries=tuple(queries[q] for q in query_ids),
                            qrels=qrels, num_queries_without_qrels=0, corpus_path=full.corpus_path)


def _hidden_states(reference, vocabulary, texts, max_length):
  """transformers' last hidden states and mask of xtr's token ids."""
  ids = tokenization.encode_batch(tokenization.of(vocabulary), texts, max_length)
  with torch.no_grad():
    hidden = reference(input_ids=torch.tensor(ids, dtype=torch.long),
                       attention_mask=torch.tensor(ids != 0)).last_hidden_state.numpy()
  return hidden, ids != 0


def test_encode_untuned_equals_sentence_transformers_pooling(minilm, tiny_beir):
  backbone, params, vocabulary, reference = minilm
  texts = list(tiny_beir.docs[:5])
  hidden, mask = _hidden_states(reference, vocabulary, texts, 64)
  mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
  pooled, tokens = baselines.encode_untuned(backbone, params, vocabulary, texts, max_length=64,
                                            batch_size=4)
  np.testing.assert_allclose(pooled, mean / np.linalg.norm(mean, axis=-1, keepdims=True), atol=1e-4)
  for got, h, m in zip(tokens, hidden, mask):
    np.testing.assert_allclose(got, h[m] / np.linalg.norm(h[m], axis=-1, keepdims=True), atol=1e-4)


@pytest.fixture(scope="module")
def untuned(minilm, tiny_beir):
  backbone, params, vocabulary, _ = minilm
  return baselines.untuned_search(backbone, params, vocabulary, tiny_beir, top_k=5)


def test_untuned_maxsim_equals_naive_maxsim(minilm, tiny_beir, untuned):
  _, _, vocabulary, reference = minilm
  d, d_mask = _hidden_states(reference, vocabulary, list(tiny_beir.docs), 256)
  q, q_mask = _hidden_states(reference, vocabulary, list(tiny_beir.queries), 32)
  d = d / np.linalg.norm(d, axis=-1, keepdims=True)
  q = q / np.linalg.norm(q, axis=-1, keepdims=True)
  for i, ranking in enumerate(untuned["maxsim"].rankings):
    scores = [
        np.mean([
            max(q[i, a] @ d[j, b]
                for b in np.flatnonzero(d_mask[j]))
            for a in np.flatnonzero(q_mask[i])
        ])
        for j in range(NUM_DOCS)
    ]
    order = np.argsort(scores)[::-1][:5]
    assert [doc for doc, _ in ranking] == [tiny_beir.doc_ids[j] for j in order]
    np.testing.assert_allclose([s for _, s in ranking], np.asarray(scores)[order], atol=1e-4)


def test_untuned_single_vector_ranks_by_pooled_dot_product(minilm, tiny_beir, untuned):
  _, _, vocabulary, reference = minilm

  def pooled(texts, max_length):
    hidden, mask = _hidden_states(reference, vocabulary, list(texts), max_length)
    mean = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return mean / np.linalg.norm(mean, axis=-1, keepdims=True)

  docs, queries = pooled(tiny_beir.docs, 256), pooled(tiny_beir.queries, 32)
  for query, ranking in zip(queries, untuned["single_vector"].rankings):
    scores = docs @ query
    assert [d for d, _ in ranking] == [tiny_beir.doc_ids[j] for j in np.argsort(-scores)[:5]]
    np.testing.assert_allclose([s for _, s in ranking], np.sort(scores)[::-1][:5], atol=1e-4)
  assert untuned["single_vector"].latency_ms.shape == (3,)


def test_carve_dev_split_partitions_the_queries(scifact_dir, tmp_path):
  beir_files.carve_dev_split(str(scifact_dir), str(tmp_path / "a"), fraction=0.2, seed=0)
  beir_files.carve_dev_split(str(scifact_dir), str(tmp_path / "b"), fraction=0.2, seed=0)
  original = (scifact_dir / "qrels" / "train.tsv").read_text().splitlines()
  train = (tmp_path / "a" / "qrels" / "train.tsv").read_text().splitlines()
  dev = (tmp_path / "a" / "qrels" / "dev.tsv").read_text().splitlines()
  assert train[0] == dev[0] == original[0]
  assert sorted(train[1:] + dev[1:]) == sorted(original[1:])
  train_queries = {row.split("\t")[0] for row in train[1:]}
  dev_queries = {row.split("\t")[0] for row in dev[1:]}
  assert not train_queries & dev_queries
  assert len(dev_queries) == round(0.2 * len(train_queries | dev_queries))
  assert dev == (tmp_path / "b" / "qrels" / "dev.tsv").read_text().splitlines()
  assert len(beir_eval.load_beir(str(tmp_path / "a"), "dev").query_ids) == len(dev_queries)
