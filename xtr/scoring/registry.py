"""The scoring functions, registered once with what each supports.

Training (`xtr.training.objective`), search (`xtr.retrieval.ranker`) and the tools (`--scoring`)
take their choices from here: a name that is not registered for a use is refused, naming the
ones that are.

  xtr         f_XTR (eq. 2): in training over the batch's top-k_train retrieved tokens; in search
              f_XTR' (eq. 4) from the retrieved token scores alone, with imputation.
  colbert     f_ColBERT (eq. 1, sum of max; T5-ColBERT, ALIGNER with top-1 alignment): in
              training over every token of the batch; in search, ColBERT's stages: token
              retrieval, then the candidates' stored token vectors rescored.
  aligner     ALIGNER's sparse alignment (`alignment.Alignment`) weighted by the saliences: in
              training over the batch; in search, token retrieval then refinement of the
              candidates' stored vectors and saliences.
  exhaustive  f_ColBERT (MaxSim) of every document of the corpus, without token retrieval: an
              upper bound of the others' rankings for small corpora (search only). Not to be
              confused with `--searcher=bruteforce`, which retrieves tokens exactly and then
              scores as --scoring says.
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Scoring:
  """A scoring function and what it supports.

  Attributes:
    name: its name in gin (`objective.Objective.scoring`), `SearchConfig.scoring` and `--scoring`.
    train: an in-batch training objective.
    search: ranks a corpus (`xtr.retrieval.ranker`).
    retrieves: search starts from token retrieval (otherwise it scores every document).
    needs_vectors: search reads the index's stored token vectors (refinement or exhaustive
      scoring), so an index exported with `--store_vectors=none` cannot serve it.
  """
  name: str
  train: bool
  search: bool
  retrieves: bool
  needs_vectors: bool


SCORINGS = {
    scoring.name: scoring for scoring in (
        Scoring("xtr", train=True, search=True, retrieves=True, needs_vectors=False),
        Scoring("colbert", train=True, search=True, retrieves=True, needs_vectors=True),
        Scoring("aligner", train=True, search=True, retrieves=True, needs_vectors=True),
        Scoring("exhaustive", train=False, search=True, retrieves=False, needs_vectors=True),
    )
}


def names(use: str) -> tuple[str, ...]:
  """The names of the scorings that support `use` ("train" or "search")."""
  return tuple(name for name, scoring in SCORINGS.items() if getattr(scoring, use))


def get(name: str, use: str) -> Scoring:
  """The scoring `name`, which must support `use` ("train" or "search").

  Raises:
    ValueError: naming `name`, the use and the registered choices.
  """
  if name not in names(use):
    raise ValueError(f"scoring {name!r} cannot {use}: expected one of {names(use)}.")
  return SCORINGS[name]
