"""Tests for xtr/training/wise_ft.py: the interpolation against a hand computation, and the command
on a trained run (its initial parameters saved by the trainer)."""
import re
import subprocess

import gin
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests import retrieval_setup
from tests.test_trainer import REPO
from tests.test_trainer import _final_params
from tests.test_trainer import _train_smoke_in_process
from xtr import io
from xtr.models import encoding
from xtr.training import wise_ft


def test_interpolate_matches_a_hand_computation():
  initial = {"a": np.array([0.0, 2.0], np.float32), "b": {"c": jnp.array([[1.0]], jnp.bfloat16)}}
  tuned = {"a": np.array([4.0, 6.0], np.float32), "b": {"c": jnp.array([[3.0]], jnp.bfloat16)}}
  mixed = wise_ft.interpolate(initial, tuned, 0.25)  # 0.75·initial + 0.25·tuned
  np.testing.assert_array_equal(mixed["a"], [1.0, 3.0])
  assert mixed["b"]["c"].dtype == jnp.bfloat16 and float(mixed["b"]["c"][0, 0]) == 1.5
  for alpha, expected in ((0.0, initial), (1.0, tuned)):
    jax.tree.map(np.testing.assert_array_equal, wise_ft.interpolate(initial, tuned, alpha),
                 expected)


@pytest.mark.parametrize("tuned, alpha, message", [
    ({
        "a": np.zeros(2)
    }, 1.5, r"alpha must be in \[0, 1\]"),
    ({
        "a": np.zeros(3)
    }, 0.5, r"Parameter \['a'\]: initial shape \(2,\), fine-tuned \(3,\)"),
    ({
        "b": np.zeros(2)
    }, 0.5, "differ in structure"),
])
def test_interpolate_refuses_mismatches(tuned, alpha, message):
  with pytest.raises(ValueError, match=message):
    wise_ft.interpolate({"a": np.zeros(2)}, tuned, alpha)


def test_command_interpolates_a_run_with_its_saved_initial_parameters(tmp_path,
                                                                      msmarco_triples_path,
                                                                      t5_spm_path):
  model_dir = tmp_path / "run"
  _train_smoke_in_process(f"MODEL_DIR = '{model_dir}'", f"TRIPLES_PATH = '{msmarco_triples_path}'",
                          f"T5_SPM_PATH = '{t5_spm_path}'", "trainer.train.num_steps = 3",
                          "initialization.Initialization.save_initial_params = True")
  initial = ocp.PyTreeCheckpointer().restore(model_dir / "initial" / "state")["params"]
  final = _final_params(model_dir, 3)
  assert not np.array_equal(initial["projection"]["kernel"], final["projection"]["kernel"])
  out = tmp_path / "wise_ft"
  subprocess.run([
      str(REPO / ".venv/bin/xtr-wise-ft"), f"--checkpoint={model_dir}", "--alpha=0.25",
      f"--out={out}"
  ], check=True, capture_output=True)
  mixed = encoding.load_params(str(out))
  jax.tree.map(
      lambda m, a, b: np.testing.assert_allclose(m, 0.75 * a + 0.25 * b, rtol=1e-6, atol=1e-7),
      mixed, initial, final)
  again = subprocess.run([
      str(REPO / ".venv/bin/xtr-wise-ft"), f"--checkpoint={model_dir}", "--alpha=0.25",
      f"--out={out}"
  ], capture_output=True, text=True)
  assert again.returncode != 0 and f"--out={out} exists" in again.stderr
  for inside in (model_dir / "checkpoints" / "9", model_dir / "initial" / "x", model_dir):
    refused = subprocess.run([
        str(REPO / ".venv/bin/xtr-wise-ft"), f"--checkpoint={model_dir}", "--alpha=0.25",
        f"--out={inside}"
    ], capture_output=True, text=True)  # It became the run's latest step, or its θ_0.
    assert refused.returncode == 2 and "lies in the checkpoints of" in refused.stderr
    assert not inside.exists() or inside == model_dir
  killed = tmp_path / "killed"  # All that a write killed under orbax leaves: written again.
  (killed / "state.orbax-checkpoint-tmp-1").mkdir(parents=True)
  subprocess.run([
      str(REPO / ".venv/bin/xtr-wise-ft"), f"--checkpoint={model_dir}", "--alpha=0.25",
      f"--out={killed}"
  ], check=True, capture_output=True)
  assert encoding.fingerprint(encoding.load_params(str(killed))) == encoding.fingerprint(mixed)
  # The demo's θ_α, interpolated again once the run has trained on (it was kept as it was).
  assert wise_ft.write(str(model_dir), 0.25, str(out))
  _train_smoke_in_process(f"MODEL_DIR = '{model_dir}'", f"TRIPLES_PATH = '{msmarco_triples_path}'",
                          f"T5_SPM_PATH = '{t5_spm_path}'", "trainer.train.num_steps = 4",
                          "initialization.Initialization.save_initial_params = True")
  assert not wise_ft.write(str(model_dir), 0.25, str(out))


def test_command_says_how_to_save_the_initial_parameters(tmp_path):
  with pytest.raises(FileNotFoundError, match="save_initial_params = True"):
    wise_ft.write(str(tmp_path), 0.5, str(tmp_path / "out"))


def test_an_initial_planted_as_a_link_is_refused(tmp_path, t5_spm_path):
  """run/initial, a link to another checkpoint, was read as the run's θ_0."""
  run = tmp_path / "run"
  retrieval_setup.random_checkpoint(run, 0, t5_spm_path)
  gin.clear_config()
  (run / "initial").symlink_to(run / "checkpoints" / "1")
  with pytest.raises(io.UnsafeFileError,
                     match=f"^{re.escape(str(run / 'initial'))} is a symbolic link"):
    wise_ft.write(str(run), 0.5, str(tmp_path / "out"))
  assert not (tmp_path / "out").exists()
