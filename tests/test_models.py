"""XTREncoder's PCA projection init against a naive eigendecomposition."""
import jax
import numpy as np

from xtr.models import t5
from xtr.models import xtr_encoder

TINY = t5.T5Config(vocab_size=512, emb_dim=32, num_heads=4, num_layers=2, head_dim=8, mlp_dim=64)


def _ids(rng, batch, length):
  tokens = rng.integers(1, TINY.vocab_size, size=(batch, length))
  lengths = rng.integers(2, length + 1, size=batch)
  return np.where(np.arange(length) < lengths[:, None], tokens, 0).astype(np.int32)


def _setup(embed_dim):
  model = xtr_encoder.XTREncoder(backbone=t5.T5Encoder(TINY), embed_dim=embed_dim)
  params = jax.tree.map(
      np.asarray,
      model.init(jax.random.key(0), _ids(np.random.default_rng(0), 2, 8))["params"])
  return model, params


def test_pca_projection_spans_the_top_eigenvectors_of_the_token_second_moment():
  model, params = _setup(embed_dim=8)
  rng = np.random.default_rng(1)
  token_ids = [_ids(rng, 6, 10), _ids(rng, 4, 16)]
  kernel = xtr_encoder.pca_projection(model, params["backbone"], token_ids)
  assert kernel.shape == (TINY.emb_dim, 8)
  # Reference: the backbone run token by token-sequence, padding dropped, then eigh of H^T H.
  hidden = []
  for ids in token_ids:
    for row in ids:
      row = row[row != 0][None]
      hidden.append(
          np.asarray(
              model.backbone.apply({"params": params["backbone"]}, row, row != 0,
                                   deterministic=True))[0])
  hidden = np.concatenate(hidden)
  _, eigenvectors = np.linalg.eigh(hidden.T @ hidden)
  top = eigenvectors[:, ::-1][:, :8]
  np.testing.assert_allclose(np.abs(kernel.T @ top), np.eye(8), atol=2e-3)


def test_full_rank_pca_projection_keeps_the_backbone_cosines():
  """With D = H the kernel is a rotation: the encoder's token vectors keep the raw cosines."""
  model, params = _setup(embed_dim=TINY.emb_dim)
  ids = _ids(np.random.default_rng(2), 8, 12)
  params["projection"]["kernel"] = xtr_encoder.pca_projection(model, params["backbone"], [ids])
  vectors, mask, salience = model.apply({"params": params}, ids)
  assert salience is None
  raw = np.asarray(model.backbone.apply({"params": params["backbone"]}, ids, mask))
  raw = raw / np.linalg.norm(raw, axis=-1, keepdims=True)
  vectors, mask = np.asarray(vectors), np.asarray(mask)
  np.testing.assert_allclose(vectors[mask] @ vectors[mask].T, raw[mask] @ raw[mask].T, atol=1e-5)
