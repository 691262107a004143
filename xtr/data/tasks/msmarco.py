"""MS MARCO passage training triples (`triples.train.small.tsv`: query<TAB>positive<TAB>negative).

The official file is ~27 GB (39.8M lines): it is streamed line by line, never loaded. Split into
several files, it is also sharded by file over the hosts of a multi-host run, so that each host
reads only its own files (README, "Data"):

  split --number=l/64 --numeric-suffixes --suffix-length=3 --additional-suffix=.tsv \
    triples.train.small.tsv triples.train.small-    # 64 files of whole lines
"""
from collections.abc import Sequence

import gin
import seqio
import tensorflow as tf

_FIELDS = ("query", "positive", "negative")
_CYCLE_LENGTH = 16  # Files read at once, one line from each in turn.


@gin.configurable
def triples_files(path: str | Sequence[str] = gin.REQUIRED) -> list[str]:
  """The triples TSV files: `path` is a file, a glob pattern or a list of them, e.g.
  'gs://bucket/msmarco/triples.train.small-*.tsv'. Sorted, so every host sees one order.

  Raises:
    ValueError: naming the pattern that matches no file, or an empty file.
  """
  patterns = [path] if isinstance(path, str) else list(path)
  files = []
  for pattern in patterns:
    matched = sorted(tf.io.gfile.glob(pattern))
    if not matched:
      raise ValueError(f"tasks.msmarco.triples_files.path: no file matches {pattern!r}.")
    files += matched
  for file in files:
    if not tf.io.gfile.stat(file).length:
      raise ValueError(f"{file} is empty: it holds no triples to train on.")
  return files


class TriplesSource(seqio.DataSource):
  """seqio source of the triples of `triples_files()`: {"query", "positive", "negative"} ([]
  string each), each file in line order.

  With at least as many files as input shards (hosts), each shard reads only its files (file i
  goes to shard i mod num_shards), in an order shuffled with its seed; with fewer, every shard
  streams every file in one order and keeps every num_shards-th example (an order shuffled with
  each host's own seed would make the hosts' shares overlap). Examples are shuffled downstream.
  """

  def __init__(self):
    super().__init__(splits=("train",))

  @property
  def supports_arbitrary_sharding(self) -> bool:
    return True  # `get_dataset` shards by file or by example itself.

  def list_shards(self, split: str) -> Sequence[str]:
    del split
    return triples_files()

  def get_dataset(self, split: str = "train", shuffle: bool = True, seed: int | None = None,
                  shard_info: seqio.ShardInfo | None = None, *, sequence_length=None,
                  use_cached: bool = False, num_epochs: int | None = 1) -> tf.data.Dataset:
    del sequence_length, use_cached, num_epochs  # Repeated and cut downstream.
    files = self.list_shards(split)
    if shard_info is not None and len(files) < shard_info.num_shards:
      return _interleaved(files, shuffle=False, seed=None).shard(shard_info.num_shards,
                                                                 shard_info.index)
    if shard_info is not None:
      files = files[shard_info.index::shard_info.num_shards]
    return _interleaved(files, shuffle, seed)


def _interleaved(files: Sequence[str], shuffle: bool, seed: int | None) -> tf.data.Dataset:
  """The triples of `files`, one line of each of up to _CYCLE_LENGTH files in turn; the file
  order shuffled with `seed` if `shuffle`."""
  files_ds = tf.data.Dataset.from_tensor_slices(list(files))
  if shuffle:
    files_ds = files_ds.shuffle(len(files), seed=seed)
  return files_ds.interleave(read_triples, cycle_length=min(len(files),
                                                            _CYCLE_LENGTH), block_length=1,
                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def read_triples(path: tf.Tensor) -> tf.data.Dataset:
  """The triples of one TSV file ([] string path; gunzipped if it ends with `.gz`), in file
  order.

  A malformed line (invalid UTF-8, not 3 tab-separated fields, or an empty field) stops
  iteration with an `InvalidArgumentError` whose message reads `{path}:{line}: {what is wrong}`
  (line is 1-based).
  """
  gzipped = tf.strings.regex_full_match(path, r".*\.gz")
  lines = tf.data.TextLineDataset(path, compression_type=tf.where(gzipped, "GZIP", ""))
  lines = lines.enumerate(start=1)
  return lines.map(lambda number, line: _parse_line(path, number, _without_bom(number, line)),
                   num_parallel_calls=tf.data.AUTOTUNE)


def _without_bom(line_number: tf.Tensor, line: tf.Tensor) -> tf.Tensor:
  """The line ([] string) without the byte order mark (U+FEFF) that may start line 1 of a
  file an editor wrote."""
  return tf.where(line_number == 1, tf.strings.regex_replace(line, "^\ufeff", ""), line)


def _utf8_error(line: tf.Tensor) -> tf.Tensor:
  """[] string -> [] int64 offset of its first byte that is not valid UTF-8, -1 if none.

  Transcoding with replacement changes a line only if it is not valid UTF-8; then each invalid
  sequence decodes to a U+FFFD that is not the three bytes of a real U+FFFD in the line.
  """

  def first_invalid() -> tf.Tensor:
    chars, offsets = tf.strings.unicode_decode_with_offsets(line, "UTF-8", errors="replace")
    real = tf.strings.substr(tf.fill(tf.shape(offsets), line), offsets, tf.ones_like(offsets) * 3)
    return tf.reduce_min(tf.boolean_mask(offsets, tf.equal(chars, 0xFFFD) & (real != "\ufffd")))

  valid = tf.equal(tf.strings.unicode_transcode(line, "UTF-8", "UTF-8", errors="replace"), line)
  return tf.cond(valid, lambda: tf.constant(-1, tf.int64), first_invalid)


def _parse_line(path: tf.Tensor, line_number: tf.Tensor, line: tf.Tensor) -> dict[str, tf.Tensor]:
  """Splits one line ([] string, number [] int64) into the triple, asserting it is well formed."""
  where = tf.strings.join([path, ":", tf.strings.as_string(line_number), ": "])
  utf8_error = _utf8_error(line)
  valid_utf8 = tf.debugging.Assert(utf8_error < 0, [
      tf.strings.join(
          [where, "invalid UTF-8 at byte ",
           tf.strings.as_string(utf8_error + 1), " of the line"])
  ])
  with tf.control_dependencies([valid_utf8]):
    line = tf.identity(line)
  fields = tf.strings.split(line, "\t")
  num_fields = tf.size(fields)
  well_formed = tf.debugging.Assert(num_fields == len(_FIELDS), [
      tf.strings.join([
          where, "expected 3 tab-separated fields (query, positive, negative), got ",
          tf.strings.as_string(num_fields)
      ])
  ])
  with tf.control_dependencies([well_formed]):
    fields = tf.identity(fields)
  non_empty = [
      tf.debugging.Assert(
          tf.strings.length(tf.strings.strip(fields[i])) > 0,
          [tf.strings.join([where, f"empty {name}"])]) for i, name in enumerate(_FIELDS)
  ]
  with tf.control_dependencies(non_empty):
    return {name: tf.identity(fields[i]) for i, name in enumerate(_FIELDS)}
