"""Ranking a corpus for queries: token retrieval from the index, then scoring.

  scoring="xtr":     token retrieval -> f_XTR' from the retrieved scores alone (eq. 4, with
                     imputation); no gathering stage.
  scoring="colbert": ColBERT's three stages: token retrieval -> gather all token vectors of every
                     candidate from the index -> exact f_ColBERT.
  scoring="aligner": ALIGNER's two stages: token retrieval -> gather the candidates' token vectors
                     and saliences -> sparse alignment (`alignment`) weighted by the saliences.
  scoring="exhaustive": f_ColBERT (MaxSim) of every document of the corpus, no token retrieval:
                     an upper bound for the others, for small corpora.

The scorings and what each supports are registered in `xtr.scoring.registry`.

With a model that has salience heads, `prune_query` = β_q retrieves tokens for the ⌈β_q·n⌉ most
salient query tokens only (ALIGNER §3.2); refinement still scores with every query token.
"""
from concurrent import futures
import dataclasses
import math
import numbers
import operator
import os
import sys
import time
from typing import Sequence

import numpy as np
import tqdm

from xtr.index import device
from xtr.index import reader
from xtr.models import encoding
from xtr.models import salience
from xtr.scoring import alignment as alignment_lib
from xtr.scoring import registry
from xtr.scoring import search_scores as scoring_lib

QUERIES_PER_BATCH = 64  # Of f_XTR' search with threads > 1 (`rank_batch`).
MAX_COUNT = alignment_lib.MAX_K  # Of top_k, k_prime, leaves_to_search: what ScaNN and JAX index.
# Of a constant imputation: similarities of the model's L2-normalized token vectors lie in [-1, 1],
# so a constant beyond them only orders documents by how many query tokens missed them; at 1e4 a
# float32 score still resolves ~1e-3 (what float16 token vectors do), and beyond it, loses them.
MAX_IMPUTE = 1e4


@dataclasses.dataclass(frozen=True)
class SearchConfig:
  """How queries are answered.

  Attributes:
    top_k: documents returned per query (search returns at most the index's documents).
    k_prime: document tokens retrieved per query token (k'; search retrieves at most the tokens
      of the index's token retrieval).
    scoring: a search scoring of `registry.SCORINGS` (see the module docstring).
    impute: f_XTR''s score for query tokens that retrieved nothing of a document:
      "top_k_prime" (the paper's m_i), "zero", a number in [-MAX_IMPUTE, MAX_IMPUTE], or "none".
    searcher: "scann" (the index's ScaNN searcher), "bruteforce" (exact token retrieval) or
      "device" (exact or binned retrieval from vectors resident on the accelerator,
      `xtr.index.device`; with scoring "xtr", f_XTR' runs there too).
    alignment: the sparse alignment of "aligner" refinement (or its text, e.g. "top_k:1").
    prune_query: β_q in (0, 1]: only the most salient ⌈β_q·n⌉ query tokens retrieve tokens
      (None: all of them); needs a model with salience heads.
    leaves_to_search: ScaNN partitions searched per query token (None: the index's, as built).
    threads: CPU threads of token retrieval and scoring. 1 answers one query at a time (the
      latency of an interactive query); more answers f_XTR' queries in batches (`rank_batch`:
      throughput, each query's time being its batch's divided by the batch's size); at most
      the CPU cores.
  """
  top_k: int = 100
  k_prime: int = 1000
  scoring: str = "xtr"
  impute: str | float = "top_k_prime"
  searcher: str = "scann"
  alignment: alignment_lib.Alignment = alignment_lib.Alignment()
  prune_query: float | None = None
  leaves_to_search: int | None = None
  threads: int = 1

  def __post_init__(self):
    """Refuses a bad setting by name before any query is encoded, and stores numpy numbers and
    an alignment's text as the Python int, float and `Alignment` that search uses."""
    registry.get(self.scoring, "search")
    counts = {"top_k": MAX_COUNT, "k_prime": MAX_COUNT, "threads": os.cpu_count() or 1}
    if self.leaves_to_search is not None:
      counts["leaves_to_search"] = MAX_COUNT
    for name, most in counts.items():
      object.__setattr__(self, name, _count(name, getattr(self, name), most))
    object.__setattr__(self, "impute", _impute(self.impute))
    object.__setattr__(self, "alignment", _alignment(self.alignment))
    if self.prune_query is not None:
      if not _real(self.prune_query) or not 0 < self.prune_query <= 1:
        raise ValueError(f"prune_query must be in (0, 1], got {self.prune_query!r}")
      object.__setattr__(self, "prune_query", float(self.prune_query))

  def within(self, token_index: reader.TokenIndex) -> "SearchConfig":
    """This config with top_k at most the index's documents and k_prime at most the tokens its
    token retrieval holds: more would return nothing more, only allocate more."""
    return dataclasses.replace(
        self, top_k=min(self.top_k, token_index.num_docs - len(token_index.deleted_docs)),
        k_prime=min(self.k_prime, token_index.num_indexed_tokens))


