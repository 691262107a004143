"""Updating an index in place (`xtr.index.update`): export A, delete C, add B ranks as a fresh
export of A - C + B (exactly under brute force and on the devices, within ANN noise under ScaNN),
again after a second update, after a kill -9 at any point, and with pruning; refusals change
nothing; `--from_index` compacts an updated index into the chunks of a fresh export."""
import codecs
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys

import gin
import numpy as np
import pytest

from tests.retrieval_setup import REPO
from tests.retrieval_setup import run_tool
from tests.test_index import FINGERPRINT
from tests.test_index import MODEL
from tests.test_index import _corpus
from tests.test_index import _files
from tests.test_index import _ids
from tests.test_index import _integer_docs
import xtr
from xtr.index import files
from xtr.index import reader
from xtr.index import update
from xtr.index import writer as index_writer

DIM = 32
SALIENCE_MODEL = {**MODEL, "salience": {"gate": "stub"}}  # Stored, not read.


@dataclasses.dataclass
class TableEncoder:
  """The encoder of documents whose texts are keys of `table`: {text: (vectors, salience)}."""
  table: dict
  fingerprint: str = FINGERPRINT
  dim: int = DIM

  def encode_documents(self, texts):
    vectors = [self.table[t][0] for t in texts]
    saliences = [self.table[t][1] for t in texts]
    return vectors, None if saliences[0] is None else saliences


def _corpora(salience=False):
  """A (40 docs), B (12 new docs), C (9 ids of A to delete): {id: (vectors, salience)}."""
  docs = _integer_docs(52)
  rng = np.random.default_rng(5)
  table = {
      doc_id: (v, rng.random(len(v)).astype(np.float32) if salience else None)
      for doc_id, v in zip(_ids(40) + _ids(12, "new"), docs)
  }
  deleted = [f"doc-{i}" for i in (0, 3, 4, 5, 17, 22, 23, 38, 39)]
  return table, _ids(40), _ids(12, "new"), deleted


def _export(path, table, doc_ids, prune_doc=None):
  model = SALIENCE_MODEL if prune_doc else MODEL
  writer = index_writer.IndexWriter(str(path), DIM, "float32", model, FINGERPRINT, 4,
                                    _corpus(len(doc_ids)), prune_doc=prune_doc)
  encoder = TableEncoder(table)
  for chunk, start in enumerate(range(0, len(doc_ids), 4)):
    part = doc_ids[start:start + 4]
    writer.write_chunk(chunk, part, *encoder.encode_documents(part))
  return writer.finalize()


def _update(path, table, added, deleted):
  """Updates the index at `path` with an encoder set up as its model (MODEL or SALIENCE_MODEL)."""
  model = files.read_json(os.path.join(path, files.MANIFEST))["model"]
  return update.update(str(path), lambda: (TableEncoder(table), model), (added, added), deleted,
                       {"test": True})


def _retrieved(index_dir, queries, k, searcher):
  """(scores, doc ids, positions) of each query token's top-k tokens."""
  index = reader.open_index(str(index_dir))
  scores, docs, positions = index.search_tokens(queries, k, searcher)
  ids = np.array([index.doc_ids[d] if d >= 0 else "" for d in docs.ravel()]).reshape(docs.shape)
  return scores, ids, positions


def _queries():
  return np.random.default_rng(1).integers(-8, 9, (16, DIM)).astype(np.float32)


def _assert_same_retrieval(got_dir, want_dir, searchers=("bruteforce", "device")):
  for searcher in searchers:
    for got, want in zip(_retrieved(got_dir, _queries(), 20, searcher),
                         _retrieved(want_dir, _queries(), 20, searcher)):
      np.testing.assert_array_equal(got, want)


def _live_ids(table, doc_ids, added, deleted):
  return [d for d in doc_ids if d not in deleted] + added


