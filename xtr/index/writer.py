"""Writing an index directory chunk by chunk: resumable, locked, and repairable.

Chunk c holds docs c * docs_per_chunk onwards, in corpus order; token ids are row numbers in the
concatenation of the chunks. `writer.json` records the settings (model, checkpoint fingerprint,
corpus sha256 and document range, pruning, ...): an export, resume or repair of a directory
whose recorded settings differ in what the vectors depend on is refused before it changes a
file. The lock (`export.lock`) is taken first; every file is written through `xtr.io` (no
name planted in the directory redirects a write).

Pruning (ALIGNER §3.2): with `prune_doc` = β_d, ScaNN indexes only the top ⌈β_d·m⌉ tokens of each
document by salience (`salience.kept`); the chunks keep every token vector, for refinement.
`reprune` writes another pruning of a complete index without re-encoding: it links the chunks.
"""
from collections.abc import Iterator
from collections.abc import Sequence
import functools
import hashlib
import json
import os
import posixpath
from typing import Any

import numpy as np
import tqdm

from xtr import io
from xtr.index import files
from xtr.index import scann
from xtr.index import verify
from xtr.models import salience as salience_lib

DOCS_PER_CHUNK = 1000  # when neither the caller nor the directory's settings say
# The settings that the vectors and the chunks depend on: an export, resume or repair must
# match them. The gin text (kept for the record) and the paths of the corpus and vocabulary
# files (their sha256s count) may differ.
_PROVENANCE = ("format", "dim", "dtype", "model", "fingerprint", "docs_per_chunk", "corpus",
               "prune_doc", "vectors_stored")


class IndexComplete(FileExistsError):
  """The directory is already a complete index of these settings: there is nothing to do."""


def _without_path(record: Any) -> Any:
  return {k: v for k, v in record.items() if k != "path"} if isinstance(record, dict) else record


def _model_without_path(model: Any) -> Any:
  """A model description (`model_spec.describe`) without its vocabulary file's path."""
  if isinstance(model, dict) and "vocabulary" in model:
    return {**model, "vocabulary": _without_path(model["vocabulary"])}
  return model


def changed_model(recorded: dict[str, Any], model: dict[str, Any]) -> list[tuple[str, Any, Any]]:
  """(key, recorded value, value) of each entry where two model descriptions differ as JSON,
  nested keys joined by "." (the vocabulary's path does not count, its sha256 does)."""

  def differences(a, b, prefix):
    if not (isinstance(a, dict) and isinstance(b, dict)):
      return [] if a == b else [(prefix, a, b)]
    return [
        difference for key in sorted(a.keys() | b.keys())
        for difference in differences(a.get(key), b.get(key), f"{prefix}{key}.")
    ]

  as_json = lambda m: json.loads(json.dumps(_model_without_path(m)))
  return [(key[:-1], a, b) for key, a, b in differences(as_json(recorded), as_json(model), "")]


def _changed_settings(previous: dict[str, Any], settings: dict[str, Any]) -> list[str]:
  """The provenance keys whose values differ (paths of the same files do not count)."""

  def provenance(s):
    return {
        **{
            k: s.get(k) for k in _PROVENANCE
        }, "model": _model_without_path(s.get("model")),
        "corpus": _without_path(s.get("corpus"))
    }

  previous, settings = provenance(previous), provenance(settings)
  return [k for k in _PROVENANCE if previous[k] != settings[k]]


def _vocabulary_copy(model: dict[str, Any]) -> dict[str, Any]:
  """`model` with its vocabulary's path where the index keeps its copy: vocabulary/<name>."""
  if "vocabulary" not in model:
    return model
  name = posixpath.basename(model["vocabulary"]["path"].rstrip("/"))
  return {**model, "vocabulary": {**model["vocabulary"], "path": f"{files.VOCABULARY_DIR}/{name}"}}


