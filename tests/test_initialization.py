"""Tests for xtr/training/initialization.py: what a run starts from is refused early when it cannot
be built (the PCA and the pretrained weights themselves are tested in test_trainer.py)."""
import pytest

from xtr.training import initialization


@pytest.mark.parametrize("fields, message", [
    (dict(projection_init="pca"), r"projection_init='pca' needs a pretrained_backbone"),
    (dict(projection_init="svd", pretrained_backbone=dict), r"projection_init='svd': expected"),
    (dict(save_initial_params="yes"), r"save_initial_params = 'yes': expected bool"),
])
def test_refuses_what_cannot_start_a_run(fields, message):
  with pytest.raises(ValueError, match=message):
    initialization.Initialization(**fields)


def test_random_init_has_no_pretrained_params():
  assert initialization.Initialization().pretrained(model=None, first_batches=None, mesh=None) == {}