def test_delete_and_add_rank_as_a_fresh_export(tmp_path):
  table, doc_ids, added, deleted = _corpora()
  _export(tmp_path / "updated", table, doc_ids)
  manifest = _update(tmp_path / "updated", table, added, deleted)
  _export(tmp_path / "fresh", table, _live_ids(table, doc_ids, added, deleted))
  _assert_same_retrieval(tmp_path / "updated", tmp_path / "fresh")
  assert manifest["generation"] == 1 and manifest["num_deleted_docs"] == len(deleted)
  index = reader.open_index(str(tmp_path / "updated"))
  index.verify()
  live = [i for i, d in enumerate(index.doc_ids) if d not in deleted]
  fresh = reader.open_index(str(tmp_path / "fresh"))
  for got, want in zip(index.doc_vectors(live), fresh.doc_vectors(range(fresh.num_docs))):
    np.testing.assert_array_equal(got, want)
  # The export's doc ids, offsets and ScaNN are gone; the next generation's are listed.
  assert not (tmp_path / "updated" / files.DOC_IDS).exists()
  assert not (tmp_path / "updated" / files.SCANN_DIR).exists()
  assert "scann.g1/scann_assets.pbtxt" in manifest["files"]


def test_scann_after_an_update_finds_what_exact_search_finds(tmp_path):
  """ScaNN's partitions and codebooks were trained on A: the updated searcher's top-k' (its rows
  mapped to tokens) agree with exact search as a fresh build's do."""
  table, doc_ids, added, deleted = _corpora()
  _export(tmp_path / "updated", table, doc_ids)
  _update(tmp_path / "updated", table, added, deleted)
  _export(tmp_path / "fresh", table, _live_ids(table, doc_ids, added, deleted))
  _, exact_ids, exact_positions = _retrieved(tmp_path / "fresh", _queries(), 20, "bruteforce")
  recall = {}
  for index_dir in ("updated", "fresh"):
    _, ids, positions = _retrieved(tmp_path / index_dir, _queries(), 20, "scann")
    assert not set(ids.ravel()) & set(deleted)
    recall[index_dir] = np.mean([
        len(set(zip(*got)) & set(zip(*want))) / 20
        for got, want in zip(zip(ids, positions), zip(exact_ids, exact_positions))
    ])
  assert recall["updated"] >= 0.85 and recall["updated"] >= recall["fresh"] - 0.05, recall


def test_a_second_update_replaces_and_deletes_again(tmp_path):
  table, doc_ids, added, deleted = _corpora()
  _export(tmp_path / "updated", table, doc_ids)
  _update(tmp_path / "updated", table, added, deleted)
  table["doc-3"] = (table["doc-7"][0] + 1, None)  # doc-3 comes back with other vectors,
  manifest = _update(tmp_path / "updated", table, ["doc-3"], ["new-2", "doc-10"])
  assert manifest["generation"] == 2 and len(manifest["updates"]) == 2
  assert not (tmp_path / "updated" / "doc_ids.g1.jsonl").exists()
  live = _live_ids(table, doc_ids, added, deleted)
  live = [d for d in live if d not in ("new-2", "doc-10")] + ["doc-3"]
  _export(tmp_path / "fresh", table, live)
  _assert_same_retrieval(tmp_path / "updated", tmp_path / "fresh")


def test_a_pruned_index_prunes_the_added_documents(tmp_path):
  table, doc_ids, added, deleted = _corpora(salience=True)
  _export(tmp_path / "updated", table, doc_ids, prune_doc=0.5)
  _update(tmp_path / "updated", table, added, deleted)
  _export(tmp_path / "fresh", table, _live_ids(table, doc_ids, added, deleted), prune_doc=0.5)
  _assert_same_retrieval(tmp_path / "updated", tmp_path / "fresh")


@pytest.mark.parametrize("prune_doc", [None, 0.5])
def test_rows_in_partition_order_map_to_their_tokens_through_an_update(tmp_path, prune_doc):
  """A ScaNN that rescores is written partition by partition (`scann.write`), its rows mapped to
  tokens by the listed scann_tokens table, in an export and after an update (deleted rows filled,
  added ones appended, all put in order again): searching every leaf and rescoring every token,
  ScaNN finds exact search's top-k, each token at its score, and brute-force and device search
  rank as a fresh export."""
  table, doc_ids, added, deleted = _corpora(salience=prune_doc is not None)
  exact = dict(num_leaves=4, num_leaves_to_search=4, reorder_k=2000, reorder_type="'float32'")
  with gin.unlock_config():
    gin.parse_config([f"ScannConfig.{name} = {value}" for name, value in exact.items()])
  try:
    for generation, scann_dir in enumerate(("scann", "scann.g1")):
      if generation:
        manifest = _update(tmp_path / "updated", table, added, deleted)
      else:
        manifest = _export(tmp_path / "updated", table, doc_ids, prune_doc)
      assert files.names(manifest)[files.SCANN_TOKENS] in manifest["files"]
      partitions = np.load(tmp_path / "updated" / scann_dir / "datapoint_to_token.npy")
      assert np.all(np.diff(partitions) >= 0) and len(np.unique(partitions)) > 1
      scores, ids, positions = _retrieved(tmp_path / "updated", _queries(), 20, "scann")
      want, _, _ = _retrieved(tmp_path / "updated", _queries(), 20, "bruteforce")
      np.testing.assert_array_equal(scores, want)
      for query, row in zip(_queries(), zip(scores, ids, positions)):
        for score, doc_id, position in zip(*row):
          assert table[doc_id][0][position] @ query == score
    _export(tmp_path / "fresh", table, _live_ids(table, doc_ids, added, deleted), prune_doc)
  finally:
    gin.clear_config()
  _assert_same_retrieval(tmp_path / "updated", tmp_path / "fresh")