class IndexWriter:
  """Writes one index directory chunk by chunk; a killed export resumes at `completed_chunks()`.

  Usage: for chunk in range(writer.completed_chunks(), num_chunks): write_chunk(chunk, ...);
  then finalize(). Chunks must be written in order and all but the last hold docs_per_chunk docs.
  One writer at a time: a second one on the same directory is refused until the first finishes
  or dies.
  """

  def __init__(self, out_dir: str, dim: int, dtype: str, model: dict[str, Any], fingerprint: str,
               docs_per_chunk: int | None, corpus: dict[str, Any], gin_config: str = "",
               prune_doc: float | None = None, store_vectors: bool = True, repair: bool = False,
               vocabulary: str | None = None):
    """Takes the directory's lock, then checks these settings against those it records (if
    any) before it changes anything.

    Args:
      model: the encoder as data (`xtr.models.model_spec.describe`, plus the encoder's lengths); a
        model with a "salience" gate writes each token's salience. Its vocabulary file is
        copied into the index (`vocabulary/<name>`), where the manifest records it.
      docs_per_chunk: None: the directory's recorded value (resume, repair), else 1000.
      corpus: {"path", "sha256", "docs": [first, stop), "total_docs"}: what the directory holds.
      gin_config: the exporting run's gin config, stored for provenance only (never parsed).
      prune_doc: β_d in (0, 1]: ScaNN indexes each document's top ⌈β_d·m⌉ tokens by salience
        (None: all tokens).
      store_vectors: keep the token vectors in the index (`dtype`). False: they are written in
        `dtype` while the export runs (for resuming and for ScaNN) and deleted once the
        manifest is written, which then records "vectors_stored": false.
      repair: a complete index of the same settings is verified in full (`repair_report`
        says what was found) and made resumable from its first damaged chunk; without it, it
        raises IndexComplete. An unfinished export's completed chunks are verified likewise.
      vocabulary: the vocabulary file to copy (default: the path `model` records).

    Raises:
      ValueError: the directory holds an export or index of other settings (nothing changed).
      IndexComplete: the directory is a complete index of these settings and not `repair`.
      io.LockedError: another export or repair is writing the directory.
    """
    if str(np.dtype(dtype)) not in files.DTYPES:
      raise ValueError(f"dtype {dtype} is not one of {files.DTYPES}")
    if prune_doc is not None and not (model.get("salience") and 0 < prune_doc <= 1):
      raise ValueError(f"prune_doc={prune_doc} needs a model with salience heads and a value in "
                       "(0, 1]")
    self.out_dir = out_dir
    check_out_dir(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    lock = os.path.join(out_dir, files.LOCK)
    self._lock = io.Lock(
        lock, "repair" if repair else "export",
        lambda holder: f"{out_dir} is being written by another export ({holder}, holding {lock}); "
        "wait for it to finish or use another --out.")
    try:
      io.make_dir(os.path.join(out_dir, "chunks"))
      previous = self._recorded(files.WRITER)
      manifest = self._recorded(files.MANIFEST)
      if docs_per_chunk is None:
        docs_per_chunk = (previous or manifest or {}).get("docs_per_chunk", DOCS_PER_CHUNK)
      # The JSON round trip makes `settings` compare equal to the settings read back on resume.
      self.settings = json.loads(
          json.dumps({
              "format": files.FORMAT,
              "dim": dim,
              "dtype": str(np.dtype(dtype)),
              "model": _vocabulary_copy(model),
              "fingerprint": fingerprint,
              "docs_per_chunk": docs_per_chunk,
              "corpus": corpus,
              "gin_config": gin_config,
              "prune_doc": prune_doc,
              # Only when false, so that the settings of other exports stay as they were.
              **({} if store_vectors else {
                     "vectors_stored": False
                 })
          }))
      self.repair_report = self._check(previous, manifest, repair)
      self._copy_vocabulary(vocabulary or model.get("vocabulary", {}).get("path"))
    except BaseException:
      self._lock.release()
      raise
    self._next_chunk = self.completed_chunks()

  def _recorded(self, name: str) -> dict[str, Any] | None:
    """The settings recorded in the directory's `name` (writer.json or manifest.json), if any."""
    path = os.path.join(self.out_dir, name)
    if not os.path.lexists(path):
      return None
    recorded = files.read_json(path)
    if name == files.MANIFEST:
      files.check_manifest(recorded, path)
    elif not isinstance(recorded, dict):
      raise files.DamagedIndexError(f"{path}: not a JSON object; the token index is damaged.")
    return recorded

  def _check(self, previous: dict[str, Any] | None, manifest: dict[str, Any] | None,
             repair: bool) -> str | None:
    """Refuses settings that differ from the recorded ones; adopts those (so that a resumed
    export writes what the interrupted one would have); prepares a repair. Returns the repair
    report (None: nothing to repair)."""
    if manifest is not None and manifest.get("updates"):
      raise ValueError(f"{self.out_dir} was updated in place (xtr-export --add/--delete) after "
                       "its export: an export or --repair would not hold what it holds; nothing "
                       "was changed. Export the updated corpus into a new directory.")
    for name, recorded in ((files.MANIFEST, manifest), (files.WRITER, previous)):
      changed = [] if recorded is None else _changed_settings(recorded, self.settings)
      if changed:
        raise ValueError(
            f"{os.path.join(self.out_dir, name)}: this index was exported with other settings "
            f"({', '.join(changed)} differ: {[recorded.get(k) for k in changed]} before, "
            f"{[self.settings.get(k) for k in changed]} now); nothing was changed. Export into "
            "a new directory.")
    if manifest is not None and not repair:
      drop_unstored_vectors(self.out_dir, manifest)
      raise IndexComplete(f"{self.out_dir} is already a complete index of this checkpoint and "
                          "corpus; nothing to do (--repair verifies it and redoes what is "
                          "damaged).")
    if previous is None:
      io.write_json(os.path.join(self.out_dir, files.WRITER), self.settings)
    else:
      self.settings = previous
    if manifest is not None:
      return _prepare_repair(self.out_dir, manifest)
    if repair and previous is not None:
      return _prepare_unfinished_repair(self.out_dir, self.completed_chunks())
    return None

  def _copy_vocabulary(self, source: str | None) -> None:
    """Copies the model's vocabulary file from `source` into the index, unless its copy there
    is intact (an index written before xtr kept a copy records a path outside: left as is)."""
    vocab = self.settings["model"].get("vocabulary")
    if vocab is None or not vocab["path"].startswith(files.VOCABULARY_DIR + "/"):
      return
    io.make_dir(os.path.join(self.out_dir, files.VOCABULARY_DIR))
    path = io.inside(self.out_dir, vocab["path"])
    if os.path.lexists(path) and files.record(path)["sha256"] == vocab["sha256"]:
      return
    data = io.read_bytes(source)
    if hashlib.sha256(data).hexdigest() != vocab["sha256"]:
      raise ValueError(f"the vocabulary {source} is not the one the index records (sha256 "
                       f"{vocab['sha256']}): export with the model's own vocabulary.")
    io.atomic_write(path, lambda f: f.write(data))

  def completed_chunks(self) -> int:
    """Number of chunks 0, 1, ... whose files are all complete on disk."""
    chunk = 0
    while os.path.exists(files.chunk_files(self.out_dir, chunk)["chunk"]):
      chunk += 1
    return chunk

  def write_chunk(self, chunk_id: int, doc_ids: Sequence[str], vectors: Sequence[np.ndarray],
                  saliences: Sequence[np.ndarray] | None = None) -> None:
    """Writes the token vectors of docs chunk_id * docs_per_chunk onwards.

    Args:
      chunk_id: must be the next chunk (`completed_chunks()` of a fresh or resumed writer).
      doc_ids: corpus ids of the chunk's docs (1 to docs_per_chunk of them).
      vectors: per doc, its token vectors [len_i, D] (len_i may be 0).
      saliences: per doc, its token saliences [len_i]; exactly when the model has a salience
        gate.
    """
    if (saliences is None) == bool(self.settings["model"].get("salience")):
      raise ValueError(f"chunk {chunk_id}: saliences must be given exactly when the model has "
                       "salience heads")
    self._check_next(chunk_id)
    if not 0 < len(doc_ids) <= self.settings["docs_per_chunk"] or len(vectors) != len(doc_ids):
      raise ValueError(f"chunk {chunk_id}: got {len(doc_ids)} doc ids and {len(vectors)} vector "
                       f"arrays, expected 1 to {self.settings['docs_per_chunk']} of each")
    dim = self.settings["dim"]
    vectors = [np.asarray(v) for v in vectors]
    for doc_id, doc_vectors in zip(doc_ids, vectors):
      if doc_vectors.ndim != 2 or doc_vectors.shape[1] != dim:
        raise ValueError(f"chunk {chunk_id}, doc {doc_id!r}: vectors of shape "
                         f"{doc_vectors.shape}, expected [length, {dim}]")
    write_chunk_files(self.out_dir, chunk_id, chunk_id * self.settings["docs_per_chunk"], doc_ids,
                      vectors, saliences, dim, self.settings["dtype"])
    self._next_chunk += 1

  def _check_next(self, chunk_id: int) -> None:
    if chunk_id != self._next_chunk:
      raise ValueError(f"chunk {chunk_id} written out of order: the next chunk of "
                       f"{self.out_dir} is {self._next_chunk}")

  def link_chunk(self, chunk_id: int, source_dir: str) -> None:
    """Writes chunk `chunk_id` as hard links to (or copies of) the files of chunk `chunk_id` of
    the index at `source_dir`, written with the same settings but pruning; `finalize` verifies
    them."""
    self._check_next(chunk_id)
    sources = files.chunk_files(source_dir, chunk_id)
    # The chunk record comes last: its presence marks the chunk complete.
    for name, dst in files.chunk_files(self.out_dir, chunk_id).items():
      if os.path.lexists(sources[name]):
        io.link_or_copy(sources[name], dst)
    self._next_chunk += 1

  def finalize(self, scann_config: scann.ScannConfig | None = None) -> dict[str, Any]:
    """Checks the chunks, builds ScaNN and writes doc ids, offsets and (last) the manifest.

    ScaNN is trained on a sample of the tokens and then fed the chunks from disk
    (`scann.build`): no float32 copy of the tokens is made; the peak grows with ScaNN's codes
    and the copies its serialization makes of them (docs/performance.md, "At corpus scale").

    Returns:
      The manifest.
    """
    try:
      return self._finalize(scann_config or scann.ScannConfig())
    finally:  # The writer is done either way.
      self._lock.release()

  def _finalize(self, scann_config: scann.ScannConfig) -> dict[str, Any]:
    metas = [
        files.read_json(files.chunk_files(self.out_dir, c)["chunk"])
        for c in range(self._next_chunk)
    ]
    listed, chunks = {}, []
    for chunk, meta in enumerate(metas):
      chunks.append(self._checked_chunk(chunk, meta, listed))
    lengths = [n for meta in metas for n in meta["doc_lengths"]]
    if not sum(lengths):
      raise ValueError(f"{self.out_dir}: no document tokens were written")
    indexed = self._indexed_tokens(chunks, lengths)
    num_indexed = sum(lengths) if indexed is None else len(indexed)
    searcher, scann_settings = scann.build(lambda: self._indexed_vectors(chunks, indexed),
                                           num_indexed, scann_config)
    scann_files, order = scann.write(searcher, self.out_dir)
    listed.update(scann_files)
    if indexed is not None or order is not None:  # Row r of ScaNN is not token r.
      rows = np.arange(num_indexed) if indexed is None else indexed
      path = os.path.join(self.out_dir, files.SCANN_TOKENS)
      files.write_npy(path, rows if order is None else rows[order])
      listed[files.SCANN_TOKENS] = files.record(path)
    doc_ids = [doc_id for meta in metas for doc_id in meta["doc_ids"]]
    doc_ids_path = os.path.join(self.out_dir, files.DOC_IDS)
    io.atomic_write(doc_ids_path,
                    lambda f: f.write("".join(json.dumps(i) + "\n" for i in doc_ids).encode()))
    offsets_path = os.path.join(self.out_dir, files.DOC_OFFSETS)
    files.write_npy(offsets_path, np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]))
    listed[files.DOC_IDS] = files.record(doc_ids_path)
    listed[files.DOC_OFFSETS] = files.record(offsets_path)
    listed.update(self._listed_vocabulary())
    manifest = {
        **self.settings, "num_docs": len(doc_ids),
        "num_tokens": sum(lengths),
        "num_indexed_tokens": num_indexed,
        "scann": scann_settings,
        "chunks": chunks,
        "files": dict(sorted(listed.items()))
    }
    io.write_json(os.path.join(self.out_dir, files.MANIFEST), manifest)
    drop_unstored_vectors(self.out_dir, manifest)
    return manifest

  def _listed_vocabulary(self) -> dict[str, Any]:
    """{relative path: record} of the index's copy of its vocabulary, checked ({}: none)."""
    vocab = self.settings["model"].get("vocabulary")
    if vocab is None or not vocab["path"].startswith(files.VOCABULARY_DIR + "/"):
      return {}
    path = io.inside(self.out_dir, vocab["path"])
    record = files.record(path)
    if record["sha256"] != vocab["sha256"]:
      raise files.DamagedIndexError(f"{path} is damaged: its sha256 differs from the model's "
                                    "vocabulary. " + verify.repair_hint(self.out_dir))
    return {vocab["path"]: record}

  def _indexed_vectors(self, chunks: list[dict[str, Any]],
                       indexed: np.ndarray | None) -> Iterator[np.ndarray]:
    """Yields each chunk's token vectors [T_c, D], or with `indexed` (the kept tokens' indices
    [T_kept], increasing) its kept rows. Each chunk is memory-mapped while it is read and
    unmapped after, so that the corpus's pages do not stay in this process's memory."""
    start = 0
    for i, chunk in enumerate(chunks):
      vectors = files.load_npy(
          files.chunk_files(self.out_dir, i)["vectors"],
          (chunk["num_tokens"], self.settings["dim"]), self.settings["dtype"])
      stop = start + len(vectors)
      if indexed is not None:
        vectors = vectors[files.rows_between(indexed, start, stop)]
      yield vectors
      start = stop

  def _indexed_tokens(self, chunks: list[dict[str, Any]], lengths: list[int]) -> np.ndarray | None:
    """[T_kept] int64: the tokens ScaNN indexes after pruning (None: all of them)."""
    beta = self.settings["prune_doc"]
    if beta is None:
      return None
    saliences = np.concatenate([
        files.load_npy(os.path.join(self.out_dir, c["salience_file"]), (c["num_tokens"],),
                       "float32") for c in chunks
    ])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    kept = np.concatenate([np.zeros(0, bool)] + [
        salience_lib.kept(saliences[start:stop], beta)
        for start, stop in zip(offsets[:-1], offsets[1:])
    ])
    return np.flatnonzero(kept).astype(np.int64)

  def _checked_chunk(self, chunk: int, meta: dict[str, Any], listed: dict[str,
                                                                          Any]) -> dict[str, Any]:
    """Verifies chunk `chunk` on disk against its record `meta`, adds its files to `listed`;
    returns its manifest entry."""
    paths = files.chunk_files(self.out_dir, chunk)
    if chunk < self._next_chunk - 1 and len(meta["doc_ids"]) != self.settings["docs_per_chunk"]:
      raise ValueError(f"{paths['chunk']}: {len(meta['doc_ids'])} docs in a chunk that is not the"
                       f" last, expected docs_per_chunk = {self.settings['docs_per_chunk']}")
    names = ("vectors", "doc_index", "salience") if "salience" in meta else ("vectors", "doc_index")
    for name in names:
      if files.record(paths[name]) != meta[name]:
        raise files.DamagedIndexError(
            f"{paths[name]} is damaged: its sha256 or size differs from {paths['chunk']}. " +
            verify.repair_hint(self.out_dir))
    entry, chunk_listed = chunk_entry(self.out_dir, chunk, meta)
    listed.update(chunk_listed)
    if not self.settings.get("vectors_stored", True):  # doc_offsets gives each token's doc.
      del listed[entry.pop("file")], listed[entry.pop("doc_index_file")]
    return entry


