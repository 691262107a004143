"""One retrieval engine behind a line protocol, for benchmarks/engines.py.

  PYTHON benchmarks/peers/worker.py KIND VECTORS_DIR CACHE_DIR THREADS QUERIES SETTINGS_JSON

Runs in the project's .venv (KIND "xtr": this project's search) or in .venv-peers (the peers,
benchmarks/peers/setup.sh); it imports only what its KIND needs. It searches the vectors that
benchmarks/dump_vectors.py wrote to VECTORS_DIR (its first QUERIES queries; 0 = all), builds
its index into CACHE_DIR (or loads the one built there before, with the build time recorded
then), then answers JSON lines on stdin with JSON lines on stdout:

  (on start)                       -> {"build_s", "build_cpu_s", "build_threads", "bytes",
                                       "bytes_per_token", "settings"[, "built_now"]}
                                       or {"error": "..."}
  {"cmd": "round", "rankings": b}  -> {"ms": [per query], "cpu_s", "wall_s"} (+ "rankings":
                                       [[[doc id, score], ... top 100], ...] if b)
  {"cmd": "exit"}                  -> {"peak_rss_mb": peak resident MiB of this process}

A batched engine's per-query ms is its batch's time divided by the batch's size. Everything
else the libraries print goes to stderr.
"""
import collections.abc
import faulthandler
import functools
import json
import os
import resource
import sys
import tempfile
import time
import traceback

import numpy as np

TOP_K = 100


class Data:
  """The dumped vectors: docs as one [T, D] array and per-doc lengths, queries as lists of
  their valid token vectors [n_i, D] float32."""

  def __init__(self, path: str, queries: int):
    self.path = path
    self.doc_vectors = np.load(os.path.join(path, "doc_vectors.npy"), mmap_mode="r")
    self.doc_lengths = np.load(os.path.join(path, "doc_lengths.npy"))
    self.doc_ids = read_json(os.path.join(path, "doc_ids.json"))
    q = np.load(os.path.join(path, "query_vectors.npy"))
    mask = np.load(os.path.join(path, "query_mask.npy"))
    self.query_ids = read_json(os.path.join(path, "query_ids.json"))
    if queries:
      q, mask, self.query_ids = q[:queries], mask[:queries], self.query_ids[:queries]
    self.query_padded, self.query_mask = q, mask
    self.queries = [v[m] for v, m in zip(q, mask)]
    self.source = read_json(os.path.join(path, "source.json"))

  def docs(self) -> "Docs":
    """Each doc's token vectors [len_i, D] float32, as a sequence."""
    return Docs(self.doc_vectors, self.doc_lengths)


class Docs(collections.abc.Sequence):
  """docs[i]: doc i's token vectors [len_i, D] float32, converted from the dump when read, so
  that a build holds no float32 copy of the corpus beside its own (with one, PyLate's ScaNN
  build of 8x SciFact's tokens was killed for memory at 20 GB)."""

  def __init__(self, vectors: np.ndarray, lengths: np.ndarray):
    self.vectors, self.offsets = vectors, np.concatenate([[0], np.cumsum(lengths)])

  def __len__(self) -> int:
    return len(self.offsets) - 1

  def __getitem__(self, i: int) -> np.ndarray:
    if not 0 <= i < len(self):
      raise IndexError(i)
    return np.asarray(self.vectors[self.offsets[i]:self.offsets[i + 1]], np.float32)


def read_json(path: str):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def dir_bytes(path: str) -> int:
  return sum(
      os.path.getsize(os.path.join(root, name))
      for root, _, names in os.walk(path)
      for name in names)


def _cached_build(folder: str, threads: int, build) -> dict:
  """Runs `build()` (which writes `folder`) unless FOLDER.build.json records an earlier build;
  returns that record, with "built_now" if it was built now (the driver then restarts the
  worker, so that its peak RSS is that of loading and searching only)."""
  record_path = folder + ".build.json"
  if os.path.exists(record_path):
    return read_json(record_path)
  os.makedirs(os.path.dirname(folder), exist_ok=True)
  start, cpu = time.perf_counter(), _cpu_s()
  build()
  record = {
      "build_s": time.perf_counter() - start,
      "build_cpu_s": _cpu_s() - cpu,
      "build_threads": threads
  }
  with open(record_path, "w", encoding="utf-8") as f:
    json.dump(record, f)
  return record | {"built_now": True}


