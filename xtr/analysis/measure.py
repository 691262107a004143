"""Every statistic of `xtr-analyze-alignment` over one BEIR split, for one model at a time.

The rerank setting (Wu et al., 2024, §6.3): each query's candidates are its BM25 top
`bm25_depth` documents plus its gold documents (relevance > 0); each model scores every
candidate exactly in each direction (`directions`). Over the same query–candidate pairs it
measures term matching (`term_matching`) and the spectra of the alignments (`low_rank`).

A model is its token vectors and ids (`Texts`) of the queries and of the candidates: a trained
checkpoint's, or an untuned backbone's raw hidden states (`untuned_encoder`);
its q→d alignment is the gin-configured `alignment.Alignment` (top-1, ColBERT's sum of max,
unless a run file such as ALIGNER's binds another), weighted by its saliences if it has them.
"""
import dataclasses
import functools
import math
from typing import Any
from typing import Sequence

import gin
import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from xtr import typecheck
from xtr.analysis import directions
from xtr.analysis import low_rank
from xtr.analysis import term_matching
from xtr.evaluation import baselines
from xtr.evaluation import beir_eval
from xtr.models import encoding
from xtr.scoring import alignment
from xtr.scoring import functions
from xtr.text import tokenization

RERANK_METRICS = {"ndcg_at": (10,), "recall_at": (1, 10), "mrr_at": (10,)}
# The alignments whose exact-match rate is also measured per document token (the unit of the
# GR paper's Figure 3).
DOCUMENT_TOKEN_KINDS = ("d→q hard", "d→q soft")
# What a CLI binds after the user's gin files: `Settings.model` is the run file's model.
SETTINGS_BINDINGS = ("xtr.analysis.measure.Settings.model = %MODEL",)


@gin.configurable
@dataclasses.dataclass(frozen=True)
class Settings:
  """What the analysis measures.

  Attributes:
    bm25_depth: BM25 candidates per query (gold documents are added).
    temperature: τ of the softmax alignments (d→q, and the soft q→d of term matching).
    num_idf_bins: equal-count IDF bins of the query tokens.
    pretrained_backbone: a loader of the untuned backbone's weights (e.g.
      `@hf_weights.load_bert_backbone`, as gin/analysis/untuned_minilm.gin binds): the raw
      token vectors of `model`'s backbone with them are analyzed as a model too.
    model: the run's `xtr_encoder.XTREncoder` (the CLI binds it to %MODEL).
  """
  bm25_depth: int = 100
  temperature: float = 0.05
  num_idf_bins: int = 10
  pretrained_backbone: Any = None
  model: Any = None

  def __post_init__(self):
    """Refuses a binding of the wrong type or out of range, naming it, before any work."""
    typecheck.arguments(
        Settings.__init__, {
            "bm25_depth": self.bm25_depth,
            "temperature": self.temperature,
            "num_idf_bins": self.num_idf_bins
        })
    for name, value in (("bm25_depth", self.bm25_depth), ("num_idf_bins", self.num_idf_bins),
                        ("temperature", self.temperature)):
      if not (math.isfinite(value) and value > 0):
        raise ValueError(f"measure.Settings.{name} = {value!r}: expected a positive "
                         f"{'number' if name == 'temperature' else 'integer'}; check its gin "
                         "binding.")


@dataclasses.dataclass(frozen=True)
class Texts:
  """Texts under one model: per text, its valid token vectors [len_i, D], ids [len_i] and
  saliences [len_i] (None for a model without salience heads)."""
  vectors: list[np.ndarray]
  ids: list[np.ndarray]
  salience: list[np.ndarray] | None = None


@dataclasses.dataclass(frozen=True)
class Model:
  """One analyzed model: its queries' and candidates' `Texts` (candidates in the order of
  `candidate_docs`), the tokenizer, and its q→d alignment."""
  label: str
  tokenizer: Any
  queries: Texts
  docs: Texts
  strategy: alignment.Alignment


