"""xtr.analysis and `xtr-analyze-alignment` against hand-worked examples and naive loops."""
import json
import math
import types

import jax.numpy as jnp
import numpy as np
import pytest

from tests import retrieval_setup
from xtr import cli
from xtr.analysis import directions
from xtr.analysis import low_rank
from xtr.analysis import measure
from xtr.analysis import term_matching
from xtr.data import bm25
from xtr.evaluation import baselines
from xtr.evaluation import beir_eval
from xtr.models import encoding
from xtr.scoring import alignment

TAU = 0.05
E = np.eye(4, dtype=np.float32)
# The hand-worked pair: query tokens (ids 10, 20, 30) = e0, e1, e2; document tokens
# (ids 20, 10, 40, 30) = e1, e0, e2, e0. S_ij = q_i·d_j is 0/1:
#        d0(20) d1(10) d2(40) d3(30)
#  q0(10)   0      1      0      1      q→d top-1: d1 (tie with d3 goes to the lower index): same id
#  q1(20)   1      0      0      0      q→d top-1: d0, same id
#  q2(30)   0      0      1      0      q→d top-1: d2 (id 40), not the same
# d→q top-1 of each document token: d0→q1, d1→q0, d2→q2, d3→q0.
HAND_Q, HAND_Q_IDS = E[:3], np.array([10, 20, 30])
HAND_D, HAND_D_IDS = E[[1, 0, 2, 0]], np.array([20, 10, 40, 30])


def _hand_scores():
  s = jnp.asarray(HAND_Q @ HAND_D.T)[None, :, None, :]  # [1, 3, 1, 4]
  return s, jnp.ones((1, 3), bool), jnp.ones((1, 4), bool)


def test_exact_match_rates_of_the_hand_worked_pair():
  s, q_mask, d_mask = _hand_scores()
  a = directions.term_alignments(s, q_mask, d_mask, TAU)
  rates = {
      kind:
          term_matching.exact_match_rates(m,
                                          jnp.asarray(HAND_Q_IDS)[None],
                                          jnp.asarray(HAND_D_IDS)[None]) for kind, m in a.items()
  }
  e = math.exp(1 / TAU)
  expected = {
      "q→d hard": [1, 1, 0],
      "d→q hard": [1 / 2, 1, 0],  # q0 gets d1 (id 10) and d3 (id 30); q1 gets d0; q2 gets d2
      # q0's softmax over d: e on d1 (id 10) and d3 (id 30), 1 on d0 and d2; q1: e on d0
      # (id 20), 1 elsewhere; q2: e on d2 (id 40), 1 on d3 (id 30).
      "q→d soft": [e / (2 * e + 2), e / (e + 3), 1 / (e + 3)],
      # Each document token's softmax over the 3 query tokens: e on its match, 1 on the others.
      # q0 receives e (d1, id 10), e (d3), 1 (d0), 1 (d2), over e + 2 each; q1 e from d0 (id 20)
      # and 1 from the rest; q2 e from d2 and 1 from the rest, d3 (id 30) among them.
      "d→q soft": [e / (2 * e + 2), e / (e + 3), 1 / (e + 3)],
  }
  for kind, want in expected.items():
    total, count = rates[kind]
    np.testing.assert_allclose(np.asarray(total[0] / count[0]), want, rtol=1e-5, err_msg=kind)
  np.testing.assert_array_equal(rates["q→d hard"][1][0], [1, 1, 1])
  # Which documents hold each query token's id (0 is padding on both sides).
  np.testing.assert_array_equal(
      term_matching.contains(jnp.array([[10, 20, 50, 0]]),
                             jnp.array([[20, 10, 40, 30], [50, 0, 0, 0]]))[0],
      [[True, False], [True, False], [False, True], [False, False]])


def _naive_alignments(s: np.ndarray, tau: float) -> dict[str, np.ndarray]:
  """The four alignments of directions.term_alignments for one [n, m] block of valid tokens."""
  n, m = s.shape
  hard_qd, hard_dq = np.zeros((n, m)), np.zeros((n, m))
  soft_qd, soft_dq = np.zeros((n, m)), np.zeros((n, m))
  for i in range(n):
    hard_qd[i, max(range(m), key=lambda j: (s[i, j], -j))] = 1
    z = sum(math.exp(s[i, j] / tau) for j in range(m))
    for j in range(m):
      soft_qd[i, j] = math.exp(s[i, j] / tau) / z
  for j in range(m):
    hard_dq[max(range(n), key=lambda i: (s[i, j], -i)), j] = 1
    z = sum(math.exp(s[i, j] / tau) for i in range(n))
    for i in range(n):
      soft_dq[i, j] = math.exp(s[i, j] / tau) / z
  return {"q→d hard": hard_qd, "q→d soft": soft_qd, "d→q hard": hard_dq, "d→q soft": soft_dq}


