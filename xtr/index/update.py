"""Adding and deleting documents of a complete index in place (`xtr-export --add/--delete`).

An update never changes a file that the manifest lists. It writes the new documents' chunks
under new chunk numbers, and the files that change (doc ids, doc offsets, ScaNN, ScaNN's row ->
token table, the deleted documents) under the names of the next generation
(`files.generation_name`: doc_ids.g1.jsonl, scann.g1/, ...); then it writes the manifest,
whose rename is the commit; then it removes the previous generation's files. A kill at any point
leaves the old index (the new files are unlisted; the next update removes them) or the new one.

ScaNN is updated, not rebuilt: the deleted documents' tokens are deleted from it and the new
ones upserted into its trained partitions and codebooks (ScaNN fills a deleted row with its
last one, so `scann_tokens` maps rows to tokens). Deleted documents stay in the chunks as
tombstones under their doc index: no token retrieval (ScaNN, brute force or device) holds their
tokens, so they are never a candidate, and refinement reads only candidates. Their vectors stay
on disk until the index is compacted (`writer.reprune`, xtr-export --from_index) or exported again.

Doc indices stay as they were (new documents come after the old ones): an index updated from A
by adding B and deleting C ranks as a fresh export of A + B - C under exact search
(`tests/test_update.py`), and within ANN noise under ScaNN.
"""
from collections.abc import Callable
from collections.abc import Sequence
import json
import os
from typing import Any

import numpy as np
import tqdm

from xtr import io
from xtr.index import files
from xtr.index import scann
from xtr.index import scann_search
from xtr.index import verify
from xtr.index import writer as writer_lib
from xtr.models import salience as salience_lib


def update(index_dir: str, load_encoder: Callable[[], Any],
           added: tuple[Sequence[str], Sequence[str]] | None, deleted: Sequence[str],
           record: dict[str, Any]) -> dict[str, Any]:
  """Deletes the documents `deleted` from the index at `index_dir`, then adds `added`.

  Args:
    load_encoder: loads the index's encoder (`xtr.models.encoding.Encoder`) and its model as
      `xtr.models.model_spec.describe` writes it: the fingerprint and the description (lengths,
      vocabulary, backbone settings) are checked against the index's; called, once the ids are
      checked, only if documents are added.
    added: (doc ids, texts) of new documents (None: none); an id may be one deleted now.
    deleted: ids of documents of the index to delete.
    record: what the manifest's "updates" list records of this update: the files' paths
      (record["delete"]["path"], record["add"]["path"]), which errors name, and sha256s.

  Returns:
    The new manifest.

  Raises:
    ValueError: an id to delete is not in the index, an added id is already there (or twice),
      no token would be left, or the index cannot be updated (sharded, XTR-only, another
      model); nothing was changed.
  """
  lock = os.path.join(index_dir, files.LOCK)
  with io.Lock(
      lock, "update", lambda holder: f"{index_dir} is being written by another export "
      f"({holder}, holding {lock}); wait for it to finish."):
    manifest = _manifest(index_dir)
    doc_ids = files.doc_ids(index_dir, manifest)
    gone = _deleted_mask(index_dir, manifest)
    gone_now = _docs_to_delete(doc_ids, gone, deleted, _source(record, "delete"))
    added_ids, texts = added or ([], [])
    _check_added(doc_ids, gone | gone_now, added_ids, _source(record, "add"))
    if (gone | gone_now).all() and not added_ids:
      raise ValueError(f"the update would delete every document of {index_dir}; nothing was "
                       "changed.")
    encoder = _checked_encoder(index_dir, manifest, *load_encoder()) if added_ids else None
    generation = manifest.get("generation", 0) + 1
    _remove_unlisted(index_dir, manifest, generation)
    new = _commit(index_dir, manifest, generation, doc_ids + list(added_ids), gone | gone_now,
                  _write_chunks(index_dir, manifest, encoder, added_ids, texts), record)
    for name in sorted(set(manifest["files"]) - set(new["files"])):
      io.remove_stale(os.path.join(index_dir, name))
    io.remove_stale(os.path.join(index_dir, files.names(manifest)[files.SCANN_DIR]))
    return new


