"""ScaNN built from a sample, then fed the token chunks: rows in token order, recall as a build
over everything in memory, and what Python and numpy allocate bounded by the sample and a block,
not the corpus (ScaNN's own memory is measured by benchmarks/build_memory.py)."""
import dataclasses
import importlib.util
import math
import pathlib
import re
import sys
import tracemalloc

import gin
import numpy as np
import pytest
from scann.partitioning import partitioner_pb2
from scann.scann_ops.py import scann_ops_pybind

from tests import test_index
from xtr.index import files
from xtr.index import reader
from xtr.index import scann
from xtr.index import scann_search


def _clustered(num_tokens: int, dim: int, seed: int = 0) -> np.ndarray:
  """[T, D] float16 unit vectors around 64 centers (a corpus with structure to partition)."""
  rng = np.random.default_rng(seed)
  centers = rng.normal(size=(64, dim))
  x = centers[rng.integers(64, size=num_tokens)] + 0.5 * rng.normal(size=(num_tokens, dim))
  return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float16)


def _split(vectors: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
  return np.split(vectors, np.cumsum(sizes)[:-1])


def _recall(searcher, vectors: np.ndarray, queries: np.ndarray, k: int,
            reorder_k: int = 0) -> float:
  rows, _ = scann_search.search(searcher.searcher, queries, k, reorder_k, None, 1)
  exact = np.argsort(-(queries @ vectors.astype(np.float32).T), axis=1, kind="stable")[:, :k]
  return float(np.mean([len(np.intersect1d(r, e)) / k for r, e in zip(rows, exact)]))


def test_sample_rows_are_seeded_distinct_and_increasing():
  rows = scann._sample_rows(100_000, 1000, 0)
  assert len(np.unique(rows)) == 1000 and np.all(np.diff(rows) > 0)
  np.testing.assert_array_equal(rows, scann._sample_rows(100_000, 1000, 0))
  assert len(np.intersect1d(rows, scann._sample_rows(100_000, 1000, 1))) < 100
  np.testing.assert_array_equal(scann._sample_rows(50, 1000, 1), np.arange(50))


def test_gather_rows_reads_the_rows_of_the_concatenated_chunks():
  vectors = np.arange(40, dtype=np.float32).reshape(20, 2)
  rows = np.array([0, 6, 7, 13, 19])
  gathered = scann._gather_rows(_split(vectors, [7, 6, 7]), rows)
  np.testing.assert_array_equal(gathered, vectors[rows])


def test_streamed_build_holds_every_token_at_its_row_with_the_recall_of_a_full_build():
  vectors = _clustered(6000, 32)
  chunks = _split(vectors, [1500, 2600, 1900])
  config = scann.ScannConfig(num_leaves=60, num_leaves_to_search=20, training_sample_size=3000)
  streamed, built = scann.build(lambda: chunks, len(vectors), config)
  assert streamed.searcher.size() == len(vectors) and built["training_sample_size"] == 3000
  # Each token, searched over every leaf, finds itself: row t is token t, across chunks.
  probe = np.concatenate([np.arange(10), np.arange(2995, 3005), np.arange(5990, 6000)])
  rows, _ = scann_search.search(streamed.searcher, vectors[probe].astype(np.float32), 1, 0, 60, 1)
  np.testing.assert_array_equal(rows[:, 0], probe)
  # Against ScaNN built the usual way from every token in memory, its tree trained on a sample
  # of the same size: the same recall of exact search.
  full = scann_ops_pybind.builder(vectors.astype(np.float32), 10, "dot_product").tree(
      60, 20, training_sample_size=3000,
      random_init=False).score_ah(1, anisotropic_quantization_threshold=0.1).build()
  queries = _clustered(200, 32, seed=1).astype(np.float32)
  streamed_recall = _recall(streamed, vectors, queries, 50)
  full_recall = _recall(full, vectors, queries, 50)
  assert streamed_recall > 0.7 and abs(streamed_recall - full_recall) < 0.03


def test_streamed_build_is_deterministic():
  vectors = _clustered(3000, 16)
  config = scann.ScannConfig(num_leaves=30, training_sample_size=500)
  first, _ = scann.build(lambda: _split(vectors, [1000, 2000]), len(vectors), config)
  second, _ = scann.build(lambda: _split(vectors, [2500, 500]), len(vectors), config)
  queries = _clustered(50, 16, seed=2).astype(np.float32)
  for a, b in zip(scann_search.search(first.searcher, queries, 20, 0, None, 1),
                  scann_search.search(second.searcher, queries, 20, 0, None, 1)):
    np.testing.assert_array_equal(a, b)


def test_another_sample_seed_is_another_build_of_the_same_recall():
  vectors = _clustered(6000, 32)
  queries = _clustered(200, 32, seed=1).astype(np.float32)
  recalls, scores = [], []
  for seed in (0, 1):
    config = scann.ScannConfig(num_leaves=60, num_leaves_to_search=20, training_sample_size=3000,
                               sample_seed=seed)
    searcher, built = scann.build(lambda: [vectors], len(vectors), config)
    assert built["sample_seed"] == seed
    recalls.append(_recall(searcher, vectors, queries, 50))
    scores.append(scann_search.search(searcher.searcher, queries, 50, 0, None, 1)[1])
  assert not np.array_equal(*scores) and abs(recalls[0] - recalls[1]) < 0.05, recalls


def _build_peak(vectors: np.ndarray, chunks: int) -> int:
  """Peak bytes that Python and numpy allocate (tracemalloc) while ScaNN is built over `vectors`
  in `chunks` chunks (ScaNN's own C++ memory is not traced)."""
  config = scann.ScannConfig(num_leaves=100, training_sample_size=20_000)
  tracemalloc.start()
  try:
    searcher, _ = scann.build(lambda: np.array_split(vectors, chunks), len(vectors), config)
    peak = tracemalloc.get_traced_memory()[1]
  finally:
    tracemalloc.stop()
  assert searcher.searcher.size() == len(vectors)
  return peak


def test_streamed_build_memory_does_not_grow_with_the_corpus(monkeypatch):
  monkeypatch.setattr(scann, "UPSERT_ROWS", 20_000)
  vectors = _clustered(240_000, 32)
  small, large = _build_peak(vectors[:80_000], 1), _build_peak(vectors, 3)
  # 160,000 more tokens are 20.5 MB as float32: the build held them all, and ScaNN twice more.
  assert large - small < 0.1 * 160_000 * 32 * 4, (small, large)
  assert large < 240_000 * 32 * 4 / 3, large


def test_reordering_recovers_the_recall_that_coarse_codes_lose_and_survives_a_reload(tmp_path):
  """4 dimensions per LUT16 block lose recall; rescoring 1000 candidates per query token with the
  vectors ScaNN keeps (float32, bfloat16 or int8) wins it back, for tokens added by upserts too.
  The serialized searcher holds its rows partition by partition (`scann.write`'s order), and,
  loaded as xtr loads it, returns the same rows through that order, with the same scores; a
  searcher that does not rescore, or has one partition, is written in its own order."""
  vectors = _clustered(6000, 32)
  chunks = _split(vectors, [2000, 4000])
  queries = _clustered(100, 32, seed=3).astype(np.float32)
  coarse = dict(num_leaves=40, num_leaves_to_search=40, training_sample_size=2000, dims_per_block=4)
  plain, _ = scann.build(lambda: chunks, len(vectors), scann.ScannConfig(**coarse))
  assert _recall(plain, vectors, queries, 20) < 0.5
  assert scann.write(plain, str(tmp_path), "plain")[1] is None
  one_leaf = dict(coarse, num_leaves=1, num_leaves_to_search=1)
  searcher, _ = scann.build(lambda: chunks, len(vectors),
                            scann.ScannConfig(**one_leaf, reorder_k=1000))
  assert scann.write(searcher, str(tmp_path), "one_leaf")[1] is None  # Already in order.
  for reorder_type in ("float32", "bfloat16", "int8"):
    config = scann.ScannConfig(**coarse, reorder_k=1000, reorder_type=reorder_type)
    searcher, _ = scann.build(lambda: chunks, len(vectors), config)
    assert _recall(searcher, vectors, queries, 20, reorder_k=1000) > 0.95, reorder_type
    listed, order = scann.write(searcher, str(tmp_path), reorder_type)
    partitions = np.load(tmp_path / reorder_type / "datapoint_to_token.npy")
    assert np.all(np.diff(partitions) >= 0) and len(np.unique(partitions)) > 30, reorder_type
    np.testing.assert_array_equal(np.sort(order), np.arange(len(vectors)))
    assert np.mean(order == np.arange(len(vectors))) < 0.1, reorder_type
    loaded = scann_search.load(str(tmp_path / reorder_type), {p.split("/", 1)[1] for p in listed},
                               len(vectors))
    # Equal scores, the same rows but at tied scores (`agreement` raises otherwise).
    assert _benchmark("partition_order").agreement(
        [scann_search.search(loaded, queries, 20, 1000, None, 1)],
        [scann_search.search(searcher.searcher, queries, 20, 1000, None, 1)], order) > 0.8
  with pytest.raises(ValueError, match="reorder_type = 'int4' is not one of"):
    scann.ScannConfig(reorder_type="int4")


def test_float32_rescoring_vectors_of_another_row_count_are_refused(tmp_path):
  """dataset.npy, the float32 vectors ScaNN rescores with, is checked as its codes are: ScaNN
  would load fewer rows and rescore candidates from the wrong ones."""
  vectors = _clustered(2000, 32)
  config = scann.ScannConfig(num_leaves=10, training_sample_size=2000, reorder_k=100)
  searcher, _ = scann.build(lambda: [vectors], len(vectors), config)
  names = {path.split("/", 1)[1] for path in scann.write(searcher, str(tmp_path))[0]}
  dataset = tmp_path / "scann" / "dataset.npy"
  np.save(dataset, np.load(dataset)[:-5])
  with pytest.raises(files.DamagedIndexError,
                     match=r"dataset.npy holds \[1995, 32\], not the 2000"):
    scann_search.load(str(tmp_path / "scann"), names, len(vectors))


@pytest.mark.parametrize("name, value", [("dims_per_block", 0), ("num_leaves_to_search", 0),
                                         ("num_leaves", 0), ("reorder_k", -5), ("sample_seed", -1),
                                         ("training_sample_size", 0), ("training_threads", -1),
                                         ("leaf_size", -1), ("reorder_k", 1.5),
                                         ("dims_per_block", True), ("leaves_factor", 0.0),
                                         ("leaves_factor", float("inf")), ("leaves_factor", "1.8")])
def test_a_scann_setting_out_of_range_is_refused_where_it_is_bound(name, value):
  """Before, such a setting failed when the index was built, after the corpus was encoded, or
  later (ScaNN's ZeroDivisionError for no dimensions per block, a failed search for no leaves
  searched)."""
  with pytest.raises(ValueError, match=f"ScannConfig.{name} = {re.escape(repr(value))}[: ]"):
    scann.ScannConfig(**{name: value})


def _centers(searcher, out_dir) -> np.ndarray:
  """[leaves, D] the centers of a searcher's partitions, read back from what `write` serialized."""
  serialized = partitioner_pb2.SerializedPartitioner.FromString(
      (_written(searcher, out_dir) / "serialized_partitioner.pb").read_bytes())
  return np.array([list(c.dimension) for c in serialized.kmeans.kmeans_tree.root.centers])


def test_a_spherical_tree_ranks_wide_leaves_by_cosine(tmp_path):
  """Unit vectors in wide clusters and in tight ones near them: k-means centers of a wide
  cluster are short, so a dot-product ranking of the leaves prefers the tight leaves nearby and
  misses the wide cluster's tokens; the spherical tree's centers are unit vectors, and with the
  same leaves searched it finds more of a query's exact top 20."""
  rng = np.random.default_rng(0)

  def unit(x):
    return x / np.linalg.norm(x, axis=1, keepdims=True)

  def around(centers, n, spread):
    return unit(centers[rng.integers(len(centers), size=n)] +
                spread * rng.normal(size=(n, 32)) / np.sqrt(32))

  wide = unit(rng.normal(size=(32, 32)))
  tight = unit(wide + 0.9 * rng.normal(size=(32, 32)) / np.sqrt(32))
  vectors = np.concatenate([around(wide, 4000, 1.5), around(tight, 4000, 0.3)]).astype(np.float16)
  queries = around(wide, 100, 1.5).astype(np.float32)
  recall, norms = {}, {}
  for spherical in (False, True):
    config = scann.ScannConfig(num_leaves=64, num_leaves_to_search=2, training_sample_size=8000,
                               spherical=spherical)
    searcher, built = scann.build(lambda: [vectors], len(vectors), config)
    assert built["spherical"] == spherical
    recall[spherical] = _recall(searcher, vectors, queries, 20)
    norms[spherical] = np.linalg.norm(_centers(searcher, tmp_path / str(spherical)), axis=1)
  np.testing.assert_allclose(norms[True], 1, atol=1e-4)
  assert np.median(norms[False]) < 0.9
  assert recall[True] > recall[False] + 0.1, recall


def _benchmark(name: str):
  """benchmarks/{name}.py as a module (benchmarks/ on the path, as when it runs as a script)."""
  benchmarks = str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks")
  if benchmarks not in sys.path:
    sys.path.append(benchmarks)
  spec = importlib.util.spec_from_file_location(name, pathlib.Path(benchmarks) / f"{name}.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def test_leaf_coverage_counts_the_neighbours_in_the_first_leaves_as_a_loop_does():
  """benchmarks/leaf_coverage.py's share of the exact neighbours whose leaf ranks among the first
  L, against a loop over query tokens and neighbours."""
  leaf_coverage = _benchmark("leaf_coverage")
  rng = np.random.default_rng(0)
  scores = rng.normal(size=(5, 900))
  neighbour_leaves = rng.integers(900, size=(5, 40))
  shares = leaf_coverage._share_within(scores, neighbour_leaves)  # pylint: disable=protected-access
  for first, share in shares.items():
    inside = [
        leaf in np.argsort(-row)[:first]
        for row, leaves in zip(scores, neighbour_leaves)
        for leaf in leaves
    ]
    assert share == pytest.approx(np.mean(inside)), first


def test_fixed_size_leaves_keep_their_size_as_the_corpus_grows(tmp_path):
  """With `leaf_size` the tree has ceil(T / leaf_size) partitions, trained on a sample of at
  least SAMPLE_PER_LEAF tokens each: 4 times the tokens, 4 times the partitions of the same
  median size, where the default sqrt(T) sizing doubles their size."""
  sizes, sqrt_sizes = {}, {}
  for num_tokens in (3000, 12000):
    vectors = _clustered(num_tokens, 16, seed=num_tokens)
    config = scann.ScannConfig(num_leaves=10**6, leaf_size=100, training_sample_size=1000)
    searcher, built = scann.build(lambda: [vectors], num_tokens, config)
    leaves = -(-num_tokens // 100)
    assert built["num_leaves"] == leaves
    assert built["training_sample_size"] == min(num_tokens, scann.SAMPLE_PER_LEAF * leaves)
    sizes[num_tokens] = _leaf_sizes(searcher, tmp_path / f"fixed{num_tokens}")
    assert len(sizes[num_tokens]) == leaves and sizes[num_tokens].sum() == num_tokens
    sqrt_config = dataclasses.replace(config, leaf_size=0)
    searcher, built = scann.build(lambda: [vectors], num_tokens, sqrt_config)
    assert built["num_leaves"] == math.ceil(math.sqrt(num_tokens))
    sqrt_sizes[num_tokens] = _leaf_sizes(searcher, tmp_path / f"sqrt{num_tokens}")
  assert 0.75 < np.median(sizes[12000]) / np.median(sizes[3000]) < 1.33, sizes
  assert np.median(sqrt_sizes[12000]) / np.median(sqrt_sizes[3000]) > 1.6, sqrt_sizes


def _leaf_sizes(searcher, out_dir) -> np.ndarray:
  """[leaves] tokens per partition, from the partition of each token that `write` serialized."""
  partitions = np.load(_written(searcher, out_dir) / "datapoint_to_token.npy", allow_pickle=False)
  return np.bincount(partitions)


def _written(searcher, out_dir: pathlib.Path) -> pathlib.Path:
  """The directory of the files that `scann.write` serializes `searcher` into, under out_dir."""
  out_dir.mkdir()
  scann.write(searcher, str(out_dir))
  return out_dir / "scann"


def test_build_memory_searches_shard_by_shard_what_the_fan_out_finds(tmp_path, monkeypatch):
  """benchmarks/build_memory.py holds one shard's ScaNN at a time: the recall of its merged lists
  is the recall of the sharded index's own fan-out search, at every number of leaves searched."""
  build_memory = _benchmark("build_memory")
  monkeypatch.setattr(build_memory, "K_PRIME", 20)
  docs, ids = [test_index._clustered(12, seed) for seed in range(300)], test_index._ids(300)
  with gin.unlock_config():
    gin.parse_config(["ScannConfig.num_leaves = 15", "ScannConfig.num_leaves_to_search = 2"])
  try:
    for path, part in build_memory._shards(str(tmp_path), 300, 3):
      test_index._export(path, ids[part.start:part.stop], docs[part.start:part.stop],
                         first_doc=part.start, total_docs=300)
  finally:
    gin.clear_config()
  index = reader.open_index(str(tmp_path))
  queries = [test_index._clustered(4, seed=1000 + q) for q in range(12)]
  rows = build_memory.search_scale(index, build_memory._shards(str(tmp_path), 300, 3), queries,
                                   [None, 1, 15])
  sample = np.concatenate(queries[:10])
  exact = index.search_tokens(sample, 20, "bruteforce")
  for row, leaves in zip(rows, [None, 1, 15]):
    fan_out = index.search_tokens(sample, 20, "scann", leaves)
    recall = np.mean(
        [len({*zip(*a)} & {*zip(*b)}) / 20 for a, b in zip(zip(*fan_out[1:]), zip(*exact[1:]))])
    assert row["recall"] == recall
    assert 0 < row["p50_ms_shards_at_once"] <= row["p50_ms"]
  assert rows[1]["recall"] < rows[0]["recall"] < rows[2]["recall"]


def test_build_noise_pairs_the_engines_query_by_query_over_the_builds():
  """benchmarks/build_noise.py's paired difference: each query's nDCG@10 averaged over the builds,
  one engine's minus the other's, against a loop; its interval is the bootstrap's of those
  differences, and runs over other queries are refused."""
  build_noise = _benchmark("build_noise")
  rng = np.random.default_rng(0)
  queries = [f"q{i}" for i in range(40)]
  builds = []
  for _ in range(3):
    a = {q: float(rng.choice([0.0, 0.5, 1.0])) for q in queries}
    b = a | {q: float(rng.random()) for q in queries[30:]}  # The first 30 agree in every build.
    builds.append({"a": {"ndcg@10_per_query": a}, "b": {"ndcg@10_per_query": b}})
  differences = []
  for q in queries:
    total = 0.0
    for build in builds:
      total += build["a"]["ndcg@10_per_query"][q] - build["b"]["ndcg@10_per_query"][q]
    differences.append(total / len(builds))
  a, b = (build_noise.per_query_mean(builds, engine) for engine in ("a", "b"))
  report = build_noise.paired(a, b)
  assert report["mean"] == pytest.approx(sum(differences) / len(queries))
  assert report["ci95"] == pytest.approx(build_noise.adaptation.bootstrap_interval(differences))
  assert report["ci95"][0] < report["mean"] < report["ci95"][1]
  assert report["queries_differing"] == 10 and report["queries"] == 40
  with pytest.raises(ValueError, match="different queries"):
    build_noise.paired(a, {q: a[q] for q in queries[1:]})


@pytest.mark.parametrize(
    "source, content, message",
    [
        ('{"split": "test"}', "{not json", "--exact={exact}: not xtr-eval-beir's metrics"),
        ('{"split": "test"}', '{"per_query": {"q1": {"ndcg@10": 0.5}}}',
         "--exact={exact}: not xtr-eval-beir's metrics"),
        ('{"split": "test"}', '{"per_query": {"q1": {"ndcg@10": 0.5}}, "split": "dev"}',
         "--exact={exact}: split 'dev'; the vectors' queries are test's"),
        ('{}', '{"per_query": {"q1": {"ndcg@10": 0.5}}, "split": "train"}',
         "--exact={exact}: split 'train'; the vectors' queries are test's"),  # A dump before SPLIT.
        ('{"split": "train"}', '{"per_query": {"q1": {"ndcg@10": 0.5}}, "split": "test"}',
         "--exact={exact}: split 'test'; the vectors' queries are train's"),
        (None, '{"per_query": {"q1": {"ndcg@10": 0.5}}, "split": "test"}',
         "{vectors}: not benchmarks/dump_vectors.py's dump"),
        ("[1]", '{"per_query": {"q1": {"ndcg@10": 0.5}}, "split": "test"}',
         "{vectors}: not benchmarks/dump_vectors.py's dump"),
    ])
def test_build_noise_refuses_a_bad_exact_record_before_any_build(tmp_path, monkeypatch, capsys,
                                                                 source, content, message):
  """A --exact file that is not xtr-eval-beir's metrics on the split of the vectors' queries
  (dump_vectors.py's source.json; test if it names none), or vectors without a source.json: an
  error naming the flag or directory and file, exit 2, and no build run."""
  build_noise = _benchmark("build_noise")
  vectors = tmp_path / "vectors"
  vectors.mkdir()
  if source is not None:
    (vectors / "source.json").write_text(source)
  exact = tmp_path / "exact.json"
  exact.write_text(content)
  monkeypatch.setattr(build_noise, "run_build", lambda *a: pytest.fail("a build ran"))
  monkeypatch.setattr(
      "sys.argv",
      ["build_noise.py",
       str(vectors), "data",
       str(tmp_path / "out"), f"--exact={exact}"])
  with pytest.raises(SystemExit) as exit_:
    build_noise.main()
  assert exit_.value.code == 2
  assert message.format(exact=exact, vectors=vectors) in capsys.readouterr().err
  assert not (tmp_path / "out").exists()


def test_partition_order_benchmark_puts_the_rows_back_in_token_order(tmp_path):
  """benchmarks/partition_order.py's token-order copy of an index in partition order holds each
  token at its own row (row t scores as token t's vector), and the two orders agree."""
  partition_order = _benchmark("partition_order")
  docs = [test_index._clustered(12, seed) for seed in range(200)]
  with gin.unlock_config():
    gin.parse_config(["ScannConfig.num_leaves = 20", "ScannConfig.reorder_k = 50"])
  try:
    test_index._export(tmp_path / "index", test_index._ids(200), docs)
  finally:
    gin.clear_config()
  copy, names, rows = partition_order.token_order_copy(str(tmp_path / "index"), str(tmp_path))
  assert not np.array_equal(rows, np.arange(len(rows)))
  vectors = np.concatenate(docs)
  queries = test_index._clustered(10, seed=999)
  found = {
      order:
          partition_order.search_all(scann_search.load(path, names, len(rows)),
                                     list(queries[:, None]), 50)[0]
      for order, path in (("partition", str(tmp_path / "index" / "scann")), ("token", copy))
  }
  for query, (token_rows, scores) in zip(queries, found["token"]):
    np.testing.assert_allclose(scores[0], vectors[token_rows[0]] @ query, atol=1e-6)
  assert partition_order.agreement(found["partition"], found["token"], rows) > 0.9