def _unit(rng, *shape):
  x = rng.normal(size=shape)
  return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def test_alignments_and_document_to_query_scores_match_loops():
  rng = np.random.default_rng(0)
  n, c, m, dim, tau = 5, 3, 7, 6, 0.1
  q, d = _unit(rng, 1, n, dim), _unit(rng, c, m, dim)
  q_mask = np.arange(n)[None] < 4
  d_mask = np.arange(m)[None] < np.array([[7], [3], [5]])
  s = np.einsum("bnd,cmd->bncm", q, d)
  a = directions.term_alignments(jnp.asarray(s), q_mask, d_mask, tau)
  scores = {
      per_token:
          np.asarray(
              directions.document_to_query_scores(jnp.asarray(s), q_mask, d_mask, tau, per_token))
          [0] for per_token in (False, True)
  }
  for doc in range(c):
    valid_n, valid_m = int(q_mask[0].sum()), int(d_mask[doc].sum())
    block = s[0, :valid_n, doc, :valid_m].astype(np.float64)
    naive = _naive_alignments(block, tau)
    for kind, want in naive.items():
      got = np.asarray(a[kind])[0, :, doc, :]
      np.testing.assert_allclose(got[:valid_n, :valid_m], want, atol=1e-6, err_msg=kind)
      assert not got[valid_n:].any() and not got[:, valid_m:].any()
    total = sum(
        block[i, j] * naive["d→q soft"][i, j] for i in range(valid_n) for j in range(valid_m))
    assert scores[False][doc] == pytest.approx(total, rel=1e-5)
    assert scores[True][doc] == pytest.approx(total / valid_m, rel=1e-5)


def test_spectra_of_hand_alignments():
  # q→d top-1 of the hand pair: rows one-hot on 3 distinct columns -> σ = (1, 1, 1).
  # d→q top-1: q0 gets columns 1 and 3, q1 column 0, q2 column 2 -> σ = (√2, 1, 1).
  # Every query token on one document token: rank 1.
  qd = np.zeros((3, 4))
  qd[[0, 1, 2], [1, 0, 2]] = 1
  dq = np.zeros((3, 4))
  dq[[1, 0, 2, 0], [0, 1, 2, 3]] = 1
  one = np.zeros((3, 4))
  one[:, 2] = 1
  sigma, nonzero = low_rank.normalized_spectrum(jnp.asarray(np.stack([qd, dq, one, 0 * one])))
  np.testing.assert_allclose(np.asarray(sigma),
                             [[3**-.5] * 3, [.5**.5, .5, .5], [1, 0, 0], [0, 0, 0]], atol=1e-6)
  np.testing.assert_array_equal(nonzero, [True, True, True, False])
  np.testing.assert_allclose(
      np.asarray(low_rank.rank1_error(sigma))[:3], [(2 / 3)**.5, .5**.5, 0], atol=1e-6)
  # Against Eckart–Young done by hand: R = σ1 u1 v1ᵀ, ‖A − R‖ / ‖A‖.
  a = np.random.default_rng(1).uniform(size=(5, 9))
  u, s, vt = np.linalg.svd(a)
  want = np.linalg.norm(a - s[0] * np.outer(u[:, 0], vt[0])) / np.linalg.norm(a)
  got = low_rank.rank1_error(low_rank.normalized_spectrum(jnp.asarray(a))[0])
  assert float(got) == pytest.approx(want, rel=1e-5)