def _source(record: dict[str, Any], kind: str) -> str:
  """What errors call the file of the ids to delete or add (`kind`): its path, as recorded."""
  return record[kind]["path"] if kind in record else f"the ids to {kind}"


def _manifest(index_dir: str) -> dict[str, Any]:
  """The index's manifest, once every listed file's size and the sha256s of those an update
  reads (doc ids, offsets, ScaNN and its tables; not the chunks it keeps) are verified."""
  manifest = files.complete_manifest(index_dir)
  corpus = manifest["corpus"]
  if corpus.get("docs") not in (None, [0, corpus.get("total_docs")]):
    raise ValueError(f"{index_dir} is one shard of a sharded export: its shards must tile one "
                     "corpus, so it cannot be updated alone. Export the updated corpus again.")
  if not manifest.get("vectors_stored", True):
    raise ValueError(f"{index_dir} was exported with --store_vectors=none: an update writes its "
                     "new documents' vectors beside the old ones; export the updated corpus.")
  read = files.names(manifest).values()
  verifier = verify.Verifier(index_dir, manifest["files"], "full", bool(manifest.get("updates")))
  verifier.check_sizes()
  verifier.check(name for name in manifest["files"] if name in read or name.split("/")[0] in read)
  return manifest


def _checked_encoder(index_dir: str, manifest: dict[str, Any], encoder: Any,
                     model: dict[str, Any]) -> Any:
  """`encoder` (described by `model`), if it is the model the index was exported with and set
  up as it was (the same parameters can encode at other lengths or with another vocabulary)."""
  if (manifest["fingerprint"], manifest["dim"]) != (encoder.fingerprint, encoder.dim):
    raise ValueError(f"{index_dir} was exported with another checkpoint (fingerprint "
                     f"{manifest['fingerprint']}, this one's {encoder.fingerprint}): update it "
                     "with the checkpoint it was exported with.")
  changed = writer_lib.changed_model(manifest["model"], model)
  if changed:
    differ = "; ".join(f"{key} {there!r} there, {now!r} now" for key, there, now in changed)
    raise ValueError(f"{index_dir} was exported with other model settings ({differ}): update it "
                     "with the gin files it was exported with; nothing was changed.")
  return encoder


def _deleted_mask(index_dir: str, manifest: dict[str, Any]) -> np.ndarray:
  """[N] bool: the documents that earlier updates deleted."""
  mask = np.zeros(manifest["num_docs"], bool)
  mask[files.deleted_docs(index_dir, manifest)] = True
  return mask


def _docs_to_delete(doc_ids: Sequence[str], gone: np.ndarray, deleted: Sequence[str],
                    source: str) -> np.ndarray:
  """[N] bool: the live documents whose ids are in `deleted` (the lines of `source`)."""
  live = {doc_id: i for i, doc_id in enumerate(doc_ids) if not gone[i]}
  mask = np.zeros(len(doc_ids), bool)
  for n, doc_id in enumerate(deleted, start=1):
    if doc_id not in live:
      raise ValueError(f"{source}:{n}: {doc_id!r} is not a document of the index; nothing was "
                       "changed.")
    mask[live[doc_id]] = True
  return mask


def _check_added(doc_ids: Sequence[str], gone: np.ndarray, added_ids: Sequence[str],
                 source: str) -> None:
  """Refuses an added id (line n of `source`) that is a live document or added twice."""
  kept = {doc_id for i, doc_id in enumerate(doc_ids) if not gone[i]}
  seen = set()
  for n, doc_id in enumerate(added_ids, start=1):
    if doc_id in kept or doc_id in seen:
      raise ValueError(f"{source}:{n}: the document {doc_id!r} is already in the index (delete "
                       "it in the same update to replace it); nothing was changed.")
    seen.add(doc_id)


