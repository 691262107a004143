"""An index is untrusted input: hostile files never run, damage is caught before a ranking,
provenance is checked, and two exports never write one directory."""
import errno
import hashlib
import json
import os
import pathlib
import pickle
import re
import shutil
import signal
import subprocess
import sys

import gin
import numpy as np
import pytest
from scann.scann_ops.py import scann_ops_pybind

from tests import test_index
from tests.retrieval_setup import run_tool
from tests.test_index import REPO
from tests.test_index import _export
from tests.test_index import _files
from tests.test_index import _ids
from tests.test_index import _integer_docs
from tests.test_index import _new_writer
from tests.test_index import _write_chunks
from xtr import io
from xtr.index import files
from xtr.index import reader
from xtr.index import scann
from xtr.index import scann_process
from xtr.index import verify
from xtr.index import writer as index_writer
from xtr.retrieval import searcher

QUERIES = np.random.default_rng(1).integers(-8, 9, (6, 32)).astype(np.float32)


class _Payload:
  """Unpickling it creates `marker`: what a hostile scann_docids.pkl would do."""

  def __init__(self, marker):
    self.marker = str(marker)

  def __reduce__(self):
    return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def _index(path, num_docs=40, docs_per_chunk=8) -> pathlib.Path:
  _export(path, _ids(num_docs), _integer_docs(num_docs), docs_per_chunk=docs_per_chunk)
  return path


def _edit_manifest(path, edit) -> None:
  manifest = json.loads((path / files.MANIFEST).read_text())
  edit(manifest)
  (path / files.MANIFEST).write_text(json.dumps(manifest))


def _load_scann(path, in_helper, monkeypatch) -> None:
  """Loads the index's ScaNN in this process or in a helper (`xtr-search`'s); a refusal must
  come before any helper process starts."""
  monkeypatch.setattr(scann_process.subprocess, "Popen",
                      lambda *_, **__: pytest.fail("a helper started"))
  reader.open_index(str(path)).load_scann(in_helper)


@pytest.mark.parametrize("in_helper", [False, True])
def test_pickled_doc_ids_are_refused_and_never_loaded(tmp_path, monkeypatch, in_helper):
  path = _index(tmp_path / "index")
  marker = tmp_path / "pwned"
  pkl = path / "scann" / "scann_docids.pkl"
  pkl.write_bytes(pickle.dumps(_Payload(marker)))
  pickle.loads(pkl.read_bytes())  # The payload is live ...
  assert marker.exists()
  marker.unlink()
  with pytest.raises(files.DamagedIndexError, match=r"does not list: \['scann_docids.pkl'\]"):
    _load_scann(path, in_helper, monkeypatch)
  # ... and stays refused when a hostile manifest lists it with its true checksum.
  _edit_manifest(path,
                 lambda m: m["files"].update({"scann/scann_docids.pkl": files.record(str(pkl))}))
  with pytest.raises(files.DamagedIndexError, match=r"lists \['scann_docids.pkl'\].* never"):
    _load_scann(path, in_helper, monkeypatch)
  assert not marker.exists()


def _rerecord(path, relative) -> None:
  """Lists the file `relative` of the index at `path` in its manifest with its current sha256
  and size: what a hostile author (not damage) does."""
  _edit_manifest(path, lambda m: m["files"].update({relative: files.record(str(path / relative))}))


_HASHED = 'asset_path: "hashed_dataset.npy"'


@pytest.mark.parametrize("in_helper", [False, True])
@pytest.mark.parametrize(
    "forged, problem",
    [
        (_HASHED.replace("hashed", "../../elsewhere"), "does not continue an `assets"),
        (_HASHED.replace("hashed", "/tmp/elsewhere"), "does not continue an `assets"),
        # One line, a comment, single quotes: text-proto forms a line-by-line check missed.
        ('asset_path: "hashed_dataset.npy" } assets { asset_type: AH_DATASET_NPY '
         'asset_path: "../../elsewhere.npy"', "does not continue an `assets"),
        (_HASHED + "  # a comment", "does not continue an `assets"),
        (_HASHED.replace('"', "'"), "does not continue an `assets"),
        (_HASHED.replace("hashed", "unlisted"),
         r"names files that the manifest does not list: \['unlisted_dataset.npy'\]"),
    ])
def test_scann_assets_are_read_only_as_scann_writes_them(tmp_path, monkeypatch, in_helper, forged,
                                                         problem):
  """ScaNN opens whatever path its assets file names (outside the index, a FIFO that hangs):
  the file must read exactly as ScaNN writes it, naming listed files of scann/."""
  path = _index(tmp_path / "index")
  assets = path / "scann" / "scann_assets.pbtxt"
  assert _HASHED in assets.read_text()
  assets.write_text(assets.read_text().replace(_HASHED, forged))
  _rerecord(path, "scann/scann_assets.pbtxt")
  with pytest.raises(files.DamagedIndexError, match=f"scann_assets.pbtxt.*{problem}"):
    _load_scann(path, in_helper, monkeypatch)