def candidates(data: beir_eval.BeirData, bm25_depth: int) -> list[list[int]]:
  """Per query, the indices (into data.doc_ids) of its BM25 top-`bm25_depth` documents, then of
  its gold documents that BM25 missed."""
  row = {doc_id: i for i, doc_id in enumerate(data.doc_ids)}
  rankings = baselines.bm25_search(data, bm25_depth).rankings
  result = []
  for query_id, ranking in zip(data.query_ids, rankings):
    docs = [row[doc_id] for doc_id, _ in ranking]
    seen = set(docs)
    gold = [row[d] for d, rel in data.qrels[query_id].items() if rel > 0]
    result.append(docs + [d for d in gold if d not in seen])
  return result


def token_ids(tokenizer: Any, texts: Sequence[str], max_length: int) -> list[np.ndarray]:
  """Each text's token ids as the encoders see them, padding dropped."""
  return [row[row != 0] for row in tokenization.encode_batch(tokenizer, texts, max_length)]


def encode(encoder: encoding.Encoder, texts: Sequence[str], role: str) -> Texts:
  """An `encoding.Encoder`'s `Texts` of `texts` ("query" or "document")."""
  length = encoder.query_max_length if role == "query" else encoder.doc_max_length
  vectors, mask, salience = encoder.encode(texts, length, role, progress=f"encode {role}s")
  ids = token_ids(encoder.tokenizer, texts, length)
  if any(len(i) != m.sum() for i, m in zip(ids, mask)):
    raise ValueError("The encoder's token mask differs from its tokenizer's ids.")
  return Texts([v[m] for v, m in zip(vectors, mask)], ids,
               None if salience is None else [u[m] for u, m in zip(salience, mask)])


def untuned_encoder(settings: Settings) -> encoding.Encoder:
  """An `encoding.Encoder` of the untuned backbone's raw token vectors: `settings.model`
  without projection or salience heads, with `settings.pretrained_backbone()`'s weights."""
  model = settings.model.clone(embed_dim=None, salience=None)
  return encoding.Encoder({"backbone": settings.pretrained_backbone()}, model=model)


def _padded(rows: Sequence[np.ndarray], length: int) -> np.ndarray:
  """[len(rows), length, ...] rows padded with zeros."""
  out = np.zeros((len(rows), length, *rows[0].shape[1:]), rows[0].dtype)
  for i, r in enumerate(rows):
    out[i, :len(r)] = r
  return out


def _candidates(per_doc: Sequence[np.ndarray], rows: Sequence[int], width: int,
                length: int) -> np.ndarray:
  """[width, length, ...]: the documents `rows` of `per_doc`, padded with empty documents."""
  empty = per_doc[rows[0]][:0]
  return _padded([per_doc[r] for r in rows] + [empty] * (width - len(rows)), length)


@functools.partial(jax.jit, static_argnames=("strategy", "temperature"))
def _pair_statistics(q, q_ids, u_q, d, d_ids, u_d, strategy, temperature):
  """One query against its C (padded) candidates.

  Args:
    q: [1, n, D], q_ids: [1, n] (0: padding), u_q: [1, n] or None; d: [C, m, D], d_ids: [C, m],
      u_d: [C, m] or None.

  Returns:
    scores {direction: [C]}; rates {(subset, kind): ([n] rate sums, [n] counts)} of the
    subsets "candidates" (all) and "containing" (`term_matching.contains`); document_rates
    {d→q kind: ([C, m] rates, [C, m] defined, [C, m] in the query)}
    (`term_matching.document_token_rates`); spectra {direction: ([C, r] normalized σ, [C]
    nonzero)}.
  """
  q_mask, d_mask = q_ids != 0, d_ids != 0
  s = functions.token_scores(q, d)  # [1, n, C, m]
  a = {
      "q→d": strategy.matrix(s, q_mask, d_mask, u_q, u_d),
      "d→q": directions.document_to_query(s, q_mask, d_mask, temperature)
  }
  scores = {
      "q→d": alignment.normalized_sum(s, a["q→d"], q_mask, strategy.normalize)[0],
      "d→q": directions.document_to_query_scores(s, q_mask, d_mask, temperature, False)[0],
      "d→q per token": directions.document_to_query_scores(s, q_mask, d_mask, temperature, True)[0]
  }
  subsets = {"candidates": None, "containing": term_matching.contains(q_ids, d_ids)}
  aligned = directions.term_alignments(s, q_mask, d_mask, temperature)
  rates = {
      (subset, kind): tuple(x[0] for x in term_matching.exact_match_rates(m, q_ids, d_ids, over))
      for kind, m in aligned.items() for subset, over in subsets.items()
  }
  document_rates = {
      kind: tuple(x[0] for x in term_matching.document_token_rates(aligned[kind], q_ids, d_ids))
      for kind in DOCUMENT_TOKEN_KINDS
  }
  spectra = {
      name: low_rank.normalized_spectrum(jnp.transpose(m[0], (1, 0, 2))) for name, m in a.items()
  }
  return scores, rates, document_rates, spectra


