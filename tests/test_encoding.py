"""The query/document encoder: batch rows bucketed to powers of two, lengths to multiples of
length_bucket, rows split over the devices: each equal to one batch of the full length."""
import os
import re
import shutil

import gin
import jax
import numpy as np
import pytest

from tests import retrieval_setup
from xtr import cli
from xtr import io
from xtr.models import encoding
from xtr.models import model_spec

TEXTS = [
    "0-dimensional biomaterials show inductive properties", "a", "stem cells",
    "nanotechnologies to manipulate and track stem cells", "b c d", "magnetic nanoparticles"
]


def test_batches_are_padded_to_power_of_two_rows_and_encode_as_one_batch(tmp_path, t5_spm_path):
  retrieval_setup.random_checkpoint(tmp_path / "model", 0, t5_spm_path, *cli.ENCODER_BINDINGS,
                                    "Encoder.batch_size = 4")
  params = encoding.load_params(str(tmp_path / "model"))
  encoder = encoding.Encoder(params)
  gin.clear_config()
  # The parameters are put on the device once (host arrays would be copied at every call: a lone
  # MiniLM query took 23 ms instead of 4), and the fingerprint is the host arrays'.
  assert all(isinstance(leaf, jax.Array) for leaf in jax.tree.leaves(encoder.params))
  assert encoder.fingerprint == encoding.fingerprint(params)
  together = encoder.encode_queries(TEXTS)  # rows 4 + 2
  for i, text in enumerate(TEXTS):  # one row each
    alone = encoder.encode_queries([text])
    np.testing.assert_allclose(alone[0][0], together[0][i], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(alone[1][0], together[1][i])
  encoder.encode_queries(TEXTS[:3])  # one batch of 3 rows: the 4-row bucket
  assert encoder._apply._cache_size() == 3  # pylint: disable=protected-access  # 4, 2 and 1 rows


def _encoder(directory, t5_spm_path, *bindings, **settings) -> encoding.Encoder:
  """A tiny random T5 encoder (seed 0: the same parameters in every `directory`)."""
  retrieval_setup.random_checkpoint(directory, 0, t5_spm_path, *cli.ENCODER_BINDINGS, *bindings)
  try:
    return encoding.Encoder(encoding.load_params(str(directory)), batch_size=4, **settings)
  finally:
    gin.clear_config()


def test_length_buckets_encode_as_the_full_length(tmp_path, t5_spm_path):
  """Longest first, each batch cut to a multiple of length_bucket: the vectors of the full length
  (every batch at doc_max_length), with fewer tokens computed."""
  full = _encoder(tmp_path / "full", t5_spm_path, length_bucket=None)
  bucketed = _encoder(tmp_path / "bucketed", t5_spm_path, length_bucket=8)
  texts = TEXTS * 3
  want = full.encode(texts, 64)
  got = bucketed.encode(texts, 64)
  np.testing.assert_array_equal(got[1], want[1])
  np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5)
  lengths = {args[1].shape[1] for args, _ in _calls(bucketed, texts, 64)}
  assert lengths == {8, 16} and max(np.sum(want[1], axis=1)) <= 16


def _calls(encoder: encoding.Encoder, texts, max_length) -> list:
  """The (args, kwargs) of every batch `encoder` runs to encode `texts`."""
  assert encoder.dim  # Traced (lazily) before `_apply` is wrapped.
  calls, apply = [], encoder._apply  # pylint: disable=protected-access
  encoder._apply = lambda *args, **kwargs: calls.append((args, kwargs)) or apply(*args, **kwargs)
  try:
    encoder.encode(texts, max_length)
  finally:
    encoder._apply = apply
  return calls


def test_data_parallel_rows_over_the_devices_encode_as_one_device(tmp_path, t5_spm_path):
  """With 8 (simulated) devices, each batch's rows are split over all of them and the parameters
  replicated on each: the same vectors as on one device."""
  assert len(jax.local_devices()) == 8  # conftest's simulated devices
  one = _encoder(tmp_path / "one", t5_spm_path, data_parallel=False)
  parallel = _encoder(tmp_path / "parallel", t5_spm_path, data_parallel=True)
  assert all(len(leaf.sharding.device_set) == 8 for leaf in jax.tree.leaves(parallel.params))
  ids = [args[1] for args, _ in _calls(parallel, TEXTS, 32)]
  assert [x.shape[0] for x in ids] == [8, 8] and all(len(x.sharding.device_set) == 8 for x in ids)
  want, got = one.encode(TEXTS, 32), parallel.encode(TEXTS, 32)
  np.testing.assert_array_equal(got[1], want[1])
  np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5)