@pytest.mark.parametrize("in_helper", [False, True])
@pytest.mark.parametrize("forge, problem", [
    (lambda a: a[:-7], r"hashed_dataset.npy holds \[\d+, \d+\], not the \d+ rows"),
    (lambda a: np.concatenate([a, a[:3]]), r"hashed_dataset.npy holds \[\d+, \d+\], not the"),
])
def test_scann_arrays_of_another_row_count_are_refused(tmp_path, monkeypatch, in_helper, forge,
                                                       problem):
  """ScaNN loads codes of fewer rows than the index's tokens without a word, and ranks from
  them (or fails later with an IndexError)."""
  path = _index(tmp_path / "index")
  hashed = path / "scann" / "hashed_dataset.npy"
  np.save(hashed, forge(np.load(hashed)))
  _rerecord(path, "scann/hashed_dataset.npy")
  with pytest.raises(files.DamagedIndexError, match=problem):
    _load_scann(path, in_helper, monkeypatch)


def test_increasing_sorts_distinct_tokens_without_a_sort():
  """`files.increasing` (the tokens of ScaNN's rows in order, for brute-force and device search)
  equals numpy's sort for a table in any order and returns a pruned export's table itself."""
  rng = np.random.default_rng(0)
  subset = rng.permutation(10_000)[:3_000]
  np.testing.assert_array_equal(files.increasing(subset, 10_000), np.sort(subset))
  pruned = np.sort(subset)
  assert files.increasing(pruned, 10_000) is pruned


@pytest.mark.parametrize(
    "forge",
    [
        lambda rows: np.concatenate([rows[:-1], rows[:1]]),  # A token twice, another left out.
        lambda rows: np.where(rows == rows.max(), -1, rows),  # A token before the first.
        lambda rows: np.where(rows == rows.min(),
                              rows.max() + 1, rows),  # Past the last.
    ])
def test_a_row_table_that_repeats_or_leaves_the_tokens_is_refused(tmp_path, forge):
  """scann_tokens.npy maps ScaNN's rows (here in partition order) to tokens: a table that names a
  token twice or one outside the index, re-recorded in the manifest, is refused when the index
  opens, before any result is mapped through it."""
  with gin.unlock_config():
    gin.parse_config(["ScannConfig.num_leaves = 4", "ScannConfig.reorder_k = 20"])
  try:
    path = _index(tmp_path / "index")
  finally:
    gin.clear_config()
  table = path / files.SCANN_TOKENS
  rows = np.load(table)
  assert sorted(rows) == list(range(len(rows))) and np.any(np.diff(rows) < 0)
  np.save(table, forge(rows))
  _rerecord(path, files.SCANN_TOKENS)
  with pytest.raises(files.DamagedIndexError,
                     match="scann_tokens.npy (does not hold token|repeats token)"):
    reader.open_index(str(path))


@pytest.mark.parametrize("in_helper", [False, True])
def test_scann_failing_to_load_its_files_is_a_damaged_index(tmp_path, monkeypatch, in_helper):
  """A RuntimeError of ScaNN's loader (here, a partitioner of random bytes) names the index."""
  path = _index(tmp_path / "index")
  partitioner = path / "scann" / "serialized_partitioner.pb"
  partitioner.write_bytes(np.random.default_rng(0).bytes(partitioner.stat().st_size))
  _rerecord(path, "scann/serialized_partitioner.pb")
  with pytest.raises(files.DamagedIndexError, match=r"scann.*ScaNN"):
    if in_helper:
      index = reader.open_index(str(path))
      index.load_scann(in_helper=True)
      index.search_tokens(QUERIES, 5)
    else:
      _load_scann(path, in_helper, monkeypatch)


def test_an_export_never_writes_into_a_directory_it_does_not_own(tmp_path):
  """An export replaces what it finds at its names (doc_ids.jsonl, scann/): a directory of the
  user's lost files to it (exit 0), one inside an index corrupted that index, and a sharded
  export into an index's root was shadowed by it."""
  index = _index(tmp_path / "index")
  before = _files(index)
  theirs = tmp_path / "theirs"
  (theirs / "scann").mkdir(parents=True)
  (theirs / "scann" / "notes.txt").write_text("mine")
  (theirs / files.DOC_IDS).write_text("mine")
  for out, problem in ((theirs, r"holds \['doc_ids.jsonl', 'scann'\] but no writer.json or "
                        "manifest.json of an xtr export"), (index / "scann",
                                                            "is inside the token index at"),
                       (index / "shard-00000-of-00002", "is inside the token index at")):
    with pytest.raises(ValueError, match=f"--out={re.escape(str(out))} {problem}"):
      _index(out)
  assert (theirs / "scann" / "notes.txt").read_text() == "mine"
  assert (theirs / files.DOC_IDS).read_text() == "mine" and _files(index) == before
  # What an export killed before its writer.json leaves (its lock, an empty chunks/) resumes.
  started = tmp_path / "started"
  (started / "chunks").mkdir(parents=True)
  (started / files.LOCK).write_text("")
  _index(started)
  assert _files(started).keys() == _files(index).keys() - {files.LOCK}


def test_two_live_documents_with_one_id_are_refused(tmp_path):
  """No export or update writes two live documents of one id; a forged doc_ids.jsonl that does
  would rank a document twice and change every metric of its query."""
  path = _index(tmp_path / "index")
  doc_ids = path / "doc_ids.jsonl"
  lines = doc_ids.read_text().splitlines(keepends=True)
  lines[9] = lines[2]
  doc_ids.write_text("".join(lines))
  _rerecord(path, "doc_ids.jsonl")
  with pytest.raises(
      files.DamagedIndexError,
      match=re.escape(f"{doc_ids}:10: the document id {json.loads(lines[2])!r} is "
                      f"also that of {doc_ids}:3")):
    reader.open_index(str(path))