def _count(name: str, value, most: int) -> int:
  """`value` as an int in [1, most] (numpy integers accepted: a library's counts often are),
  else ValueError naming `name`: a float, bool or out-of-range count would fail deep in the
  search (numpy's padding, ScaNN's int32), or hang the process (threads beyond the cores)."""
  try:
    number = None if isinstance(value, bool) else operator.index(value)
  except TypeError:
    number = None
  if number is None or not 1 <= number <= most:
    bound = "the CPU cores" if name == "threads" else "the int32 bound"
    raise ValueError(f"{name} must be a positive integer, got {value!r}; at most {most:,} "
                     f"({bound})")
  return number


def _real(value) -> bool:
  """Whether `value` is a real number (numpy's included), not a bool or a numeric string."""
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _impute(value: str | float) -> str | float:
  """A named imputation, or a constant as a float in [-MAX_IMPUTE, MAX_IMPUTE]; ValueError
  naming it otherwise (before encoding, not as an overflow or a type error in scoring)."""
  if isinstance(value, str) and value in scoring_lib.IMPUTE_MODES:
    return value
  if _real(value) and abs(value) <= MAX_IMPUTE:
    return float(value)
  raise ValueError(f"impute must be one of {', '.join(scoring_lib.IMPUTE_MODES)} or a number in "
                   f"[-{MAX_IMPUTE:g}, {MAX_IMPUTE:g}], got {value!r}")


def _alignment(value: str | alignment_lib.Alignment) -> alignment_lib.Alignment:
  """An `Alignment`, or its text parsed ("top_k:1"); anything else is refused by name before
  retrieval rather than failing once the candidates are to be refined."""
  if isinstance(value, str):
    return alignment_lib.Alignment.parse(value)
  if not isinstance(value, alignment_lib.Alignment):
    raise ValueError(f"alignment must be an Alignment or its text (e.g. 'top_k:1'), got "
                     f"{value!r}")
  return value


@dataclasses.dataclass
class Results:
  """Ranked documents of each query, and the time each took.

  latency_ms: [Q] search + scoring time of each query (encoding excluded).
  encode_ms: [Q] time to encode each query alone (a 1-row batch, as an interactive user's
    query is), or None where the queries were encoded in batches.
  unknown_only: indices of the queries whose tokens are all unknown to the vocabulary (e.g.
    emoji or CJK with an English vocabulary): their rankings carry no information.
  """
  rankings: list[list[tuple[str, float]]]
  latency_ms: np.ndarray
  unknown_only: list[int] = dataclasses.field(default_factory=list)
  encode_ms: np.ndarray | None = None


