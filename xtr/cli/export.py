"""`xtr-export`: encode a corpus with a trained XTR encoder and build its token index.

  xtr-export --gin_file=gin/runs/smoke.gin --checkpoint=runs/smoke \
    --corpus=data/scifact/corpus.jsonl.gz --out=runs/smoke/index

The released XTR weights (README, "Evaluate the released XTR"): --gin_file of their model
(gin/models/xtr_base_en.gin) and --checkpoint=their directory, which gin sees as CHECKPOINT.

Documents are encoded in chunks (`--docs_per_chunk`) with a progress bar; a killed export
resumes at its last complete chunk when rerun with the same flags. With --num_shards=S, run once
per --shard_id (e.g. one per host): each writes INDEX_DIR/shard-SSSSS-of-NNNNN over a contiguous
range of the corpus, and search fans out over the shards. On a pod or on GPU nodes, run it once
per host with --multihost instead (launch/export_tpu_pod.sh, launch/export_gpu_nodes.sh): each
host exports shard jax.process_index() of jax.process_count() on all of its devices. ScaNN
settings: `ScannConfig` of `xtr.index.scann` (trained on a sample, then fed the chunks from
disk: its memory grows with ScaNN's codes, not with float32 copies of the tokens). The index records
the corpus file's sha256, the document range and the checkpoint's fingerprint: a resumed
export, a rerun into a complete index or a --repair with another corpus, range or checkpoint is
refused and leaves the index as it was. A damaged index is repaired by rerunning the command
with --repair (an unset --docs_per_chunk takes the index's value). Two exports or repairs of one
directory at once are refused (export.lock).

--add=CORPUS and --delete=IDS_FILE (one document id per line) update the complete index at --out
in place (`xtr.index.update`): the deleted documents' tokens leave ScaNN and token retrieval, the
added documents are encoded with --checkpoint (the index's) and upserted into its ScaNN; a
kill at any point leaves the old index or the updated one. Deleted documents stay in the chunks
as tombstones (never candidates) until the corpus is exported again.

--store_vectors=none writes an index for f_XTR' only: ScaNN and the document map, without the
float token vectors that ColBERT's and ALIGNER's refinement, exact scoring and brute-force
retrieval read (they are kept while the export runs, for resuming and for ScaNN, then deleted).
The export prints the bytes of every kind of file, per token.

ALIGNER (a checkpoint with salience heads): --prune_doc=0.2 puts only the top 20 % of each
document's tokens by salience into ScaNN (the token-retrieval index); every token vector is still
stored, for the refinement stage of `xtr-search --scoring=aligner`. Another pruning of a complete
index needs no re-encoding: --from_index=INDEX_DIR --prune_doc=0.1 --out=NEW_DIR links INDEX_DIR's
chunks into NEW_DIR and builds only ScaNN (no --checkpoint or --corpus; with --num_shards, once
per --shard_id as above). The same, without --prune_doc and with other `ScannConfig` gin
bindings, gives another ScaNN of the same vectors (e.g. 4 dimensions per block); with
--store_vectors=none, an XTR-only copy of the index. An index updated in place (--add,
--delete) is compacted instead: its live documents are copied into new chunks, without the deleted
ones, as a fresh export of the updated corpus writes them, and ScaNN is trained anew.
"""
import codecs
import os
from typing import Sequence

from absl import app
from absl import flags
import jax

from xtr import cli
from xtr import io
from xtr.data import beir_files
from xtr.index import build
from xtr.index import files
from xtr.index import scann
from xtr.index import update
from xtr.index import writer
from xtr.models import model_spec

_CHECKPOINT = flags.DEFINE_string(
    "checkpoint", None, "xtr-train model dir or checkpoint step dir, or a directory of the "
    "released XTR weights (gin: CHECKPOINT is bound to it).")
_CORPUS = flags.DEFINE_string("corpus", None, "BEIR corpus.jsonl(.gz) ({_id, title, text}).")
_OUT = flags.DEFINE_string("out", None, "Index directory to write.")
_STORE_VECTORS = flags.DEFINE_enum(
    "store_vectors", "float16", files.STORE_VECTORS,
    "Stored token vectors: their dtype, or none: an index for --scoring=xtr only (ScaNN and the "
    "document map; no refinement, exact scoring or brute force).")