_NOT_INDEXED = ("num_indexed_tokens is not a count of the tokens, all of them unless "
                "scann_tokens.npy is listed")


@pytest.mark.parametrize(
    "problem, edit",
    [
        ("field 'files' is missing", lambda m: m.pop("files")),
        ("field 'dim' is missing or not a int", lambda m: m.update(dim="32")),
        (r"files: '../outside.npy' is not a path inside the index",
         lambda m: m["files"].update({"../outside.npy": {
             "sha256": "0",
             "size": 1
         }})),
        (r"chunks\[0\] needs listed files", lambda m: m["chunks"][0].update(file=["x"])),
        (r"scann.reorder_k is not an integer in \[0, 2\^31\)",
         lambda m: m["scann"].update(reorder_k=2**62)),
        # Without scann_tokens.npy ScaNN holds every token: a count of fewer made
        # --searcher=device rank from the wrong tokens (exit 0), one of more raised an IndexError.
        *[(_NOT_INDEXED, lambda m, n=n: m.update(num_indexed_tokens=n)) for n in (100, 10**6, -1)],
    ])
def test_malformed_manifests_are_refused_naming_the_field(tmp_path, problem, edit):
  path = _index(tmp_path / "index")
  _edit_manifest(path, edit)
  with pytest.raises(files.DamagedIndexError, match=f"manifest.json: {problem}"):
    reader.open_index(str(path))


def test_an_integer_too_long_to_parse_is_a_damaged_manifest(tmp_path):
  """Python refuses to read an integer of more than 4,300 digits: a ValueError that named no
  file."""
  path = _index(tmp_path / "index")
  manifest = path / files.MANIFEST
  manifest.write_text(re.sub(r'"num_docs": \d+', '"num_docs": ' + "9" * 5000, manifest.read_text()))
  with pytest.raises(files.DamagedIndexError, match=f"{manifest} is not valid JSON"):
    reader.open_index(str(path))


def test_json_nested_too_deeply_to_parse_is_a_damaged_file_not_a_crash(tmp_path):
  """Python's JSON parser recurses: 100,000 nested lists raise RecursionError, which reaches the
  user as the damaged manifest's name; the verification record, a cache, is verified again."""
  path = _index(tmp_path / "index")
  nested = "[" * 100_000 + "]" * 100_000
  (path / verify.RECORD).write_text(nested)
  index = reader.open_index(str(path), verify="fast")
  np.testing.assert_array_equal(
      index.search(QUERIES, 5)[1],
      reader.open_index(str(path)).search(QUERIES, 5)[1])
  (path / files.MANIFEST).write_text(nested)
  with pytest.raises(files.DamagedIndexError, match=f"{files.MANIFEST} is not valid JSON"):
    reader.open_index(str(path))


def test_an_index_of_the_old_format_is_refused_with_how_to_reexport(tmp_path):
  path = _index(tmp_path / "index")
  _edit_manifest(path, lambda m: m.update(format=1))
  with pytest.raises(ValueError, match=r"format 1.*gin text.*Re-export it .*xtr-export"):
    reader.open_index(str(path))


def _flip_byte(path: pathlib.Path, offset: int = -1) -> None:
  data = bytearray(path.read_bytes())
  data[offset] ^= 0x5A
  path.write_bytes(bytes(data))


def _swap_first_lines(path: pathlib.Path) -> None:
  lines = path.read_text().splitlines(keepends=True)
  path.write_text("".join([lines[1], lines[0], *lines[2:]]))


@pytest.mark.parametrize("damaged, damage, searcher", [
    ("chunks/vectors-00001.npy", _flip_byte, "bruteforce"),
    ("doc_ids.jsonl", _swap_first_lines, "scann"),
    ("scann/hashed_dataset.npy", lambda p: _flip_byte(p, -20), "scann"),
    ("scann/datapoint_to_token.npy", lambda p: p.write_bytes(p.read_bytes()[:-8]), "scann"),
    ("scann/ah_codebook.pb", lambda p: p.write_bytes(b""), "scann"),
])
def test_damage_is_caught_before_a_ranking_naming_the_file(tmp_path, damaged, damage, searcher):
  path = _index(tmp_path / "index")
  expected = reader.open_index(str(path)).search(QUERIES, 5, searcher)
  damage(path / damaged)
  with pytest.raises(files.DamagedIndexError,
                     match=rf"{path / damaged} is damaged: .*Repair: rerun the xtr-export"):
    reader.open_index(str(path)).search(QUERIES, 5, searcher)
  # --repair redoes what is damaged, and the index ranks as before.
  writer = _new_writer(path, 40, docs_per_chunk=8, repair=True)
  print(writer.repair_report)
  _write_chunks(writer, _ids(40), _integer_docs(40), 8)
  writer.finalize()
  for got, want in zip(reader.open_index(str(path)).search(QUERIES, 5, searcher), expected):
    np.testing.assert_array_equal(got, want)


