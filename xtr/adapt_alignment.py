"""`xtr-adapt-alignment`: choose ALIGNER's pairwise alignment for a task from a few labelled
queries (few-shot alignment adaptation, ALIGNER §3.1 and §4.1; `xtr.adaptation`).

  xtr-adapt-alignment --data_dir=DATA_DIR --split=test --index=INDEX_DIR --checkpoint=CKPT \
    --shots=8 --k_prime=1000 --out=adapt.json

Each query's candidates are retrieved from the token index once, then rescored with every
strategy of --strategies (no search per strategy). With more labelled queries than --shots, the
paper's protocol runs: folds of --shots queries, the best strategy of each fold (nDCG@10)
evaluated on the other queries, mean ± std over folds, beside the default (--alignment) and the
oracle strategy. With at most --shots labelled queries it picks the best strategy on all of
them. Your own labelled queries: put them in DATA_DIR/qrels/NAME.tsv (BEIR qrels; their text in
DATA_DIR/queries.jsonl) and pass --split=NAME; then search with
`xtr-search --scoring=aligner --alignment=<chosen>`.
"""
from typing import Sequence

from absl import flags

from xtr import adaptation
from xtr import alignment
from xtr import cli
from xtr import evaluation
from xtr import retrieval

_DATA_DIR = flags.DEFINE_string("data_dir", None, "BEIR-layout dataset directory.")
_SPLIT = flags.DEFINE_string("split", "test", "The labelled queries: qrels/{split}.tsv.")
_INDEX = flags.DEFINE_string("index", None, "Token index of the dataset's corpus.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "The checkpoint the index was built with.")
_SHOTS = cli.define_count("shots", 8, "Labelled queries per fold.")
_STRATEGIES = flags.DEFINE_list("strategies", list(adaptation.DEFAULT_STRATEGIES),
                                "Candidate alignments (top_k:K, top_p:P, differentiable:K).")
_SEED = cli.define_count("seed", 0, "Seed of the fold shuffle.", lower_bound=0)
_OUT = flags.DEFINE_string("out", None, "Report JSON to write.")
_SEARCH_CONFIG = cli.define_search_flags(scoring_only="aligner")
_OPEN_FOR_SEARCH = cli.define_index_flags()


def _strategies(config: retrieval.SearchConfig) -> list[alignment.Alignment]:
  """The parsed --strategies, the default (--alignment) among them."""
  parsed = []
  for text in dict.fromkeys([str(config.alignment), *_STRATEGIES.value]):
    try:
      parsed.append(alignment.Alignment.parse(text))
    except ValueError as e:
      raise flags.ValidationError(f"--strategies: {e}") from None
  return parsed


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  config = _SEARCH_CONFIG()
  strategies = _strategies(config)
  cli.check_output_file("out", _OUT.value)
  data = evaluation.load_beir(_DATA_DIR.value, _SPLIT.value)
  encoder, token_index = _OPEN_FOR_SEARCH(_INDEX.value, _CHECKPOINT.value)
  cli.check_index_covers_qrels(token_index.doc_ids, data.qrels, _INDEX.value)
  cli.corpus_matches_index(data.corpus_path, token_index)
  rankings = retrieval.search_alignments(encoder, token_index, data.queries, config, strategies)
  per_query = {}
  for strategy, ranked in zip(strategies, rankings):
    run = {query_id: dict(ranking) for query_id, ranking in zip(data.query_ids, ranked)}
    per_query[str(strategy)] = {query_id: values["ndcg@10"] for query_id, values in
                                evaluation.evaluate(data.qrels, run)["per_query"].items()}
  query_ids = list(per_query[str(strategies[0])])
  if len(query_ids) <= _SHOTS.value:
    chosen = adaptation.best(per_query, query_ids)
    report = {"chosen": chosen, "strategies": {s: adaptation.mean(v, query_ids)
                                               for s, v in per_query.items()}}
    print(f"Chosen on all {len(query_ids)} labelled queries: --alignment={chosen}")
  else:
    report = adaptation.adapt(per_query, adaptation.folds(query_ids, _SHOTS.value, _SEED.value),
                              default=str(config.alignment))
    adapted, default, oracle = report["adapted"], report["default"], report["oracle"]
    print(f"{_DATA_DIR.value} {_SPLIT.value}, {len(report['folds'])} folds of {_SHOTS.value}: "
          f"adapted nDCG@10 {adapted['mean']:.4f} ± {adapted['std']:.4f} | default "
          f"{default['strategy']} {default['ndcg@10']:.4f} | oracle {oracle['strategy']} "
          f"{oracle['ndcg@10']:.4f}")
  report.update(data_dir=_DATA_DIR.value, split=_SPLIT.value, index=_INDEX.value,
                checkpoint=_CHECKPOINT.value, shots=_SHOTS.value, seed=_SEED.value,
                k_prime=config.k_prime, prune_query=config.prune_query,
                num_queries=len(query_ids))
  evaluation.write_json(report, _OUT.value)


def console_entry_point() -> None:
  cli.run(main, __name__, required=["data_dir", "index", "checkpoint", "out"])


if __name__ == "__main__":
  console_entry_point()