def write_chunk_files(out_dir: str, chunk_id: int, first_doc: int, doc_ids: Sequence[str],
                      vectors: Sequence[np.ndarray], saliences: Sequence[np.ndarray] | None,
                      dim: int, dtype: str) -> dict[str, Any]:
  """Writes chunk `chunk_id`'s files, its docs numbered from `first_doc`, its record last (which
  marks it complete); returns the record (doc ids and lengths, the files' sha256s and sizes)."""
  lengths = [len(v) for v in vectors]
  doc_index = np.repeat(np.arange(first_doc, first_doc + len(doc_ids), dtype=np.int32), lengths)
  # The leading [0, D] array keeps the shape when every doc of the chunk is empty.
  tokens = np.concatenate([np.zeros((0, dim)), *vectors], dtype=dtype)
  paths = files.chunk_files(out_dir, chunk_id)
  files.write_npy(paths["vectors"], tokens)
  files.write_npy(paths["doc_index"], doc_index)
  record = {
      "doc_ids": list(doc_ids),
      "doc_lengths": lengths,
      "vectors": files.record(paths["vectors"]),
      "doc_index": files.record(paths["doc_index"])
  }
  if saliences is not None:
    if [len(u) for u in saliences] != lengths:
      raise ValueError(f"chunk {chunk_id}: salience lengths {[len(u) for u in saliences]} "
                       f"differ from the vectors' {lengths}")
    files.write_npy(paths["salience"], np.concatenate([np.zeros(0), *saliences], dtype=np.float32))
    record["salience"] = files.record(paths["salience"])
  io.write_json(paths["chunk"], record)
  return record