def test_refused_updates_change_nothing(tmp_path):
  table, doc_ids, added, deleted = _corpora()
  _export(tmp_path / "index", table, doc_ids)
  before = _files(tmp_path / "index")
  with_tokens = [d for d in doc_ids if len(table[d][0])]  # Six of the 40 documents are empty.
  for args, message in (((added, ["doc-1", "nope"]), r"to delete:2: 'nope' is not a document"),
                        ((["doc-9"], []),
                         r"to add:1: the document 'doc-9' is already in the index"),
                        ((["new-1", "new-1"], []), r"to add:2: the document 'new-1' is already"),
                        (([], with_tokens), r"would leave .* no token to retrieve")):
    with pytest.raises(ValueError, match=message):
      _update(tmp_path / "index", table, *args)
  with pytest.raises(ValueError, match="another checkpoint"):
    update.update(str(tmp_path / "index"), lambda:
                  (TableEncoder(table, fingerprint="other"), MODEL), (added, added), [], {})
  # The same parameters set up otherwise (here: documents cut at another length) encode other
  # vectors: the update wrote them beside the old ones (exit 0).
  with pytest.raises(
      ValueError, match=r"other model settings \(doc_max_length None there, 64 "
      r"now\).*nothing was changed"):
    update.update(str(tmp_path / "index"), lambda: (TableEncoder(table), {
        **MODEL, "doc_max_length": 64
    }), (added, added), [], {})
  with pytest.raises(ValueError, match=r"the ids to delete:1: 'nope'"):  # Before any model loads.
    update.update(str(tmp_path / "index"), lambda: pytest.fail("the encoder was loaded"),
                  (added, added), ["nope"], {})
  assert _files(tmp_path / "index") == before
  _update(tmp_path / "index", table, [], deleted)
  for repair in (False, True):  # an export into it, or a repair of it
    with pytest.raises(ValueError, match=r"was updated in place .* nothing was changed"):
      index_writer.IndexWriter(str(tmp_path / "index"), DIM, "float32", MODEL, FINGERPRINT, 4,
                               _corpus(len(doc_ids)), repair=repair)
  with pytest.raises(ValueError, match=r"would delete every document"):
    _update(tmp_path / "index", table, [], [d for d in doc_ids if d not in deleted])
  with pytest.raises(ValueError, match=r"'doc-0' is not a document"):  # deleted already
    _update(tmp_path / "index", table, [], ["doc-0"])


def _chunk_files(index_dir):
  """{name: bytes} of the index's chunk files but their records (which name no path)."""
  return {p.name: p.read_bytes() for p in sorted((index_dir / "chunks").glob("*.npy"))}


