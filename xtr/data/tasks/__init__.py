"""seqio tasks for XTR training; `register_tasks(vocabulary)` registers them.

Every task gives {"query", "positive", "negative"}: [<= length] int32 token ids (lowercased,
special tokens added; see `tasks.preprocessors.tokenize`). Their data locations come from gin and
are read when a dataset is built:
  msmarco_triples: `tasks.msmarco.triples_files.path` (the MS MARCO triples TSV, or its shards).
  beir_pairs: `tasks.beir.load_pairs.data_dir` and `.split` (qrels split, default "train");
    the negative sampler is `tasks.beir.to_triples.negative_sampler`.
  `register_tasks.beir_tasks`: more BEIR pairs tasks, one per collection, as beir_pairs.
  `register_tasks.mixtures`: seqio Mixtures of any of these, sampled at gin-given rates.
"""
from collections.abc import Callable
from collections.abc import Mapping
from collections.abc import Sequence
import functools

import gin
import seqio
import tensorflow as tf

from xtr.data.tasks import beir
from xtr.data.tasks import msmarco
from xtr.data.tasks import preprocessors


@gin.configurable
def register_tasks(vocabulary: seqio.Vocabulary, beir_tasks: Mapping[str, str] | None = None,
                   mixtures: Mapping[str, Mapping[str, float]] | None = None) -> None:
  """(Re)registers the tasks and mixtures, tokenized with the model's `vocabulary`.

  Args:
    beir_tasks: {task name: BEIR-layout data_dir}, e.g. {"beir_scifact": "data/scifact"}: each a
      `beir_pairs` task on its own collection (the qrels split and negative sampler are
      beir_pairs's gin settings).
    mixtures: {mixture name: {task name: rate}}: each example of the mixture comes from one of
      its tasks, drawn with probability rate / sum of rates (`seqio.Mixture`).
  """
  features = preprocessors.output_features(vocabulary)
  _register("msmarco_triples", msmarco.TriplesSource(), [preprocessors.tokenize], features)
  for name, data_dir in {"beir_pairs": None, **(beir_tasks or {})}.items():
    _register(
        name,
        seqio.FunctionDataSource(functools.partial(beir.pairs_dataset, data_dir=data_dir),
                                 splits=("train",)),
        [functools.partial(beir.to_triples, data_dir=data_dir), preprocessors.tokenize], features)
  for name, rates in (mixtures or {}).items():
    seqio.MixtureRegistry.remove(name)
    seqio.MixtureRegistry.add(name, [(task, float(rate)) for task, rate in rates.items()])


def _register(name: str, source: seqio.DataSource, steps: Sequence[Callable[..., tf.data.Dataset]],
              features: dict[str, seqio.Feature]) -> None:
  seqio.TaskRegistry.remove(name)
  seqio.TaskRegistry.add(name, source=source, preprocessors=steps, output_features=features)