def search(encoder: encoding.Encoder, token_index: reader.TokenIndex, queries: Sequence[str],
           config: SearchConfig, encode_alone: bool = False, progress: bool = True,
           warm_up: bool = True) -> Results:
  """Ranks the index's documents for each query.

  Args:
    encode_alone: encode each query on its own and time it (`Results.encode_ms`); otherwise
      the queries are encoded in batches, which is faster for many queries.
    progress: show a progress bar and warn on stderr of queries of unknown tokens only
      (`Results.unknown_only` names them either way).
    warm_up: first answer one query untimed, so that no latency includes loading the searcher
      or compiling (an opened index that answered once needs it no more).
  """
  check_index(config, token_index)
  if not queries:
    return Results([], np.zeros(0), encode_ms=np.zeros(0) if encode_alone else None)
  token_ids = encoder.tokenize(queries, encoder.query_max_length)  # Tokenized once.
  unknown = encoder.unknown_only(token_ids)
  for i in unknown if progress else ():
    print(f"Warning: {unknown_message(f'query {i + 1}', queries[i])}", file=sys.stderr, flush=True)
  config = config.within(token_index)
  if not registry.SCORINGS[config.scoring].retrieves:
    q, q_mask, _ = _encode_queries(encoder, token_ids)
    return dataclasses.replace(_exhaustive(token_index, q, q_mask, config), unknown_only=unknown)
  if config.scoring == "xtr" and (config.threads > 1 or
                                  config.searcher == "device") and not encode_alone:
    batched = _search_batches(token_index, *_encode_queries(encoder, token_ids), config, progress,
                              warm_up)
    return dataclasses.replace(batched, unknown_only=unknown)
  encoded = _encoded_one_by_one(encoder, token_ids) if encode_alone else zip(
      *_encode_queries(encoder, token_ids), np.full(len(queries), np.nan))
  rankings, latency_ms, encode_ms = [], [], []
  for i, (vectors, mask, u, encode_time) in enumerate(
      tqdm.tqdm(encoded, total=len(queries), desc="search", unit="query", disable=not progress)):
    if i == 0 and warm_up:
      rank(token_index, vectors, mask, u, config)
    start = time.perf_counter()
    doc_index, scores = rank(token_index, vectors, mask, u, config)
    latency_ms.append(1000 * (time.perf_counter() - start))
    encode_ms.append(encode_time)
    rankings.append(_named(token_index.doc_ids, doc_index, scores))
  return Results(rankings, np.asarray(latency_ms), unknown,
                 np.asarray(encode_ms) if encode_alone else None)


def _search_batches(token_index: reader.TokenIndex, q: np.ndarray, q_mask: np.ndarray,
                    u_q: np.ndarray, config: SearchConfig, progress: bool,
                    warm_up: bool) -> Results:
  """`rank_batch` over batches of QUERIES_PER_BATCH queries (q [Q, n, D], q_mask, u_q [Q, n]);
  each query's latency is its batch's time divided by the batch's size. With `warm_up`, untimed
  first, one query (or for the device searcher, the first and the last batch: both shapes
  compiled) runs: no latency includes loading the searcher or a compilation."""
  starts = range(0, len(q), QUERIES_PER_BATCH)
  warm_ups = [slice(s, s + QUERIES_PER_BATCH) for s in sorted({starts[0], starts[-1]})
             ] if config.searcher == "device" else [slice(0, 1)]
  for batch in warm_ups if warm_up else ():
    rank_batch(token_index, q[batch], q_mask[batch], u_q[batch], config)
  rankings, latency_ms = [], []
  for start in tqdm.tqdm(starts, desc="search", unit="batch", disable=not progress):
    batch = slice(start, start + QUERIES_PER_BATCH)
    begin = time.perf_counter()
    ranked = rank_batch(token_index, q[batch], q_mask[batch], u_q[batch], config)
    latency_ms += [1000 * (time.perf_counter() - begin) / len(ranked)] * len(ranked)
    rankings += [_named(token_index.doc_ids, *top) for top in ranked]
  return Results(rankings, np.asarray(latency_ms))


def unknown_message(name: str, query: str) -> str:
  """What is said of a query (`name`: "query 3") whose tokens are all unknown to the
  vocabulary."""
  return (f"{name} ({query!r}) has only tokens that the vocabulary does not know: its ranking "
          "carries no information.")