_DOCS_PER_CHUNK = cli.define_count(
    "docs_per_chunk", None, "Documents per saved chunk. Default: the value the --out directory "
    "records (resume, repair), else 1000.")
_NUM_SHARDS = cli.define_count(
    "num_shards", 1, "Split the corpus into this many shards (with --multihost: one per "
    "process, jax.process_count()).")
_SHARD_ID = cli.define_count(
    "shard_id", 0, "The shard this process exports, in [0, --num_shards) (with --multihost: "
    "jax.process_index()).", lower_bound=0)
_MULTIHOST = cli.MultihostFlags()
# How long a --multihost process whose shard is done waits at exit for the others (JAX aborts
# every process when one waits longer): shards finish hours apart, and a resume finds some
# complete at once. A process that dies is still noticed in 100 s (JAX's heartbeat).
SHARD_SKEW_S = 7 * 24 * 3600
flags.register_multi_flags_validator(
    ["shard_id", "num_shards"], lambda v: v["shard_id"] < v["num_shards"],
    message="--shard_id must be less than --num_shards (shards count from 0).")
_PRUNE_DOC = cli.define_fraction(
    "prune_doc", None, "β_d: ScaNN indexes each document's top ⌈β_d·m⌉ tokens by salience "
    "(ALIGNER; needs a checkpoint with salience heads). Default: every token.")
_FROM_INDEX = flags.DEFINE_string(
    "from_index", None, "A complete index of the same model and corpus: reuse its token vectors "
    "(linked, not re-encoded; copied without the deleted documents from an updated index) and "
    "build ScaNN with --prune_doc.")
_ADD = flags.DEFINE_string(
    "add", None, "Add the documents of this BEIR corpus.jsonl(.gz) to the complete index at "
    "--out (with --checkpoint, the index's).")
_DELETE = flags.DEFINE_string(
    "delete", None, "Delete the documents whose ids this file lists, one per line, from the "
    "complete index at --out (before --add's: an id may be replaced).")
_REPAIR = flags.DEFINE_bool(
    "repair", False, "Verify a complete index in full and redo what is damaged: "
    "re-encode from the first damaged chunk, rebuild ScaNN. Refused, "
    "leaving the index as it is, unless --checkpoint and --corpus are "
    "the index's.")


def main(argv: Sequence[str]) -> None:
  cli.check_no_arguments(argv)
  out_dir = _OUT.value
  if os.path.exists(out_dir) and not os.path.isdir(out_dir):
    raise app.UsageError(f"--out={out_dir} is a file, not an index directory.")
  shard = _shard()
  if shard[1] > 1:
    out_dir = files.shard_path(out_dir, *shard)
  prune_doc = _PRUNE_DOC.value
  if _ADD.value or _DELETE.value:
    manifest = _update(out_dir)
    print(f"Updated {out_dir}: {manifest['num_docs'] - manifest['num_deleted_docs']} documents "
          f"({manifest['num_deleted_docs']} deleted ones kept as tombstones), "
          f"{manifest['num_indexed_tokens']} tokens in ScaNN.")
    return
  writer.check_out_dir(out_dir)  # Before the model loads (IndexWriter checks it again).
  try:
    manifest = (_reprune(out_dir, prune_doc, shard) if _FROM_INDEX.value else _export(
        out_dir, prune_doc, shard))
  except writer.IndexComplete as e:
    _check_scann_as_configured(out_dir)
    print(e)
    return
  print(f"Wrote {out_dir}: {manifest['num_docs']} documents, {manifest['num_tokens']} tokens "
        f"of dim {manifest['dim']}, {manifest['num_indexed_tokens']} of them in ScaNN.")
  print(_sizes(manifest))


def _check_scann_as_configured(out_dir: str) -> None:
  """Refuses a rerun into the complete index at `out_dir` whose ScaNN was built with other
  settings than gin's now ("nothing to do" left the old ScaNN without a word)."""
  manifest = files.complete_manifest(out_dir)
  built = manifest["scann"]
  wanted = scann.settings(scann.ScannConfig(),
                          manifest.get("num_indexed_tokens", manifest["num_tokens"]))
  changed = [
      f"{key} {built.get(key)!r} there, {value!r} now" for key, value in wanted.items()
      if built.get(key) != value
  ]
  if changed:
    raise app.UsageError(
        f"--out={out_dir} is a complete index whose ScaNN was built with other settings "
        f"({'; '.join(changed)}); nothing was changed. Build a ScaNN of its vectors with these "
        f"settings into a new directory: xtr-export --from_index={out_dir} --out=NEW.")