def test_repair_reencodes_from_the_first_damaged_chunk_only(tmp_path):
  reference = _index(tmp_path / "reference")
  path = _index(tmp_path / "index")
  _flip_byte(path / "chunks/vectors-00003.npy")
  _repair(path, "re-encoding from chunk 3 of 5", first_damaged=3)
  assert _files(path) == _files(reference)


def _repair(path, report: str, first_damaged: int) -> None:
  """--repair of the 40-document index at `path`, which must say `report` and re-encode from
  chunk `first_damaged`."""
  writer = _new_writer(path, 40, docs_per_chunk=8, repair=True)
  assert report in writer.repair_report
  assert writer.completed_chunks() == first_damaged
  _write_chunks(writer, _ids(40), _integer_docs(40), 8)
  writer.finalize()


@pytest.mark.parametrize("finished", [True, False])
def test_a_repair_killed_after_removing_the_manifest_is_finished_by_another(
    tmp_path, monkeypatch, finished):
  """A repair removed the manifest first: killed before the damaged chunk's record went, the
  index was an unfinished export whose damaged chunk counted as done, and every --repair
  stopped at it. The same for damage in an export killed before its manifest."""
  reference = _index(tmp_path / "reference")
  path = _index(tmp_path / "index")
  _flip_byte(path / "chunks/vectors-00002.npy")
  if finished:
    real_remove = os.remove

    def killed(name):
      if "/chunks/chunk-" in str(name):
        raise KeyboardInterrupt  # The kill, as the first chunk record goes.
      real_remove(name)

    monkeypatch.setattr(os, "remove", killed)
    with pytest.raises(KeyboardInterrupt):
      _new_writer(path, 40, docs_per_chunk=8, repair=True)
    monkeypatch.undo()
    assert (path / files.MANIFEST).exists()  # The records went first: still a repair.
  else:
    (path / files.MANIFEST).unlink()  # An export killed before its manifest.
    (path / files.LOCK).unlink(missing_ok=True)
  _repair(path, "re-encoding from chunk 2", first_damaged=2)
  assert _files(path) == _files(reference)


def _count_hashes(monkeypatch) -> list[str]:
  hashed = []
  real = files.record
  monkeypatch.setattr(files, "record", lambda p: hashed.append(os.path.basename(p)) or real(p))
  return hashed


def test_fast_verification_hashes_large_files_once_and_again_when_they_change(
    tmp_path, monkeypatch):
  monkeypatch.setattr(verify, "SMALL_FILE", 1000)  # The chunks (~2 KB each) count as large.
  path = _index(tmp_path / "index")
  hashed = _count_hashes(monkeypatch)
  reader.open_index(str(path)).search(QUERIES, 5, "bruteforce")
  assert {f"vectors-0000{c}.npy" for c in range(5)} <= set(hashed)
  assert (path / verify.RECORD).exists()
  hashed.clear()
  reader.open_index(str(path)).search(QUERIES, 5, "bruteforce")
  assert not any(name.startswith("vectors") for name in hashed)  # recorded, unchanged
  assert files.DOC_IDS in hashed  # small files: every open
  # A chunk changed in place, its size and mtime kept: its ctime betrays it.
  chunk = path / "chunks/vectors-00002.npy"
  stat = chunk.stat()
  _flip_byte(chunk)
  os.utime(chunk, ns=(stat.st_atime_ns, stat.st_mtime_ns))
  with pytest.raises(files.DamagedIndexError, match="vectors-00002.npy is damaged"):
    reader.open_index(str(path)).search(QUERIES, 5, "bruteforce")
  # A copy (mtimes kept, record included) is verified anew: a shipped record vouches for nothing.
  _flip_byte(chunk)
  copy = tmp_path / "copy"
  shutil.copytree(path, copy)
  hashed.clear()
  reader.open_index(str(copy)).search(QUERIES, 5, "bruteforce")
  assert {f"vectors-0000{c}.npy" for c in range(5)} <= set(hashed)


def test_full_verification_hashes_every_open_and_off_checks_sizes_only(tmp_path, monkeypatch):
  path = _index(tmp_path / "index")
  _flip_byte(path / "chunks/vectors-00001.npy")
  with pytest.raises(files.DamagedIndexError, match="vectors-00001.npy is damaged"):
    reader.open_index(str(path), verify="full").search(QUERIES, 5, "bruteforce")
  reader.open_index(str(path), verify="off").search(QUERIES, 5, "bruteforce")  # not caught
  (path / "doc_offsets.npy").write_bytes((path / "doc_offsets.npy").read_bytes() + b"\0")
  with pytest.raises(files.DamagedIndexError, match=r"doc_offsets.npy is damaged: \d+ bytes"):
    reader.open_index(str(path), verify="off")


def test_resumed_export_refuses_another_corpus_or_range(tmp_path):
  writer = _new_writer(tmp_path, 8)
  writer.write_chunk(0, ["a"], [np.ones((2, 32), np.float32)])
  del writer  # as if the export died
  corpus = {"path": "corpus.jsonl", "sha256": "c0ffee", "docs": [0, 8], "total_docs": 8}
  for other in ({"sha256": "beef"}, {"docs": [0, 7]}):
    with pytest.raises(ValueError, match=r"other settings \(corpus differ"):
      index_writer.IndexWriter(str(tmp_path), 32, "float32", {
          "backbone": "t5",
          "embed_dim": 32
      }, "ckpt-1234", 4, corpus | other)
  moved = corpus | {"path": "/elsewhere/corpus.jsonl"}  # the same file, moved: resumes
  index_writer.IndexWriter(str(tmp_path), 32, "float32", {
      "backbone": "t5",
      "embed_dim": 32
  }, "ckpt-1234", 4, moved).finalize()


