"""Inference tokenization without TensorFlow: texts -> the token ids that training sees.

Training tokenizes inside tf.data (`vocabularies.tokenize_tf`). Export, search and the analysis
tools tokenize here, in Python: `WordPiece` (uncased BERT, by the `tokenizers` library) and
`SentencePiece` (T5 / mT5, by `sentencepiece`, with seqio's extra ids), so that a search process
never imports TensorFlow or seqio (~620 MB resident, and ~10 ms of eager TF ops per lone query).
`encode_batch` gives `tokenize_tf`'s ids (tests/test_tokenization.py: SciFact, NFCorpus, MS
MARCO and edge cases): WordPiece id for id; SentencePiece too, but where two segmentations of
a word score the same and TF Text breaks the tie the other way (6 of 3.4M tokens of SciFact and
NFCorpus: "ppp" is "p pp" here, "pp p" in TF; seqio's own Python and TF encodings differ alike).

Both vocabularies see the text lowercased (as the released XTR does), keep its first
max_length - len(prefix) - len(suffix) ids and wrap them in the special tokens: T5 () + (EOS,),
BERT ([CLS],) + ([SEP],). The padding id is 0.
"""
import functools
import json
import os
from typing import Sequence
from typing import Union

from google.protobuf import message
import numpy as np
import sentencepiece
from sentencepiece import sentencepiece_model_pb2
import tokenizers

from xtr import io
from xtr import typecheck

MAX_WORD_CHARS = 100  # Longer words (after normalization) encode as one [UNK], as in BERT.
# A vocabulary file (spiece.model, tokenizer.json, vocab.txt) past this is not one: refused, the
# rest never read. mT5's spiece.model is 4.3 MB; multilingual tokenizer.json files ~20 MB.
MAX_VOCABULARY_BYTES = 1 << 28
MAX_EXTRA_IDS = 100_000  # Sentinels a SentencePiece vocabulary may append (T5's: 100).


def lowercase(text: str) -> str:
  """`text` lowercased as TensorFlow's `tf.strings.lower(encoding="utf-8")` does: full Unicode
  lowercasing (with the Greek final sigma), and the text ends at its first NUL character."""
  return text.split("\0", 1)[0].lower()


def wordpiece_file(path: str) -> str:
  """The tokenizer.json or vocab.txt at `path`, or in the directory `path`."""
  path = str(path)
  if not os.path.isdir(path):
    return path
  return next((os.path.join(path, name)
               for name in ("tokenizer.json", "vocab.txt")
               if os.path.exists(os.path.join(path, name))), os.path.join(path, "vocab.txt"))


def read_wordpiece_tokens(path: str) -> list[str]:
  """WordPiece tokens in id order from a tokenizer.json or vocab.txt.

  Raises:
    ValueError: naming a file that is not UTF-8, a tokenizer.json that is not an uncased BERT
      WordPiece (or not one at all), or a vocabulary whose ids are not 0, 1, ... once each.
  """
  try:
    text = io.read_bytes(path, MAX_VOCABULARY_BYTES).decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError(f"{path} is not a WordPiece vocabulary: invalid UTF-8 at byte "
                     f"{e.start + 1}.") from None
  if not path.endswith(".json"):
    return _unique_lines(path, text.rstrip("\n").split("\n"))
  vocab = _uncased_wordpiece_vocab(path, text)
  if sorted(vocab.values()) != list(range(len(vocab))):
    raise ValueError(f"{path}: the ids of model.vocab are not 0 to {len(vocab) - 1}, once each.")
  return sorted(vocab, key=vocab.get)


def _unique_lines(path: str, tokens: list[str]) -> list[str]:
  """The tokens of a vocab.txt (id = line - 1); refuses one on two lines (inference would take
  the later id, training's TF tokenizer fails), naming both."""
  first = {}
  for line, token in enumerate(tokens, start=1):
    if token in first:
      raise ValueError(f"{path}: line {line} holds the token {token!r}, as line {first[token]} "
                       "does: a vocabulary holds each token once.")
    first[token] = line
  return tokens


