"""A ScaNN searcher loaded and searched in a helper process, for a one-shot search.

ScaNN's constructor holds the GIL for all of its load (~0.9 s for the demo's index: it copies
and packs every code), so a thread cannot overlap it with anything in Python. `Searcher` starts
a second interpreter that loads the searcher while this one restores the model and encodes the
queries, and then searches through pipes: `xtr-search` answers one query that much sooner
(docs/performance.md, "Cold start"). The helper only runs `scann_search.load` and
`ScannNumpy.search_batched`; its files are checked by name (`scann_search.check_files`) before
it starts, and verified (`xtr.index.verify`) before its first search.

`xtr-search`'s console script (`xtr.search_main`) starts the helper even before the tool's
imports, with `start_early`; the index's `load_scann` takes it over with `started`, after it
has verified the files.

Protocol (native byte order, the helper's stdin and stdout): after the load, and after each
request, the helper writes an int64 status, 0 or the length of a UTF-8 error message that
follows. A request is six int64 (queries Q, dim D, k, pre-reorder k, leaves, threads) and the
[Q, D] float32 queries; the answer, [Q, k] uint32 rows and [Q, k] float32 scores. The helper
ends at the end of its stdin, so it ends with this process.
"""
import contextlib
import os
import subprocess
import sys
import tempfile
import weakref

import numpy as np

from xtr.index import files
from xtr.index import scann_search
from xtr.index import verify

_INT64 = np.dtype(np.int64).itemsize
_REQUEST = 6  # int64 fields of a request's header.
_HELPER = "from xtr.index import scann_process; scann_process.serve()"
_STARTED = {}  # {(scann_dir, names): Searcher} started by `start_early`, until `started`.