def test_idf_and_equal_count_bins_by_hand():
  # 4 documents: df(2) = 3, df(1) = df(3) = df(4) = 1, df(0) = df(5) = 0 (IDF of df 1).
  docs = [np.array([1, 2, 2]), np.array([2, 3]), np.array([2]), np.array([4])]
  np.testing.assert_allclose(term_matching.idf(docs, 6), np.log([4, 4, 4 / 3, 4, 4, 4]))
  # Sorted: 0.1 (index 1), 0.3 (2), 0.5 (0) | 0.7 (4), 0.9 (3): runs of 3 and 2.
  np.testing.assert_array_equal(term_matching.equal_count_bins(np.array([.5, .1, .3, .9, .7]), 2),
                                [0, 0, 0, 1, 1])
  np.testing.assert_array_equal(term_matching.equal_count_bins(np.arange(7.0)[::-1], 3),
                                [2, 2, 1, 1, 0, 0, 0])
  with pytest.raises(ValueError, match="3 values into 4"):
    term_matching.equal_count_bins(np.zeros(3), 4)


def _tiny_model(rng, salience: bool) -> tuple[measure.Model, beir_eval.BeirData, list]:
  """3 queries and 6 documents of random unit token vectors over a 12-id vocabulary (id 1 the
  only special token), each query with 4 candidates."""
  dim = 5
  q_lengths, d_lengths = [4, 2, 5], [3, 6, 2, 5, 4, 6]
  ids = lambda length: np.concatenate([[1], rng.integers(2, 12, length - 1)])
  texts = lambda lengths, role: measure.Texts([_unit(rng, k, dim) for k in lengths], [
      ids(k) for k in lengths
  ], [rng.uniform(0.1, 1, k).astype(np.float32) for k in lengths] if salience else None)
  queries, docs = texts(q_lengths, "query"), texts(d_lengths, "document")
  tokenizer = types.SimpleNamespace(prefix=(1,), suffix=(), size=12)
  model = measure.Model("tiny", tokenizer, queries, docs,
                        alignment.Alignment("top_k", k=2 if salience else 1))
  data = beir_eval.BeirData(doc_ids=tuple(f"d{i}" for i in range(6)), docs=("",) * 6,
                            query_ids=("q0", "q1", "q2"), queries=("",) * 3, qrels={
                                "q0": {
                                    "d0": 1
                                },
                                "q1": {
                                    "d3": 2,
                                    "d4": 1
                                },
                                "q2": {
                                    "d5": 1
                                }
                            }, num_queries_without_qrels=0, corpus_path="")
  return model, data, [[0, 1, 2, 3], [3, 4, 0, 5], [5, 2, 1, 4]]