def _parse_gin(extra_bindings: Sequence[str] = ()) -> None:
  """`cli.parse_gin`, then the `ScannConfig` it binds, so that a bad binding (a ValueError) is
  refused before anything is encoded or written."""
  cli.parse_gin(extra_bindings)
  scann.ScannConfig()


def _shard() -> tuple[int, int]:
  """(shard id, number of shards): --shard_id and --num_shards, or with --multihost this
  process's index and the number of processes (each host exports its shard)."""
  for flag in (_SHARD_ID, _NUM_SHARDS):
    if _MULTIHOST.multihost.value and flags.FLAGS[flag.name].present:
      raise app.UsageError(f"--{flag.name}={flag.value} with --multihost: the shards are the "
                           "processes (jax.process_index() of jax.process_count()).")
  if not _MULTIHOST.initialize(shutdown_timeout_s=SHARD_SKEW_S):
    return _SHARD_ID.value, _NUM_SHARDS.value
  return jax.process_index(), jax.process_count()


def _sizes(manifest: dict) -> str:
  """The bytes of the index's files by kind, and per token."""
  sizes = files.bytes_by_kind(manifest)
  rows = [
      f"  {kind:<9} {size:>14,} bytes {size / manifest['num_tokens']:8.1f} bytes/token"
      for kind, size in (*sizes.items(), ("total", sum(sizes.values())))
  ]
  return "\n".join(rows)


def _reprune(out_dir: str, prune_doc: float | None, shard: tuple[int, int]) -> dict:
  """--from_index: the manifest of out_dir, the source's chunks with ScaNN over `prune_doc`."""
  if _CHECKPOINT.value or _CORPUS.value or _REPAIR.value:
    raise app.UsageError("--from_index reuses an index's token vectors: it takes no "
                         "--checkpoint, --corpus or --repair.")
  source = _FROM_INDEX.value
  if shard[1] > 1:  # --num_shards, or the processes of --multihost.
    source = files.shard_path(source, *shard)
  if not os.path.exists(os.path.join(source, files.MANIFEST)):
    raise app.UsageError(f"--from_index={source} is not a complete index (no "
                         f"{files.MANIFEST}).")
  source_manifest = files.read_json(os.path.join(source, files.MANIFEST))
  model, dtype = source_manifest.get("model"), source_manifest.get("dtype")
  if prune_doc is not None and not (isinstance(model, dict) and model.get("salience")):
    raise app.UsageError(f"--prune_doc={prune_doc} prunes by salience, but the model of "
                         f"--from_index={source} has no salience heads.")
  if _STORE_VECTORS.present and _STORE_VECTORS.value not in ("none", dtype):
    raise app.UsageError(f"--store_vectors={_STORE_VECTORS.value}: --from_index={source} holds "
                         f"{dtype} vectors; keep them or drop them (--store_vectors=none).")
  _parse_gin()  # ScannConfig: another ScaNN of the same vectors.
  how = "Compacting the updated" if source_manifest.get("updates") else "Linking the chunks of"
  print(f"{how} {source} into {out_dir}; building its ScaNN index.", flush=True)
  return writer.reprune(source, out_dir, prune_doc, store_vectors=_STORE_VECTORS.value != "none")