@pytest.mark.parametrize("prune_doc", [None, 0.5])
def test_from_index_compacts_an_updated_index_into_a_fresh_export(tmp_path, prune_doc):
  """Two updates, then `reprune` (xtr-export --from_index): the chunk files of a fresh export of
  the live corpus, byte for byte, and the same retrieval by every searcher, ScaNN's too; a
  compaction killed after two chunks resumes to the same index."""
  table, doc_ids, added, deleted = _corpora(salience=prune_doc is not None)
  _export(tmp_path / "updated", table, doc_ids, prune_doc)
  _update(tmp_path / "updated", table, added, deleted)
  _update(tmp_path / "updated", table, [], ["new-2", "doc-10"])
  live = [d for d in _live_ids(table, doc_ids, added, deleted) if d not in ("new-2", "doc-10")]
  _export(tmp_path / "fresh", table, live, prune_doc)
  compacted = tmp_path / "compacted"
  manifest = index_writer.reprune(str(tmp_path / "updated"), str(compacted), prune_doc)
  assert reader.open_index(str(compacted)).doc_ids == live
  assert _chunk_files(compacted) == _chunk_files(tmp_path / "fresh")
  _assert_same_retrieval(compacted, tmp_path / "fresh", ("bruteforce", "device", "scann"))
  assert "generation" not in manifest and not manifest.get("updates")
  assert manifest["corpus"]["total_docs"] == len(live) and len(manifest["corpus"]["updates"]) == 2
  os.remove(compacted / files.MANIFEST)  # Killed after writing chunks 0 and 1.
  for chunk in range(2, len(manifest["chunks"])):
    os.remove(files.chunk_files(str(compacted), chunk)["chunk"])
  assert index_writer.reprune(str(tmp_path / "updated"), str(compacted), prune_doc) == manifest
  _assert_same_retrieval(compacted, tmp_path / "fresh", ("bruteforce", "scann"))


def test_a_damaged_updated_index_is_refused_before_compaction_writes(tmp_path):
  table, doc_ids, added, deleted = _corpora()
  _export(tmp_path / "updated", table, doc_ids)
  _update(tmp_path / "updated", table, added, deleted)
  vectors = tmp_path / "updated" / "chunks" / "vectors-00011.npy"  # An added chunk.
  data = bytearray(vectors.read_bytes())
  data[-1] ^= 1
  vectors.write_bytes(bytes(data))
  # Not "rerun ... with --repair", which an updated index refuses.
  with pytest.raises(
      files.DamagedIndexError, match=r"vectors-00011.npy is damaged: .* was "
      r"updated in place \(xtr-export --add/--delete\), which --repair cannot redo"):
    index_writer.reprune(str(tmp_path / "updated"), str(tmp_path / "compacted"), None)
  assert not (tmp_path / "compacted").exists()
  with pytest.raises(files.DamagedIndexError, match=r"which --repair cannot redo"):
    reader.open_index(str(tmp_path / "updated")).verify()


# Runs an update that SIGKILLs itself at its N-th rename or removal (argv: index dir, N).
_KILLED_UPDATE = """
import os, shutil, signal, sys
from tests.test_update import _corpora, _update
calls = [0]
def killing(real):
  def call(*args, **kwargs):
    calls[0] += 1
    if calls[0] == int(sys.argv[2]):
      os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
  return call
os.replace, os.remove, shutil.rmtree = (killing(os.replace), killing(os.remove),
                                        killing(shutil.rmtree))
table, doc_ids, added, deleted = _corpora()
_update(sys.argv[1], table, added, deleted)
print("finished")
"""


def test_a_kill_at_any_point_leaves_the_old_or_the_new_index(tmp_path):
  table, doc_ids, added, deleted = _corpora()
  _export(tmp_path / "old", table, doc_ids)
  _export(tmp_path / "new", table, doc_ids)
  _update(tmp_path / "new", table, added, deleted)
  outcomes = []
  for kill_at in range(1, 100):
    index_dir = tmp_path / f"killed{kill_at}"
    _export(index_dir, table, doc_ids)
    process = subprocess.run(
        [sys.executable, "-c", _KILLED_UPDATE,
         str(index_dir), str(kill_at)], cwd=REPO, capture_output=True, text=True, check=False)
    if process.returncode == 0:
      assert "finished" in process.stdout
      break
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    committed = "generation" in files.read_json(str(index_dir / files.MANIFEST))
    reader.open_index(str(index_dir)).verify()
    _assert_same_retrieval(index_dir, tmp_path / ("new" if committed else "old"),
                           ("bruteforce", "scann"))
    outcomes.append(committed)
    if not committed:  # Rerun, the update does it all.
      _update(index_dir, table, added, deleted)
      _assert_same_retrieval(index_dir, tmp_path / "new", ("bruteforce", "scann"))
    else:  # The next update removes what the kill kept from being removed.
      _update(index_dir, table, [], ["doc-1"])
      assert not {files.DOC_IDS, files.SCANN_DIR, "doc_ids.g1.jsonl"} & set(os.listdir(index_dir))
  assert False in outcomes and True in outcomes, outcomes  # killed before and after the commit