_HOLD_LOCK = """
import sys, time
from tests.test_index import _new_writer
writer = _new_writer(sys.argv[1], 4)
print("locked", flush=True)
time.sleep(600)
"""


def test_a_second_export_is_refused_and_a_killed_one_leaves_no_stuck_lock(tmp_path):
  holder = subprocess.Popen(
      [sys.executable, "-c", _HOLD_LOCK, str(tmp_path)], cwd=REPO, stdout=subprocess.PIPE,
      text=True)
  try:
    assert holder.stdout.readline().strip() == "locked"
    with pytest.raises(
        io.LockedError, match=rf"being written by another export \(export "
        rf"by process {holder.pid} on .*\); wait for it"):
      _new_writer(tmp_path, 4)
  finally:
    holder.send_signal(signal.SIGKILL)
    holder.wait()
  assert (tmp_path / files.LOCK).exists()  # left behind by the killed export ...
  _new_writer(tmp_path, 4)  # ... but not held: the next export proceeds.


def test_the_package_never_unpickles_or_evaluates():
  forbidden = re.compile(r"\bimport pickle|\bpickle\.\w|allow_pickle=True|\.load_searcher\(|"
                         r"\beval\(|\bexec\(|gin\.parse_config\(")
  for path in sorted((REPO / "xtr").rglob("*.py")) + sorted((REPO / "tasks").rglob("*.py")):
    found = forbidden.search(path.read_text())
    assert found is None, f"{path} uses {found and found.group()}"


def _sha256s(root) -> dict[str, str]:
  """sha256 of every file under `root` (symlinks as their target path): the index's state."""
  root = pathlib.Path(root)
  return {
      str(p.relative_to(root)):
          os.readlink(p) if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest()
      for p in sorted(root.rglob("*"))
      if p.is_symlink() or p.is_file()
  }


def _killed_export(path, num_docs=40, docs_per_chunk=8, chunks=2) -> pathlib.Path:
  """An export of `_index`'s settings killed after `chunks` chunks (its lock dropped)."""
  writer = _new_writer(path, num_docs, docs_per_chunk=docs_per_chunk)
  for chunk in range(chunks):
    part = slice(chunk * docs_per_chunk, (chunk + 1) * docs_per_chunk)
    writer.write_chunk(chunk, _ids(num_docs)[part], _integer_docs(num_docs)[part])
  del writer
  return path


def _resume(path, num_docs=40, docs_per_chunk=8) -> None:
  writer = _new_writer(path, num_docs, docs_per_chunk=docs_per_chunk)
  _write_chunks(writer, _ids(num_docs), _integer_docs(num_docs), docs_per_chunk)
  writer.finalize()


@pytest.mark.parametrize("planted", [
    files.LOCK, "doc_ids.jsonl.tmp", "doc_offsets.npy.tmp", "writer.json",
    "chunks/vectors-00002.npy.tmp", "chunks/chunk-00002.json", "scann.tmp"
])
def test_a_resumed_export_never_writes_through_a_planted_symlink(tmp_path, planted):
  path = _killed_export(tmp_path / "index")
  outside = tmp_path / "outside"
  outside.write_bytes(b"the user's file")
  kept = (path / planted).read_bytes() if (path / planted).exists() else None
  (path / planted).unlink(missing_ok=True)
  os.symlink(outside, path / planted)
  with pytest.raises(
      io.UnsafeFileError, match=rf"{path / planted} is a symbolic link, not a "
      "file that xtr wrote: .* remove it and rerun"):
    _resume(path)
  assert outside.read_bytes() == b"the user's file"
  (path / planted).unlink()
  if planted == files.WRITER:  # What makes the directory an export's to resume.
    (path / planted).write_bytes(kept)
  _resume(path)  # Once the link is gone, the export completes ...
  assert _files(path) == _files(_index(tmp_path / "reference"))  # ... as if never attacked.


def test_linking_a_chunk_again_leaves_one_link_and_no_temporary(tmp_path):
  """A resumed `--from_index` links a chunk that its killed run had linked: `os.replace` of two
  links of one file does nothing, and left `vectors.npy.tmp` in the new index."""
  src, dst = tmp_path / "source.npy", tmp_path / "index" / "vectors.npy"
  src.write_bytes(b"vectors")
  dst.parent.mkdir()
  for _ in range(2):
    io.link_or_copy(str(src), str(dst))
    assert os.path.samefile(src, dst) and sorted(os.listdir(dst.parent)) == ["vectors.npy"]
  dst.unlink()
  dst.write_bytes(b"stale")  # Another file at dst is replaced by the link.
  io.link_or_copy(str(src), str(dst))
  assert os.path.samefile(src, dst) and sorted(os.listdir(dst.parent)) == ["vectors.npy"]