def _update(out_dir: str) -> dict:
  """--add, --delete: the manifest of the index at out_dir, updated in place."""
  others = [
      f"--{flag.name}" for flag in (_CORPUS, _FROM_INDEX, _REPAIR, _PRUNE_DOC, _DOCS_PER_CHUNK,
                                    _NUM_SHARDS, _SHARD_ID, _STORE_VECTORS, _MULTIHOST.multihost)
      if flags.FLAGS[flag.name].present
  ]
  if others:
    raise app.UsageError(f"--add and --delete update the index at --out as it was exported: "
                         f"they take no {', '.join(others)}.")
  if _ADD.value and not _CHECKPOINT.value:
    raise app.UsageError("--add encodes documents: --checkpoint (the index's) is required.")
  record, deleted, added = {}, [], None
  if _DELETE.value:
    deleted = _doc_ids_file(_DELETE.value)
    record["delete"] = {
        "path": _DELETE.value,
        "sha256": io.sha256(_DELETE.value),
        "num_ids": len(deleted)
    }
  if _ADD.value:
    cli.check_input_file("add", _ADD.value)
    _parse_gin(extra_bindings=[*cli.ENCODER_BINDINGS, f"CHECKPOINT = {_CHECKPOINT.value!r}"])
    corpus = beir_files.read_jsonl(_ADD.value, beir_files.document_text)
    if not corpus:
      raise app.UsageError(f"--add={_ADD.value} holds no document.")
    added = (list(corpus), list(corpus.values()))
    record["add"] = {"path": _ADD.value, "sha256": io.sha256(_ADD.value), "num_docs": len(corpus)}

  def load_encoder():
    encoder = model_spec.gin_encoder(_CHECKPOINT.value)
    return encoder, model_spec.describe(encoder)

  return update.update(out_dir, load_encoder, added, deleted, record)


def _doc_ids_file(path: str) -> list[str]:
  """The document ids of --delete's file, one per line (UTF-8); refuses an empty line or an id
  given twice, naming the line. A symlink is followed (it is the user's file, as --corpus is);
  a FIFO or device is refused."""
  with io.open_binary(path) as f:
    lines = f.read().removeprefix(codecs.BOM_UTF8).split(b"\n")
  if lines[-1] == b"":
    lines.pop()
  ids, seen = [], {}
  for n, line in enumerate(lines, start=1):
    try:
      doc_id = line.removesuffix(b"\r").decode("utf-8")
    except UnicodeDecodeError:
      raise app.UsageError(f"--delete={path}:{n}: not UTF-8 text.") from None
    if not doc_id or doc_id in seen:
      raise app.UsageError(f"--delete={path}:{n}: " +
                           (f"the id {doc_id!r} is also on line "
                            f"{seen[doc_id]}." if doc_id else "an empty line, not a document id."))
    seen[doc_id] = n
    ids.append(doc_id)
  if not ids:
    raise app.UsageError(f"--delete={path} lists no document id.")
  return ids


def _export(out_dir: str, prune_doc: float | None, shard: tuple[int, int]) -> dict:
  """The manifest of out_dir, encoded from --corpus with --checkpoint (resuming, repairing)."""
  for flag in (_CHECKPOINT, _CORPUS):
    if not flag.value:
      raise app.UsageError(f"--{flag.name} is required (or --from_index).")
  cli.check_input_file("corpus", _CORPUS.value)
  cli.check_outside_run(_OUT.value, _CHECKPOINT.value)
  _parse_gin(extra_bindings=[*cli.ENCODER_BINDINGS, f"CHECKPOINT = {_CHECKPOINT.value!r}"])
  corpus = beir_files.read_jsonl(_CORPUS.value, beir_files.document_text)
  docs = build.shard_range(len(corpus), *shard)
  if not len(docs):
    raise app.UsageError(f"--corpus={_CORPUS.value} has {len(corpus)} documents: nothing for "
                         f"shard {shard[0]} of {shard[1]} to export.")
  doc_ids = list(corpus)[docs.start:docs.stop]
  texts = list(corpus.values())[docs.start:docs.stop]
  record = build.corpus_record(_CORPUS.value, docs, len(corpus))
  encoder = model_spec.gin_encoder(_CHECKPOINT.value)
  if prune_doc is not None and not encoder.has_salience:
    raise app.UsageError(f"--prune_doc={prune_doc} prunes by salience, but the model of "
                         f"--checkpoint={_CHECKPOINT.value} has no salience heads (gin: "
                         "xtr_encoder.XTREncoder.salience).")
  return build.export(encoder, doc_ids, texts, out_dir, _STORE_VECTORS.value, _DOCS_PER_CHUNK.value,
                      record, prune_doc, _REPAIR.value)


def console_entry_point() -> None:
  cli.run(main, __name__, required=["out"])


if __name__ == "__main__":
  console_entry_point()