def analyze(model: Model, data: beir_eval.BeirData, candidate_docs: Sequence[int],
            candidates_of: Sequence[Sequence[int]], corpus_ids: list[np.ndarray],
            settings: Settings) -> dict[str, Any]:
  """Rerank metrics, term matching by IDF bin and alignment spectra of one model.

  Args:
    candidate_docs: the documents (indices into data.doc_ids) of `model.docs`, in its order.
    candidates_of: per query, its candidate documents (indices into data.doc_ids).
    corpus_ids: every corpus document's token ids under the model's tokenizer (for IDF).
  """
  row = {doc: i for i, doc in enumerate(candidate_docs)}
  n = max(map(len, model.queries.ids))
  m = max(map(len, model.docs.ids))
  width = max(map(len, candidates_of))
  special = np.asarray(model.tokenizer.prefix + model.tokenizer.suffix)
  idf = term_matching.idf(corpus_ids, model.tokenizer.size)
  runs = {}
  token_rates, query_token_ids = {}, []
  document_token_rates, document_token_ids = {}, []
  spectra = {}
  for i, query_id in enumerate(
      tqdm.tqdm(data.query_ids, desc=f"analyze {model.label}", unit="query")):
    rows = [row[doc] for doc in candidates_of[i]]
    u_q = u_d = None
    if model.queries.salience is not None:
      u_q = _padded([model.queries.salience[i]], n)
      u_d = _candidates(model.docs.salience, rows, width, m)
    d_ids = _candidates(model.docs.ids, rows, width, m)
    scores, rates, document_rates, spectrum = jax.device_get(
        _pair_statistics(_padded([model.queries.vectors[i]], n), _padded([model.queries.ids[i]],
                                                                         n), u_q,
                         _candidates(model.docs.vectors, rows, width, m), d_ids, u_d,
                         model.strategy, settings.temperature))
    for direction, values in scores.items():
      runs.setdefault(direction, {})[query_id] = {
          data.doc_ids[doc]: float(v) for doc, v in zip(candidates_of[i], values)
      }
    length = len(model.queries.ids[i])
    for key, (total, count) in rates.items():
      token_rates.setdefault(key, []).append(
          np.where(count > 0, total / np.maximum(count, 1), np.nan)[:length])
    query_token_ids.append(model.queries.ids[i])
    valid = d_ids[:len(rows)] != 0
    document_token_ids.append(d_ids[:len(rows)][valid])
    for kind, (rate, defined, in_query) in document_rates.items():
      rate, defined, in_query = (x[:len(rows)][valid] for x in (rate, defined, in_query))
      document_token_rates.setdefault(("candidates", kind),
                                      []).append(np.where(defined, rate, np.nan))
      document_token_rates.setdefault(("containing", kind),
                                      []).append(np.where(defined & in_query, rate, np.nan))
    for name, (sigma, nonzero) in spectrum.items():
      keep = nonzero[:len(rows)]
      spectra.setdefault(name, []).append(sigma[:len(rows)][keep])
  return {
      "alignment":
          str(model.strategy),
      "rerank": {
          direction: _without_per_query(beir_eval.evaluate(data.qrels, run, **RERANK_METRICS))
          for direction, run in runs.items()
      },
      "term_matching":
          _term_matching(query_token_ids, token_rates, directions.KINDS, idf, special, settings),
      "document_token_term_matching":
          _term_matching(document_token_ids, document_token_rates, DOCUMENT_TOKEN_KINDS, idf,
                         special, settings),
      "low_rank": {
          name: _spectrum_summary(np.concatenate(v)) for name, v in spectra.items()
      }
  }