@pytest.mark.parametrize("salience", [False, True])
def test_analyze_matches_loops(salience):
  rng = np.random.default_rng(2)
  model, data, candidates_of = _tiny_model(rng, salience)
  settings = measure.Settings(temperature=0.2, num_idf_bins=2)
  # Documents stored in another order than data's, as the CLI stores the candidates' union.
  order = [5, 4, 3, 2, 1, 0]
  stored = measure.Model(
      model.label, model.tokenizer, model.queries,
      measure.Texts([model.docs.vectors[i] for i in order], [model.docs.ids[i] for i in order],
                    None if not salience else [model.docs.salience[i] for i in order]),
      model.strategy)
  result = measure.analyze(stored, data, order, candidates_of, model.docs.ids, settings)

  runs = {name: {} for name in ("q→d", "d→q", "d→q per token")}
  rates = {
      (subset, kind): [] for subset in ("candidates", "containing") for kind in directions.KINDS
  }
  spectra = {"q→d": [], "d→q": []}
  # Per document token, the GR paper's d→q unit: (id, {kind: rate}, the query holds its id).
  document_tokens = []
  for qi, query_id in enumerate(data.query_ids):
    q, q_ids = model.queries.vectors[qi], model.queries.ids[qi]
    sums = {key: np.zeros(len(q)) for key in rates}
    counts = {key: np.zeros(len(q)) for key in rates}
    for doc in candidates_of[qi]:
      d, d_ids = model.docs.vectors[doc], model.docs.ids[doc]
      s = (q @ d.T).astype(np.float64)
      naive = _naive_alignments(s, settings.temperature)
      a_qd = np.zeros_like(s)  # top-k of each row, times the saliences
      for i in range(len(q)):
        for j in sorted(range(len(d)), key=lambda j: (-s[i, j], j))[:model.strategy.k]:
          a_qd[i, j] = 1
      if salience:
        a_qd *= np.outer(model.queries.salience[qi], model.docs.salience[doc])
      runs["q→d"].setdefault(query_id, {})[f"d{doc}"] = (s * a_qd).sum() / a_qd.sum()
      dq = (s * naive["d→q soft"]).sum()
      runs["d→q"].setdefault(query_id, {})[f"d{doc}"] = dq
      runs["d→q per token"].setdefault(query_id, {})[f"d{doc}"] = dq / len(d)
      for kind, a in naive.items():
        for i in range(len(q)):
          mass = a[i].sum()
          if mass > 0:
            rate = sum(a[i, j] for j in range(len(d)) if d_ids[j] == q_ids[i]) / mass
            for subset in ("candidates", "containing"):
              if subset == "candidates" or q_ids[i] in list(d_ids):
                sums[subset, kind][i] += rate
                counts[subset, kind][i] += 1
      for j in range(len(d)):
        token_rates = {}
        for kind in measure.DOCUMENT_TOKEN_KINDS:
          mass = naive[kind][:, j].sum()
          token_rates[kind] = (
              sum(naive[kind][i, j] for i in range(len(q)) if q_ids[i] == d_ids[j]) /
              mass if mass > 0 else np.nan)
        document_tokens.append((d_ids[j], token_rates, d_ids[j] in list(q_ids)))
      for name, a in (("q→d", a_qd), ("d→q", naive["d→q soft"])):
        sigma = np.linalg.svd(a, compute_uv=False)
        sigma = sigma / np.linalg.norm(sigma)
        spectra[name].append(sigma)
    for key in rates:
      rates[key].append(np.where(counts[key] > 0, sums[key] / np.maximum(counts[key], 1), np.nan))
  for name, run in runs.items():
    want = beir_eval.evaluate(data.qrels, run, **measure.RERANK_METRICS)
    for metric in ("ndcg@10", "recall@1", "recall@10", "mrr@10"):
      assert result["rerank"][name][metric] == pytest.approx(want[metric], rel=1e-5), name

  query_ids = np.concatenate(model.queries.ids)
  plain = query_ids != 1
  idf = np.log(6 / np.maximum([sum(t in ids for ids in model.docs.ids) for t in query_ids], 1))
  order = np.argsort(idf[plain], kind="stable")
  halves = np.array_split(np.flatnonzero(plain)[order], 2)
  for (subset, kind), per_query in rates.items():
    tm = result["term_matching"][subset]
    r = np.concatenate(per_query)
    for b, members in enumerate(halves):
      want = r[members][~np.isnan(r[members])]
      assert tm["bins"][b][kind] == (pytest.approx(want.mean(), rel=1e-5) if len(want) else None)
      assert tm["bins"][b]["num_tokens"] == len(members)
    assert tm["special"][kind] == pytest.approx(np.nanmean(r[~plain]), rel=1e-5)
    assert tm["all"][kind] == pytest.approx(np.nanmean(r[plain]), rel=1e-5)
    assert tm["bins"][0]["idf_max"] <= tm["bins"][1]["idf_min"]

  ids = np.array([t for t, _, _ in document_tokens])
  plain = ids != 1
  idf = np.log(6 / np.maximum([sum(t in d for d in model.docs.ids) for t in ids], 1))
  halves = np.array_split(np.flatnonzero(plain)[np.argsort(idf[plain], kind="stable")], 2)
  for subset in ("candidates", "containing"):
    tm = result["document_token_term_matching"][subset]
    for kind in measure.DOCUMENT_TOKEN_KINDS:
      r = np.array([
          rates[kind] if subset == "candidates" or in_query else np.nan
          for _, rates, in_query in document_tokens
      ])
      for b, members in enumerate(halves):
        want = r[members][~np.isnan(r[members])]
        assert tm["bins"][b][kind] == (pytest.approx(want.mean(), rel=1e-5) if len(want) else None)
        assert tm["bins"][b]["num_tokens"] == len(members)
      assert tm["all"][kind] == pytest.approx(np.nanmean(r[plain]), rel=1e-5)

  for name, sigmas in spectra.items():
    width = max(map(len, sigmas))
    mean = np.mean([np.pad(x, (0, width - len(x))) for x in sigmas], axis=0)
    got = result["low_rank"][name]["spectrum"]
    np.testing.assert_allclose(got[:width], mean, atol=1e-5)
    assert not np.any(got[width:])
    assert result["low_rank"][name]["num_pairs"] == 12
    assert result["low_rank"][name]["rank1_error"] == pytest.approx(
        np.mean([np.sqrt(np.sum(x[1:]**2)) for x in sigmas]), abs=1e-5)


