"""Vocabularies of the XTR encoders and the one tokenization of xtr (`tokenize_tf`).

T5 uses seqio's SentencePieceVocabulary. BERT (e.g. all-MiniLM-L6-v2) uses `BertVocabulary`:
uncased WordPiece, encoded in python by the `tokenizers` library and inside TF by TF-native ops
only (regexes, tf_text NFD normalization and FastWordpieceTokenizer; no lookup tables or
py_function), so tf.data iterators stay checkpointable. Both give identical ids.
Training (tf.data) and inference (`encode_batch`) both tokenize with `tokenize_tf`.
Padding id is 0 for both; inputs are lowercased before encoding, as the released XTR does.
"""
import functools
import json
import pathlib
from typing import Sequence

import gin
import numpy as np
import seqio
import tensorflow as tf
import tensorflow_text as tf_text
import tokenizers

_MAX_WORD_CHARS = 100  # Longer words (after normalization) encode as one [UNK], as in BERT.
# tokenizers' `is_chinese_char` blocks: every such character is a word of its own.
_CJK = (r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
        r"\x{2B740}-\x{2B81F}\x{2B920}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}")
_PUNCTUATION = r"!-/:-@\[-`{-~\p{P}"  # BERT's: ASCII symbols and Unicode punctuation (P*).
_UNKNOWN_WORD = "\uE000"  # A private-use character: a one-character word mapped to [UNK].


@gin.configurable
def t5_vocabulary(spm_path: str, extra_ids: int = 100) -> seqio.SentencePieceVocabulary:
  """The T5 SentencePiece vocabulary (32,000 pieces + `extra_ids` sentinels; pad 0, eos 1)."""
  return seqio.SentencePieceVocabulary(str(spm_path), extra_ids=extra_ids)


def wordpiece_file(path: str | pathlib.Path) -> str:
  """The tokenizer.json or vocab.txt at `path`, or in the directory `path`."""
  path = pathlib.Path(path)
  if path.is_dir():
    path = next((path / name for name in ("tokenizer.json", "vocab.txt")
                 if (path / name).exists()), path / "vocab.txt")
  return str(path)


def _read_tokens(path: pathlib.Path) -> list[str]:
  """WordPiece tokens in id order from a tokenizer.json or vocab.txt (or a dir holding one)."""
  path = pathlib.Path(wordpiece_file(path))
  if path.suffix != ".json":
    return path.read_text(encoding="utf-8").rstrip("\n").split("\n")
  spec = json.loads(path.read_text(encoding="utf-8"))
  normalizer = spec.get("normalizer") or {}
  if (spec["model"]["type"] != "WordPiece" or normalizer.get("type") != "BertNormalizer"
      or not normalizer.get("lowercase") or normalizer.get("strip_accents") is False):
    raise ValueError(f"{path} is not an uncased BERT WordPiece tokenizer.")
  vocab = spec["model"]["vocab"]
  return sorted(vocab, key=vocab.get)


