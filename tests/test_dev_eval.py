"""xtr/evaluation/dev_eval.py: nDCG@10 of a dev split over a bounded candidate set, against MaxSim
computed by loops over the same candidates with the search encoder (`encoding.Encoder`) and
pytrec_eval."""
import flax.linen as nn
import jax
import numpy as np
import pytest

from tests import retrieval_setup
from xtr.evaluation import beir_eval
from xtr.evaluation import dev_eval
from xtr.models import encoding

SAMPLED = 30


@pytest.fixture(scope="module")
def tiny_model(t5_spm_path):
  model, vocabulary, _ = retrieval_setup.parse_model_file("gin/models/t5_1_1_tiny.gin",
                                                          f"T5_SPM_PATH = '{t5_spm_path}'")
  params = nn.meta.unbox(model.init(jax.random.key(0), np.ones((1, 8), np.int32))["params"])
  return model, vocabulary, params


def _loop_run(encoder, data, doc_ids) -> dict[str, dict[str, float]]:
  """The top 10 of `doc_ids` for each query by f_ColBERT, one (query, document) pair at a time."""
  texts = dict(zip(data.doc_ids, data.docs))
  q, q_mask, _ = encoder.encode_queries(list(data.queries))
  d, d_mask, _ = encoder.encode([texts[doc] for doc in doc_ids], 64)
  run = {}
  for query_id, vectors, mask in zip(data.query_ids, q, q_mask):
    scores = {
        doc: float(np.mean([max(v @ t for t in doc_vectors[doc_mask]) for v in vectors[mask]]))
        for doc, doc_vectors, doc_mask in zip(doc_ids, d, d_mask)
    }
    run[query_id] = dict(sorted(scores.items(), key=lambda item: -item[1])[:10])
  return run


def test_dev_ndcg_equals_a_loop_over_the_candidates(scifact_slice, tiny_model):
  model, vocabulary, params = tiny_model
  evaluator = dev_eval.DevEvaluator(str(scifact_slice), split="test", every_steps=5,
                                    sampled_docs=SAMPLED, doc_max_length=64, batch_size=8)
  assert evaluator(3, model, params, vocabulary) == {}
  got = evaluator(5, model, params, vocabulary)["dev_ndcg@10"]
  data = beir_eval.load_beir(str(scifact_slice), "test")
  judged = {doc for docs in data.qrels.values() for doc in docs}
  assert judged <= set(evaluator.doc_ids) and len(evaluator.doc_ids) == len(judged) + SAMPLED
  encoder = encoding.Encoder(params, model=model, vocabulary=vocabulary, doc_max_length=64)
  expected = beir_eval.evaluate(data.qrels, _loop_run(encoder, data, evaluator.doc_ids),
                                ndcg_at=(10,), recall_at=(), mrr_at=())["ndcg@10"]
  assert 0 < got == pytest.approx(expected, abs=1e-6)


def test_the_candidate_sample_is_fixed_by_the_seed(scifact_slice):
  make = lambda seed: dev_eval.DevEvaluator(str(scifact_slice), split="test", sampled_docs=SAMPLED,
                                            seed=seed).doc_ids
  assert make(0) == make(0) != make(1)


def test_bad_settings_are_refused(scifact_slice):
  with pytest.raises(ValueError, match="every_steps=0"):
    dev_eval.DevEvaluator(str(scifact_slice), split="test", every_steps=0)
