"""xtr/evaluation/dev_eval.py: nDCG@10 of a dev split over a bounded candidate set, against MaxSim
(or ALIGNER's alignment) computed by loops over the same candidates with the search encoder
(`encoding.Encoder`) and pytrec_eval."""
import flax.linen as nn
import jax
import numpy as np
import pytest

from tests import retrieval_setup
from xtr.evaluation import beir_eval
from xtr.evaluation import dev_eval
from xtr.models import encoding
from xtr.scoring import alignment

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


def test_an_aligner_model_is_scored_by_its_alignment_and_saliences(scifact_slice, t5_spm_path):
  """Top-1 sparse alignment with the model's saliences (relu gate) against a loop over the
  candidates: sim = Σ_i u_i^q u_j*^d s_ij* / Σ_i u_i^q u_j*^d, j* = argmax_j s_ij."""
  model, vocabulary, _ = retrieval_setup.parse_model_file(
      "gin/models/t5_1_1_tiny.gin", f"T5_SPM_PATH = '{t5_spm_path}'",
      "xtr_encoder.XTREncoder.salience = @salience.Salience()",
      "salience.Salience.variant = 'relu'")
  params = nn.meta.unbox(model.init(jax.random.key(1), np.ones((1, 8), np.int32))["params"])
  evaluator = dev_eval.DevEvaluator(str(scifact_slice), split="test", every_steps=1,
                                    sampled_docs=SAMPLED, doc_max_length=64, batch_size=8,
                                    alignment=alignment.Alignment())
  got = evaluator(1, model, params, vocabulary)["dev_ndcg@10"]
  data = beir_eval.load_beir(str(scifact_slice), "test")
  texts = dict(zip(data.doc_ids, data.docs))
  encoder = encoding.Encoder(params, model=model, vocabulary=vocabulary, doc_max_length=64)
  q, q_mask, u_q = encoder.encode_queries(list(data.queries))
  d, d_mask, u_d = encoder.encode([texts[doc] for doc in evaluator.doc_ids], 64)
  assert u_q is not None and np.ptp(u_d[d_mask]) > 0.1  # Saliences that change the ranking.
  run, unweighted = {}, {}
  for query_id, vectors, mask, u in zip(data.query_ids, q, q_mask, u_q):
    scores, plain = {}, {}
    for doc, doc_vectors, doc_mask, v in zip(evaluator.doc_ids, d, d_mask, u_d):
      num = den = 0.0
      maxima = []
      for i in np.flatnonzero(mask):
        sims = [float(vectors[i] @ doc_vectors[j]) for j in np.flatnonzero(doc_mask)]
        best = int(np.flatnonzero(doc_mask)[int(np.argmax(sims))])
        num += u[i] * v[best] * max(sims)
        den += u[i] * v[best]
        maxima.append(max(sims))
      scores[doc] = num / max(den, alignment.Z_FLOOR)
      plain[doc] = float(np.mean(maxima))
    run[query_id] = dict(sorted(scores.items(), key=lambda item: -item[1])[:10])
    unweighted[query_id] = list(dict(sorted(plain.items(), key=lambda item: -item[1])[:10]))
  assert any(list(run[q]) != unweighted[q] for q in run)  # The saliences change the rankings.
  expected = beir_eval.evaluate(data.qrels, run, ndcg_at=(10,), recall_at=(), mrr_at=())["ndcg@10"]
  assert 0 < got == pytest.approx(expected, abs=1e-6)


def test_the_candidate_sample_is_fixed_by_the_seed(scifact_slice):
  make = lambda seed: dev_eval.DevEvaluator(str(scifact_slice), split="test", sampled_docs=SAMPLED,
                                            seed=seed).doc_ids
  assert make(0) == make(0) != make(1)


def test_bad_settings_are_refused(scifact_slice):
  with pytest.raises(ValueError, match="every_steps=0"):
    dev_eval.DevEvaluator(str(scifact_slice), split="test", every_steps=0)
