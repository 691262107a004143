"""Term matching in alignment (Wu et al., 2024, §7.2, Figures 2–3): how often a query token is
aligned with the same vocabulary token in the document, by the query token's IDF.

For one query token i, one document and an alignment A (`directions.term_alignments`), the
exact-match rate is the share of the alignment that i takes part in which joins same-id tokens:

  rate_i = Σ_j A_ij [id(q_i) = id(d_j)] / Σ_j A_ij        (undefined where Σ_j A_ij = 0)

For q→d hard alignments this is 1 if the top-1 document token of q_i has q_i's id, else 0; for
soft ones, the softmax mass on same-id tokens. For d→q, the document tokens that align to q_i
(hard: those whose top-1 query token is q_i, soft: weighted by their softmax over query tokens)
and the share of them, or of their mass, with q_i's id. Each query token's rate is averaged over
the candidate documents where it is defined ("candidates"), and over those of them that
contain its id ("containing"): a document without the token cannot match it exactly, so the
first rate also measures how often the candidates hold the token, the second only the alignment.

The paper's d→q exact-match rate (Figure 3) is "computed for each document token": for one
document token j, the share of its alignment that goes to query tokens of its id,

  rate_j = Σ_i A_ij [id(q_i) = id(d_j)] / Σ_i A_ij        (`document_token_rates`)

(1 or 0 for a hard d→q alignment, the softmax mass on same-id query tokens for a soft one),
binned by the document token's IDF; over every candidate document token, and over those whose id
the query holds ("containing").

IDF of a token id in a corpus of N documents: ln(N / max(df, 1)), df the number of documents
whose (encoded) tokens contain it. Query tokens are binned by IDF into equal-count bins.
"""
import jax.numpy as jnp
import numpy as np


def exact_match_rates(a: jnp.ndarray, q_ids: jnp.ndarray, d_ids: jnp.ndarray,
                      over: jnp.ndarray | None = None) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Each query token's exact-match rate summed over the documents where it is defined.

  Args:
    a: [B, n, C, m] an alignment (0 on padding).
    q_ids: [B, n] query token ids; d_ids: [C, m] document token ids.
    over: [B, n, C] bool, the (query token, document) pairs to average over (None: all), e.g.
      `contains`.

  Returns:
    (rate sums [B, n], number of documents where the rate is defined [B, n]); their ratio is
    the mean rate over those documents.
  """
  same = q_ids[:, :, None, None] == d_ids[None, None]
  mass = jnp.sum(a, axis=3)  # [B, n, C]
  matched = jnp.sum(jnp.where(same, a, 0.0), axis=3)
  defined = mass > 0 if over is None else (mass > 0) & over
  rates = jnp.where(defined, matched / jnp.where(defined, mass, 1.0), 0.0)
  return jnp.sum(rates, axis=2), jnp.sum(defined, axis=2)


def document_token_rates(a: jnp.ndarray, q_ids: jnp.ndarray,
                         d_ids: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray, jnp.ndarray]:
  """Each document token's exact-match rate under a d→q alignment, against each query.

  Args:
    a: [B, n, C, m] an alignment (0 on padding); q_ids: [B, n]; d_ids: [C, m] (0: padding).

  Returns:
    (rates [B, C, m], defined [B, C, m] bool: the token aligns to some query token, in_query
    [B, C, m] bool: the query holds a token of its id).
  """
  same = q_ids[:, :, None, None] == d_ids[None, None]  # [B, n, C, m]
  mass = jnp.sum(a, axis=1)
  matched = jnp.sum(jnp.where(same, a, 0.0), axis=1)
  defined = mass > 0
  rates = jnp.where(defined, matched / jnp.where(defined, mass, 1.0), 0.0)
  in_query = jnp.any(same & (q_ids != 0)[:, :, None, None], axis=1) & (d_ids != 0)[None]
  return rates, defined, in_query


def contains(q_ids: jnp.ndarray, d_ids: jnp.ndarray) -> jnp.ndarray:
  """[B, n, C] bool: document c has a token of query token i's id (q_ids [B, n], d_ids [C, m],
  0 = padding): where an exact match is possible."""
  same = (q_ids[:, :, None, None] == d_ids[None, None]) & (d_ids != 0)[None, None]
  return jnp.any(same, axis=3)


def idf(doc_ids: list[np.ndarray], vocab_size: int) -> np.ndarray:
  """[vocab_size] float64 ln(N / max(df, 1)) over N documents' token ids (each [len_i])."""
  df = np.zeros(vocab_size, np.int64)
  for ids in doc_ids:
    df[np.unique(ids)] += 1
  return np.log(len(doc_ids) / np.maximum(df, 1))


def equal_count_bins(values: np.ndarray, num_bins: int) -> np.ndarray:
  """[T] bin of each value: the values sorted (stably) and cut into `num_bins` runs of sizes
  differing by at most one, lowest values in bin 0. Equal values may straddle a bin edge."""
  if not 1 <= num_bins <= len(values):
    raise ValueError(f"Cannot cut {len(values)} values into {num_bins} equal-count bins.")
  bins = np.empty(len(values), np.int64)
  for b, members in enumerate(np.array_split(np.argsort(values, kind="stable"), num_bins)):
    bins[members] = b
  return bins
