"""seqio tasks for XTR training; `register_tasks(vocabulary)` registers them.

Both tasks give {"query", "positive", "negative"}: [<= length] int32 token ids (lowercased,
special tokens added; see `tasks.preprocessors.tokenize`). Their data locations come from gin and
are read when a dataset is built:
  msmarco_triples: `tasks.msmarco.triples_files.path` (the MS MARCO triples TSV, or its shards).
  beir_pairs: `tasks.beir.load_pairs.data_dir` and `.split` (qrels split, default "train");
    the negative sampler is `tasks.beir.to_triples.negative_sampler`.
"""
from collections.abc import Callable, Sequence

import seqio
import tensorflow as tf

from tasks import beir
from tasks import msmarco
from tasks import preprocessors


def register_tasks(vocabulary: seqio.Vocabulary) -> None:
  """(Re)registers `msmarco_triples` and `beir_pairs`, tokenized with the model's `vocabulary`."""
  features = preprocessors.output_features(vocabulary)
  _register("msmarco_triples", msmarco.TriplesSource(), [preprocessors.tokenize], features)
  _register("beir_pairs", seqio.FunctionDataSource(beir.pairs_dataset, splits=("train",)),
            [beir.to_triples, preprocessors.tokenize], features)


def _register(name: str, source: seqio.DataSource,
              steps: Sequence[Callable[..., tf.data.Dataset]],
              features: dict[str, seqio.Feature]) -> None:
  seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(name, source=source, preprocessors=steps, output_features=features)