@pytest.mark.parametrize("planted", ["fifo", "hard link", "chunks symlink"])
def test_a_fifo_hard_link_or_linked_directory_in_an_index_is_refused(tmp_path, planted):
  path = _killed_export(tmp_path / "index")
  outside = tmp_path / "outside"
  outside.mkdir()
  (outside / "file").write_bytes(b"the user's file")
  if planted == "fifo":  # Read, it would hang the export.
    (path / files.WRITER).unlink()
    os.mkfifo(path / files.WRITER)
    problem = rf"{path / files.WRITER} is a FIFO"
  elif planted == "hard link":  # Truncated, it would truncate the user's file.
    (path / files.LOCK).unlink()
    os.link(outside / "file", path / files.LOCK)
    problem = rf"{path / files.LOCK} is a hard link to another file"
  else:
    shutil.rmtree(path / "chunks")
    os.symlink(outside, path / "chunks")
    problem = rf"{path / 'chunks'} is a symbolic link"
  with pytest.raises(io.UnsafeFileError, match=problem):
    _resume(path)
  assert sorted(p.name for p in outside.iterdir()) == ["file"]
  assert (outside / "file").read_bytes() == b"the user's file"


@pytest.mark.parametrize("listed",
                         ["chunks/vectors-00001.npy", "doc_ids.jsonl", "scann/hashed_dataset.npy"])
@pytest.mark.parametrize("kind", ["symlink to an identical copy", "fifo"])
def test_a_listed_file_replaced_by_a_symlink_or_fifo_is_refused_at_open(tmp_path, listed, kind):
  path = _index(tmp_path / "index")
  copy = tmp_path / "copy"
  shutil.copyfile(path / listed, copy)
  (path / listed).unlink()
  if kind == "fifo":
    os.mkfifo(path / listed)  # Read, it would hang the search.
  else:
    os.symlink(copy, path / listed)  # Same bytes: only the link gives it away.
  with pytest.raises(
      io.UnsafeFileError, match=rf"{path / listed} is a "
      rf"{'FIFO' if kind == 'fifo' else 'symbolic link'}, not a file that xtr"):
    reader.open_index(str(path))


def test_a_linked_directory_or_verification_record_is_never_followed(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(verify, "SMALL_FILE", 1000)  # The chunks count as large: recorded.
  path = _index(tmp_path / "index")
  outside = tmp_path / "outside.json"
  outside.write_text('{"the user": "file"}')
  os.symlink(outside, path / verify.RECORD)
  reader.open_index(str(path)).search(QUERIES, 5, "bruteforce")
  assert outside.read_text() == '{"the user": "file"}'
  assert (path / verify.RECORD).is_symlink()
  assert f"cannot record verified files ({path / verify.RECORD} is a symbolic link" in (
      capsys.readouterr().err)
  assert not [p for p in path.iterdir() if p.name.endswith(".tmp")]
  shutil.move(path / "scann", tmp_path / "scann")  # ScaNN's files, moved out and linked back:
  os.symlink(tmp_path / "scann", path / "scann")
  with pytest.raises(io.UnsafeFileError, match=rf"{path / 'scann'}/.* passes through a "
                     "symbolic link"):
    reader.open_index(str(path))


def _forge(path, relative, array) -> None:
  """Replaces a listed .npy file and its manifest record: only the content's checks remain."""
  np.save(path / relative, array)
  _edit_manifest(path, lambda m: m["files"].update({relative: files.record(str(path / relative))}))


@pytest.mark.parametrize("problem, forge", [
    ("does not start at 0 and increase", lambda o: o.__setitem__(slice(1, 3), o[2:0:-1])),
    (r"ends at 99999999999, not at num_tokens = \d+", lambda o: o.__setitem__(-1, 99999999999)),
    ("disagrees with the token counts of the chunks", lambda o: o.__setitem__(8, o[8] + 1)),
])
def test_forged_doc_offsets_are_refused_before_anything_is_allocated(tmp_path, monkeypatch, problem,
                                                                     forge):
  path = _index(tmp_path / "index")
  offsets = np.load(path / files.DOC_OFFSETS)
  forge(offsets)
  _forge(path, files.DOC_OFFSETS, offsets)
  monkeypatch.setattr(np, "repeat", None)  # `locate`'s [T] table: never reached.
  with pytest.raises(files.DamagedIndexError, match=rf"doc_offsets.npy {problem}: the token "
                     "index is damaged"):
    reader.open_index(str(path))


def test_forged_counts_in_the_manifest_are_refused_before_reading_the_files(tmp_path):
  path = _index(tmp_path / "index")
  _edit_manifest(path, lambda m: m.update(num_tokens=10**11, num_indexed_tokens=10**11))
  with pytest.raises(files.DamagedIndexError, match=r"doc_offsets.npy ends at \d+, not at "
                     r"num_tokens = 100000000000"):
    reader.open_index(str(path))
  _edit_manifest(path, lambda m: m.update(num_docs=10**11))
  with pytest.raises(files.DamagedIndexError, match=r"the chunks do not hold num_docs = "
                     "100000000000 documents"):
    reader.open_index(str(path))


def test_a_write_on_a_full_disk_names_the_file_and_loses_nothing(tmp_path, monkeypatch):
  path = _killed_export(tmp_path / "index")
  before = _sha256s(path)

  def full(*_, **__):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

  with monkeypatch.context() as patch:
    patch.setattr(np.lib.format, "write_array", full)
    with pytest.raises(
        OSError, match=rf"cannot write {path / 'chunks/vectors-00002.npy'}: No "
        r"space left on device; free space \(or write elsewhere\) and rerun"):
      _resume(path)
  assert _sha256s(path) == before  # no temporary left, nothing overwritten
  _resume(path)
  assert _files(path) == _files(_index(tmp_path / "reference"))


def test_scann_failing_on_a_full_disk_is_named_and_loses_nothing(tmp_path, monkeypatch):
  """ScaNN's serializer reports a full disk as "RuntimeError: ... I/O error" (measured on a
  7 MiB tmpfs); the error names scann.tmp, which is removed, and the rerun completes."""
  path = _killed_export(tmp_path / "index", chunks=5)

  def full(self, *_, **__):
    (pathlib.Path(_[0]) / "ah_codebook.pb").write_bytes(b"part")
    raise RuntimeError("Failed to extract SingleMachineFactoryOptions: I/O error")

  with monkeypatch.context() as patch:
    patch.setattr(scann_ops_pybind.ScannSearcher, "serialize", full)
    patch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9, 4096))
    with pytest.raises(
        OSError, match=rf"^cannot write {path / 'scann.tmp'}: Failed to extract "
        r"SingleMachineFactoryOptions: I/O error; free space \(or write elsewhere"):
      _resume(path)
  assert not (path / "scann.tmp").exists() and not (path / files.MANIFEST).exists()
  _resume(path)
  assert _files(path) == _files(_index(tmp_path / "reference"))


