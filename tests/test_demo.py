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
