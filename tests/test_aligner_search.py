"""ALIGNER end to end: a checkpoint with salience heads -> an index with saliences, pruned by
salience (β_d) -> search with query pruning (β_q) and sparse-alignment refinement, each against
an independent reference (loops over the encoder's own saliences, exact scoring of every
document)."""
import dataclasses
import json
import math
import os
import re
import subprocess
import sys

import gin
import jax.numpy as jnp
import numpy as np
import pytest

from tests import retrieval_setup
from xtr import cli
from xtr.evaluation import beir_eval
from xtr.index import build
from xtr.index import files
from xtr.index import reader
from xtr.models import encoding
from xtr.retrieval import ranker
from xtr.scoring import adaptation
from xtr.scoring import alignment

SALIENCE = ("xtr_encoder.XTREncoder.salience = @salience.Salience()",
            "salience.Salience.alpha_d = 0.4", "salience.Salience.epsilon = 0.05")


@pytest.fixture(scope="module")
def aligner_indexes(scifact_slice, tmp_path_factory, t5_spm_path):
  """(encoder, unpruned index, index pruned to β_d = 0.2) of a random tiny ALIGNER model."""
  root = tmp_path_factory.mktemp("aligner")
  retrieval_setup.random_checkpoint(root / "model", 0, t5_spm_path, *SALIENCE,
                                    *cli.ENCODER_BINDINGS, "Encoder.doc_max_length = 64")
  encoder = encoding.Encoder(encoding.load_params(str(root / "model")))
  gin.clear_config()
  data = _corpus(scifact_slice)
  record = build.corpus_record(data.corpus_path, range(len(data.docs)), len(data.docs))
  indexes = []
  for name, prune_doc in (("full", None), ("pruned", 0.2)):
    build.export(encoder, list(data.doc_ids), list(data.docs), str(root / name), "float32", 40,
                 record, prune_doc)
    indexes.append(reader.open_index(str(root / name), "full"))
  return encoder, *indexes


def _corpus(scifact_slice):
  return beir_eval.load_beir(str(scifact_slice), "test")


def test_the_index_stores_the_encoders_saliences(aligner_indexes, scifact_slice):
  encoder, full, _ = aligner_indexes
  vectors, saliences = encoder.encode_documents(list(_corpus(scifact_slice).docs))
  stored = full.doc_saliences(range(full.num_docs))
  for u, expected, v in zip(stored, saliences, vectors):
    np.testing.assert_array_equal(u, expected)
    assert len(u) == len(v)
  assert full.num_indexed_tokens == full.num_tokens


def test_pruned_index_holds_each_documents_most_salient_tokens(aligner_indexes):
  _, full, pruned = aligner_indexes
  saliences = full.doc_saliences(range(full.num_docs))
  expected, start = [], 0
  for u in saliences:  # loop reference: top ⌈0.2·m⌉ by salience, ties to the earlier token
    keep = math.ceil(round(0.2 * len(u), 9))
    expected += sorted(start + j for j in sorted(range(len(u)), key=lambda j: (-u[j], j))[:keep])
    start += len(u)
  shard = pruned._shards[0]  # pylint: disable=protected-access
  np.testing.assert_array_equal(shard._scann_rows, expected)  # pylint: disable=protected-access
  assert pruned.num_indexed_tokens == len(expected) <= pruned.num_tokens / 4
  assert pruned.manifest["prune_doc"] == 0.2
  # ScaNN's files shrink with the tokens they index (its tree and codes are per token).
  assert files.scann_bytes(pruned.manifest) < files.scann_bytes(full.manifest) / 3
  # Exact token retrieval searches the kept tokens only, and finds their exact top-k.
  queries = np.random.default_rng(0).normal(size=(3, full.dim)).astype(np.float32)
  scores, docs, positions = pruned.search_tokens(queries, 7, "bruteforce")
  all_vectors = np.concatenate(full.doc_vectors(range(full.num_docs)))
  kept = all_vectors[expected]
  reference = np.sort(queries @ kept.T, axis=1)[:, ::-1][:, :7]
  np.testing.assert_allclose(scores, reference, rtol=1e-5, atol=1e-6)
  offsets = np.concatenate([[0], np.cumsum([len(u) for u in saliences])])
  assert set((offsets[docs] + positions).ravel()) <= set(expected)
  # So does token retrieval on the device (float32: the same numbers).
  gin.bind_parameter("xtr.index.device.DeviceConfig.dtype", "float32")
  for got, want in zip(pruned.search_tokens(queries, 7, "device"), (scores, docs, positions)):
    np.testing.assert_allclose(got, want, atol=1e-6)
  gin.clear_config()