def test_scann_logs_go_to_the_debug_log_and_to_stderr_only_on_failure(capfd, monkeypatch):
  debug = []
  monkeypatch.setattr(scann.logging, "debug", lambda *args: debug.append(args[0] % args[1:]))
  vectors = np.random.default_rng(0).normal(size=(4096, 16)).astype(np.float32)
  scann.build(lambda: [vectors], len(vectors), scann.ScannConfig())
  assert capfd.readouterr().err == ""
  assert "training partition" in debug[0]  # ScaNN's C++ log: the k-means sample size.

  def failing(*_):
    os.write(2, b"native line\n")
    raise RuntimeError("ScaNN failed")

  monkeypatch.setattr(scann, "_build", failing)
  with pytest.raises(RuntimeError, match="ScaNN failed"):
    scann.build(lambda: [vectors], len(vectors), scann.ScannConfig())
  assert capfd.readouterr().err == "native line\n"


def test_a_refused_export_or_repair_leaves_the_index_byte_identical(tmp_path):
  path = _index(tmp_path / "index")
  before = _sha256s(path)
  for settings, changed in (({
      "fingerprint": "another-checkpoint"
  }, "fingerprint"), ({
      "num_docs": 39
  }, "corpus"), ({
      "dim": 16
  }, "dim")):
    for repair in (False, True):
      args = {"num_docs": 40, "docs_per_chunk": None, "repair": repair, **settings}
      with pytest.raises(
          ValueError, match=rf"manifest.json: this index was exported with other "
          rf"settings \({changed} differ: .*nothing was changed"):
        _new_writer(path, args.pop("num_docs"), **args)
      assert _sha256s(path) == before
  reader.open_index(str(path), "full").search(QUERIES, 5, "scann")
  with pytest.raises(index_writer.IndexComplete, match="nothing to do"):
    _new_writer(path, 40, docs_per_chunk=None)
  assert _sha256s(path) == before


def test_a_repair_keeps_the_recorded_chunking_and_gin_text(tmp_path):
  path = _index(tmp_path / "index")  # docs_per_chunk 8, gin text ""
  before = _sha256s(path)
  writer = index_writer.IndexWriter(str(path), 32, "float32",
                                    test_index.MODEL, test_index.FINGERPRINT, None,
                                    test_index._corpus(40), gin_config="another config = 'text'",
                                    repair=True)
  assert "every file verifies" in writer.repair_report
  assert writer.settings["docs_per_chunk"] == 8
  writer.finalize()
  assert _sha256s(path) == before


def test_a_search_during_a_repair_and_a_second_repair_are_told_and_change_nothing(tmp_path):
  path = _index(tmp_path / "index")
  before = _sha256s(path)
  with io.Lock(str(path / files.LOCK), "repair", str):  # A repair holding the index ...
    with pytest.raises(
        io.LockedError, match=r"being written by another export \(repair by "
        rf"process {os.getpid()} on "):
      _new_writer(path, 40, docs_per_chunk=None, repair=True)  # ... refuses a second one
    (path / files.MANIFEST).rename(tmp_path / files.MANIFEST)  # ... which has begun:
    with pytest.raises(
        ValueError, match=rf"the token index at {path} is being repaired \(repair "
        r"by process .*\): search again when the repair has finished"):
      reader.open_index(str(path))
  with pytest.raises(ValueError, match="incomplete token index .* rerun the interrupted"):
    reader.open_index(str(path))  # The repair died.
  (tmp_path / files.MANIFEST).rename(path / files.MANIFEST)
  assert _sha256s(path) == before