def _normalize_tf(text: tf.Tensor) -> tf.Tensor:
  """tokenizers' uncased BertNormalizer in TF ops, with words then separated by single spaces.

  Also puts spaces around punctuation (BertPreTokenizer splits there anyway) and replaces words
  over _MAX_WORD_CHARS characters by _UNKNOWN_WORD (FastWordpieceTokenizer counts bytes).
  text: string Tensor of any shape -> same shape.
  """
  text = tf.strings.regex_replace(text, r"[\t\n\r\p{Z}]", " ")
  text = tf.strings.regex_replace(text, r"[\p{C}\x{FFFD}]", "")
  text = tf.strings.regex_replace(text, f"([{_CJK}])", r" \1 ")
  text = tf.strings.regex_replace(tf_text.normalize_utf8(text, "NFD"), r"\p{Mn}", "")
  # Lowercase character by character, as tokenizers does: no final-sigma rule (ICU has one).
  text = tf.strings.lower(tf.strings.regex_replace(text, "Σ", "σ"), encoding="utf-8")
  text = tf.strings.regex_replace(text, f"([{_PUNCTUATION}])", r" \1 ")
  return tf.strings.regex_replace(text, f"[^ ]{{{_MAX_WORD_CHARS + 1},}}", _UNKNOWN_WORD)


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
  def _tokens(self) -> tuple[str, ...]:
    tokens = tuple(_read_tokens(pathlib.Path(self._path)))
    if tokens[self.pad_id] != "[PAD]":
      raise ValueError(f"{self._path}: id {self.pad_id} must be [PAD], not {tokens[0]!r}.")
    return tokens

  def piece(self, token_id: int) -> str:
    """The vocabulary's string of `token_id` ("the", "##ing", "[CLS]")."""
    return self._tokens[token_id]

  @functools.cached_property
  def _ids(self) -> dict[str, int]:
    return {token: i for i, token in enumerate(self._tokens)}

  @functools.cached_property
  def _tokenizer(self) -> tokenizers.Tokenizer:
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordPiece(
        self._ids, unk_token="[UNK]", max_input_chars_per_word=_MAX_WORD_CHARS))
    tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = tokenizers.decoders.WordPiece(cleanup=False)
    return tokenizer

  @functools.cached_property
  def _tf_tokenizer(self) -> tf_text.FastWordpieceTokenizer:
    with tf.init_scope():  # An eager model buffer, usable by every later graph.
      return tf_text.FastWordpieceTokenizer(
          list(self._tokens), max_bytes_per_word=4 * _MAX_WORD_CHARS,
          token_out_type=tf.int32)

  @functools.cached_property
  def _tf_tokens(self) -> tf.Tensor:
    with tf.init_scope():
      return tf.constant(self._tokens)

  @property
  def cls_id(self) -> int:
    return self._ids["[CLS]"]

  @property
  def eos_id(self) -> int:
    return self._ids["[SEP]"]

  @property
  def unk_id(self) -> int:
    return self._ids["[UNK]"]

  @property
  def _base_vocab_size(self) -> int:
    return len(self._tokens)

  def _encode(self, s: str) -> list[int]:
    return self._tokenizer.encode(s).ids

  def _encode_tf(self, s: tf.Tensor) -> tf.Tensor:
    """s: string scalar -> [n] int32 ids (a string batch [N] -> ragged [N, None])."""
    return self._tf_tokenizer.tokenize(_normalize_tf(s))

  def _decode(self, ids: Sequence[int]) -> str:
    """Tokens joined by spaces, "##" pieces glued to the previous token, [PAD]/[CLS]/[SEP] left
    out."""
    skip = (self.pad_id, self.cls_id, self.eos_id)
    return self._tokenizer.decode([i for i in ids if i not in skip])

  def _decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
    """ids: [..., L] int32 -> [...] strings, as `_decode`."""
    ids = tf.convert_to_tensor(ids)
    keep = tf.reduce_all(ids[..., None] != [self.pad_id, self.cls_id, self.eos_id], axis=-1)
    tokens = tf.ragged.boolean_mask(tf.gather(self._tf_tokens, ids), keep)
    return tf.strings.regex_replace(tf.strings.reduce_join(tokens, axis=-1, separator=" "),
                                    " ##", "")


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
  `special_tokens`). The one tokenization of xtr: training (tf.data) and inference both use it.
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


def encode_batch(vocab: seqio.Vocabulary, texts: Sequence[str], max_length: int) -> np.ndarray:
  """texts -> [N, max_length] int32 ids of `tokenize_tf`, padded with 0."""
  ids = tokenize_tf(vocab, tf.constant(list(texts), tf.string, [len(texts)]), max_length)
  return ids.to_tensor(0, shape=[len(texts), max_length]).numpy()


def pieces(vocab: seqio.Vocabulary, ids: Sequence[int]) -> list[str]:
  """The vocabulary's string of each id: WordPiece tokens ("##ing") or SentencePiece pieces
  ("▁the", "</s>")."""
  if isinstance(vocab, BertVocabulary):
    return [vocab.piece(int(i)) for i in ids]
  if isinstance(vocab, seqio.SentencePieceVocabulary):
    return [vocab.tokenizer.id_to_piece(int(i)) for i in ids]
  raise TypeError(f"Unsupported vocabulary {vocab!r}.")


def unknown_only(vocab: seqio.Vocabulary, ids: np.ndarray) -> np.ndarray:
  """ids: [N, L] of `encode_batch` -> [N] bool: texts whose tokens are all unknown (or none).

  Special tokens, padding and T5's bare word-boundary piece "▁" do not count: "😀" is
  ["▁", <unk>] in T5 and [UNK] in BERT, both unknown only.
  """
  prefix, suffix = special_tokens(vocab)
  ignored = {vocab.pad_id, *prefix, *suffix}
  if isinstance(vocab, seqio.SentencePieceVocabulary):
    ignored.add(vocab.tokenizer.piece_to_id("\u2581"))
  content = ~np.isin(ids, list(ignored))
  return np.all(~content | (ids == vocab.unk_id), axis=1)