def test_bfloat16_compute_encodes_within_its_rounding_and_says_so(tmp_path, t5_spm_path):
  """The backbone computing in bfloat16 (a gin binding of its config; the parameters stay
  float32): vectors within bfloat16's rounding of float32's, and the model description that an
  index records (and that its query encoder is rebuilt from) says bfloat16."""
  full = _encoder(tmp_path / "float32", t5_spm_path)
  half = _encoder(tmp_path / "bfloat16", t5_spm_path, "t5.T5Config.dtype = 'bfloat16'")
  assert half.fingerprint == full.fingerprint
  assert model_spec.describe(half)["config"]["dtype"] == "bfloat16"
  assert model_spec.describe(full)["config"]["dtype"] == "float32"
  want, got = full.encode(TEXTS, 32), half.encode(TEXTS, 32)
  np.testing.assert_array_equal(got[1], want[1])
  assert got[0].dtype == np.float32
  error = np.abs(got[0] - want[0])[want[1]].max()
  assert 1e-4 < error < 5e-2  # bfloat16 has 8 bits of mantissa: ~0.4 % per operation.


def test_a_vocabulary_larger_than_the_embedding_table_is_refused(tmp_path, t5_spm_path):
  """T5's 32,100 pieces over a table of 32,000 rows: the last ids' vectors were NaN, silently."""
  with pytest.raises(
      ValueError, match="has 32,100 tokens, more than the 32,000 rows of the "
      "model's embedding table"):
    _encoder(tmp_path / "model", t5_spm_path, "t5.T5Config.vocab_size = 32000")


@pytest.fixture(scope="module")
def saved_runs(tmp_path_factory, t5_spm_path):
  """Two runs of the tiny T5 with other parameters (seeds 0 and 1), each saved at step 1."""
  root = tmp_path_factory.mktemp("runs")
  for seed in (0, 1):
    retrieval_setup.random_checkpoint(root / f"run{seed}", seed, t5_spm_path)
  gin.clear_config()
  return root


@pytest.mark.parametrize("name", ["_METADATA", "manifest.ocdbt", "ocdbt.process_0/manifest.ocdbt"])
def test_a_fifo_in_a_checkpoint_is_refused_before_orbax_reads_it(saved_runs, tmp_path, monkeypatch,
                                                                 name):
  """Orbax waited forever on the FIFO (every tool that loaded the checkpoint hung)."""
  run = shutil.copytree(saved_runs / "run0", tmp_path / "run")
  fifo = run / "checkpoints" / "1" / "state" / name
  fifo.unlink()
  os.mkfifo(fifo)
  monkeypatch.setattr(encoding, "_restore", lambda *_: pytest.fail("orbax reads the checkpoint"))
  with pytest.raises(io.UnsafeFileError, match=f"^{re.escape(str(fifo))} is a FIFO, not a file"):
    encoding.load_params(str(run))


def test_a_step_planted_as_a_link_to_another_runs_step_is_refused(saved_runs, tmp_path):
  """A link checkpoints/2 -> the other run's step 1 was the run's latest step: the other run's
  weights loaded, silently. A step dir that the user names is still followed."""
  run = shutil.copytree(saved_runs / "run0", tmp_path / "run")
  planted = run / "checkpoints" / "2"
  planted.symlink_to(saved_runs / "run1" / "checkpoints" / "1")
  with pytest.raises(io.UnsafeFileError,
                     match=f"^{re.escape(str(planted))} is a symbolic link, not a file that xtr"):
    encoding.load_params(str(run))
  named = tmp_path / "named"
  named.symlink_to(saved_runs / "run1" / "checkpoints" / "1")
  assert encoding.fingerprint(encoding.load_params(str(named))) == encoding.fingerprint(
      encoding.load_params(str(saved_runs / "run1")))


def test_a_damaged_checkpoint_is_refused_in_one_line_naming_it(saved_runs, tmp_path, t5_spm_path):
  """A truncated data file: orbax's bare Exception, a 145-line traceback and exit status 1; a
  truncated _METADATA: a TypeError of xtr's."""
  run = shutil.copytree(saved_runs / "run0", tmp_path / "run")
  step = run / "checkpoints" / "1"
  data = max((step / "state" / "ocdbt.process_0" / "d").iterdir(), key=os.path.getsize)
  os.truncate(data, data.stat().st_size // 2)
  message = (re.escape(f"The checkpoint {step} is damaged and cannot be read (OUT_OF_RANGE: "
                       "Error reading ") + r'"params\.[^"]*" in OCDBT database at local file ' +
             re.escape(f'"{step}/state/": Requested byte range '))
  with pytest.raises(ValueError, match=f"^{message}"):
    encoding.load_params(str(run))
  process = retrieval_setup.run_tool("xtr.cli.export_model",
                                     "--gin_file=gin/models/t5_1_1_tiny.gin",
                                     f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'",
                                     f"--checkpoint={run}", f"--out={tmp_path / 'out'}",
                                     timeout=300)
  assert process.returncode == 2
  [line] = process.stderr.splitlines()
  assert re.match(f"xtr-tool: {message}", line) and line.endswith(
      "): restore it from a copy, or use another checkpoint (an earlier step of the run).")
  os.truncate(step / "state" / "_METADATA", 100)
  with pytest.raises(
      ValueError, match=re.escape(f"damaged and cannot be read (orbax cannot read "
                                  f"the metadata of {step / 'state'})")):
    encoding.load_params(str(run))