def _uncased_wordpiece_vocab(path: str, text: str) -> dict[str, int]:
  """model.vocab of the tokenizer.json `text`; refuses one that is not an uncased BERT
  WordPiece."""
  try:
    spec = json.loads(text)
    normalizer = spec.get("normalizer") or {}
    model, vocab = spec["model"], spec["model"]["vocab"]
    uncased = (model["type"] == "WordPiece" and normalizer.get("type") == "BertNormalizer" and
               normalizer.get("lowercase") and normalizer.get("strip_accents") is not False)
    typed = all(isinstance(t, str) and typecheck.matches(i, int) for t, i in vocab.items())
  except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
    uncased = typed = False
  if not (uncased and typed):
    raise ValueError(f"{path} is not an uncased BERT WordPiece tokenizer.json.")
  return vocab


class WordPiece:
  """Uncased BERT WordPiece (`BertTokenizerFast`'s tokenization): text cleaned, CJK ideographs
  split off, NFD with accents stripped, lowercased, split at whitespace and punctuation.
  Special-token strings in the text (e.g. "[SEP]") are ordinary text."""
  kind = "wordpiece"
  pad_id = 0

  def __init__(self, path: str):
    """path: a tokenizer.json or vocab.txt (local or gs://), or a local directory holding one."""
    self.path = wordpiece_file(path)
    self.tokens = tuple(read_wordpiece_tokens(self.path))
    self._ids = {token: i for i, token in enumerate(self.tokens)}
    if self.tokens[self.pad_id:self.pad_id + 1] != ("[PAD]",):
      raise ValueError(f"{self.path}: id {self.pad_id} must be [PAD], not "
                       f"{self.tokens[0] if self.tokens else 'missing'!r}.")
    missing = [token for token in ("[CLS]", "[SEP]", "[UNK]") if token not in self._ids]
    if missing:
      raise ValueError(f"{self.path} lacks the special tokens {missing} of a BERT WordPiece "
                       "vocabulary.")
    self.prefix, self.suffix = (self._ids["[CLS]"],), (self._ids["[SEP]"],)
    self.unk_id = self._ids["[UNK]"]

  @functools.cached_property
  def _tokenizer(self) -> tokenizers.Tokenizer:
    tokenizer = tokenizers.Tokenizer(
        tokenizers.models.WordPiece(self._ids, unk_token="[UNK]",
                                    max_input_chars_per_word=MAX_WORD_CHARS))
    tokenizer.normalizer = tokenizers.normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = tokenizers.decoders.WordPiece(cleanup=False)
    return tokenizer

  def encode(self, text: str) -> list[int]:
    """`text`'s ids, without special tokens and without lowercasing it first."""
    return self._tokenizer.encode(text).ids

  def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
    return [e.ids for e in self._tokenizer.encode_batch(list(texts))]

  def decode(self, ids: Sequence[int]) -> str:
    """Tokens joined by spaces, "##" pieces glued to the previous token, specials left out."""
    skip = (self.pad_id, *self.prefix, *self.suffix)
    return self._tokenizer.decode([i for i in ids if i not in skip])

  def pieces(self, ids: Sequence[int]) -> list[str]:
    """The vocabulary's string of each id ("the", "##ing", "[CLS]")."""
    return [self.tokens[int(i)] for i in ids]

  @property
  def size(self) -> int:
    return len(self.tokens)

  def describe(self) -> dict:
    return {"kind": self.kind, "path": self.path}


