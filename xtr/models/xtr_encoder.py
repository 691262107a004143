"""The XTR token encoder: backbone (T5 or BERT) -> Dense(128, no bias) -> L2-normalized tokens,
and optionally ALIGNER's unary salience of each token (`xtr.models.salience`)."""
import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from xtr.models import layer_stack
from xtr.models import salience as salience_lib

PAD_ID = 0  # Padding id of every vocabulary xtr uses (T5 and BERT).


class XTREncoder(nn.Module):
  """Encodes token ids into L2-normalized token vectors; queries and documents share it.

  Attributes:
    backbone: a module mapping (input_ids [B, L], input_mask [B, L], deterministic) to hidden
      states [B, L, H] (`xtr.models.t5.T5Encoder` or `xtr.models.bert.BertEncoder`).
    embed_dim: size D of the token vectors (128 in the paper); None keeps the backbone's hidden
      states (no projection), e.g. to score with a pretrained encoder's raw token vectors.
    salience: ALIGNER's salience gate; with one, the model has a salience head per role,
      `query_salience` and `document_salience` (Dense(1) on the token vectors, then ReLU).
  """
  backbone: nn.Module
  embed_dim: int | None = 128
  salience: salience_lib.Salience | None = None

  @nn.compact
  def __call__(self, input_ids: jnp.ndarray, deterministic: bool = True, role: str = "document"):
    """input_ids: [B, L] int32 -> (vectors [B, L, D] float32, mask [B, L] bool, salience).

    Padding positions (id 0) are masked out and their vectors are zero. `salience` is None
    without a salience gate, else the [B, L] float32 u of eq. 3 by the head of `role` ("query"
    or "document"), 0 on padding.
    """
    mask = input_ids != PAD_ID
    vectors = self.backbone(input_ids, mask, deterministic=deterministic)
    if self.embed_dim is not None:
      vectors = nn.Dense(
          self.embed_dim, use_bias=False, dtype=vectors.dtype,
          kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(),
                                                   ("embed", "token_vector")),
          name="projection")(vectors)
    vectors = vectors.astype(jnp.float32)
    norm = jnp.linalg.norm(vectors, axis=-1, keepdims=True)
    vectors = vectors / jnp.maximum(norm, 1e-6) * mask[..., None]
    if self.salience is None:
      return vectors, mask, None
    heads = {
        name:
            nn.Dense(
                1,
                kernel_init=nn.with_logical_partitioning(nn.initializers.lecun_normal(),
                                                         ("token_vector", "salience")),
                # Every token starts salient (u ≈ 1): training begins from plain sparse alignment.
                bias_init=nn.with_logical_partitioning(nn.initializers.ones, ("salience",)),
                name=f"{name}_salience") for name in salience_lib.ROLES
    }
    if self.is_initializing():  # Both heads get parameters, whichever role initializes.
      for head in heads.values():
        head(vectors)
    s = nn.relu(heads[role](vectors)[..., 0])
    return vectors, mask, self.salience.gate(s, mask, role)


def in_layout(model: XTREncoder, params: Any) -> Any:
  """`model`'s params (either layout of the backbone's layers: from Hugging Face weights, a
  released checkpoint or a run with the other `scan_layers`) in the layout of its backbone."""
  if "backbone" not in params:
    return params
  return {
      **params, "backbone":
          layer_stack.in_layout(params["backbone"], model.backbone.config.scan_layers)
  }


def check_vocabulary(model: XTREncoder, tokenizer: Any) -> None:
  """Refuses a tokenizer (`xtr.text.tokenization`) whose ids reach past the model's embedding
  table: they would read outside it (NaN token vectors at inference, no error), naming the
  vocabulary file and both sizes."""
  rows = model.backbone.config.vocab_size
  if tokenizer.size > rows:
    raise ValueError(f"The vocabulary {tokenizer.path} has {tokenizer.size:,} tokens, more than "
                     f"the {rows:,} rows of the model's embedding table (vocab_size): ids from "
                     f"{rows:,} on have no embedding. Use the model's own vocabulary (check its "
                     "gin binding).")


def with_scan_layers(model: XTREncoder, scan_layers: bool) -> XTREncoder:
  """`model` with its backbone's layers scanned or not (the same parameters, laid out as
  `in_layout` lays them)."""
  config = dataclasses.replace(model.backbone.config, scan_layers=scan_layers)
  return model.clone(backbone=model.backbone.clone(config=config))


def pca_projection(model: XTREncoder, backbone_params: Any, token_ids: list[np.ndarray],
                   sharding: jax.sharding.Sharding | None = None) -> np.ndarray:
  """A projection kernel [H, D] that keeps the most of the backbone's token geometry.

  The kernel's columns are the top-D eigenvectors of the second moment HᵀH [H, H] of the
  backbone's token vectors H on `token_ids` (arrays [B, L] of ids), i.e. the top-D right singular
  vectors of H: the D-dimensional subspace that best preserves their dot products. Fine-tuning
  then starts from the pretrained MaxSim instead of a random 128-d projection. HᵀH is summed
  batch by batch on the devices (each batch placed with `sharding`, e.g. split over `data`), so H
  itself is never gathered.
  """

  @jax.jit
  def second_moment(ids):  # [B, L] -> ([H, H] float32, valid tokens)
    mask = ids != PAD_ID
    states = model.backbone.apply({"params": backbone_params}, ids, mask, deterministic=True)
    states = jnp.where(mask[..., None], states.astype(jnp.float32), 0.0)
    return jnp.einsum("blh,blk->hk", states, states), jnp.sum(mask)

  moments = [second_moment(jax.device_put(ids, sharding)) for ids in token_ids]
  moment = np.sum([np.asarray(m, np.float64) for m, _ in moments], axis=0)
  tokens = sum(int(n) for _, n in moments)
  if model.embed_dim is None or model.embed_dim > min(tokens, moment.shape[0]):
    raise ValueError(f"A PCA projection to embed_dim={model.embed_dim} needs at most the "
                     f"backbone's hidden size and at least as many tokens; got {tokens} tokens "
                     f"of size {moment.shape[0]}.")
  _, eigenvectors = np.linalg.eigh(moment)  # Ascending eigenvalues.
  return eigenvectors[:, ::-1][:, :model.embed_dim].astype(np.float32)