def test_the_next_update_removes_the_temporary_a_killed_one_left(tmp_path):
  """Killed at its first rename, an update leaves its first added chunk's temporary
  (vectors-00010.npy.tmp): a next update that writes no chunk removes it all the same."""
  table, doc_ids, _, _ = _corpora()
  _export(tmp_path / "index", table, doc_ids)
  process = subprocess.run([sys.executable, "-c", _KILLED_UPDATE,
                            str(tmp_path / "index"), "1"], cwd=REPO, check=False)
  assert process.returncode == -signal.SIGKILL
  assert [p.name for p in (tmp_path / "index").rglob("*.tmp")] == ["vectors-00010.npy.tmp"]
  _update(tmp_path / "index", table, [], ["doc-1"])
  assert not list((tmp_path / "index").rglob("*.tmp"))
  reader.open_index(str(tmp_path / "index")).verify()


def test_an_update_of_any_generation_looks_at_the_two_beside_it(tmp_path):
  """An update removed what killed ones left by trying every generation from 0 to the
  manifest's: a manifest of generation 10^12 held `export.lock` for years. Now it removes the
  leftovers of the generation committed over (here planted) and of the next, and nothing else."""
  table, doc_ids, _, deleted = _corpora()
  index = tmp_path / "index"
  _export(index, table, doc_ids)
  _update(index, table, [], deleted[:2])  # Generation 1.
  manifest = files.read_json(str(index / files.MANIFEST))
  old, new = files.names(manifest), files.names({"generation": 10**12})
  for kind, name in old.items():
    if os.path.lexists(index / name):
      os.rename(index / name, index / new[kind])
  renamed = {old[kind]: new[kind] for kind in old}
  manifest["files"] = {
      "/".join([renamed.get(path.split("/")[0],
                            path.split("/")[0]), *path.split("/")[1:]]): record
      for path, record in manifest["files"].items()
  }
  (index / files.MANIFEST).write_text(json.dumps({**manifest, "generation": 10**12}))
  left = index / files.names({"generation": 10**12 - 1})[files.DOC_IDS]
  shutil.copy(index / new[files.DOC_IDS], left)
  process = run_tool("xtr.cli.export", f"--out={index}", f"--delete={_ids_file(tmp_path, 'doc-1')}",
                     timeout=120)
  assert process.returncode == 0, process.stderr[-3000:]
  assert files.read_json(str(index / files.MANIFEST))["generation"] == 10**12 + 1
  assert not left.exists()
  reader.open_index(str(index)).verify()


def _ids_file(tmp_path, *doc_ids):
  path = tmp_path / "ids.txt"
  path.write_text("".join(f"{doc_id}\n" for doc_id in doc_ids))
  return path


def _slice_update(scifact_slice, tmp_path):
  """The slice's corpus lines, the ids to delete (10) and the lines to add (5 of them again)."""
  lines = (scifact_slice / "corpus.jsonl").read_text().splitlines(keepends=True)
  deleted = lines[20:30]
  (tmp_path / "delete.txt").write_text("".join(json.loads(line)["_id"] + "\n" for line in deleted))
  (tmp_path / "add.jsonl").write_text("".join(deleted[:5]))
  (tmp_path / "fresh.jsonl").write_text("".join(lines[:20] + lines[30:] + deleted[:5]))