def _remove_unlisted(index_dir: str, manifest: dict[str, Any], generation: int) -> None:
  """Removes what a killed update left: the files of the generations beside the manifest's
  (`generation`, uncommitted; `generation` - 2, committed over but not yet removed: each update
  removes them first, so no earlier one is left) and unlisted chunks, with their temporaries
  (`name.tmp`). Never the generations from 0 up: a manifest's generation is not bounded."""
  current = set(files.names(manifest).values())
  for left in (generation - 2, generation):
    for name in set(files.names({"generation": max(left, 0)}).values()) - current:
      for path in _with_temporary(os.path.join(index_dir, name)):
        io.remove_stale(path)
  chunk = len(manifest["chunks"])
  while paths := [
      path for name in files.chunk_files(index_dir, chunk).values()
      for path in _with_temporary(name) if os.path.lexists(path)
  ]:
    for path in paths:
      io.remove_stale(path)
    chunk += 1


def _with_temporary(path: str) -> tuple[str, str]:
  """`path` and the temporary (`io.atomic_write`'s, `scann.write`'s) it is written through."""
  return path, path + ".tmp"


def _write_chunks(index_dir: str, manifest: dict[str, Any], encoder: Any, doc_ids: Sequence[str],
                  texts: Sequence[str]) -> tuple[list[dict], dict, list[int]]:
  """Encodes the added documents into chunks after the index's; returns their manifest entries,
  listed files and the documents' token counts."""
  per_chunk = manifest["docs_per_chunk"]
  first_chunk, first_doc = len(manifest["chunks"]), manifest["num_docs"]
  entries, listed, lengths = [], {}, []
  for start in tqdm.tqdm(range(0, len(doc_ids), per_chunk), desc="add", unit="chunk"):
    chunk = first_chunk + start // per_chunk
    vectors, saliences = encoder.encode_documents(texts[start:start + per_chunk])
    meta = writer_lib.write_chunk_files(index_dir, chunk, first_doc + start,
                                        doc_ids[start:start + per_chunk], vectors, saliences,
                                        manifest["dim"], manifest["dtype"])
    entry, chunk_listed = writer_lib.chunk_entry(index_dir, chunk, meta)
    entries.append(entry)
    listed.update(chunk_listed)
    lengths += meta["doc_lengths"]
  return entries, listed, lengths


def _commit(index_dir: str, manifest: dict[str, Any], generation: int, doc_ids: list[str],
            gone: np.ndarray, added: tuple[list[dict], dict,
                                           list[int]], record: dict) -> dict[str, Any]:
  """Updates ScaNN, writes the next generation's files, then the manifest (the commit)."""
  new_chunks, listed, new_lengths = added
  old_offsets = files.doc_offsets(index_dir, manifest)
  offsets = np.concatenate([old_offsets, old_offsets[-1] + np.cumsum(new_lengths, dtype=np.int64)])
  names = files.names({"generation": generation})
  rows = _updated_scann(index_dir, manifest, names[files.SCANN_DIR], offsets, gone, new_chunks,
                        listed)
  old_names = files.names(manifest)
  listed.update({
      name: value
      for name, value in manifest["files"].items()
      if name not in old_names.values() and not name.startswith(old_names[files.SCANN_DIR] + "/")
  })
  _write(index_dir, names[files.DOC_IDS], listed,
         lambda f: f.write("".join(json.dumps(i) + "\n" for i in doc_ids).encode()))
  _write(index_dir, names[files.DOC_OFFSETS], listed,
         lambda f: np.save(f, offsets, allow_pickle=False))
  _write(index_dir, names[files.SCANN_TOKENS], listed,
         lambda f: np.save(f, rows, allow_pickle=False))
  if gone.any():
    _write(index_dir, names[files.DELETED_DOCS], listed,
           lambda f: np.save(f,
                             np.flatnonzero(gone).astype(np.int64), allow_pickle=False))
  new = {
      **manifest, "generation": generation,
      "num_docs": len(doc_ids),
      "num_tokens": int(offsets[-1]),
      "num_indexed_tokens": len(rows),
      "num_deleted_docs": int(gone.sum()),
      "updates": manifest.get("updates", []) + [record],
      "chunks": manifest["chunks"] + new_chunks,
      "files": dict(sorted(listed.items()))
  }
  files.check_manifest(new, os.path.join(index_dir, files.MANIFEST))
  io.write_json(os.path.join(index_dir, files.MANIFEST), new)
  return new


