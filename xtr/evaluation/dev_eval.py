"""Evaluation during training: nDCG@10 of a dev split by exact MaxSim (or, for an ALIGNER model,
its salience-weighted sparse alignment) over a bounded candidate set, logged beside the loss.

  trainer.train.evaluator = @dev_eval.DevEvaluator()
  dev_eval.DevEvaluator.data_dir = 'data/scifact'   # a BEIR directory with qrels/dev.tsv
  dev_eval.DevEvaluator.every_steps = 500
  dev_eval.DevEvaluator.alignment = @alignment.Alignment()   # ALIGNER: score as it trains

The candidates are the split's judged documents plus `sampled_docs` others drawn once (seeded)
from the corpus: a fixed, bounded set, so that an evaluation costs the same at every step and
its numbers are comparable along the run (not with full-corpus retrieval, whose candidates are
the whole corpus). The trainer calls it without importing it (an evaluation stage after the
loss).
"""
from typing import Any

import flax.linen as nn
import gin
import jax
from jax.experimental import multihost_utils
import numpy as np

from xtr.evaluation import beir_eval
from xtr.scoring import alignment as alignment_lib
from xtr.scoring import search_scores
from xtr.text import tokenization


@gin.configurable
class DevEvaluator:
  """`evaluator(step, model, params, vocabulary)` -> {"dev_ndcg@10": value} every
  `every_steps` steps, else {}."""

  def __init__(self, data_dir: str = gin.REQUIRED, split: str = "dev", every_steps: int = 1000,
               sampled_docs: int = 1000, query_max_length: int = 32, doc_max_length: int = 256,
               batch_size: int = 32, seed: int = 0,
               alignment: alignment_lib.Alignment | None = None):
    if every_steps < 1 or sampled_docs < 0 or batch_size < 1:
      raise ValueError(f"dev_eval.DevEvaluator: every_steps={every_steps} and batch_size="
                       f"{batch_size} must be positive, sampled_docs={sampled_docs} not negative.")
    data = beir_eval.load_beir(data_dir, split)
    judged = {doc for docs in data.qrels.values() for doc in docs}
    others = [i for i, doc in enumerate(data.doc_ids) if doc not in judged]
    sample = np.random.default_rng(seed).choice(len(others), min(sampled_docs, len(others)),
                                                replace=False)
    candidates = sorted([i for i, doc in enumerate(data.doc_ids) if doc in judged] +
                        [others[i] for i in sample])
    self.doc_ids = [data.doc_ids[i] for i in candidates]
    self.docs = [data.docs[i] for i in candidates]
    self.query_ids, self.queries, self.qrels = data.query_ids, data.queries, data.qrels
    self.every_steps = every_steps
    self.lengths = {"query": query_max_length, "document": doc_max_length}
    self.batch_size = batch_size
    self.alignment = alignment

  def __call__(self, step: int, model: nn.Module, params: Any, vocabulary: Any) -> dict[str, float]:
    if step % self.every_steps:
      return {}
    tokenizer = tokenization.of(vocabulary)
    apply = jax.jit(lambda p, ids, role: model.apply({"params": p}, ids, role=role),
                    static_argnums=2)
    q, q_mask, u_q = self._encode(apply, params, tokenizer, self.queries, "query")
    d, d_mask, u_d = self._encode(apply, params, tokenizer, self.docs, "document")
    k = min(10, len(self.docs))
    if self.alignment is None:
      top, scores = search_scores.exact_maxsim(q, q_mask, d, d_mask, k)
    else:
      top, scores = self._aligner_top(q, q_mask, u_q, d, d_mask, u_d, k)
    run = {
        query_id: {
            self.doc_ids[j]: float(s) for j, s in zip(docs, doc_scores) if j >= 0
        } for query_id, docs, doc_scores in zip(self.query_ids, top, scores)
    }
    metrics = beir_eval.evaluate(self.qrels, run, ndcg_at=(10,), recall_at=(), mrr_at=())
    return {"dev_ndcg@10": metrics["ndcg@10"]}

  def _aligner_top(self, q, q_mask, u_q, d, d_mask, u_d, k) -> tuple[np.ndarray, np.ndarray]:
    """The k best candidates [Q, k] and their scores [Q, k] by `self.alignment` with the model's
    saliences (None: 1), scoring batch_size candidates at a time (the last block padded)."""
    rows = -(-len(d) // self.batch_size) * self.batch_size
    pad = lambda x: None if x is None else np.pad(x, [(0, rows - len(x))] + [(0, 0)] * (x.ndim - 1))
    d, d_mask, u_d = pad(d), pad(d_mask), pad(u_d)
    blocks = [
        search_scores.aligner_scores(q, q_mask, u_q, d[s:s + self.batch_size],
                                     d_mask[s:s + self.batch_size],
                                     None if u_d is None else u_d[s:s + self.batch_size],
                                     self.alignment) for s in range(0, rows, self.batch_size)
    ]
    scores = np.concatenate([np.asarray(b) for b in blocks], axis=1)[:, :len(self.docs)]
    top = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # Ties to the lower index.
    return top, np.take_along_axis(scores, top, axis=1)

  def _encode(self, apply, params, tokenizer, texts, role):
    """texts -> (vectors [N, L, D] float32, mask [N, L] bool, saliences [N, L] float32 or None),
    in batches of batch_size rows (the last one padded: one compilation per role). Under the
    trainer's mesh and axis rules the outputs are sharded over its data axis, across hosts in a
    multi-host run: each is gathered whole on every host."""
    ids = tokenization.encode_batch(tokenizer, texts, self.lengths[role])
    rows = -(-len(ids) // self.batch_size) * self.batch_size
    ids = np.pad(ids, [(0, rows - len(ids)), (0, 0)])
    outputs = [
        multihost_utils.process_allgather(apply(params, ids[start:start + self.batch_size], role),
                                          tiled=True) for start in range(0, rows, self.batch_size)
    ]
    vectors, mask, saliences = (
        None if parts[0] is None else np.concatenate(parts)[:len(texts)] for parts in zip(*outputs))
    return vectors.astype(np.float32), mask, saliences