def test_aligner_refinement_of_every_document_ranks_as_exact_sparse_alignment(
    aligner_indexes, scifact_slice):
  """With k' = every indexed token, every document is a candidate: the ranking is the exact
  sim(Q, D) of eq. 1–2 over the corpus (xtr.scoring.alignment, tested against loops), for top-1 and
  a top-p alignment."""
  encoder, full, _ = aligner_indexes
  data = _corpus(scifact_slice)
  q, q_mask, u_q = encoder.encode_queries(data.queries[:4])
  docs = full.doc_vectors(range(full.num_docs))
  saliences = full.doc_saliences(range(full.num_docs))
  length = max(len(d) for d in docs)
  d = np.zeros((len(docs), length, full.dim), np.float32)
  d_mask = np.zeros((len(docs), length), bool)
  u_d = np.zeros((len(docs), length), np.float32)
  for i, (v, u) in enumerate(zip(docs, saliences)):
    d[i, :len(v)], d_mask[i, :len(v)], u_d[i, :len(u)] = v, True, u
  for strategy in ("top_k:1", "top_p:0.05"):
    chosen = alignment.Alignment.parse(strategy)
    config = ranker.SearchConfig(top_k=10, k_prime=full.num_tokens, scoring="aligner",
                                 searcher="bruteforce", alignment=chosen)
    results = ranker.search(encoder, full, data.queries[:4], config)
    exact = np.asarray(
        alignment.sparse_alignment_scores(jnp.asarray(q), jnp.asarray(q_mask), jnp.asarray(d),
                                          jnp.asarray(d_mask), pairwise=chosen.pairwise, k=chosen.k,
                                          p=chosen.p, u_q=jnp.asarray(u_q), u_d=jnp.asarray(u_d),
                                          epsilon=chosen.epsilon))
    for row, ranking in zip(exact, results.rankings):
      top = np.argsort(-row, kind="stable")[:10]
      np.testing.assert_allclose([s for _, s in ranking], row[top], rtol=1e-5, atol=1e-6)
      assert {doc for doc, _ in ranking[:5]} == {full.doc_ids[i] for i in top[:5]}


def test_query_pruning_retrieves_with_the_most_salient_query_tokens(aligner_indexes, scifact_slice,
                                                                    monkeypatch):
  encoder, _, pruned = aligner_indexes
  queries = _corpus(scifact_slice).queries[:3]
  _, q_mask, u_q = encoder.encode_queries(queries)
  searched = []
  search = pruned.search
  monkeypatch.setattr(pruned, "search", lambda v, *args: searched.append(v) or search(v, *args))
  config = ranker.SearchConfig(top_k=5, k_prime=20, scoring="aligner", prune_query=0.5)
  ranker.search(encoder, pruned, queries, config)
  q, _, _ = encoder.encode_queries(queries)
  for vectors, mask, u, rows in zip(q, q_mask, u_q, searched[1:]):  # [0]: the warm-up query
    keep = math.ceil(round(0.5 * mask.sum(), 9))
    top = sorted(np.flatnonzero(mask), key=lambda i: (-u[i], i))[:keep]
    np.testing.assert_array_equal(rows, vectors[sorted(top)])


def test_salience_pruning_needs_salience_heads(exported):
  token_index = reader.open_index(str(exported[1]))
  with pytest.raises(
      ValueError, match=r"--prune_query=0.5 prunes query tokens by salience, but "
      r"the model of the index at .* has no salience heads"):
    ranker.check_index(ranker.SearchConfig(prune_query=0.5), token_index)
  with pytest.raises(ValueError, match="holds no token saliences"):
    token_index.doc_saliences([0])


def test_rescoring_retrieved_candidates_equals_a_search_per_alignment(aligner_indexes,
                                                                      scifact_slice):
  encoder, _, pruned = aligner_indexes
  queries = _corpus(scifact_slice).queries[:3]
  strategies = [alignment.Alignment.parse(s) for s in ("top_k:1", "top_k:4", "top_p:0.02")]
  config = ranker.SearchConfig(top_k=10, k_prime=30, scoring="aligner", prune_query=0.5)
  rescored = ranker.search_alignments(encoder, pruned, queries, config, strategies)
  for strategy, rankings in zip(strategies, rescored):
    searched = ranker.search(encoder, pruned, queries,
                             dataclasses.replace(config, alignment=strategy))
    assert rankings == searched.rankings