def test_export_cli_adds_and_deletes_as_a_fresh_export_ranks(exported, scifact_slice, tmp_path,
                                                             t5_spm_path):
  """xtr-export --delete --add with the tiny T5: rankings equal to an export of the resulting
  corpus under brute force; bad ids files (by line), an empty one, a corpus without documents or
  in a pipe are refused, exit 2, the index unchanged, before the checkpoint is read; and so is
  the index's checkpoint set up otherwise than at the export."""
  model_dir, index_dir = exported
  _slice_update(scifact_slice, tmp_path)
  ids = (tmp_path / "delete.txt").read_bytes()
  (tmp_path / "delete.txt").unlink()
  (tmp_path / "ids.txt").write_bytes(codecs.BOM_UTF8 + ids)  # As some editors save it: refused.
  (tmp_path / "delete.txt").symlink_to(tmp_path / "ids.txt")  # The user's file: it was refused.
  updated = tmp_path / "updated"
  shutil.copytree(index_dir, updated)
  model = [
      f"--gin_file={REPO}/gin/models/t5_1_1_tiny.gin",
      f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'",
      "--gin_bindings=xtr.models.encoding.Encoder.doc_max_length = 64", f"--checkpoint={model_dir}"
  ]
  (tmp_path / "bad.txt").write_text("31715818\n\n")
  before = _files(updated)
  process = run_tool("xtr.cli.export", f"--out={updated}", f"--delete={tmp_path / 'bad.txt'}")
  assert process.returncode == 2 and process.stderr.strip().endswith(
      f"--delete={tmp_path / 'bad.txt'}:2: an empty line, not a document id."), process.stderr
  (tmp_path / "empty.txt").write_text("")
  (tmp_path / "absent.txt").write_text("31715818\nno-such-doc\n")
  os.mkfifo(tmp_path / "fifo.jsonl")
  missing = [*model[:-1], f"--checkpoint={tmp_path / 'no-model'}"]  # Never read: refused first.
  for flags, message in (
      ([f"--delete={tmp_path / 'empty.txt'}"], "empty.txt lists no document id."),
      ([f"--delete={tmp_path / 'absent.txt'}", f"--add={tmp_path / 'add.jsonl'}"],
       "absent.txt:2: 'no-such-doc' is not a document of the index; nothing was changed."),
      ([f"--add={tmp_path / 'empty.txt'}"], "empty.txt holds no document."),
      ([f"--add={tmp_path / 'fifo.jsonl'}"], "fifo.jsonl is not a regular file: xtr reads it "
       "twice (once for its sha256, which the index records); write it to a file first.")):
    process = run_tool("xtr.cli.export", *missing, f"--out={updated}", *flags, timeout=120)
    assert process.returncode == 2 and process.stderr.strip().endswith(message), process.stderr
  # The index's checkpoint, its documents cut at the default 256 tokens instead of the export's
  # 64: the update added them so (exit 0), beside the old ones.
  process = run_tool("xtr.cli.export", *model[:2], *model[3:], f"--out={updated}",
                     f"--delete={tmp_path / 'delete.txt'}", f"--add={tmp_path / 'add.jsonl'}")
  assert process.returncode == 2 and process.stderr.strip().endswith(
      "other model settings (doc_max_length 64 there, 256 now): update it with the gin files it "
      "was exported with; nothing was changed."), process.stderr
  assert _files(updated) == before
  process = run_tool("xtr.cli.export", *model, f"--out={updated}",
                     f"--delete={tmp_path / 'delete.txt'}", f"--add={tmp_path / 'add.jsonl'}")
  assert process.returncode == 0, process.stderr[-3000:]
  assert "Updated" in process.stdout
  fresh = tmp_path / "fresh"
  process = run_tool("xtr.cli.export", *model, f"--corpus={tmp_path / 'fresh.jsonl'}",
                     f"--out={fresh}", "--docs_per_chunk=40")
  assert process.returncode == 0, process.stderr[-3000:]
  compacted = tmp_path / "compacted"
  process = run_tool("xtr.cli.export", f"--from_index={updated}", f"--out={compacted}")
  assert process.returncode == 0 and "Compacting the updated" in process.stdout, process.stderr
  queries = [json.loads(q)["text"] for q in (scifact_slice / "queries.jsonl").open()]
  updated, fresh, compacted = (
      xtr.Searcher(str(d), str(model_dir)) for d in (updated, fresh, compacted))
  assert compacted.search(queries, top_k=10) == fresh.search(queries, top_k=10)  # ScaNN as well
  for config in ({
      "searcher": "bruteforce"
  }, {
      "searcher": "bruteforce",
      "scoring": "colbert"
  }, {
      "scoring": "exhaustive"
  }):
    got, want = (s.search(queries, top_k=10, k_prime=100, **config) for s in (updated, fresh))
    for a, b in zip(got, want):
      assert [d for d, _ in a] == [d for d, _ in b], config
      np.testing.assert_allclose([s for _, s in a], [s for _, s in b], rtol=1e-6)


def test_a_damaged_scann_is_refused_before_the_update_changes_anything(tmp_path):
  table, doc_ids, added, deleted = _corpora()
  _export(tmp_path / "index", table, doc_ids)
  codes = tmp_path / "index" / files.SCANN_DIR / "hashed_dataset.npy"
  data = bytearray(codes.read_bytes())
  data[-1] ^= 1
  codes.write_bytes(bytes(data))
  before = _files(tmp_path / "index")
  with pytest.raises(files.DamagedIndexError, match=r"hashed_dataset.npy is damaged"):
    _update(tmp_path / "index", table, added, deleted)
  assert _files(tmp_path / "index") == before