def chunk_entry(out_dir: str, chunk: int, meta: dict[str, Any]) -> tuple[dict, dict]:
  """(the manifest's entry of chunk `chunk`, {relative path: record} of its files) from its
  record `meta` (`write_chunk_files`)."""
  paths = files.chunk_files(out_dir, chunk)
  relative = {name: os.path.relpath(path, out_dir) for name, path in paths.items()}
  names = ("vectors", "doc_index", "salience") if "salience" in meta else ("vectors", "doc_index")
  listed = {relative[name]: meta[name] for name in names}
  listed[relative["chunk"]] = files.record(paths["chunk"])
  entry = {
      "file": relative["vectors"],
      "doc_index_file": relative["doc_index"],
      "num_docs": len(meta["doc_ids"]),
      "num_tokens": sum(meta["doc_lengths"])
  }
  if "salience" in meta:
    entry["salience_file"] = relative["salience"]
  return entry, listed


def drop_unstored_vectors(out_dir: str, manifest: dict[str, Any]) -> None:
  """Deletes the vector and doc index chunks of a complete index whose manifest says they are
  not stored (written for the export's sake, or left by a kill between the manifest and their
  deletion)."""
  if manifest.get("vectors_stored", True):
    return
  for chunk in range(len(manifest["chunks"])):
    for name in ("vectors", "doc_index"):
      path = files.chunk_files(out_dir, chunk)[name]
      if os.path.lexists(path):
        os.remove(path)


