"""Numeric training bindings out of range are refused, named, before any work: before, a
temperature of 0 trained on NaN, a negative one (or learning rate) toward the reverse ranking,
k_train 0 on zero gradients, and log_every_steps 0 failed after the model was built, each run
but the last exiting 0."""
import re

import gin
import pytest

from tests.retrieval_setup import REPO
from tests.retrieval_setup import run_tool
from xtr import cli
from xtr.training import objective
from xtr.training import optimizers
from xtr.training import partitioning
from xtr.training import trainer


@pytest.mark.parametrize("name, value, expected", [
    ("temperature", 0.0, "a positive number"),
    ("temperature", -1.0, "a positive number"),
    ("temperature", float("nan"), "a positive number"),
    ("temperature", float("inf"), "a positive number"),
    ("k_train", 0, "a positive integer"),
    ("k_train", -1, "a positive integer"),
    ("l1", -0.1, "a number >= 0"),
    ("l1", float("nan"), "a number >= 0"),
    ("distillation", -0.5, "a number >= 0"),
    ("distillation", float("inf"), "a number >= 0"),
])
def test_an_objective_out_of_range_is_refused_naming_its_binding(name, value, expected):
  message = f"objective.Objective.{name} = {value!r}: expected {expected}; check its gin binding."
  with pytest.raises(ValueError, match=f"^{re.escape(message)}"):  # gin adds where it was called.
    objective.Objective(**{name: value})


@pytest.mark.parametrize("factory, name, value, expected", [
    (optimizers.warmup_constant, "learning_rate", -0.01, "a positive number"),
    (optimizers.warmup_constant, "learning_rate", 0.0, "a positive number"),
    (optimizers.warmup_constant, "learning_rate", float("nan"), "a positive number"),
    (optimizers.warmup_constant, "warmup_steps", -1, "an integer >= 0"),
    (optimizers.make_optimizer, "max_grad_norm", 0.0, "a positive number or None"),
    (optimizers.make_optimizer, "max_grad_norm", -1.0, "a positive number or None"),
    (optimizers.make_optimizer, "max_grad_norm", float("inf"), "a positive number or None"),
    (optimizers.make_optimizer, "weight_decay", -0.1, "a number >= 0"),
])
def test_an_optimizer_setting_out_of_range_is_refused_naming_its_binding(
    factory, name, value, expected):
  message = (f"optimizers.{factory.__name__}.{name} = {value!r}: expected {expected}; check its "
             "gin binding.")
  with pytest.raises(ValueError, match=f"^{re.escape(message)}"):
    factory(**{name: value})


def test_the_limits_themselves_are_accepted():
  """num_steps 0 saves the initial model (to export it); no clipping and no warmup are valid."""
  objective.Objective(k_train=1, temperature=1e-6, l1=0.0, distillation=0.0)
  optimizers.make_optimizer(schedule=optimizers.warmup_constant(1e-6, 0), max_grad_norm=None)
  trainer._check_counts(num_steps=0, log_every_steps=1, micro_batch_size=1)


@pytest.mark.parametrize("binding, message", [
    ("trainer.train.num_steps = -1", "trainer.train.num_steps = -1: expected an integer >= 0"),
    ("trainer.train.log_every_steps = 0",
     "trainer.train.log_every_steps = 0: expected an integer >= 1"),
    ("trainer.train.micro_batch_size = 0",
     "trainer.train.micro_batch_size = 0: expected an integer >= 1"),
    ("objective.Objective.temperature = 0.0",
     "objective.Objective.temperature = 0.0: expected a positive number"),
    ("objective.Objective.k_train = -1",
     "objective.Objective.k_train = -1: expected a positive integer"),
    ("optimizers.warmup_constant.learning_rate = -0.01",
     "optimizers.warmup_constant.learning_rate = -0.01: expected a positive number"),
    ("optimizers.make_optimizer.max_grad_norm = 0.0",
     "optimizers.make_optimizer.max_grad_norm = 0.0: expected a positive number or None"),
])
def test_training_refuses_a_binding_out_of_range_before_the_mesh(tmp_path, monkeypatch, t5_spm_path,
                                                                 binding, message):
  monkeypatch.setattr(partitioning, "make_mesh", lambda *a: pytest.fail("the mesh was built"))
  gin.clear_config()
  gin.add_config_file_search_path(str(REPO))
  gin.parse_config_files_and_bindings(
      [str(REPO / "gin/runs/smoke.gin")],
      [f"MODEL_DIR = '{tmp_path / 'model'}'", f"T5_SPM_PATH = '{t5_spm_path}'", binding])
  try:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}; check its gin binding."):
      trainer.train()
  finally:
    gin.clear_config()
  assert not (tmp_path / "model").exists()


def test_xtr_train_refuses_a_zero_temperature_in_one_line_writing_nothing(tmp_path, t5_spm_path):
  """Before: NaN losses from the first step to the last, checkpoints of them, exit status 0."""
  model_dir = tmp_path / "model"
  process = run_tool("xtr.cli.train", "--gin_file=gin/runs/smoke.gin",
                     f"--gin_bindings=MODEL_DIR = '{model_dir}'",
                     f"--gin_bindings=T5_SPM_PATH = '{t5_spm_path}'",
                     "--gin_bindings=objective.Objective.temperature = 0.0", timeout=120)
  assert process.returncode == cli.REFUSED, process.stderr[-2000:]
  assert process.stderr == ("xtr-tool: objective.Objective.temperature = 0.0: expected a positive "
                            "number; check its gin binding.\n")
  assert not model_dir.exists()
