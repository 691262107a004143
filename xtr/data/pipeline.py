"""Training input pipeline: seqio task -> batches of query and document token ids.

The pipeline is pure tf.data, deterministic for a seed, so each host can save its iterator with
`tf.train.Checkpoint(iterator=iterator).write(path)` and resume exactly after `.read(path)`.
"""
from collections.abc import Iterator
from collections.abc import Mapping
import dataclasses
import re

import gin
import seqio
import tensorflow as tf

from xtr import typecheck
from xtr.data import tasks

FeatureSpec = seqio.FeatureConverter.FeatureSpec


class RetrievalFeatureConverter(seqio.FeatureConverter):
  """{query, positive, negative} -> {query_tokens [Lq], doc_tokens [1 + num_negatives, Ld]}.

  Ids are padded with 0; doc 0 is the positive, then the negative (num_negatives = 1).
  Lq = task_feature_lengths["query"], Ld = task_feature_lengths["positive"] (= "negative").
  """
  TASK_FEATURES = {name: FeatureSpec(dtype=tf.int32) for name in ("query", "positive", "negative")}
  MODEL_FEATURES = {
      "query_tokens": FeatureSpec(dtype=tf.int32),
      "doc_tokens": FeatureSpec(dtype=tf.int32, rank=2, sequence_dim=1)
  }
  PACKING_FEATURE_DTYPES = {}

  def __init__(self):
    super().__init__(pack=False)

  def _convert_features(self, ds: tf.data.Dataset,
                        task_feature_lengths: Mapping[str, int]) -> tf.data.Dataset:
    lengths = self.get_model_feature_lengths(task_feature_lengths)

    def convert(features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
      docs = [_pad(features[name], lengths["doc_tokens"]) for name in ("positive", "negative")]
      return {
          "query_tokens": _pad(features["query"], lengths["query_tokens"]),
          "doc_tokens": tf.stack(docs)
      }

    return ds.map(convert, num_parallel_calls=tf.data.AUTOTUNE)

  def get_model_feature_lengths(self, task_feature_lengths: Mapping[str, int]) -> dict[str, int]:
    if task_feature_lengths["positive"] != task_feature_lengths["negative"]:
      raise ValueError(f"positive and negative need one length, got {dict(task_feature_lengths)}")
    return {
        "query_tokens": task_feature_lengths["query"],
        "doc_tokens": task_feature_lengths["positive"]
    }


@gin.configurable
@dataclasses.dataclass(frozen=True, kw_only=True)
class DatasetConfig:
  """What a training run reads; gin binds it to `trainer.train.dataset`.

  Attributes:
    task_name: a task or mixture of `tasks` ("msmarco_triples", "beir_pairs", ...).
    batch_size: the *global* number of queries per step (each host reads the rows its devices
      hold: `partitioning.data_layout`).
    task_feature_lengths: max token ids of {"query", "positive", "negative"}, specials included.
  """
  task_name: str = "msmarco_triples"
  batch_size: int = 128
  task_feature_lengths: dict[str, int] = dataclasses.field(default_factory=lambda: {
      "query": 32,
      "positive": 256,
      "negative": 256
  })

  def __post_init__(self):
    typecheck.arguments(DatasetConfig.__init__, dataclasses.asdict(self))
    if self.batch_size < 1:
      raise ValueError(f"pipeline.DatasetConfig.batch_size={self.batch_size} must be positive.")
    if set(self.task_feature_lengths) != {"query", "positive", "negative"}:
      raise ValueError("pipeline.DatasetConfig.task_feature_lengths="
                       f"{self.task_feature_lengths} needs exactly query, positive and negative.")


def _pad(ids: tf.Tensor, length: int) -> tf.Tensor:
  """ids: [<= length] int32 -> [length] int32, padded with 0."""
  return tf.ensure_shape(tf.pad(ids, [[0, length - tf.size(ids)]]), [length])


@gin.configurable
def get_dataset(task_name: str, vocabulary: seqio.Vocabulary, task_feature_lengths: Mapping[str,
                                                                                            int],
                batch_size: int, seed: int, shuffle: bool = True, shuffle_buffer_size: int = 10_000,
                shard_id: int = 0, num_shards: int = 1) -> tf.data.Dataset:
  """This host's endless training batches of `task_name` (registered here with `vocabulary`).

  Args:
    task_name: a task or mixture of `tasks` ("msmarco_triples", "beir_pairs", ...).
    vocabulary: the model's vocabulary.
    task_feature_lengths: max ids of {"query", "positive", "negative"}, specials included.
    batch_size: examples per batch on this host (the global batch / num_shards).
    seed: seeds the example shuffle and the tasks' sampling (e.g. BEIR negatives); shard i
      uses seed + i, so that hosts reading other examples do not draw the same negatives row
      for row (shard 0, a single host's run, uses `seed`).
    shuffle: whether to shuffle examples (in a buffer of `shuffle_buffer_size`).
    shuffle_buffer_size: examples in the shuffle buffer (a mixture's tasks shuffle with seqio's
      default buffer: `Mixture.get_dataset` takes no size).
    shard_id: this host's index (`jax.process_index()`); it reads every num_shards-th example.
    num_shards: number of hosts (`jax.process_count()`).

  Returns:
    Batches {"query_tokens": [batch_size, Lq] int32, "doc_tokens": [batch_size, 2, Ld] int32},
    repeated forever (the last partial batch of an epoch is never cut: epochs run into each other).
  """
  tasks.register_tasks(vocabulary)
  provider = seqio.get_mixture_or_task(task_name)
  buffer = {} if isinstance(provider, seqio.Mixture) else {
      "shuffle_buffer_size": shuffle_buffer_size
  }
  ds = provider.get_dataset(task_feature_lengths, split="train", shuffle=shuffle,
                            seed=seed + shard_id, **buffer,
                            shard_info=seqio.ShardInfo(index=shard_id,
                                                       num_shards=num_shards), num_epochs=None)
  ds = RetrievalFeatureConverter()(ds, task_feature_lengths)
  return ds.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)


def next_batch(iterator: Iterator[dict[str, tf.Tensor]]) -> dict[str, tf.Tensor]:
  """`next(iterator)` of a `get_dataset` iterator.

  Raises:
    ValueError: the message of a task reader's assertion on a malformed input line
      (`{path}:{line}: {what is wrong}`, e.g. `tasks.msmarco.read_triples`), not TensorFlow's
      InvalidArgumentError around it.
  """
  try:
    return next(iterator)
  except tf.errors.InvalidArgumentError as e:
    assertion = re.search(r"assertion failed: \[(.*?)\]", e.message, re.DOTALL)
    if assertion is None:
      raise
    raise ValueError(assertion.group(1)) from None
