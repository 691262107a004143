"""The query/document encoder: batch rows bucketed to powers of two, equal to one batch."""
import gin
import jax
import numpy as np

from tests import retrieval_setup
from xtr import cli
from xtr.models import encoding

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