def check_out_dir(out_dir: str) -> None:
  """Refuses an `out_dir` that xtr did not make its own: one inside a token index, or one that
  holds files when it holds no export (its writer.json or manifest.json); a killed export leaves
  at most its lock and an empty chunks/ before its writer.json. An export replaces what it finds
  at its names (doc_ids.jsonl, scann/, ...), so it never writes where these could be a user's."""
  path = os.path.abspath(out_dir)
  while os.path.dirname(path) != path:
    path = os.path.dirname(path)
    if _holds_index(path):
      raise ValueError(f"--out={out_dir} is inside the token index at {path}: an export there "
                       "would change that index. Choose a directory outside it.")
  if not os.path.isdir(out_dir) or _holds_index(out_dir):
    return
  chunks = os.path.join(out_dir, "chunks")
  found = sorted(set(os.listdir(out_dir)) - {files.LOCK, "chunks"})
  if found or os.path.lexists(chunks) and (not os.path.isdir(chunks) or os.listdir(chunks)):
    raise ValueError(f"--out={out_dir} holds {(found or ['chunks/'])[:3]} but no {files.WRITER} "
                     f"or {files.MANIFEST} of an xtr export: an export writes only into a new or "
                     "empty directory, or resumes its own (whose writer.json is kept). Choose "
                     "another --out.")


