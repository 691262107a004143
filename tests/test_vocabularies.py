"""T5 and BERT vocabularies: check values, transformers parity, tf == python, batch encoding."""
import copy
import itertools
import json
import pickle

import pytest
import tensorflow as tf
import transformers

from xtr.text import vocabularies

T5_CHECK_TEXT = "translate English to German: That is good."
T5_CHECK_IDS = [13959, 1566, 12, 2968, 10, 466, 19, 207, 5]

# Accents, scripts, symbols, control and space characters, long words, final sigma.
EDGE_CASES = [
    "Café déjà vu — naïve façade",
    "Straße ß ÅNGSTRÖM İstanbul",
    "中文字符 日本語 한국어",
    "tab\tnew\nline\r end",
    "a\x00b\ufffdc\u200bd\u00ade\x0bf\x85g",
    "a\u00a0b\u2003c\u3000d\u2028e",
    "emoji 😀👍🏽🥰",
    "x" * 120,
    "é" * 101,
    "é" * 100,
    "α" * 101,
    "ﬁ ligature ½ ①",
    "ΟΔΟΣ Σ ς σ",
    "",
    "   ",
    "hello---world!!! (a+b)=c $5 @x #y ^z `q` ~w |p \\ «guillemets»",
    "ＡＢＣ",
    "x\u0301\u0327y",
    "10 µg/m² ≤ 5 ± 2 °C, CD4⁺ H₂O…",
    "Ǆ ǅ ǆ ǰ ẞ K Å Ω",
]


@pytest.fixture(scope="module")
def t5_vocab(t5_spm_path):
  return vocabularies.t5_vocabulary(t5_spm_path)


@pytest.fixture(scope="module")
def bert_vocab(minilm_dir):
  return vocabularies.bert_vocabulary(minilm_dir / "tokenizer.json")


@pytest.fixture(scope="module")
def texts(scifact_dir, msmarco_triples_path) -> list[str]:
  """500 SciFact documents (title + text), all SciFact queries, MS MARCO triples, edge cases."""
  with open(scifact_dir / "corpus.jsonl") as f:
    docs = [json.loads(line) for line in itertools.islice(f, 500)]
  with open(scifact_dir / "queries.jsonl") as f:
    queries = [json.loads(line)["text"] for line in f]
  with open(msmarco_triples_path, encoding="utf-8") as f:
    triples = [field for line in f for field in line.rstrip("\n").split("\t")]
  return [f"{doc['title']} {doc['text']}" for doc in docs] + queries + triples + EDGE_CASES


def _tf_ids(vocab, texts: list[str]) -> list[list[int]]:
  """encode_tf inside a tf.data pipeline, one scalar string at a time."""
  dataset = tf.data.Dataset.from_tensor_slices(texts).map(vocab.encode_tf)
  return [ids.tolist() for ids in dataset.as_numpy_iterator()]


def test_t5_check_values(t5_vocab):
  assert t5_vocab.vocab_size == 32100
  assert t5_vocab.encode(T5_CHECK_TEXT) == T5_CHECK_IDS
  assert t5_vocab.encode_tf(tf.constant(T5_CHECK_TEXT)).numpy().tolist() == T5_CHECK_IDS
  assert vocabularies.special_tokens(t5_vocab) == ((), (1,))


def test_bert_ids_equal_transformers(bert_vocab, minilm_dir, texts):
  tokenizer = transformers.BertTokenizerFast.from_pretrained(minilm_dir)
  expected = tokenizer(texts, add_special_tokens=False, truncation=False)["input_ids"]
  assert max(map(len, expected)) > 512  # Nothing was truncated.
  assert [bert_vocab.encode(t) for t in texts] == expected
  assert [bert_vocab.encode(text) for text in EDGE_CASES] == expected[-len(EDGE_CASES):]
  assert bert_vocab.vocab_size == tokenizer.vocab_size == 30522
  assert vocabularies.special_tokens(bert_vocab) == ((tokenizer.cls_token_id,),
                                                     (tokenizer.sep_token_id,))
  assert (bert_vocab.pad_id, bert_vocab.unk_id) == (tokenizer.pad_token_id, tokenizer.unk_token_id)