def _export_cli(exported, index_dir, *flags):
  """xtr-export with the flags that built the `exported` fixture (conftest.py), then `flags`
  (a later --checkpoint or --corpus wins)."""
  manifest = json.loads((exported[1] / files.MANIFEST).read_text())
  return run_tool("xtr.cli.export", f"--gin_file={REPO}/gin/models/t5_1_1_tiny.gin",
                  f"--gin_bindings=T5_SPM_PATH = '{exported[1] / 'vocabulary/spiece.model'}'",
                  "--gin_bindings=xtr.models.encoding.Encoder.doc_max_length = 64",
                  f"--checkpoint={exported[0]}", f"--corpus={manifest['corpus']['path']}",
                  f"--out={index_dir}", *flags)


def test_export_into_a_complete_index_with_another_corpus_or_checkpoint_is_refused(
    exported, tmp_path):
  index_dir = tmp_path / "index"
  shutil.copytree(exported[1], index_dir)
  before = _sha256s(index_dir)
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text('{"_id": "d", "title": "", "text": "another corpus"}\n')
  for flags, changed in (([f"--checkpoint={exported[0].parent / 'other_model'}"],
                          "fingerprint"), ([f"--corpus={corpus}"], "corpus"),
                         ([f"--checkpoint={exported[0].parent / 'other_model'}",
                           "--repair"], "fingerprint")):
    process = _export_cli(exported, index_dir, *flags)
    assert process.returncode != 0
    assert re.search(
        rf"manifest.json: this index was exported with other settings \(.*{changed}"
        r".* differ: .*nothing was changed", process.stderr), process.stderr[-2000:]
    assert _sha256s(index_dir) == before  # the manifest included: still searchable
  # Other ScaNN settings: "nothing to do" kept the old ScaNN without a word.
  process = _export_cli(exported, index_dir,
                        "--gin_bindings=xtr.index.scann.ScannConfig.dims_per_block = 4")
  assert process.returncode == 2 and (
      "is a complete index whose ScaNN was built with other settings (dims_per_block 1 there, "
      f"4 now); nothing was changed. Build a ScaNN of its vectors with these settings into a new "
      f"directory: xtr-export --from_index={index_dir} --out=NEW.") in process.stderr
  assert "nothing to do" in _export_cli(exported, index_dir).stdout  # The same settings.
  assert _sha256s(index_dir) == before
  reader.open_index(str(index_dir), "full")


def test_repair_with_the_indexs_checkpoint_and_corpus_keeps_its_chunking(exported, tmp_path):
  """The fixture's index has 40 docs per chunk; the repair is run without --docs_per_chunk and
  with another gin text (an extra binding): it repairs to the same index."""
  index_dir = tmp_path / "index"
  shutil.copytree(exported[1], index_dir)
  before = _sha256s(index_dir)
  _flip_byte(index_dir / "chunks/vectors-00002.npy")
  process = _export_cli(exported, index_dir, "--repair",
                        "--gin_bindings=xtr.models.encoding.Encoder.batch_size = 7")
  assert process.returncode == 0, process.stderr[-2000:]
  assert "re-encoding from chunk 2 of 4" in process.stdout
  assert _sha256s(index_dir) == before


@pytest.mark.parametrize("recorded",
                         ["/dev/zero", "gs://bucket/spiece.model", "../spiece.model", "OUTSIDE"])
def test_a_vocabulary_path_outside_the_index_is_used_only_from_the_users_flag(
    exported, tmp_path, t5_spm_path, recorded):
  index_dir = tmp_path / "index"
  shutil.copytree(exported[1], index_dir)
  recorded = str(t5_spm_path) if recorded == "OUTSIDE" else recorded
  _edit_manifest(index_dir, lambda m: m["model"]["vocabulary"].update(path=recorded))
  with pytest.raises(
      ValueError, match=rf"records the vocabulary '{re.escape(recorded)}', which is "
      r"not a file of the index .* search it with --vocabulary=PATH"):
    searcher.open_for_search(str(index_dir), str(exported[0]))
  encoder, _ = searcher.open_for_search(str(index_dir), str(exported[0]),
                                        vocabulary=str(t5_spm_path))
  assert encoder.tokenizer.path == str(t5_spm_path)


def test_an_export_keeps_its_vocabulary_and_searches_from_any_directory(
    exported, tmp_path, t5_spm_path, monkeypatch):
  manifest = json.loads((exported[1] / files.MANIFEST).read_text())
  assert manifest["model"]["vocabulary"]["path"] == "vocabulary/spiece.model"
  assert manifest["files"]["vocabulary/spiece.model"] == files.record(str(t5_spm_path))
  monkeypatch.chdir(tmp_path)
  encoder, _ = searcher.open_for_search(str(exported[1]), str(exported[0]))
  assert encoder.tokenizer.path == str(exported[1] / "vocabulary/spiece.model")
  index_dir = tmp_path / "index"  # The copy replaced by a link to /dev/zero: refused at open.
  shutil.copytree(exported[1], index_dir)
  (index_dir / "vocabulary/spiece.model").unlink()
  os.symlink("/dev/zero", index_dir / "vocabulary/spiece.model")
  with pytest.raises(io.UnsafeFileError, match="spiece.model is a symbolic link"):
    searcher.open_for_search(str(index_dir), str(exported[0]))