def _without_per_query(metrics: dict[str, Any]) -> dict[str, Any]:
  return {k: v for k, v in metrics.items() if k != "per_query"}


def _term_matching(ids: list[np.ndarray], rates: dict[tuple[str, str],
                                                      list[np.ndarray]], kinds: Sequence[str],
                   idf: np.ndarray, special: np.ndarray, settings: Settings) -> dict[str, Any]:
  """{subset: `_by_idf`} of the tokens whose ids and rates were gathered per query–candidate
  pair (ids: [len] arrays; rates {(subset, kind): [len] arrays})."""
  return {
      subset:
          _by_idf(np.concatenate(ids), {kind: np.concatenate(rates[subset, kind])
                                        for kind in kinds}, idf, special, settings.num_idf_bins)
      for subset in ("candidates", "containing")
  }


def _by_idf(ids: np.ndarray, rates: dict[str, np.ndarray], idf: np.ndarray, special: np.ndarray,
            num_bins: int) -> dict[str, Any]:
  """Mean exact-match rates of the tokens [T] (query tokens, or document tokens for the d→q
  unit of Figure 3: ids [T], rates {kind: [T]}, NaN where undefined) in each equal-count IDF bin
  of the non-special tokens, over all of them, and over the special ones."""
  is_special = np.isin(ids, special)
  plain = np.flatnonzero(~is_special)
  token_idf = idf[ids[plain]]
  bins = term_matching.equal_count_bins(token_idf, num_bins)

  def summary(members: np.ndarray) -> dict[str, float | None]:
    """num_tokens, and each kind's mean rate over the members where it is defined."""
    means = {kind: r[members][~np.isnan(r[members])] for kind, r in rates.items()}
    return {
        "num_tokens": int(len(members))
    } | {
        kind: float(v.mean()) if len(v) else None for kind, v in means.items()
    }

  return {
      "bins": [{
          "idf_min": float(token_idf[bins == b].min()),
          "idf_max": float(token_idf[bins == b].max()),
          "idf_mean": float(token_idf[bins == b].mean())
      } | summary(plain[bins == b]) for b in range(num_bins)],
      "all": summary(plain),
      "special": summary(np.flatnonzero(is_special))
  }


def _spectrum_summary(sigma: np.ndarray) -> dict[str, Any]:
  """Mean normalized spectrum and rank-1 error over the pairs' spectra [P, r]."""
  return {
      "num_pairs": int(len(sigma)),
      "spectrum": sigma.mean(axis=0).tolist(),
      "rank1_error": float(np.mean(low_rank.rank1_error(sigma)))
  }


def case_study(encoder: encoding.Encoder, strategy: alignment.Alignment, query: str, doc: str,
               temperature: float) -> tuple[dict[str, np.ndarray], list[str], list[str]]:
  """S and both directions' alignments of one query and one document under one model.

  Returns:
    ({"S": [n, m], "A q→d": [n, m], "A d→q": [n, m]} over the valid tokens, the n query token
    strings, the m document token strings).
  """
  q, d = encode(encoder, [query], "query"), encode(encoder, [doc], "document")
  s = jnp.asarray(q.vectors[0] @ d.vectors[0].T)[None, :, None, :]  # [1, n, 1, m]
  q_mask, d_mask = jnp.ones(s.shape[:2], bool), jnp.ones((1, s.shape[3]), bool)
  u_q, u_d = (None, None) if q.salience is None else (q.salience[0][None], d.salience[0][None])
  a = {
      "S": s,
      "A q→d": strategy.matrix(s, q_mask, d_mask, u_q, u_d),
      "A d→q": directions.document_to_query(s, q_mask, d_mask, temperature)
  }
  return ({
      name: np.asarray(m[0, :, 0, :]) for name, m in a.items()
  }, encoder.tokenizer.pieces(q.ids[0]), encoder.tokenizer.pieces(d.ids[0]))