def _holds_index(path: str) -> bool:
  """Whether the directory `path` holds an export of xtr, complete or not."""
  return os.path.lexists(os.path.join(
      path, files.WRITER)) or (os.path.lexists(os.path.join(path, files.MANIFEST)) and
                               os.path.isdir(os.path.join(path, "chunks")))


def reprune(source_dir: str, out_dir: str, prune_doc: float | None,
            scann_config: scann.ScannConfig | None = None,
            store_vectors: bool = True) -> dict[str, Any]:
  """Writes at `out_dir` the index of `source_dir` with ScaNN over another pruning (β_d).

  The chunks (token vectors, doc indexes, saliences, records) are hard links to the source's
  (copies across file systems); the settings are the source's but for `prune_doc` and
  `store_vectors` (False: an XTR-only index, its links to the vectors dropped once it is
  complete). Resumable like an export: a killed reprune is finished by running it again. Damage
  in the source's chunks is detected by `finalize` before ScaNN is built.

  An index updated in place (`xtr-export --add/--delete`) is compacted instead: its files but
  ScaNN are verified in full, then its live documents, in its order, are copied into chunks of
  docs_per_chunk, without the deleted documents' tombstones: the index a fresh export of the
  updated corpus writes (the corpus record adds the updates).

  Returns:
    The manifest of `out_dir`.
  """
  source = files.complete_manifest(source_dir)
  if not source.get("vectors_stored", True):
    raise ValueError(f"{source_dir} was exported with --store_vectors=none: it has no token "
                     "vectors to build another ScaNN from. Export from the corpus instead.")
  vocabulary = source["model"].get("vocabulary")
  if vocabulary is not None and vocabulary.get("path") not in source["files"]:
    raise ValueError(f"{os.path.join(source_dir, files.MANIFEST)}: the vocabulary "
                     f"{vocabulary.get('path')!r} is not a file of the index (it was written "
                     "before xtr kept a copy of its vocabulary): export from the corpus instead.")
  corpus, live = source["corpus"], None
  if source.get("updates"):  # Verified first: what it holds decides the settings.
    scann_dir = files.names(source)[files.SCANN_DIR] + "/"
    verifier = verify.Verifier(source_dir, source["files"], "full", bool(source.get("updates")))
    verifier.check_sizes()
    verifier.check(name for name in source["files"] if not name.startswith(scann_dir))
    live = np.setdiff1d(np.arange(source["num_docs"]), files.deleted_docs(source_dir, source))
    corpus = {
        **corpus, "docs": [0, len(live)],
        "total_docs": len(live),
        "updates": source["updates"]
    }
  writer = IndexWriter(out_dir, source["dim"], source["dtype"], source["model"],
                       source["fingerprint"], source["docs_per_chunk"], corpus,
                       source["gin_config"], prune_doc, store_vectors, vocabulary=vocabulary and
                       _regular(source_dir, vocabulary["path"]))
  if live is None:
    for chunk in range(writer.completed_chunks(), len(source["chunks"])):
      writer.link_chunk(chunk, source_dir)
  else:
    _copy_live_docs(source_dir, source, live, writer)
  manifest = writer.finalize(scann_config)
  drop_unstored_vectors(out_dir, manifest)
  return manifest