def test_candidates_are_bm25_top_k_then_the_missed_gold(scifact_slice):
  data = beir_eval.load_beir(scifact_slice, "test")
  got = measure.candidates(data, 5)
  index = bm25.Bm25(data.doc_ids, data.docs)
  for query_id, query, docs in zip(data.query_ids, data.queries, got):
    top = [data.doc_ids.index(d) for d, _ in index.search([query], 5)[0]]
    gold = [data.doc_ids.index(d) for d, rel in data.qrels[query_id].items() if rel > 0]
    assert docs == top + [d for d in gold if d not in top]


def test_the_untuned_encoder_is_the_backbones_raw_tokens(scifact_slice):
  """gin/analysis/untuned_minilm.gin beside the demo's run file: MiniLM's raw hidden states."""
  import gin
  gin.clear_config()
  gin.add_config_file_search_path(str(retrieval_setup.REPO))
  gin.parse_config_files_and_bindings([
      str(retrieval_setup.REPO / "gin/runs/demo.gin"),
      str(retrieval_setup.REPO / "gin/analysis/untuned_minilm.gin")
  ], list(cli.ENCODER_BINDINGS + measure.SETTINGS_BINDINGS))
  try:
    settings = measure.Settings()
    encoder = measure.untuned_encoder(settings)
    backbone = settings.model.backbone
    params = settings.pretrained_backbone()
  finally:
    gin.clear_config()
  docs = beir_eval.load_beir(scifact_slice, "test").docs[:4]
  texts = measure.encode(encoder, docs, "document")
  _, want = baselines.encode_untuned(backbone, params, encoder.tokenizer, docs,
                                     encoder.doc_max_length)
  for got, ref, ids in zip(texts.vectors, want, texts.ids):
    assert len(got) == len(ids) > 10
    np.testing.assert_allclose(got, ref, atol=1e-5)