def _write(index_dir: str, name: str, listed: dict, write) -> None:
  path = os.path.join(index_dir, name)
  io.atomic_write(path, write)
  listed[name] = files.record(path)


def _updated_scann(index_dir: str, manifest: dict[str, Any], name: str, offsets: np.ndarray,
                   gone: np.ndarray, new_chunks: list[dict], listed: dict) -> np.ndarray:
  """Deletes the deleted documents' tokens from ScaNN, upserts the new documents' (those that
  pruning keeps), serializes it as `name`; returns its [rows] int64 row -> token table."""
  scann_dir = files.names(manifest)[files.SCANN_DIR]
  rows, _ = files.scann_rows(index_dir, manifest)
  searcher = scann_search.load(os.path.join(index_dir, scann_dir),
                               scann_search.listed_names(manifest["files"], scann_dir), len(rows))
  dropped = np.zeros(offsets[-1], bool)
  for doc in np.flatnonzero(gone):
    dropped[offsets[doc]:offsets[doc + 1]] = True
  # Deleted last row first, ScaNN moves its current last row into each: mirrored in `rows`.
  dropped_rows = np.flatnonzero(dropped[rows])[::-1]
  expected = np.arange(len(rows) - 1, len(rows) - 1 - len(dropped_rows), -1)
  if len(dropped_rows) and searcher.delete(dropped_rows.tolist()) != expected.tolist():
    raise RuntimeError("ScaNN did not fill deleted rows with its last rows.")
  for row in dropped_rows:
    rows[row] = rows[-1]
    rows = rows[:-1]
  first_token = offsets[manifest["num_docs"]]
  new_tokens = np.arange(first_token, offsets[-1])
  if manifest.get("prune_doc") is not None:
    new_tokens = new_tokens[_kept(index_dir, new_chunks,
                                  offsets[manifest["num_docs"]:] - first_token,
                                  manifest["prune_doc"])]
  start = first_token
  for chunk in new_chunks:
    vectors = files.load_npy(os.path.join(index_dir, chunk["file"]),
                             (chunk["num_tokens"], manifest["dim"]), manifest["dtype"])
    vectors = vectors[files.rows_between(new_tokens, start, start + len(vectors))]
    for block in range(0, len(vectors), scann.UPSERT_ROWS):
      part = np.asarray(vectors[block:block + scann.UPSERT_ROWS], np.float32)
      searcher.upsert([None] * len(part), part, len(part))
    start += chunk["num_tokens"]
  rows = np.concatenate([rows, new_tokens])
  if not len(rows):
    raise ValueError(f"the update would leave {index_dir} no token to retrieve (the documents "
                     "left hold none that are kept); nothing was changed.")
  if searcher.size() != len(rows):
    raise RuntimeError(f"ScaNN holds {searcher.size()} tokens after the update, not {len(rows)}.")
  scann_files, order = scann.write(searcher, index_dir, name)
  listed.update(scann_files)
  return rows if order is None else rows[order]


def _kept(index_dir: str, chunks: list[dict], offsets: np.ndarray, beta: float) -> np.ndarray:
  """[T_new] bool: the new documents' tokens that pruning at β_d keeps (`salience.kept`)."""
  saliences = np.concatenate([np.zeros(0, np.float32)] + [
      files.load_npy(os.path.join(index_dir, c["salience_file"]), (c["num_tokens"],), "float32")
      for c in chunks
  ])
  return np.concatenate([np.zeros(0, bool)] + [
      salience_lib.kept(saliences[start:stop], beta)
      for start, stop in zip(offsets[:-1], offsets[1:])
  ])
