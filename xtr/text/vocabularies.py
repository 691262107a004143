"""Vocabularies of the XTR encoders for training, and its tokenization in TF (`tokenize_tf`).

T5 uses seqio's SentencePieceVocabulary. BERT (e.g. all-MiniLM-L6-v2) uses `BertVocabulary`:
uncased WordPiece, encoded in Python by `tokenization.WordPiece` and inside TF by TF-native ops
only (regexes, tf_text NFD normalization and FastWordpieceTokenizer; no lookup tables or
py_function), so tf.data iterators stay checkpointable. Both give identical ids.
Training (tf.data) tokenizes with `tokenize_tf`; inference with `xtr.text.tokenization`, in Python,
with the same ids (tests/test_tokenization.py). Padding id is 0 for both; inputs are lowercased
before encoding, as the released XTR does.
"""
import functools
import pathlib
from typing import Sequence

import gin
import seqio
import tensorflow as tf
import tensorflow_text as tf_text

from xtr.text import tokenization

# tokenizers' `is_chinese_char` blocks: every such character is a word of its own.
_CJK = (r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
        r"\x{2B740}-\x{2B81F}\x{2B920}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}")
_PUNCTUATION = r"!-/:-@\[-`{-~\p{P}"  # BERT's: ASCII symbols and Unicode punctuation (P*).
MAX_WORD_CHARS = tokenization.MAX_WORD_CHARS
_UNKNOWN_WORD = "\uE000"  # A private-use character: a one-character word mapped to [UNK].


@gin.configurable
def t5_vocabulary(spm_path: str, extra_ids: int = 100) -> seqio.SentencePieceVocabulary:
  """The T5 SentencePiece vocabulary (32,000 pieces + `extra_ids` sentinels; pad 0, eos 1)."""
  return seqio.SentencePieceVocabulary(str(spm_path), extra_ids=extra_ids)


def _normalize_tf(text: tf.Tensor) -> tf.Tensor:
  """tokenizers' uncased BertNormalizer in TF ops, with words then separated by single spaces.

  Also puts spaces around punctuation (BertPreTokenizer splits there anyway) and replaces words
  over MAX_WORD_CHARS characters by _UNKNOWN_WORD (FastWordpieceTokenizer counts bytes).
  text: string Tensor of any shape -> same shape.
  """
  text = tf.strings.regex_replace(text, r"[\t\n\r\p{Z}]", " ")
  text = tf.strings.regex_replace(text, r"[\p{C}\x{FFFD}]", "")
  text = tf.strings.regex_replace(text, f"([{_CJK}])", r" \1 ")
  text = tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFD"), r"\p{Mn}", "")
  # Lowercase character by character, as tokenizers does: no final-sigma rule (ICU has one).
  text = tf.strings.lower(tf.strings.regex_replace(text, "Σ", "σ"), encoding="utf-8")
  text = tf.strings.regex_replace(text, f"([{_PUNCTUATION}])", r" \1 ")
  return tf.strings.regex_replace(text, f"[^ ]{{{MAX_WORD_CHARS + 1},}}", _UNKNOWN_WORD)