class Xtr:
  """This project's search (`xtr.retrieval.ranker`) over an index it builds once from the dumped
  vectors, as `xtr-export` would from the same vectors: float16 chunks (`xtr.index.writer`),
  then ScaNN with the `ScannConfig` of `scann_gin` (a gin file; None: the settings of the index
  the vectors came from, whose model and fingerprint it records, so that the same query encoder
  searches it). The build is timed whole. Search: f_XTR' one query at a time (`rank`) or in
  batches (`rank_batch`), or ColBERT's three stages."""

  def __init__(self, data: Data, cache: str, threads: int, name: str, scann_gin: str | None = None,
               scoring: str = "xtr", batch: int = 0, k_prime: int = 1000, shards: int = 1):
    from xtr.index import files  # pylint: disable=import-outside-toplevel
    from xtr.index import reader  # pylint: disable=import-outside-toplevel
    from xtr.retrieval import ranker  # pylint: disable=import-outside-toplevel
    self._ranking = ranker
    folder = os.path.join(cache, name)
    self.info = _cached_build(folder, threads,
                              lambda: _build_xtr_index(data, folder, scann_gin, shards))
    self.index = reader.open_index(folder)
    manifests = [
        files.read_json(os.path.join(path, files.MANIFEST)) for path in _index_dirs(folder, shards)
    ]
    kinds = [files.bytes_by_kind(manifest) for manifest in manifests]
    self.info["bytes"] = sum(k["scann"] + k["records"] if scoring == "xtr"  # f_XTR' reads
                             else sum(k.values()) for k in kinds)
    self.info["settings"] = {
        "scann_gin": scann_gin,
        "scoring": scoring,
        "k_prime": k_prime,
        "batch": batch,
        "shards": shards,
        "scann": manifests[0]["scann"]
    }
    self.config = ranker.SearchConfig(top_k=TOP_K, k_prime=k_prime, scoring=scoring,
                                      threads=threads)
    self.batch = batch
    self.q, self.q_mask = data.query_padded, data.query_mask
    self.u_q = np.ones(self.q_mask.shape, np.float32)  # No salience: f_XTR' and f_ColBERT.
    ranker.rank(self.index, self.q[0], self.q_mask[0], self.u_q[0], self.config)  # Warms up.

  def search(self) -> tuple[list, list]:
    names = self.index.doc_ids
    rankings, ms = [], []
    if self.batch:
      for start in range(0, len(self.q), self.batch):
        part = slice(start, start + self.batch)
        begin = time.perf_counter()
        ranked = self._ranking.rank_batch(self.index, self.q[part], self.q_mask[part],
                                          self.u_q[part], self.config)
        ms += [1000 * (time.perf_counter() - begin) / len(ranked)] * len(ranked)
        rankings += [_named(names, *top) for top in ranked]
      return rankings, ms
    for q, mask, u in zip(self.q, self.q_mask, self.u_q):
      begin = time.perf_counter()
      top = self._ranking.rank(self.index, q, mask, u, self.config)
      ms.append(1000 * (time.perf_counter() - begin))
      rankings.append(_named(names, *top))
    return rankings, ms


def _index_dirs(folder: str, shards: int) -> list[str]:
  """The directories of an index of `shards` shards at `folder` (as `xtr-export` names them)."""
  from xtr.index import files  # pylint: disable=import-outside-toplevel
  return [files.shard_path(folder, s, shards) for s in range(shards)] if shards > 1 else [folder]


