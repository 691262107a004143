"""The Python API of search: an index and its checkpoint, opened once, answering queries.

  import xtr
  searcher = xtr.Searcher("runs/demo/index", "runs/demo")
  for ranking in searcher.search(["what causes scurvy"], top_k=10):
    for doc_id, score in ranking:
      ...

`search` takes `ranker.SearchConfig`'s fields as keywords (top_k, k_prime, scoring, impute,
searcher, alignment, prune_query) and returns what `xtr-search` writes: per query, its top_k
(doc id, score) pairs by decreasing score. It prints nothing: a query whose tokens are all
unknown to the vocabulary is reported by `warnings.warn`.
"""
from typing import Sequence
import warnings

from xtr.data import beir_files
from xtr.index import reader
from xtr.models import encoding
from xtr.models import model_spec
from xtr.retrieval import ranker
from xtr.scoring import alignment as alignment_lib

Ranking = list[tuple[str, float]]


def open_for_search(index_path: str, checkpoint: str, verify: str = "fast",
                    vocabulary: str | None = None, searcher: str = "scann",
                    scann_helper: bool = False) -> tuple[encoding.Encoder, reader.TokenIndex]:
  """The token index at `index_path` and the query encoder of `checkpoint`.

  The model, vocabulary and lengths come from the index's manifest, as data (nothing stored in
  the index is executed), the vocabulary file from the index's copy of it. Refuses a checkpoint
  or token dim that differs from the index's.

  Args:
    verify: the index's checks before first use (`xtr.index.verify.MODES`).
    vocabulary: the vocabulary file to use instead of the index's copy (an index exported
      before xtr kept one); its sha256 must be the recorded one.
    searcher: the token retrieval that will be used: ScaNN is loaded now only for "scann" (the
      others never read it).
    scann_helper: ScaNN loads in a helper process while the model is restored here, and is
      searched there (`xtr.index.scann_process`: a one-shot search's answer comes sooner).
  """
  token_index = reader.open_index(index_path, verify)
  if searcher == "scann":
    # ScaNN holds its codes twice while it loads: here, before the parameters, that peak adds to
    # less (in a helper, the parameters are small beside it).
    token_index.load_scann(scann_helper)
  params = encoding.load_params(checkpoint)
  encoder = model_spec.encoder(token_index.manifest["model"], f"the manifest of {index_path}",
                               params, checkpoint, vocabulary or token_index.vocabulary_file(),
                               token_index.manifest["fingerprint"])
  reader.check_compatible(token_index.manifest, encoder.dim, encoder.fingerprint)
  return encoder, token_index


class Searcher:
  """An opened index and query encoder (see the module docstring)."""

  def __init__(self, index_dir: str, checkpoint: str, *, verify: str = "fast",
               vocabulary: str | None = None):
    self.encoder, self.index = open_for_search(index_dir, checkpoint, verify, vocabulary)

  def close(self) -> None:
    """Lets go of the index and the model now (their memory maps, device arrays and threads, a
    ScaNN helper process) rather than when the Searcher is collected; searching is then
    refused. `with xtr.Searcher(...) as searcher:` closes it at the end of the block."""
    self.encoder = self.index = None

  def __enter__(self) -> "Searcher":
    return self

  def __exit__(self, *exc_info) -> None:
    self.close()

  def search(self, queries: Sequence[str], *, top_k: int = 100, k_prime: int = 1000,
             alignment: str | alignment_lib.Alignment = alignment_lib.Alignment(),
             **config) -> list[Ranking]:
    """Each query's top_k (doc id, score) pairs, by decreasing score.

    Args:
      queries: query texts (a list, not a single string), each a line of plain text.
      alignment: ALIGNER's alignment (scoring="aligner"), e.g. "top_k:1" or "top_p:0.015".
      **config: the other fields of `ranker.SearchConfig`.

    Raises:
      TypeError: `queries` is one string (or bytes), or holds something else than a str.
      ValueError: a blank query, or one with a control character or a lone surrogate (naming
        it and the character), or a bad setting; before any query is encoded.
    """
    if self.index is None:
      raise ValueError("This Searcher is closed.")
    texts = _checked(queries)
    config = ranker.SearchConfig(top_k=top_k, k_prime=k_prime, alignment=alignment, **config)
    # Loading and compiling happen in the first call, once: no query is answered twice.
    results = ranker.search(self.encoder, self.index, texts, config, progress=False, warm_up=False)
    for i in results.unknown_only:
      warnings.warn(ranker.unknown_message(f"queries[{i}]", texts[i]), stacklevel=2)
    return results.rankings


def _checked(queries: Sequence[str]) -> list[str]:
  """The query texts of `queries`, refused as `Searcher.search` says."""
  if isinstance(queries, (str, bytes)):
    raise TypeError("queries must be a sequence of texts, not one string: pass [query].")
  texts = list(queries)
  for i, text in enumerate(texts):
    if not isinstance(text, str):
      raise TypeError(f"queries[{i}] is not a str but {type(text).__name__} {text!r}")
    if not text.strip():
      raise ValueError(f"queries[{i}] is blank: it has nothing to search for")
    try:
      beir_files.check_plain_text(text)
    except ValueError as e:
      raise ValueError(f"queries[{i}]: {e}") from None
  return texts