class BertVocabulary(seqio.Vocabulary):
  """Uncased BERT WordPiece vocabulary (the tokenization of `BertTokenizerFast`, uncased).

  Text is cleaned (control characters dropped, whitespace -> " "), CJK ideographs split off,
  NFD-normalized with non-spacing marks (accents) stripped, lowercased, split at whitespace and
  punctuation, and WordPiece-encoded. `encode` adds no [CLS]/[SEP] (see `special_tokens`), and
  special-token strings in the text (e.g. "[SEP]") are encoded as ordinary text. eos_id is [SEP].
  Tokenizers load lazily and are not pickled, so instances are cheap to create and copy.
  """

  def __init__(self, path: str | pathlib.Path):
    """path: a tokenizer.json or vocab.txt, or a model directory holding one."""
    super().__init__(extra_ids=0)
    self._path = str(path)

  def __getstate__(self) -> dict:
    return {"_path": self._path, "_extra_ids": 0}

  def __eq__(self, other) -> bool:
    return isinstance(other, BertVocabulary) and self._path == other._path

  def __hash__(self) -> int:
    return hash(self._path)

  def __repr__(self) -> str:
    return f"BertVocabulary({self._path!r})"

  @property
  def path(self) -> str:
    return self._path

  @functools.cached_property
  def wordpiece(self) -> tokenization.WordPiece:
    """The Python tokenizer of this vocabulary."""
    return tokenization.WordPiece(self._path)

  @property
  def _tokens(self) -> tuple[str, ...]:
    return self.wordpiece.tokens

  @functools.cached_property
  def _tf_tokenizer(self) -> tf_text.FastWordpieceTokenizer:
    with tf.init_scope():  # An eager model buffer, usable by every later graph.
      return tf_text.FastWordpieceTokenizer(list(self._tokens),
                                            max_bytes_per_word=4 * MAX_WORD_CHARS,
                                            token_out_type=tf.int32)

  @functools.cached_property
  def _tf_tokens(self) -> tf.Tensor:
    with tf.init_scope():
      return tf.constant(self._tokens)

  @property
  def cls_id(self) -> int:
    return self.wordpiece.prefix[0]

  @property
  def eos_id(self) -> int:
    return self.wordpiece.suffix[0]

  @property
  def unk_id(self) -> int:
    return self.wordpiece.unk_id

  @property
  def _base_vocab_size(self) -> int:
    return len(self._tokens)

  def _encode(self, s: str) -> list[int]:
    return self.wordpiece.encode(s)

  def _encode_tf(self, s: tf.Tensor) -> tf.Tensor:
    """s: string scalar -> [n] int32 ids (a string batch [N] -> ragged [N, None])."""
    return self._tf_tokenizer.tokenize(_normalize_tf(s))

  def _decode(self, ids: Sequence[int]) -> str:
    """Tokens joined by spaces, "##" pieces glued to the previous token, [PAD]/[CLS]/[SEP] left
    out."""
    return self.wordpiece.decode(ids)

  def _decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
    """ids: [..., L] int32 -> [...] strings, as `_decode`."""
    ids = tf.convert_to_tensor(ids)
    keep = tf.reduce_all(ids[..., None] != [self.pad_id, self.cls_id, self.eos_id], axis=-1)
    tokens = tf.ragged.boolean_mask(tf.gather(self._tf_tokens, ids), keep)
    return tf.strings.regex_replace(tf.strings.reduce_join(tokens, axis=-1, separator=" "), " ##",
                                    "")


@gin.configurable
def bert_vocabulary(path: str | pathlib.Path) -> BertVocabulary:
  """The uncased WordPiece vocabulary at `path` (tokenizer.json, vocab.txt or their dir)."""
  return BertVocabulary(path)


def special_tokens(vocab: seqio.Vocabulary) -> tuple[tuple[int, ...], tuple[int, ...]]:
  """(prefix ids, suffix ids) around each sequence: T5 ((), (eos,)); BERT ((CLS,), (SEP,))."""
  if isinstance(vocab, BertVocabulary):
    return (vocab.cls_id,), (vocab.eos_id,)
  if isinstance(vocab, seqio.SentencePieceVocabulary):
    return (), (vocab.eos_id,)
  raise TypeError(f"Unsupported vocabulary {vocab!r}.")


def tokenize_tf(vocab: seqio.Vocabulary, texts: tf.Tensor, max_length: int) -> tf.RaggedTensor:
  """texts: [N] string -> [N, <= max_length] int32 ragged token ids.

  Lowercases (as the released XTR does), encodes, keeps the first
  max_length - len(prefix) - len(suffix) ids and wraps them in the special tokens (see
  `special_tokens`). Training's tokenization (tf.data); `tokenization.encode_batch` gives the
  same ids in Python for inference.
  """
  prefix, suffix = special_tokens(vocab)
  budget = max_length - len(prefix) - len(suffix)
  if budget < 0:
    raise ValueError(f"max_length {max_length} cannot hold the special tokens {prefix, suffix}.")
  ids = vocab.encode_tf(tf.strings.lower(texts, encoding="utf-8"))
  ids = tf.cast(ids[:, :budget], tf.int32)
  num_texts = ids.nrows()
  wrap = lambda special: tf.RaggedTensor.from_tensor(
      tf.tile(tf.constant([special], tf.int32, [1, len(special)]), [num_texts, 1]))
  return tf.concat([wrap(prefix), ids, wrap(suffix)], axis=1)