class SentencePiece:
  """A SentencePiece model (T5: cc_all.32000; mT5) as seqio's `SentencePieceVocabulary` loads
  it: `extra_ids` sentinels "▁<extra_id_i>" appended as user-defined pieces, the first one with
  the highest id."""
  kind = "sentencepiece"
  pad_id = 0

  def __init__(self, path: str, extra_ids: int = 0):
    self.path, self.extra_ids = str(path), extra_ids
    try:
      self._processor = sentencepiece.SentencePieceProcessor(
          model_proto=_with_extra_ids(io.read_bytes(self.path, MAX_VOCABULARY_BYTES), extra_ids))
    except (message.DecodeError, RuntimeError) as e:
      raise ValueError(f"{self.path} is not a SentencePiece model ({e}).") from None
    if self._processor.pad_id() != self.pad_id:
      raise ValueError(f"{self.path}: the padding id must be {self.pad_id}, not "
                       f"{self._processor.pad_id()}.")
    self.prefix, self.suffix = (), (self._processor.eos_id(),)
    self.unk_id = self._processor.unk_id()
    self.word_boundary_id = self._processor.piece_to_id("\u2581")

  def encode(self, text: str) -> list[int]:
    """`text`'s ids, without EOS and without lowercasing it first."""
    return self._processor.encode_as_ids(text)

  def encode_many(self, texts: Sequence[str]) -> list[list[int]]:
    return self._processor.encode(list(texts), out_type=int)

  def pieces(self, ids: Sequence[int]) -> list[str]:
    """The model's piece of each id ("▁the", "</s>")."""
    return [self._processor.id_to_piece(int(i)) for i in ids]

  @property
  def size(self) -> int:
    return self._processor.get_piece_size()

  def describe(self) -> dict:
    return {"kind": self.kind, "path": self.path, "extra_ids": self.extra_ids}


def _with_extra_ids(model_proto: bytes, extra_ids: int) -> bytes:
  """A serialized SentencePiece model with `extra_ids` sentinels appended, as seqio adds them.

  Raises:
    message.DecodeError: the bytes are not a ModelProto, or one without pieces.
  """
  model = sentencepiece_model_pb2.ModelProto.FromString(model_proto)
  if not model.pieces:
    raise message.DecodeError("it holds no pieces")
  for i in reversed(range(extra_ids)):
    model.pieces.add(piece=f"▁<extra_id_{i}>", score=0.0,
                     type=sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED)
  return model.SerializeToString()


Tokenizer = Union[WordPiece, SentencePiece]


def encode_batch(tokenizer: Tokenizer, texts: Sequence[str], max_length: int) -> np.ndarray:
  """texts -> [N, max_length] int32 ids, lowercased, trimmed, wrapped and padded with 0 (the
  ids of `vocabularies.tokenize_tf`)."""
  prefix, suffix = tokenizer.prefix, tokenizer.suffix
  budget = max_length - len(prefix) - len(suffix)
  if budget < 0:
    raise ValueError(f"max_length {max_length} cannot hold the special tokens {prefix, suffix}.")
  ids = np.zeros((len(texts), max_length), np.int32)
  for row, text_ids in zip(ids, tokenizer.encode_many([lowercase(t) for t in texts])):
    wrapped = [*prefix, *text_ids[:budget], *suffix]
    row[:len(wrapped)] = wrapped
  return ids


def unknown_only(tokenizer: Tokenizer, ids: np.ndarray) -> np.ndarray:
  """ids: [N, L] of `encode_batch` -> [N] bool: texts whose tokens are all unknown (or none).

  Special tokens, padding and T5's bare word-boundary piece "▁" do not count: "😀" is
  ["▁", <unk>] in T5 and [UNK] in BERT, both unknown only.
  """
  ignored = {tokenizer.pad_id, *tokenizer.prefix, *tokenizer.suffix}
  if isinstance(tokenizer, SentencePiece):
    ignored.add(tokenizer.word_boundary_id)
  content = ~np.isin(ids, list(ignored))
  return np.all(~content | (ids == tokenizer.unk_id), axis=1)


def of(vocabulary) -> Tokenizer:
  """The tokenizer of a training vocabulary (`vocabularies.BertVocabulary`, seqio's
  `SentencePieceVocabulary`), or `vocabulary` itself if it is a tokenizer already."""
  if isinstance(vocabulary, (WordPiece, SentencePiece)):
    return vocabulary
  if hasattr(vocabulary, "wordpiece"):
    return vocabulary.wordpiece
  if hasattr(vocabulary, "sentencepiece_model_file"):
    return SentencePiece(vocabulary.sentencepiece_model_file, vocabulary.extra_ids)
  raise TypeError(f"No tokenizer for the vocabulary {vocabulary!r}.")