def _copy_live_docs(source_dir: str, source: dict[str, Any], live: np.ndarray,
                    writer: IndexWriter) -> None:
  """Writes the documents `live` [n] (doc indices of the updated index at `source_dir`,
  increasing) into `writer`'s chunks, docs_per_chunk each, from its next chunk on (a resumed
  compaction)."""
  doc_ids, offsets = files.doc_ids(source_dir, source), files.doc_offsets(source_dir, source)
  starts = files.chunk_doc_starts(source)

  @functools.lru_cache(maxsize=2)
  def chunk_arrays(c: int) -> tuple[np.ndarray, np.ndarray | None]:
    """Source chunk c's token vectors [T_c, D] and saliences [T_c] (None without)."""
    entry = source["chunks"][c]
    load = lambda key, shape, dtype: files.load_npy(os.path.join(source_dir, entry[key]), shape,
                                                    dtype)
    vectors = load("file", (entry["num_tokens"], source["dim"]), source["dtype"])
    return vectors, (load("salience_file",
                          (entry["num_tokens"],), "float32") if "salience_file" in entry else None)

  def doc(d: int) -> tuple[np.ndarray, np.ndarray | None]:
    c = int(np.searchsorted(starts, d, side="right")) - 1
    first = offsets[starts[c]]
    rows = slice(offsets[d] - first, offsets[d + 1] - first)
    vectors, saliences = chunk_arrays(c)
    return np.asarray(vectors[rows]), None if saliences is None else np.asarray(saliences[rows])

  per_chunk = source["docs_per_chunk"]
  for chunk in tqdm.tqdm(range(writer.completed_chunks(), -(-len(live) // per_chunk)),
                         desc="compact", unit="chunk"):
    docs = live[chunk * per_chunk:(chunk + 1) * per_chunk]
    vectors, saliences = zip(*(doc(d) for d in docs))
    writer.write_chunk(chunk, [doc_ids[d] for d in docs], vectors,
                       None if saliences[0] is None else saliences)


def _regular(index_dir: str, relative: str) -> str:
  """index_dir/relative, a regular file inside the index (`io.inside`)."""
  path = io.inside(index_dir, relative)
  io.regular_size(path)
  return path


def _remove_chunk_records(out_dir: str, first: int, stop: int) -> None:
  """Removes the records of chunks first..stop-1, last first: the chunks a resumed export
  counts as done (`completed_chunks`, from chunk 0 to the first without a record) stay a prefix
  of intact ones, wherever a kill stops this."""
  for chunk in reversed(range(first, stop)):
    if os.path.lexists(files.chunk_files(out_dir, chunk)["chunk"]):
      os.remove(files.chunk_files(out_dir, chunk)["chunk"])


def _prepare_unfinished_repair(out_dir: str, completed: int) -> str:
  """`_prepare_repair` of an export that never finished (no manifest): verifies its completed
  chunks against their records and removes the records from the first damaged one on."""
  for chunk in range(completed):
    paths = files.chunk_files(out_dir, chunk)
    meta = files.read_json(paths["chunk"])
    for name in ("vectors", "doc_index", "salience"):
      if name in meta and (not os.path.lexists(paths[name]) or
                           files.record(paths[name]) != meta[name]):
        _remove_chunk_records(out_dir, chunk, completed)
        return (f"{out_dir}: an unfinished export, {paths[name]} damaged; re-encoding from chunk "
                f"{chunk}, then finishing the export.")
  return f"{out_dir}: an unfinished export whose {completed} chunks verify; finishing it."


def _prepare_repair(out_dir: str, manifest: dict[str, Any]) -> str:
  """Makes a damaged complete index resumable: the export then redoes only what is damaged.

  Verifies every file of `out_dir` in full; removes the manifest, and the chunk records from the
  first chunk whose files do not verify on (the resumed export re-encodes from there; ScaNN, doc
  ids and offsets are always rebuilt). A listed name that is a symlink or another non-regular
  file is refused before anything is removed. Returns what it found, for the user.
  """
  damaged = []
  for relative, expected in manifest["files"].items():
    try:
      intact = files.record(io.inside(out_dir, relative)) == expected
    except FileNotFoundError:
      intact = False
    if not intact:
      damaged.append(relative)
  chunk_records = lambda c: os.path.relpath(files.chunk_files(out_dir, c)["chunk"], out_dir)
  bad_chunks = [
      c for c, chunk in enumerate(manifest["chunks"])
      if {*(chunk[key] for key in files.CHUNK_FILES if key in chunk),
          chunk_records(c)} & set(damaged)
  ]
  first_bad = bad_chunks[0] if bad_chunks else len(manifest["chunks"])
  if not manifest.get("vectors_stored", True):
    first_bad = 0  # Rebuilding ScaNN needs every token vector: re-encode them all.
  # The records before the manifest: a repair killed in between is a repair again when rerun.
  _remove_chunk_records(out_dir, first_bad, len(manifest["chunks"]))
  os.remove(os.path.join(out_dir, files.MANIFEST))
  if first_bad == len(manifest["chunks"]):
    return f"{out_dir}: every file verifies; rebuilding ScaNN, doc ids and offsets."
  found = f"damaged {damaged}" if damaged else "every file verifies (no stored vectors)"
  return (f"{out_dir}: {found}; re-encoding from chunk {first_bad} of "
          f"{len(manifest['chunks'])}, then rebuilding ScaNN, doc ids and offsets.")
