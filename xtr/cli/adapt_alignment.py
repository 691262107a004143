"""`xtr-adapt-alignment`: choose ALIGNER's pairwise alignment for a task from a few labelled
queries (few-shot alignment adaptation, ALIGNER §3.1 and §4.1; `xtr.scoring.adaptation`).

  xtr-adapt-alignment --data_dir=DATA_DIR --split=test --index=INDEX_DIR --checkpoint=CKPT \
    --shots=8 --k_prime=1000 --out=adapt.json

Each query's candidates are retrieved from the token index once, then rescored with every
strategy of --strategies (no search per strategy). With more labelled queries than --shots, the
paper's protocol runs: folds of --shots queries, the best strategy of each fold (nDCG@10)
evaluated on the other queries, mean ± std over folds, beside the default (--alignment) and the
oracle strategy, and the change against the default with a 95 % bootstrap interval over folds.
With at most --shots labelled queries it picks the best strategy on all of them. Your own
labelled queries: put them in DATA_DIR/qrels/NAME.tsv (BEIR qrels; their text in
DATA_DIR/queries.jsonl) and pass --split=NAME; then search with
`xtr-search --scoring=aligner --alignment=<chosen>`. The report holds every strategy's nDCG@10
per query (`per_query`), from which `adaptation.adapt` gives other fold sizes and seeds without
another search.
"""
from typing import Sequence

from absl import flags

from xtr import cli
from xtr import io
from xtr.evaluation import beir_eval
from xtr.evaluation import run_record
from xtr.retrieval import ranker
from xtr.scoring import adaptation
from xtr.scoring import alignment

_SPLIT_FLAGS = cli.SplitFlags("The labelled queries: qrels/{split}.tsv.")
_INDEX_FLAGS = cli.IndexFlags()
_SHOTS = cli.define_count("shots", 8, "Labelled queries per fold.")
_STRATEGIES = flags.DEFINE_list("strategies", list(adaptation.DEFAULT_STRATEGIES),
                                "Candidate alignments (top_k:K, top_p:P, differentiable:K).")
_SEED = cli.define_count("seed", 0, "Seed of the fold shuffle.", lower_bound=0)
_OUT = flags.DEFINE_string("out", None, "Report JSON to write.")
_SEARCH_CONFIG = cli.define_search_flags(scoring_only="aligner")


def _strategies(config: ranker.SearchConfig) -> list[alignment.Alignment]:
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
  data = _SPLIT_FLAGS.load()
  encoder, token_index = _INDEX_FLAGS.open()
  cli.check_index_covers_qrels(token_index.doc_ids, data.qrels, _INDEX_FLAGS.index.value)
  cli.corpus_matches_index(data.corpus_path, token_index)
  rankings = ranker.search_alignments(encoder, token_index, data.queries, config, strategies)
  per_query = {}
  for strategy, ranked in zip(strategies, rankings):
    run = {query_id: dict(ranking) for query_id, ranking in zip(data.query_ids, ranked)}
    per_query[str(strategy)] = {
        query_id: values["ndcg@10"]
        for query_id, values in beir_eval.evaluate(data.qrels, run)["per_query"].items()
    }
  query_ids = list(per_query[str(strategies[0])])
  if len(query_ids) <= _SHOTS.value:
    chosen = adaptation.best(per_query, query_ids)
    report = {
        "chosen": chosen,
        "strategies": {
            s: adaptation.mean(v, query_ids) for s, v in per_query.items()
        }
    }
    print(f"Chosen on all {len(query_ids)} labelled queries: --alignment={chosen}")
  else:
    report = adaptation.adapt(per_query, adaptation.folds(query_ids, _SHOTS.value, _SEED.value),
                              default=str(config.alignment))
    adapted, change = report["adapted"], report["change"]
    default, oracle = report["default"], report["oracle"]
    print(f"{_SPLIT_FLAGS.data_dir.value} {_SPLIT_FLAGS.split.value}, {len(report['folds'])} "
          f"folds of {_SHOTS.value}: "
          f"adapted nDCG@10 {adapted['mean']:.4f} ± {adapted['std']:.4f}, change "
          f"{change['mean']:+.4f} (95 % CI {change['ci95'][0]:+.4f} .. "
          f"{change['ci95'][1]:+.4f}) | default "
          f"{default['strategy']} {default['ndcg@10']:.4f} | oracle {oracle['strategy']} "
          f"{oracle['ndcg@10']:.4f}")
  report.update(data_dir=_SPLIT_FLAGS.data_dir.value, split=_SPLIT_FLAGS.split.value,
                index=_INDEX_FLAGS.index.value, checkpoint=_INDEX_FLAGS.checkpoint.value,
                shots=_SHOTS.value, seed=_SEED.value, k_prime=config.k_prime,
                prune_query=config.prune_query, num_queries=len(query_ids), per_query=per_query)
  report.update(run_record.provenance([_SPLIT_FLAGS.data_dir.value], _SPLIT_FLAGS.split.value))
  io.write_results(_OUT.value, report)


def console_entry_point() -> None:
  cli.run(main, __name__, required=["data_dir", "index", "checkpoint", "out"])


if __name__ == "__main__":
  console_entry_point()