def test_bert_tf_ids_equal_python_ids(bert_vocab, texts):
  special = "[CLS] x [SEP] [PAD]"  # Special-token strings are text on both sides.
  assert _tf_ids(bert_vocab, texts + [special]) == [bert_vocab.encode(t) for t in texts + [special]]
  assert 101 not in bert_vocab.encode(special) and 102 not in bert_vocab.encode(special)
  batch = bert_vocab.encode_tf(tf.constant(EDGE_CASES))  # A batch gives ragged ids.
  assert batch.to_list() == [bert_vocab.encode(t) for t in EDGE_CASES]


def test_bert_vocab_from_vocab_txt_or_dir_is_the_same(bert_vocab, minilm_dir, texts):
  for path in (minilm_dir / "vocab.txt", minilm_dir):
    other = vocabularies.BertVocabulary(path)
    assert [other.encode(t) for t in texts[:50]] == [bert_vocab.encode(t) for t in texts[:50]]
    assert _tf_ids(other, EDGE_CASES) == _tf_ids(bert_vocab, EDGE_CASES)


def test_bert_rejects_a_cased_tokenizer(minilm_dir, tmp_path):
  spec = json.loads((minilm_dir / "tokenizer.json").read_text())
  spec["normalizer"]["lowercase"] = False
  (tmp_path / "tokenizer.json").write_text(json.dumps(spec))
  with pytest.raises(ValueError, match="not an uncased BERT WordPiece"):
    vocabularies.BertVocabulary(tmp_path / "tokenizer.json").encode("x")


def test_bert_tf_encoding_keeps_the_iterator_checkpointable(minilm_dir, texts, tmp_path):
  vocab = vocabularies.BertVocabulary(minilm_dir)  # First used inside a tf.data graph.
  iterator = iter(tf.data.Dataset.from_tensor_slices(texts[:6]).map(vocab.encode_tf))
  next(iterator)
  checkpoint = tf.train.Checkpoint(iterator=iterator)
  path = checkpoint.write(str(tmp_path / "iterator"))
  after = [next(iterator).numpy().tolist() for _ in range(2)]
  checkpoint.read(path)
  assert [next(iterator).numpy().tolist() for _ in range(2)
         ] == after == [vocab.encode(t) for t in texts[1:3]]
  assert vocab.encode_tf(tf.constant(texts[0])).numpy().tolist() == vocab.encode(texts[0])


def test_bert_decode_python_and_tf(bert_vocab):
  text = "the embeddings of ubiquitination, 42 times!"
  ids = [101] + bert_vocab.encode(text) + [102, 0, 0]
  assert any(bert_vocab._tokens[i].startswith("##") for i in ids)  # Word pieces get glued.
  assert bert_vocab.decode(ids) == "the embeddings of ubiquitination , 42 times !"
  assert bert_vocab.decode_tf(tf.constant(ids)).numpy().decode() == bert_vocab.decode(ids)
  hello = [101, 7592, 102] + [0] * (len(ids) - 3)
  batch = bert_vocab.decode_tf(tf.constant([ids, hello]))
  assert batch.numpy().tolist()[1] == b"hello"


def test_bert_vocabulary_pickles_cheaply(bert_vocab):
  bert_vocab.encode("warm the caches")
  state = pickle.dumps(bert_vocab)
  assert len(state) < 1000  # Only the path: tokenizers are rebuilt lazily.
  for clone in (pickle.loads(state), copy.deepcopy(bert_vocab)):
    assert clone == bert_vocab and hash(clone) == hash(bert_vocab)
    assert clone.encode("Pickled?") == bert_vocab.encode("Pickled?")
