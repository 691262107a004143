"""Files by path: local ones through Python, remote ones (gs://…) through TensorFlow's gfile,
which is imported only for them: a search of local files never loads TensorFlow."""
import os
from typing import BinaryIO


def _gfile():
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  return tf.io.gfile


def is_remote(path: str) -> bool:
  """Whether `path` is a URL (gs://bucket/…) rather than a local file."""
  return "://" in str(path)


def open_binary(path: str) -> BinaryIO:
  """The file at `path`, opened for reading bytes."""
  return _gfile().GFile(path, "rb") if is_remote(path) else open(path, "rb")


def read_bytes(path: str) -> bytes:
  with open_binary(path) as f:
    return f.read()


def exists(path: str) -> bool:
  return _gfile().exists(path) if is_remote(path) else os.path.exists(path)
