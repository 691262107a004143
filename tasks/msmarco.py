"""MS MARCO passage training triples (`triples.train.small.tsv`: query<TAB>positive<TAB>negative).

The official file is ~27 GB (39.8M lines): it is streamed line by line, never loaded.
"""
import functools
import os

import gin
import tensorflow as tf

_FIELDS = ("query", "positive", "negative")


@gin.configurable
def triples_dataset(split: str, shuffle_files: bool, seed: int | None = None,
                    path: str = gin.REQUIRED) -> tf.data.Dataset:
  """seqio dataset_fn: the triples of the TSV at `path`, in file order.

  A malformed line (not 3 tab-separated fields, or an empty field) stops iteration with an
  `InvalidArgumentError` whose message reads `{path}:{line}: {what is wrong}` (line is 1-based).

  Args:
    split: unused; the file is the training split.
    shuffle_files: unused; there is one file (the task shuffles examples).
    seed: unused; reading is deterministic.
    path: the triples TSV.

  Returns:
    {"query", "positive", "negative"}: [] string each.
  """
  del split, shuffle_files, seed
  path = os.fspath(path)
  lines = tf.data.TextLineDataset(path).enumerate(start=1)
  return lines.map(functools.partial(_parse_line, path=path),
                   num_parallel_calls=tf.data.AUTOTUNE)


def _parse_line(line_number: tf.Tensor, line: tf.Tensor, path: str) -> dict[str, tf.Tensor]:
  """Splits one line ([] string, number [] int64) into the triple, asserting it is well formed."""
  where = tf.strings.join([path, ":", tf.strings.as_string(line_number), ": "])
  fields = tf.strings.split(line, "\t")
  num_fields = tf.size(fields)
  well_formed = tf.debugging.Assert(num_fields == len(_FIELDS), [tf.strings.join([
      where, "expected 3 tab-separated fields (query, positive, negative), got ",
      tf.strings.as_string(num_fields)])])
  with tf.control_dependencies([well_formed]):
    fields = tf.identity(fields)
  non_empty = [
      tf.debugging.Assert(tf.strings.length(tf.strings.strip(fields[i])) > 0,
                          [tf.strings.join([where, f"empty {name}"])])
      for i, name in enumerate(_FIELDS)]
  with tf.control_dependencies(non_empty):
    return {name: tf.identity(fields[i]) for i, name in enumerate(_FIELDS)}
