"""Tests for xtr/cli/demo.py's evaluation sets (the demo itself is `make demo`)."""
import pytest

from xtr.cli import demo


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