def test_cli_writes_every_number_and_plot(exported, scifact_slice, t5_spm_path, tmp_path):
  model_dir, _ = exported
  gin_flags = [
      f"--gin_file={retrieval_setup.REPO}/gin/models/t5_1_1_tiny.gin",
      f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'",
      "--gin_bindings=xtr.models.encoding.Encoder.doc_max_length = 64",
      "--gin_bindings=xtr.analysis.measure.Settings.bm25_depth = 10",
      "--gin_bindings=xtr.analysis.measure.Settings.num_idf_bins = 4"
  ]
  other = model_dir.parent / "other_model"
  analyze = lambda *args: retrieval_setup.run_tool("xtr.cli.analyze_alignment", *gin_flags,
                                                   f"--data_dir={scifact_slice}", *args)
  done = analyze(f"--checkpoint=A={model_dir}", f"--checkpoint={other}",
                 f"--out={tmp_path / 'out'}")
  assert done.returncode == 0, done.stderr[-3000:]
  report = json.loads((tmp_path / "out" / "alignment.json").read_text())
  assert list(report["models"]) == ["A", "other_model"]
  data = beir_eval.load_beir(scifact_slice, "test")
  assert report["num_queries"] == len(data.query_ids)
  case = report.pop("case_study")
  assert (case["query_id"], case["doc_id"]) == (data.query_ids[0],
                                                data.most_relevant(data.query_ids[0]))
  # The figure's data: each model's S and alignments of the pair, as measure.case_study gives them.
  matrices, q_tokens, d_tokens = measure.case_study(_tiny_encoder(model_dir, t5_spm_path),
                                                    alignment.Alignment(), data.queries[0],
                                                    data.docs[data.doc_ids.index(case["doc_id"])],
                                                    measure.Settings().temperature)
  panels = [p for p in case["panels"] if p["title"].startswith("A: ")]
  assert [p["title"] for p in panels] == [f"A: {name}" for name in matrices]
  for panel, matrix in zip(panels, matrices.values()):
    assert (panel["query_tokens"], panel["doc_tokens"]) == (q_tokens, d_tokens)
    np.testing.assert_allclose(panel["matrix"], matrix, atol=1e-4)
  assert len(case["panels"]) == 2 * len(matrices)
  for result in report["models"].values():
    assert set(result["rerank"]) == {"q→d", "d→q", "d→q per token"}
    assert len(result["term_matching"]["containing"]["bins"]) == 4
    assert set(result["low_rank"]) == {"q→d", "d→q"}
  # The q→d rerank of a checkpoint is exact MaxSim over the candidates: recompute it.
  encoder = _tiny_encoder(model_dir, t5_spm_path)
  candidates_of = measure.candidates(data, 10)
  q, q_mask, _ = encoder.encode_queries(data.queries)
  run = {}
  for qi, query_id in enumerate(data.query_ids):
    docs, _ = encoder.encode_documents([data.docs[d] for d in candidates_of[qi]])
    run[query_id] = {
        data.doc_ids[d]: float(np.mean((q[qi][q_mask[qi]] @ v.T).max(axis=1)))
        for d, v in zip(candidates_of[qi], docs)
    }
  want = beir_eval.evaluate(data.qrels, run, **measure.RERANK_METRICS)
  assert report["models"]["A"]["rerank"]["q→d"]["ndcg@10"] == pytest.approx(
      want["ndcg@10"], abs=1e-6)
  for png in ("term_matching.png", "term_matching_document_tokens.png", "spectra.png",
              "case_study.png"):
    assert (tmp_path / "out" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  # A τ sweep: each model at each τ; the default τ's numbers are the single run's, and the d→q
  # alignment softmax_i(S/τ) tends to rank 1 as τ grows.
  done = analyze(f"--checkpoint=A={model_dir}", "--temperature=0.05", "--temperature=10",
                 f"--out={tmp_path / 'sweep'}")
  assert done.returncode == 0, done.stderr[-3000:]
  sweep = json.loads((tmp_path / "sweep" / "alignment.json").read_text())
  assert list(sweep["models"]) == ["A τ=0.05", "A τ=10"]
  assert sweep["settings"]["temperatures"] == [0.05, 10.0]
  single = report["models"]["A"]
  for direction in ("q→d", "d→q"):
    assert sweep["models"]["A τ=0.05"]["low_rank"][direction]["rank1_error"] == pytest.approx(
        single["low_rank"][direction]["rank1_error"])
  assert sweep["models"]["A τ=0.05"]["rerank"]["q→d"] == pytest.approx(single["rerank"]["q→d"])
  assert (sweep["models"]["A τ=10"]["low_rank"]["d→q"]["rank1_error"]
          < sweep["models"]["A τ=0.05"]["low_rank"]["d→q"]["rank1_error"])
  done = analyze(f"--checkpoint=A={model_dir}", "--temperature=0", f"--out={tmp_path / 'again'}")
  assert done.returncode == 2 and "--temperature must be a positive finite number" in done.stderr
  # Bad input is named before any work.
  done = analyze(f"--checkpoint=B={model_dir}", f"--compare={tmp_path / 'out' / 'alignment.json'}",
                 "--query_id=nope", f"--out={tmp_path / 'again'}")
  assert done.returncode != 0 and "--query_id=nope" in done.stderr
  (tmp_path / "bad.json").write_text("{}")
  done = analyze(f"--checkpoint={model_dir}", f"--compare={tmp_path / 'bad.json'}",
                 f"--out={tmp_path / 'again'}")
  assert done.returncode != 0 and f"--compare={tmp_path / 'bad.json'}" in done.stderr
  done = analyze(f"--checkpoint=A={model_dir}", f"--checkpoint=A={other}",
                 f"--out={tmp_path / 'again'}")
  assert done.returncode != 0 and f"--checkpoint=A={other}" in done.stderr
  assert not (tmp_path / "again").exists()


def _tiny_encoder(model_dir, t5_spm_path) -> encoding.Encoder:
  import gin
  gin.clear_config()
  gin.parse_config_files_and_bindings([str(retrieval_setup.REPO / "gin/models/t5_1_1_tiny.gin")], [
      f"T5_SPM_PATH = '{t5_spm_path}'", "xtr.models.encoding.Encoder.model = %MODEL",
      "xtr.models.encoding.Encoder.vocabulary = %VOCABULARY",
      "xtr.models.encoding.Encoder.doc_max_length = 64"
  ])
  encoder = encoding.Encoder(encoding.load_params(str(model_dir)))
  gin.clear_config()
  return encoder