def _build_xtr_index(data: Data, folder: str, scann_gin: str | None, shards: int) -> None:
  """An index of the dumped vectors at `folder` (see `Xtr`), in `shards` shards of contiguous
  documents as `xtr-export --num_shards` writes them (1: not sharded)."""
  import gin  # pylint: disable=import-outside-toplevel

  from xtr.index import build  # pylint: disable=import-outside-toplevel
  from xtr.index import files  # pylint: disable=import-outside-toplevel
  from xtr.index import scann  # pylint: disable=import-outside-toplevel
  from xtr.index import writer  # pylint: disable=import-outside-toplevel
  source = files.read_json(os.path.join(data.source["index"], files.MANIFEST))
  if scann_gin:
    gin.parse_config_file(scann_gin)
    config = scann.ScannConfig()
  else:
    config = scann.ScannConfig(**{k: v for k, v in source["scann"].items() if k != "scoring"})
  num_docs, docs_per_chunk, vectors = len(data.doc_ids), 1000, data.docs()
  for shard, path in enumerate(_index_dirs(folder, shards)):
    shard_docs = build.shard_range(num_docs, shard, shards)
    index = writer.IndexWriter(
        path, data.doc_vectors.shape[1], "float16", source["model"], source["fingerprint"],
        docs_per_chunk,
        build.corpus_record(os.path.join(data.path, "doc_ids.json"), shard_docs, num_docs),
        vocabulary=os.path.join(data.source["index"], source["model"]["vocabulary"]["path"]))
    for chunk in range(index.completed_chunks(), -(-len(shard_docs) // docs_per_chunk)):
      docs = shard_docs[chunk * docs_per_chunk:(chunk + 1) * docs_per_chunk]
      index.write_chunk(chunk, data.doc_ids[docs.start:docs.stop], [vectors[d] for d in docs])
    index.finalize(config)


def _named(names, doc_index, scores) -> list:
  return [[names[d], float(s)] for d, s in zip(doc_index, scores) if d >= 0]


class _Pylate:
  """Shared by the PyLate engines: torch's threads, search in batches, the results' format."""
  batch = 1

  def __init__(self, threads: int):
    import torch  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(threads)

  def search(self) -> tuple[list, list]:
    rankings, ms = [], []
    for start in range(0, len(self.queries), self.batch):
      part = self.queries[start:start + self.batch]
      begin = time.perf_counter()
      results = self.run(part)
      ms += [1000 * (time.perf_counter() - begin) / len(part)] * len(part)
      rankings += [[[r["id"], float(r["score"])] for r in result] for result in results]
    return rankings, ms


class PylateXtr(_Pylate):
  """PyLate's `retrieve.XTR` over its `indexes.ScaNN` index: ScaNN's threads set to THREADS,
  and at 1 thread its `search_batched_parallel` replaced by `search_batched` (parallel off).

  Settings: `index` (keyword arguments of `indexes.ScaNN`; {} = its defaults), `k_token`
  (None = `retrieve.XTR`'s default), `batch` (queries per `retrieve` call; 1 = XTR's default)."""

  def __init__(self, data: Data, cache: str, threads: int, name: str, index: dict,
               k_token: int | None = None, batch: int = 1):
    super().__init__(threads)
    from pylate import indexes  # pylint: disable=import-outside-toplevel
    from pylate import retrieve  # pylint: disable=import-outside-toplevel
    folder = os.path.join(cache, name)
    make = lambda override: indexes.ScaNN(index_folder=cache, index_name=name, store_embeddings=
                                          False, override=override, **index)
    self.info = _cached_build(folder, threads,
                              lambda: make(True).add_documents(data.doc_ids, data.docs()))
    self.index = make(False)  # Loads what the build saved.
    searcher = self.index.searcher
    searcher.set_num_threads(threads)
    if threads == 1:  # PyLate always calls search_batched_parallel, which uses 2 cores.
      searcher.search_batched_parallel = lambda queries, final_num_neighbors: (
          searcher.search_batched(queries, final_num_neighbors))
    self.info |= {
        "bytes": dir_bytes(folder),
        "settings": {
            "index": index,
            "k_token": k_token or retrieve.XTR.default_k_token,
            "batch": batch,
            "built": read_json(os.path.join(folder, "metadata.json"))
        }
    }
    self.retriever = retrieve.XTR(index=self.index)
    self.retriever._show_progress = lambda: False  # pylint: disable=protected-access
    self.queries, self.k_token, self.batch = data.queries, k_token, batch
    self.run(self.queries[:1])

  def run(self, queries: list[np.ndarray]) -> list:
    return self.retriever.retrieve(queries, k=TOP_K, k_token=self.k_token, device="cpu",
                                   batch_size=len(queries))


class PylateIndex(_Pylate):
  """PyLate's multi-vector index `indexes.<index>` searched as a retriever: "PLAID" with the
  Stanford backend (`use_fast=False`) or fast-plaid (`use_fast=True`), or "WARP" (xtr-warp-rs);
  the native ones (fast-plaid, WARP) run on THREADS CPU threads. Other settings are the index
  class's keyword arguments.

  The Stanford backend compiles its C++ torch extensions (ninja, g++) the first time they load,
  a minute on 2 cores, in child processes (not in build_cpu_s): the untimed tiny build before
  the timed one compiles them (into ~/.cache/torch_extensions), so build_s is the build's."""

  def __init__(self, data: Data, cache: str, threads: int, name: str, index: str, **settings):
    super().__init__(threads)
    from pylate import indexes  # pylint: disable=import-outside-toplevel
    native = "xtr-warp-rs" if index == "WARP" else "fast-plaid" if settings.get("use_fast") else ""
    if native:
      settings |= {"num_threads": threads, "device": "cpu", "show_progress": False}
      _note_torch_requirement(native)
    if "codec_sample_max_tokens" in settings:  # xtr-warp-rs's, which PyLate does not pass on.
      _warp_codec_sample(settings.pop("codec_sample_max_tokens"))
    index_class = getattr(indexes, index)
    _tiny_build(lambda folder: index_class(index_folder=folder, override=True, **settings))
    folder = os.path.join(cache, name)
    make = lambda override: index_class(index_folder=cache, index_name=name, override=override, **
                                        settings)
    self.info = _cached_build(
        folder, threads, lambda: make(True).add_documents(documents_ids=data.doc_ids,
                                                          documents_embeddings=list(data.docs())))
    self.index = make(False)
    self.info |= {"bytes": dir_bytes(folder), "settings": {"index": index, **settings}}
    self.queries = data.queries
    self.run(self.queries[:1])

  def run(self, queries: list[np.ndarray]) -> list:
    return self.index(queries, k=TOP_K)


def _warp_codec_sample(tokens: int) -> None:
  """Makes xtr-warp-rs train its residual codec on at most `tokens` token vectors (its default,
  1M, overflows torch's `quantile` at 384 dims: "quantile() input tensor is too large")."""
  from xtr_warp import search  # pylint: disable=import-outside-toplevel
  search.XTRWarp.create = functools.partialmethod(search.XTRWarp.create,
                                                  codec_sample_max_tokens=tokens)


def _tiny_build(make) -> None:
  """Builds `make(folder)`'s index of 64 random docs in a temporary folder, untimed: native
  code that crashes does so in seconds, not after the real build's k-means, and what loads
  lazily (compiled extensions) is loaded before the timed build."""
  with tempfile.TemporaryDirectory() as folder:
    docs = np.random.default_rng(0).standard_normal((64, 32, 128), np.float32)
    make(folder).add_documents(documents_ids=[str(i) for i in range(64)],
                               documents_embeddings=list(docs))


NOTES = []  # What _note_torch_requirement found, for the error reply.


def _note_torch_requirement(dist: str) -> None:
  """Notes (on stderr, and in NOTES for an error reply) the installed `dist`'s torch
  requirement if this torch does not meet it: fast-plaid and xtr-warp-rs are compiled against
  one torch (their versions' suffix: .2110 = 2.11.0), and under another torch their wheels may
  fail to load or crash in native code, where no exception reaches the error reply
  (engines.py shows the note with the crash)."""
  import importlib.metadata  # pylint: disable=import-outside-toplevel

  from packaging.requirements import Requirement  # pylint: disable=import-outside-toplevel
  import torch  # pylint: disable=import-outside-toplevel
  try:
    version = importlib.metadata.version(dist)
    wanted = [Requirement(r) for r in importlib.metadata.requires(dist) or ()]
  except importlib.metadata.PackageNotFoundError:
    return
  for r in wanted:
    if r.name == "torch" and not r.marker and not r.specifier.contains(
        torch.__version__.split("+")[0], prereleases=True):
      note = (f"worker note: {dist} {version} requires torch{r.specifier}; this is torch "
              f"{torch.__version__}")
      NOTES.append(note)
      print(note, file=sys.stderr, flush=True)


KINDS = {"xtr": Xtr, "pylate_xtr": PylateXtr, "pylate_index": PylateIndex}


def _peak_rss_mb() -> float:
  """This process's peak resident memory since its exec (VmHWM; ru_maxrss would count the
  driver's memory that the fork copied before the exec)."""
  with open("/proc/self/status", encoding="utf-8") as f:
    return next(int(line.split()[1]) for line in f if line.startswith("VmHWM")) / 1024


def _cpu_s() -> float:
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def reason(error: BaseException) -> str:
  """The error and the errors it was raised from or during, innermost last, one per line."""
  lines = []
  while error is not None:
    lines.append(f"{type(error).__name__}: {error}".strip())
    error = error.__cause__ or error.__context__
  return "\n  during: ".join(reversed(lines)) if len(lines) > 1 else lines[0]


def main(kind: str, vectors: str, cache: str, threads: str, queries: str, settings: str) -> None:
  protocol = os.fdopen(os.dup(1), "w")
  os.dup2(2, 1)  # What the libraries print (C included) goes to stderr.
  sys.stdout = sys.stderr
  faulthandler.enable()  # A crash in native code prints where, on stderr.

  def reply(message: dict) -> None:
    protocol.write(json.dumps(message) + "\n")
    protocol.flush()

  data = Data(vectors, int(queries))
  try:
    engine = KINDS[kind](data, cache, int(threads), **json.loads(settings))
  except Exception as error:  # pylint: disable=broad-except
    traceback.print_exc()
    reply({"error": "\n".join([reason(error)] + NOTES)})
    return
  num_tokens = int(data.doc_lengths.sum())
  reply({**engine.info, "bytes_per_token": engine.info["bytes"] / num_tokens})
  for line in sys.stdin:
    command = json.loads(line)
    if command["cmd"] == "exit":
      break
    cpu, wall = _cpu_s(), time.perf_counter()
    rankings, ms = engine.search()
    reply({
        "ms": ms,
        "cpu_s": _cpu_s() - cpu,
        "wall_s": time.perf_counter() - wall
    } | ({
        "rankings": [r[:TOP_K] for r in rankings]
    } if command.get("rankings") else {}))
  reply({"peak_rss_mb": _peak_rss_mb()})


if __name__ == "__main__":
  main(*sys.argv[1:])
