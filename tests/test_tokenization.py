"""Inference tokenization in Python (`xtr.text.tokenization`) against training's TF one
(`vocabularies.tokenize_tf`) on real corpora and edge cases: the same ids, but where TF Text's
and Python's SentencePiece break a tie between equally scored segmentations differently."""
import gzip
import itertools
import json
import re

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from tests.test_vocabularies import EDGE_CASES
from tests.test_vocabularies import T5_CHECK_IDS
from tests.test_vocabularies import T5_CHECK_TEXT
from xtr.text import tokenization
from xtr.text import vocabularies

# Beyond test_vocabularies' edge cases: NUL (TF's lowercasing ends the text there), T5's
# sentinels written out, final sigma, dotted capital I, titlecase digraphs.
MORE_EDGE_CASES = [
    "ab\x00CD", "\x00x", "fill <extra_id_0> and <extra_id_99>", "ΟΔΟΣ. ΑΣ'", "İstanbul I\u0307",
    "ǅemal ǈ", "a" * 600, " leading and trailing  "
]


def tf_ids(vocab, texts: list[str], max_length: int) -> np.ndarray:
  """[N, max_length] ids of `tokenize_tf`, padded with 0, tokenized as training does (inside
  tf.data)."""
  dataset = tf.data.Dataset.from_tensor_slices(texts).batch(256).map(
      lambda batch: vocabularies.tokenize_tf(vocab, batch, max_length).to_tensor(
          0, shape=[None, max_length]))
  return np.concatenate(list(dataset.as_numpy_iterator()))


@pytest.fixture(scope="module")
def corpora(scifact_dir, msmarco_triples_path) -> list[str]:
  """Every SciFact and NFCorpus document (title + text) and query, the MS MARCO triples' texts
  and the edge cases: ~14,000 texts."""
  texts = []
  for corpus, queries in ((open(scifact_dir / "corpus.jsonl",
                                encoding="utf-8"), scifact_dir / "queries.jsonl"),
                          (gzip.open(scifact_dir.parent / "nfcorpus" / "corpus.jsonl.gz", "rt",
                                     encoding="utf-8"),
                           scifact_dir.parent / "nfcorpus" / "queries.jsonl")):
    with corpus:
      texts += [f"{d['title']} {d['text']}" for d in map(json.loads, corpus)]
    with open(queries, encoding="utf-8") as f:
      texts += [json.loads(line)["text"] for line in f]
  with open(msmarco_triples_path, encoding="utf-8") as f:
    texts += [field for line in f for field in line.rstrip("\n").split("\t")]
  return texts + EDGE_CASES + MORE_EDGE_CASES


@pytest.fixture(scope="module", params=["t5", "bert"])
def vocab(request, t5_spm_path, minilm_dir):
  if request.param == "t5":
    return vocabularies.t5_vocabulary(str(t5_spm_path))
  return vocabularies.bert_vocabulary(minilm_dir)


@pytest.mark.parametrize("max_length", [32, 256])
def test_python_ids_equal_tokenize_tf(vocab, corpora, max_length, t5_spm_path):
  """WordPiece: equal on every text. SentencePiece: equal but on a few texts (3 of SciFact's
  and NFCorpus's 13,162 at any length, 6 of their 3.4M tokens: "ppp" is "p pp" in Python,
  "pp p" in TF), where both segmentations spell the same text with the same total score."""
  tokenizer = tokenization.of(vocab)
  expected = tf_ids(vocab, corpora, max_length)
  got = tokenization.encode_batch(tokenizer, corpora, max_length)
  assert got.dtype == np.int32 and got.shape == (len(corpora), max_length)
  assert np.mean(expected[:, -1] != 0) > 0.05  # Long texts were trimmed: trimming is tested.
  differing = np.flatnonzero(np.any(got != expected, axis=1))
  if isinstance(tokenizer, tokenization.WordPiece):
    assert not len(differing), [corpora[i][:80] for i in differing[:5]]
    return
  assert len(differing) <= 5
  model = sentencepiece.SentencePieceProcessor(model_file=str(t5_spm_path))
  for i in differing:
    text = tokenization.lowercase(corpora[i])
    ours, theirs = tokenizer.encode(text), vocab.encode_tf(tf.constant(text)).numpy().tolist()
    assert model.decode(ours) == model.decode(theirs)
    assert sum(map(model.get_score, ours)) == pytest.approx(sum(map(model.get_score, theirs)),
                                                            abs=1e-4)


def test_tokenizer_rebuilt_from_its_description_is_the_same(vocab, corpora):
  tokenizer = tokenization.of(vocab)
  spec = tokenizer.describe()
  rebuilt = (tokenization.WordPiece(spec["path"]) if spec["kind"] == "wordpiece" else
             tokenization.SentencePiece(spec["path"], spec["extra_ids"]))
  np.testing.assert_array_equal(tokenization.encode_batch(rebuilt, corpora[:300], 64),
                                tokenization.encode_batch(tokenizer, corpora[:300], 64))
  assert rebuilt.size == vocab.vocab_size
  assert (rebuilt.prefix, rebuilt.suffix) == vocabularies.special_tokens(vocab)