def _encoded_one_by_one(encoder: encoding.Encoder, token_ids: np.ndarray):
  """Yields (q [n, D], q_mask [n], u_q [n], ms to encode it) of each query's token ids
  [Q, n], encoded alone; the 1-row shape is compiled first, so no time includes compilation."""
  _encode_queries(encoder, token_ids[:1])
  for ids in token_ids:
    start = time.perf_counter()
    q, q_mask, u_q = _encode_queries(encoder, ids[None])
    yield q[0], q_mask[0], u_q[0], 1000 * (time.perf_counter() - start)


def _encode_queries(encoder: encoding.Encoder,
                    token_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Token ids [Q, n] -> (q [Q, n, D], q_mask [Q, n], u_q [Q, n]); u_q is 1 where the model
  has no salience heads."""
  q, q_mask, u_q = encoder.encode_ids(token_ids, "query")
  return q, q_mask, np.ones(q_mask.shape, np.float32) if u_q is None else u_q


def check_index(config: SearchConfig, token_index: reader.TokenIndex) -> None:
  """Refuses, naming the flag, what the index cannot do: salience pruning without salience
  heads; refinement, exhaustive scoring or brute-force retrieval without stored token
  vectors."""
  if config.prune_query is not None and not token_index.has_salience:
    raise ValueError(f"--prune_query={config.prune_query} prunes query tokens by salience, but "
                     f"the model of the index at {token_index.path} has no salience heads.")
  if token_index.has_vectors:
    return
  for flag, value, needs_vectors in (("scoring", config.scoring,
                                      registry.SCORINGS[config.scoring].needs_vectors),
                                     ("searcher", config.searcher, config.searcher
                                      in ("bruteforce", "device"))):
    if needs_vectors:
      raise ValueError(f"--{flag}={value} needs the token vectors, but the index at "
                       f"{token_index.path} was exported with --store_vectors=none: use "
                       "--scoring=xtr --searcher=scann, or export with --store_vectors=float16.")


def _retrieving(q_mask: np.ndarray, u_q: np.ndarray, config: SearchConfig) -> np.ndarray:
  """[n] bool: the query tokens that retrieve (the valid ones, or with `prune_query` the most
  salient of them)."""
  retrieving = q_mask.copy()
  if config.prune_query is not None:
    retrieving[q_mask] = salience.kept(u_q[q_mask], config.prune_query)
  return retrieving


def _retrieve(token_index: reader.TokenIndex, q: np.ndarray, q_mask: np.ndarray, u_q: np.ndarray,
              config: SearchConfig) -> tuple[np.ndarray, np.ndarray]:
  """Token retrieval for one query: (scores [n', k'], doc index [n', k']) of its n' retrieving
  tokens. The device searcher searches all n rows (one shape, compiled once) and drops the
  others'."""
  retrieving = _retrieving(q_mask, u_q, config)
  rows = q if config.searcher == "device" else q[retrieving]
  scores, docs = token_index.search(rows, config.k_prime, config.searcher, config.leaves_to_search,
                                    config.threads)
  return (scores[retrieving], docs[retrieving]) if config.searcher == "device" else (scores, docs)


def _xtr_top(token_scores: np.ndarray, token_docs: np.ndarray,
             config: SearchConfig) -> tuple[np.ndarray, np.ndarray]:
  """One query's retrieval (token_scores, token_docs [n', k']) -> its top_k by f_XTR'."""
  return scoring_lib.top_candidates(
      *scoring_lib.f_xtr_prime(token_scores, token_docs, impute=config.impute), config.top_k)


def device_xtr_top(resident: device.DeviceTokens, q: np.ndarray, retrieving: np.ndarray,
                   config: SearchConfig) -> tuple[np.ndarray, np.ndarray]:
  """Queries (q [Q, n, D], retrieving [Q, n]) -> their top_k (doc_index, scores) [Q, top_k] by
  f_XTR', token retrieval from the `resident` tokens and scoring on the device; all n rows are
  searched (static shapes), the rows that do not retrieve are masked out of the scores."""
  num_queries, n, dim = q.shape
  scores, docs, _ = resident.search(q.reshape(num_queries * n, dim), config.k_prime)
  k_prime = scores.shape[1]
  doc_index, top_scores = scoring_lib.f_xtr_prime_top(scores.reshape(num_queries, n, k_prime),
                                                      docs.reshape(num_queries, n, k_prime),
                                                      retrieving, config.impute, config.top_k)
  return np.asarray(doc_index), np.asarray(top_scores)


def rank_batch(token_index: reader.TokenIndex, q: np.ndarray, q_mask: np.ndarray, u_q: np.ndarray,
               config: SearchConfig) -> list[tuple[np.ndarray, np.ndarray]]:
  """Queries (q [Q, n, D], q_mask [Q, n], u_q [Q, n]) -> `rank` of each, by f_XTR': one token
  retrieval of all their retrieving tokens over `config.threads` threads, then f_XTR' of the
  queries on as many threads (numpy's sort releases the GIL); with the device searcher, both
  on the device."""
  retrieving = [_retrieving(mask, u, config) for mask, u in zip(q_mask, u_q)]
  if config.searcher == "device":
    return list(zip(*device_xtr_top(token_index.on_device(), q, np.stack(retrieving), config)))
  token_scores, token_docs = token_index.search(q[np.stack(retrieving)], config.k_prime,
                                                config.searcher, config.leaves_to_search,
                                                config.threads)
  bounds = np.cumsum([r.sum() for r in retrieving])[:-1]
  per_query = zip(np.split(token_scores, bounds), np.split(token_docs, bounds))
  with futures.ThreadPoolExecutor(config.threads) as pool:
    return list(pool.map(lambda retrieved: _xtr_top(*retrieved, config), per_query))


def rank(token_index: reader.TokenIndex, q: np.ndarray, q_mask: np.ndarray, u_q: np.ndarray,
         config: SearchConfig) -> tuple[np.ndarray, np.ndarray]:
  """One query (q [n, D], q_mask [n], saliences u_q [n]) -> its top_k (doc_index [top_k],
  scores [top_k])."""
  if config.scoring == "xtr" and config.searcher == "device":
    doc_index, scores = device_xtr_top(token_index.on_device(), q[None],
                                       _retrieving(q_mask, u_q, config)[None], config)
    return doc_index[0], scores[0]
  token_scores, token_docs = _retrieve(token_index, q, q_mask, u_q, config)
  if config.scoring == "xtr":
    return _xtr_top(token_scores, token_docs, config)
  doc_ids = np.unique(token_docs[token_docs >= 0])
  refine = _refinement(token_index, q, q_mask, u_q, doc_ids)
  scores = refine(None if config.scoring == "colbert" else config.alignment)
  return scoring_lib.top_candidates(doc_ids, scores, config.top_k)


def _refinement(token_index: reader.TokenIndex, q: np.ndarray, q_mask: np.ndarray, u_q: np.ndarray,
                doc_ids: np.ndarray):
  """Gathers the candidates' token vectors (and saliences) once; returns `refine(alignment)`:
  their scores [len(doc_ids)] by f_ColBERT (alignment None) or ALIGNER's sim with `alignment`,
  NaN for a candidate with a NaN or infinite token vector (refused by `_named`: XLA's max on
  CPU may drop a NaN, which would give the damaged document a score)."""
  vectors = token_index.doc_vectors(doc_ids)
  finite = _finite(vectors)
  saliences = token_index.doc_saliences(doc_ids) if token_index.has_salience else None
  query_saliences = u_q if token_index.has_salience else None

  # The query stays padded to n tokens: every query compiles to the same shapes.
  def refine(alignment: alignment_lib.Alignment | None) -> np.ndarray:
    if alignment is None:
      scores = scoring_lib.colbert_rerank(q, q_mask, vectors)
    else:
      scores = scoring_lib.alignment_rerank(q, q_mask, query_saliences, vectors, saliences,
                                            alignment)
    return np.where(finite, scores, np.nan)

  return refine


def _finite(doc_vectors: Sequence[np.ndarray]) -> np.ndarray:
  """[len(doc_vectors)] bool: whether every token vector of each document is finite."""
  return np.array([np.isfinite(d).all() for d in doc_vectors], bool)


def search_alignments(
    encoder: encoding.Encoder, token_index: reader.TokenIndex, queries: Sequence[str],
    config: SearchConfig,
    alignments: Sequence[alignment_lib.Alignment]) -> list[list[list[tuple[str, float]]]]:
  """ALIGNER search under several alignments at the cost of one token retrieval: each query's
  candidates are retrieved and gathered once, then refined with each alignment.

  Returns:
    rankings[a][i]: query i's top_k (doc id, score) under alignments[a].
  """
  check_index(config, token_index)
  config = config.within(token_index)
  q, q_mask, u_q = _encode_queries(encoder, encoder.tokenize(queries, encoder.query_max_length))
  rankings = [[] for _ in alignments]
  for vectors, mask, u in tqdm.tqdm(zip(q, q_mask, u_q), total=len(q), desc="rescore",
                                    unit="query"):
    token_docs = _retrieve(token_index, vectors, mask, u, config)[1]
    doc_ids = np.unique(token_docs[token_docs >= 0])
    refine = _refinement(token_index, vectors, mask, u, doc_ids)
    for ranked, alignment in zip(rankings, alignments):
      top_ids, top_scores = scoring_lib.top_candidates(doc_ids, refine(alignment), config.top_k)
      ranked.append(_named(token_index.doc_ids, top_ids, top_scores))
  return rankings


def _exhaustive(token_index: reader.TokenIndex, q: np.ndarray, q_mask: np.ndarray,
                config: SearchConfig) -> Results:
  """Exact MaxSim of every query against every document of the index (all in memory; not the
  documents that updates deleted)."""
  live = token_index.live_docs()
  return exact_search([token_index.doc_ids[i] for i in live], token_index.doc_vectors(live), q,
                      q_mask, config.top_k)


def exact_search(doc_ids: Sequence[str], docs: Sequence[np.ndarray], q: np.ndarray,
                 q_mask: np.ndarray, top_k: int) -> Results:
  """Exact MaxSim top_k of queries (q [Q, n, D], q_mask [Q, n]) over docs ([len_i, D] each);
  a document with a NaN or infinite token vector is refused, naming it, before any scoring."""
  damaged = np.flatnonzero(~_finite(docs))
  if damaged.size:
    _named(doc_ids, damaged[:1], np.array([np.nan]))
  length = max(len(d) for d in docs)
  doc_vectors = np.zeros((len(docs), length, q.shape[-1]), np.float32)
  doc_mask = np.zeros((len(docs), length), bool)
  for i, d in enumerate(docs):
    doc_vectors[i, :len(d)], doc_mask[i, :len(d)] = d, True
  scoring_lib.exact_maxsim(q, q_mask, doc_vectors[:1], doc_mask[:1], top_k)  # Compiles.
  start = time.perf_counter()
  doc_index, scores = scoring_lib.exact_maxsim(q, q_mask, doc_vectors, doc_mask, top_k)
  per_query = 1000 * (time.perf_counter() - start) / len(q)
  rankings = [_named(doc_ids, np.asarray(d), np.asarray(s)) for d, s in zip(doc_index, scores)]
  return Results(rankings, np.full(len(q), per_query))


def _named(doc_ids: Sequence[str], doc_index: np.ndarray,
           scores: np.ndarray) -> list[tuple[str, float]]:
  """Drops padding (-1) and maps doc indices to corpus ids; a NaN score (token vectors of NaN or
  infinities, which only a damaged or forged index holds) is refused, naming the document."""
  named = [(doc_ids[d], float(s)) for d, s in zip(doc_index, scores) if d >= 0]
  for doc_id, score in named:
    if math.isnan(score):
      raise ValueError(f"document {doc_id!r} scores NaN: the token index holds NaN or infinite "
                       "token vectors of it; it is damaged (re-export it).")
  return named