def _adapt(aligner_indexes, scifact_slice, out, *flags):
  index = aligner_indexes[1].path
  command = [
      sys.executable, "-m", "xtr.cli.adapt_alignment", f"--data_dir={scifact_slice}",
      f"--index={index}", f"--checkpoint={os.path.dirname(index)}/model", f"--out={out}",
      "--k_prime=40", *flags
  ]
  return subprocess.run(command, capture_output=True, text=True, cwd=retrieval_setup.REPO, env={
      **os.environ, "XLA_FLAGS": ""
  })


def test_adapt_alignment_runs_the_few_shot_protocol(aligner_indexes, scifact_slice, tmp_path):
  """12 labelled queries in folds of 4: three folds; every strategy's score is the one
  xtr-eval-beir's metrics give for a search with it."""
  done = _adapt(aligner_indexes, scifact_slice, tmp_path / "adapt.json", "--shots=4",
                "--strategies=top_k:1,top_k:2,top_p:0.02")
  assert done.returncode == 0, done.stderr
  report = json.loads((tmp_path / "adapt.json").read_text())
  assert len(report["folds"]) == 3 and report["num_queries"] == retrieval_setup.SLICE_QUERIES
  assert set(report["strategies"]) == {"top_k:1", "top_k:2", "top_p:0.02"}
  assert report["default"]["strategy"] == "top_k:1"
  assert report["oracle"]["ndcg@10"] == max(report["strategies"].values())
  encoder, full, _ = aligner_indexes
  data = _corpus(scifact_slice)
  config = ranker.SearchConfig(k_prime=40, scoring="aligner",
                               alignment=alignment.Alignment.parse("top_p:0.02"))
  results = ranker.search(encoder, full, data.queries, config)
  run = {q: dict(r) for q, r in zip(data.query_ids, results.rankings)}
  assert report["strategies"]["top_p:0.02"] == pytest.approx(
      beir_eval.evaluate(data.qrels, run)["ndcg@10"])
  assert "adapted nDCG@10" in done.stdout and "95 % CI" in done.stdout
  assert "--shots=4" in report["command"] and report["data_sha256"]
  # The report's per-query scores give its protocol again (as launch/ computes other fold sizes).
  again = adaptation.adapt(report["per_query"], [f["queries"] for f in report["folds"]])
  assert json.loads(json.dumps(again)) == {k: report[k] for k in again}


@pytest.mark.parametrize("flag,message", [
    ("--strategies=top_k:1,top_q:3", r"--strategies: alignment 'top_q:3' does not parse"),
    ("--alignment=top_p:1.5", r"--alignment=top_p:1.5: .*0 < p <= 1"),
    ("--alignment=top_k:0", r"--alignment=top_k:0: alignment 'top_k:0': top_k alignment needs "
     r"k >= 1, got 0\n"),
    ("--prune_query=0", r"--prune_query=0.0: not a number in \(0, 1\]"),
])
def test_bad_alignment_flags_are_refused_naming_the_flag(aligner_indexes, scifact_slice, tmp_path,
                                                         flag, message):
  done = _adapt(aligner_indexes, scifact_slice, tmp_path / "adapt.json", flag)
  assert done.returncode != 0
  assert re.search(message, done.stderr), done.stderr
  assert not (tmp_path / "adapt.json").exists()


@pytest.mark.parametrize("prune_doc,message", [
    ("1.5", r"--prune_doc=1.5: not a number in \(0, 1\]"),
    ("0.2", r"--prune_doc=0.2 prunes by salience, but the model of --checkpoint=.* has no "
     r"salience heads"),
])
def test_export_refuses_pruning_it_cannot_do(exported, scifact_slice, t5_spm_path, tmp_path,
                                             prune_doc, message):
  command = [
      sys.executable, "-m", "xtr.cli.export",
      f"--gin_file={retrieval_setup.REPO}/gin/models/t5_1_1_tiny.gin",
      f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'", f"--checkpoint={exported[0]}",
      f"--corpus={scifact_slice / 'corpus.jsonl'}", f"--out={tmp_path / 'index'}",
      f"--prune_doc={prune_doc}"
  ]
  done = subprocess.run(command, capture_output=True, text=True, cwd=retrieval_setup.REPO, env={
      **os.environ, "XLA_FLAGS": ""
  })
  assert done.returncode != 0 and re.search(message, done.stderr), done.stderr[-2000:]
  assert not (tmp_path / "index" / "chunks").exists()  # refused before any work