def test_t5_check_values_lowercasing_trimming_and_sentinels(t5_spm_path):
  t5 = tokenization.SentencePiece(str(t5_spm_path), extra_ids=100)
  assert t5.encode(T5_CHECK_TEXT) == T5_CHECK_IDS
  batch = tokenization.encode_batch(t5, [T5_CHECK_TEXT, ""], max_length=16)
  expected = t5.encode(T5_CHECK_TEXT.lower()) + [1]
  assert expected != T5_CHECK_IDS + [1]  # Lowercasing changes the ids.
  np.testing.assert_array_equal(batch[0], expected + [0] * (16 - len(expected)))
  np.testing.assert_array_equal(batch[1], [1] + [0] * 15)
  trimmed = tokenization.encode_batch(t5, [T5_CHECK_TEXT], max_length=4)
  np.testing.assert_array_equal(trimmed[0], expected[:3] + [1])
  assert t5.size == 32100 and t5.encode("<extra_id_0>") == [32099]  # seqio's numbering.
  assert t5.pieces([13959, 1]) == ["▁translate", "</s>"]


def test_bert_trims_keeps_specials_pads_and_names_pieces(minilm_dir):
  bert = tokenization.WordPiece(minilm_dir)
  doc = "The embeddings of Ubiquitination, 42 times! " * 3
  batch = tokenization.encode_batch(bert, [doc, "", "Hello"], max_length=8)
  np.testing.assert_array_equal(batch[0], [101] + bert.encode(doc.lower())[:6] + [102])
  np.testing.assert_array_equal(batch[1], [101, 102, 0, 0, 0, 0, 0, 0])
  np.testing.assert_array_equal(batch[2], [101, 7592, 102, 0, 0, 0, 0, 0])
  assert bert.pieces([101, 7592, 102]) == ["[CLS]", "hello", "[SEP]"]
  assert bert.decode(batch[0]) == "the embeddings of"  # 6 ids: "##ding" "##s" glued.
  with pytest.raises(ValueError, match="cannot hold the special tokens"):
    tokenization.encode_batch(bert, [doc], max_length=1)


def test_queries_of_unknown_tokens_only_are_flagged(t5_spm_path, minilm_dir):
  texts = ["what causes scurvy", "😀 🙂", "", "😀 vitamin"]
  for tokenizer in (tokenization.SentencePiece(str(t5_spm_path),
                                               100), tokenization.WordPiece(minilm_dir)):
    ids = tokenization.encode_batch(tokenizer, texts, 16)
    np.testing.assert_array_equal(tokenization.unknown_only(tokenizer, ids),
                                  [False, True, True, False])


def test_bert_rejects_a_cased_tokenizer(minilm_dir, tmp_path):
  spec = json.loads((minilm_dir / "tokenizer.json").read_text())
  spec["normalizer"]["lowercase"] = False
  (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
  with pytest.raises(ValueError, match="not an uncased BERT WordPiece"):
    tokenization.WordPiece(tmp_path / "tokenizer.json")


def _wordpiece_json(vocab: dict) -> bytes:
  """An uncased BERT tokenizer.json holding `vocab`."""
  return json.dumps({
      "normalizer": {
          "type": "BertNormalizer",
          "lowercase": True
      },
      "model": {
          "type": "WordPiece",
          "vocab": vocab
      }
  }).encode()


@pytest.mark.parametrize("name, content, message", [
    ("spiece.model", b"\x00\x01forged", "is not a SentencePiece model \\(Error parsing message"),
    ("spiece.model", b"", r"is not a SentencePiece model \(it holds no pieces\)"),
    ("tokenizer.json", b"{forged", "is not an uncased BERT WordPiece tokenizer.json"),
    ("tokenizer.json", b'{"model": 3}', "is not an uncased BERT WordPiece tokenizer.json"),
    ("tokenizer.json", b"[]", "is not an uncased BERT WordPiece tokenizer.json"),
    ("tokenizer.json", _wordpiece_json({
        "[PAD]": 0,
        "a": "1"
    }), "is not an uncased BERT WordPiece tokenizer.json"),
    ("tokenizer.json", _wordpiece_json({
        "[PAD]": 0,
        "a": 2
    }), "the ids of model.vocab are not 0 to 1, once each"),
    ("vocab.txt", b"[PAD]\n\xff\xfe\n", "is not a WordPiece vocabulary: invalid UTF-8 at byte 7"),
    ("vocab.txt", b"[PAD]\nthe\n[UNK]\n", r"lacks the special tokens \['\[CLS\]', '\[SEP\]'\]"),
    ("vocab.txt", b"[PAD]\n[CLS]\nthe\n[SEP]\nthe\n[UNK]\n",
     "line 5 holds the token 'the', as line 3 does: a vocabulary holds each token once"),
    ("tokenizer.json", _wordpiece_json({}), "id 0 must be \\[PAD\\], not 'missing'"),
])
def test_a_forged_vocabulary_is_refused_naming_the_file(tmp_path, name, content, message):
  path = tmp_path / name
  path.write_bytes(content)
  load = tokenization.SentencePiece if name == "spiece.model" else tokenization.WordPiece
  with pytest.raises(ValueError, match=f"^{re.escape(str(path))}:? {message}"):
    load(str(path))


def test_vocab_txt_dir_and_tokenizer_json_are_the_same(minilm_dir, corpora):
  texts = list(itertools.islice(corpora, 200)) + EDGE_CASES
  ids = [
      tokenization.encode_batch(tokenization.WordPiece(path), texts, 64)
      for path in (minilm_dir / "tokenizer.json", minilm_dir / "vocab.txt", minilm_dir)
  ]
  np.testing.assert_array_equal(ids[0], ids[1])
  np.testing.assert_array_equal(ids[0], ids[2])