class Searcher:
  """The searcher serialized in `scann_dir`, loading in a helper process from construction on:
  `set_num_threads` and `search_batched` as `ScannNumpy`'s (what `scann_search.search` calls);
  the first search waits for the load. `names`: the listed files, which the caller verifies
  before the first search."""

  def __init__(self, scann_dir: str, names: set[str], rows: int):
    scann_search.check_files(scann_dir, names, rows)  # Refused here, before a process starts.
    self._dir = scann_dir
    self._threads = 1
    self._loaded = False
    self._stderr = tempfile.TemporaryFile()  # A file: the helper can never block on it.
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # Where this process imported xtr from, after the user's own path (which may hold other
    # packages that must come first, as they do here).
    path = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), package_root) if p)
    self._process = subprocess.Popen(
        [sys.executable, "-c", _HELPER, scann_dir,
         str(rows), *sorted(names)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=self._stderr, env={
            **os.environ, "PYTHONPATH": path
        })
    weakref.finalize(self, _stop, self._process, self._stderr)

  def set_num_threads(self, threads: int) -> None:
    self._threads = threads

  def search_batched(self, queries: np.ndarray, k: int, pre_reorder: int, leaves: int,
                     parallel: bool, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """queries [Q, D] -> (rows [Q, k] uint32, scores [Q, k] float32), as `ScannNumpy`'s with
    one query per task (`batch_size` 1, the only one `scann_search.search` uses)."""
    del batch_size
    self.wait()
    queries = np.ascontiguousarray(queries, np.float32)
    header = (*queries.shape, k, pre_reorder, leaves, self._threads if parallel else 1)
    try:
      self._process.stdin.write(np.array(header, np.int64).tobytes() + queries.tobytes())
      self._process.stdin.flush()
    except BrokenPipeError:
      self._ended()
    self._check_status()
    size = len(queries) * k
    rows = np.frombuffer(self._read(4 * size), np.uint32).reshape(-1, k)
    return rows, np.frombuffer(self._read(4 * size), np.float32).reshape(-1, k)

  def wait(self) -> None:
    """Waits for the helper's load; a load that failed is raised here."""
    if not self._loaded:
      self._check_status()
      self._loaded = True

  def _error(self) -> type[Exception]:
    """What a failure is: before the load is done, the index's (ScaNN could not load its
    files); after, ScaNN's or the machine's (a search's error, a helper killed for memory)."""
    return RuntimeError if self._loaded else files.DamagedIndexError

  def _check_status(self) -> None:
    length = int(np.frombuffer(self._read(_INT64), np.int64)[0])
    if length:
      raise self._error()(f"{self._dir}: ScaNN: {self._read(length).decode()}")

  def _read(self, size: int) -> bytes:
    data = self._process.stdout.read(size)
    if len(data) < size:
      self._ended()
    return data

  def _ended(self) -> None:
    """Raises the end of a helper that died (a crash of ScaNN's loader, a kill) with its
    exit status and the last line it wrote on stderr."""
    status = self._process.wait()
    self._stderr.seek(0)
    lines = self._stderr.read().decode(errors="replace").strip().splitlines()
    raise self._error()(
        f"{self._dir}: the process that loads and searches ScaNN ended (exit status {status}"
        f"{': ' + lines[-1] if lines else ''}).")


def start_early(index_path: str) -> None:
  """Starts the helper of a one-shard index's ScaNN before the tool has imported JAX, the
  manifest and the listed files' sizes and types checked (nothing is hashed twice: `started`'s
  caller verifies them before the first search). Anything else (no index there, a sharded one,
  a manifest or file that the tool's own open will refuse) starts nothing."""
  try:
    manifest_path = os.path.join(index_path, files.MANIFEST)
    manifest = files.read_json(manifest_path)
    files.check_manifest(manifest, manifest_path)
    verify.Verifier(index_path, manifest["files"], "off").check_sizes()
    scann_dir = files.names(manifest)[files.SCANN_DIR]
    names = scann_search.listed_names(manifest["files"], scann_dir)
    scann_path = os.path.join(index_path, scann_dir)
    rows = manifest.get("num_indexed_tokens", manifest["num_tokens"])
    _STARTED[(scann_path, frozenset(names), rows)] = Searcher(scann_path, names, rows)
  except (OSError, ValueError):
    pass  # The tool's own open reports it.


def started(scann_dir: str, names: set[str], rows: int) -> Searcher:
  """The helper that `start_early` started for these files, else a new one; `names` must have
  been verified."""
  return _STARTED.pop((scann_dir, frozenset(names), rows), None) or Searcher(scann_dir, names, rows)


def _stop(process: subprocess.Popen, stderr) -> None:
  """Ends a helper whose searcher is no longer used (it holds nothing to save)."""
  process.kill()
  process.wait()
  for stream in (process.stdin, process.stdout, stderr):
    with contextlib.suppress(BrokenPipeError):  # A request left unsent by a helper that died.
      stream.close()


def serve() -> None:
  """The helper: loads the searcher of `sys.argv` (the dir, its rows, then its files' names),
  then answers requests until its stdin ends. ScaNN's own output goes to stderr, off the
  protocol."""
  scann_dir, rows, *names = sys.argv[1:]
  out = os.fdopen(os.dup(1), "wb")
  os.dup2(2, 1)
  requests = sys.stdin.buffer
  try:
    searcher = scann_search.load(scann_dir, set(names), int(rows))
  except Exception as error:  # pylint: disable=broad-except  # Sent to the searching process.
    _send(out, error=error)
    return
  _send(out)
  while header := requests.read(_REQUEST * _INT64):
    q, d, k, pre_reorder, leaves, threads = (int(v) for v in np.frombuffer(header, np.int64))
    queries = np.frombuffer(requests.read(4 * q * d), np.float32).reshape(q, d)
    try:
      if threads > 1:
        searcher.set_num_threads(threads)
      rows, scores = searcher.search_batched(queries, k, pre_reorder, leaves, threads > 1, 1)
    except Exception as error:  # pylint: disable=broad-except
      _send(out, error=error)
      continue
    _send(out, rows.astype(np.uint32).tobytes() + scores.astype(np.float32).tobytes())


def _send(out, payload: bytes = b"", error: Exception | None = None) -> None:
  message = f"{type(error).__name__}: {error}".encode() if error else b""
  out.write(np.array([len(message)], np.int64).tobytes() + message + payload)
  out.flush()