def _reprune(source, out, *flags):
  command = [
      sys.executable, "-m", "xtr.cli.export", f"--from_index={source}", f"--out={out}", *flags
  ]
  return subprocess.run(command, capture_output=True, text=True, cwd=retrieval_setup.REPO, env={
      **os.environ, "XLA_FLAGS": ""
  })


def test_repruning_an_index_equals_exporting_it_pruned(aligner_indexes, tmp_path):
  """--from_index: the unpruned index's chunks with ScaNN over β_d = 0.2 are, file for file, the
  index that an export pruned to 0.2 wrote (ScaNN builds are deterministic)."""
  _, full, pruned = aligner_indexes
  done = _reprune(full.path, tmp_path / "re", "--prune_doc=0.2")
  assert done.returncode == 0, done.stderr
  repruned = reader.open_index(str(tmp_path / "re"), "full")
  assert repruned.manifest["files"] == pruned.manifest["files"]
  assert repruned.manifest["prune_doc"] == 0.2
  chunk = repruned.manifest["chunks"][0]["file"]
  assert os.path.samefile(tmp_path / "re" / chunk, os.path.join(full.path, chunk))  # linked


def test_from_index_builds_another_scann_of_the_same_vectors_from_gin(aligner_indexes, tmp_path):
  """--from_index without --prune_doc and with ScannConfig bindings: a ScaNN of 2 dimensions per
  block over every token, half the code bytes, and a token recall@10 against brute force close to
  the 1-per-block index's."""
  _, full, _ = aligner_indexes
  done = _reprune(full.path, tmp_path / "dpb2", "--gin_bindings=ScannConfig.dims_per_block = 2")
  assert done.returncode == 0, done.stderr
  rebuilt = reader.open_index(str(tmp_path / "dpb2"), "full")
  assert rebuilt.manifest["scann"]["dims_per_block"] == 2
  assert full.manifest["scann"]["dims_per_block"] == 1
  assert rebuilt.num_indexed_tokens == full.num_tokens and rebuilt.manifest["prune_doc"] is None
  code_bytes = lambda index: index.manifest["files"]["scann/hashed_dataset.npy"]["size"]
  assert code_bytes(rebuilt) - 128 == (code_bytes(full) - 128) // 2  # one byte per block
  queries = np.stack([v[len(v) // 2] for v in full.doc_vectors(range(40))])
  exact = full.search_tokens(queries, 10, "bruteforce")
  recall = lambda index: np.mean([
      len({*zip(*a)} & {*zip(*b)}) / 10
      for a, b in zip(zip(*index.search_tokens(queries, 10)[1:]), zip(*exact[1:]))
  ])
  assert recall(full) > 0.85 and recall(rebuilt) > 0.65  # measured: 0.915 and 0.7725


def test_from_index_makes_an_xtr_only_copy_without_touching_the_source(aligner_indexes, tmp_path):
  """--from_index --store_vectors=none: ScaNN (4 dimensions per block) over the linked vectors,
  then no vector or doc index chunk in the copy; the source keeps its files (verifies in full)
  and the copy retrieves the tokens that a copy keeping the vectors retrieves."""
  _, full, _ = aligner_indexes
  dims4 = "--gin_bindings=ScannConfig.dims_per_block = 4"
  for name, flags in (("kept", [dims4]), ("xtr_only", [dims4, "--store_vectors=none"])):
    done = _reprune(full.path, tmp_path / name, *flags)
    assert done.returncode == 0, done.stderr
  kept, xtr_only = (reader.open_index(str(tmp_path / n), "full") for n in ("kept", "xtr_only"))
  assert not xtr_only.has_vectors and kept.has_vectors
  assert not list((tmp_path / "xtr_only/chunks").glob("vectors-*"))
  assert not list((tmp_path / "xtr_only/chunks").glob("doc_index-*"))
  reader.open_index(full.path, "full").verify()
  queries = np.stack([v[0] for v in full.doc_vectors(range(20))])
  for got, expected in zip(xtr_only.search(queries, 10), kept.search(queries, 10)):
    np.testing.assert_array_equal(got, expected)
  other = {"float16": "float32", "float32": "float16"}[full.manifest["dtype"]]
  refused = _reprune(full.path, tmp_path / other, f"--store_vectors={other}")
  assert refused.returncode != 0 and not (tmp_path / other).exists()
  assert f"holds {full.manifest['dtype']} vectors; keep them or drop them" in refused.stderr


def test_repruning_detects_a_damaged_source_before_building(aligner_indexes, tmp_path):
  _, full, _ = aligner_indexes
  source = tmp_path / "source"
  subprocess.run(["cp", "-r", full.path, str(source)], check=True)
  vectors = source / full.manifest["chunks"][1]["file"]
  data = bytearray(vectors.read_bytes())
  data[-3] ^= 0xFF
  vectors.write_bytes(bytes(data))
  done = _reprune(source, tmp_path / "re", "--prune_doc=0.2")
  assert done.returncode != 0
  assert re.search(r"chunks/vectors-00001.npy is damaged", done.stderr), done.stderr[-2000:]
  assert not (tmp_path / "re" / files.MANIFEST).exists()


@pytest.mark.parametrize("flags,message", [
    (("--prune_doc=0.2",), r"--prune_doc=0.2 prunes by salience, but the model of "
     r"--from_index=.* has no salience heads"),
    (("--prune_doc=0.2", "--checkpoint=x"), r"--from_index .* takes no --checkpoint"),
])
def test_repruning_refuses_what_it_cannot_do(exported, tmp_path, flags, message):
  done = _reprune(exported[1], tmp_path / "re", *flags)
  assert done.returncode != 0 and re.search(message, done.stderr), done.stderr[-2000:]
  assert not (tmp_path / "re").exists()


def test_show_alignment_renders_the_salient_tokens_and_their_alignments(
    aligner_indexes, scifact_slice, tmp_path):
  encoder, full, _ = aligner_indexes
  data = _corpus(scifact_slice)
  query_id = data.query_ids[0]
  doc_id = next(d for d, grade in data.qrels[query_id].items() if grade > 0)
  out, record = tmp_path / "example.html", tmp_path / "example.json"
  command = [
      sys.executable, "-m", "xtr.cli.show_alignment", f"--data_dir={scifact_slice}",
      f"--index={full.path}", f"--checkpoint={os.path.dirname(full.path)}/model",
      f"--query_id={query_id}", f"--out={out}", "--num_aligned=2", "--beta_d=0.25"
  ]
  done = subprocess.run(command + [f"--record={record}"], capture_output=True, text=True,
                        cwd=retrieval_setup.REPO, env={
                            **os.environ, "XLA_FLAGS": ""
                        })
  assert done.returncode == 0, done.stderr[-2000:]
  page = out.read_text()
  recorded = json.loads(record.read_text())
  assert recorded["results"] == {"query_id": query_id, "doc_id": doc_id, "rendering": page}
  assert f"--query_id={query_id}" in recorded["command"]
  assert {"git_commit", "gin_config", "date"} <= recorded.keys()
  assert len(recorded["data_sha256"]) == 3
  q, q_mask, u_q = (a[0] for a in encoder.encode_queries([data.queries[0]]))
  doc = full.doc_ids.index(doc_id)
  d, u_d = full.doc_vectors([doc])[0], full.doc_saliences([doc])[0]
  n, m = q_mask.sum(), len(d)
  assert page.count("background:") == math.ceil(0.5 * n) + math.ceil(round(0.25 * m, 9))
  s = q[q_mask] @ d.T
  for number, i in enumerate(sorted(range(n), key=lambda i: (-u_q[q_mask][i], i))[:2], start=1):
    j = int(np.argmax(s[i]))
    assert (f"<td>{number}</td>" in page and f"<td>{j}</td>" in page and
            f"<td>{s[i, j]:.3f}</td><td>{u_d[j]:.3f}</td>" in page)
  assert page.count("<sup") == 4
  done = subprocess.run(command[:-3] + [f"--out={tmp_path / 'x.txt'}"], capture_output=True,
                        text=True, cwd=retrieval_setup.REPO, env={
                            **os.environ, "XLA_FLAGS": ""
                        })
  assert done.returncode != 0 and "--out=" in done.stderr and ".html or .md" in done.stderr
