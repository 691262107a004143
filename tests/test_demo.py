"""Tests for xtr/cli/demo.py's evaluation sets (the demo itself is `make demo`)."""
import json
import shutil
import types

import gin
import numpy as np
import pytest

from tests import retrieval_setup
from xtr import cli
from xtr.cli import demo
from xtr.evaluation import beir_eval
from xtr.index import files
from xtr.models import encoding
from xtr.retrieval import ranker


def test_sets_are_named_by_their_directories():
  assert demo._named_sets(["data/scifact", "../shared/data/beir/nfcorpus/"]) == {  # pylint: disable=protected-access
      "scifact": "data/scifact",
      "nfcorpus": "../shared/data/beir/nfcorpus/"
  }
  with pytest.raises(ValueError, match="are both named 'scifact'"):
    demo._named_sets(["data/scifact", "../shared/data/beir/scifact"])  # pylint: disable=protected-access


def test_wise_ft_without_initial_parameters_is_refused_before_training(tmp_path):
  with pytest.raises(ValueError,
                     match="needs initialization.Initialization.save_initial_params = True"):
    demo.run(out_dir=str(tmp_path), model_dir=str(tmp_path / "model"), data_dir="data/scifact",
             model=None, vocabulary=None, pretrained_backbone=None, wise_ft_alpha=0.5)


@pytest.mark.parametrize("alpha", [1.5, -0.1, float("nan")])
def test_a_wise_ft_alpha_outside_its_interval_is_refused_before_training(tmp_path, alpha):
  """It was refused by the interpolation, after the whole fine-tuning."""
  with pytest.raises(ValueError,
                     match=r"demo.run.wise_ft_alpha = .*: expected a number in \[0, 1\]"):
    demo.run(out_dir=str(tmp_path), model_dir=str(tmp_path / "model"), data_dir="data/scifact",
             model=None, vocabulary=None, pretrained_backbone=None, wise_ft_alpha=alpha)


@pytest.mark.parametrize("k_prime", [0, -5])
def test_a_k_prime_out_of_range_is_refused_before_training(tmp_path, k_prime):
  """It was refused after the whole fine-tuning, naming no binding."""
  with pytest.raises(ValueError, match=rf"demo.run.k_prime = {k_prime}: .*check its gin binding"):
    demo.run(out_dir=str(tmp_path), model_dir=str(tmp_path / "model"), data_dir="data/scifact",
             model=None, vocabulary=None, pretrained_backbone=None, k_prime=k_prime)


class _Started(Exception):
  """Raised where the demo's fine-tuning would start."""


def test_the_output_directory_is_made_before_training(tmp_path, monkeypatch):
  """out_dir is created before the fine-tuning (or refused, where a file is in the way), not
  found missing when the results are written, ~15 minutes of work later."""
  out_dir = tmp_path / "new" / "demo"

  def train():
    assert out_dir.is_dir()
    raise _Started

  monkeypatch.setattr(demo.trainer, "train", train)
  arguments = dict(model_dir=str(tmp_path / "model"), data_dir="data/scifact", model=None,
                   vocabulary=None, pretrained_backbone=None)
  with pytest.raises(_Started):
    demo.run(out_dir=str(out_dir), **arguments)
  (tmp_path / "file").write_text("")
  with pytest.raises(FileExistsError):
    demo.run(out_dir=str(tmp_path / "file"), **arguments)


def test_each_steps_time_is_printed_and_recorded(scifact_slice, tmp_path, monkeypatch, capsys):
  """Each step's wall-clock time, from its start to the next step's, printed when it ends and
  kept in run.json's `step_seconds` (the demo's time budget, step by step)."""
  clock = [0.0]

  def taking(seconds, result=None):

    def step(*args, **kwargs):
      del args, kwargs
      clock[0] += seconds
      return result

    return step

  data = beir_eval.load_beir(str(scifact_slice), "test")
  perfect = ranker.Results(
      [sorted(data.qrels[q].items(), key=lambda kv: -kv[1]) for q in data.query_ids],
      np.ones(len(data.query_ids)))
  monkeypatch.setattr(demo.time, "monotonic", lambda: clock[0])
  monkeypatch.setattr(demo.trainer, "train", taking(500))
  monkeypatch.setattr(demo, "_xtr", taking(300, perfect))
  monkeypatch.setattr(demo.baselines, "bm25_search", taking(2, perfect))
  monkeypatch.setattr(demo.baselines, "untuned_search",
                      taking(400, {
                          "single_vector": perfect,
                          "maxsim": perfect
                      }))
  demo.run(out_dir=str(tmp_path), model_dir=str(tmp_path / "model"), data_dir=str(scifact_slice),
           model=types.SimpleNamespace(backbone=None), vocabulary=None,
           pretrained_backbone=taking(7))
  name = scifact_slice.name
  want = {
      "fine-tune XTR from MiniLM": 507,  # the untuned backbone's weights are read in this step
      f"{name}: export the token index and search with f_XTR'": 300,
      f"{name}: BM25": 2,
      f"{name}: untuned all-MiniLM-L6-v2": 400
  }
  assert json.loads((tmp_path / "run.json").read_text())["step_seconds"] == want
  printed = capsys.readouterr().out
  for number, (title, seconds) in enumerate(want.items(), 1):
    assert f"== {number}/4 {title}\n" in printed and f"   {title}: {seconds} s\n" in printed


@pytest.mark.parametrize("finished", [True, False])
def test_an_index_of_another_step_of_the_run_is_exported_again(exported, scifact_slice, tmp_path,
                                                               t5_spm_path, capsys, finished):
  """The demo reused any index with a manifest: trained on, it searched the earlier step's index
  with the new model (0.7678 where a fresh index gave 0.7096, exit 0)."""
  index = tmp_path / "index"
  shutil.copytree(exported[1], index)
  if not finished:  # A killed export of the earlier step: its writer.json, no manifest.
    (index / files.MANIFEST).unlink()
  retrieval_setup.random_checkpoint(tmp_path / "later", 1, t5_spm_path, *cli.ENCODER_BINDINGS)
  try:
    data = beir_eval.load_beir(str(scifact_slice), "test")
    results = demo._xtr(
        str(tmp_path / "later"),
        data,
        str(index),  # pylint: disable=protected-access
        ranker.SearchConfig(k_prime=50))
  finally:
    gin.clear_config()
  later = encoding.fingerprint(encoding.load_params(str(tmp_path / "later")))
  assert files.read_json(str(index / files.MANIFEST))["fingerprint"] == later
  assert "holds the index of another step of the run: exporting it again" in capsys.readouterr().out
  assert len(results.rankings) == len(data.query_ids)
