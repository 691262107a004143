"""BERT encoder (e.g. all-MiniLM-L6-v2) in Flax linen, matching transformers' `BertModel`.

Post-norm Transformer encoder: word + absolute position + token type (always 0) embeddings and a
layer norm, then layers of x = norm(x + attention(x)), x = norm(x + mlp(x)), with biases on every
projection, 1/sqrt(D) attention scaling and an exact (erf) GELU MLP.
Shapes: B batch, L length, E hidden_size, H num_heads, D head_dim = E / H, F intermediate_size.
"""
import dataclasses
import functools
import math

import flax.linen as nn
import gin
import jax
import jax.numpy as jnp

from xtr.models import attention
from xtr.models import layer_stack

_MASK_BIAS = -1e10  # Attention logit bias for padded keys.
_INIT = nn.initializers.normal(0.02)  # BERT's initializer_range.


@gin.configurable
@dataclasses.dataclass(frozen=True)
class BertConfig(layer_stack.LayersConfig):
  """Encoder hyper-parameters; the defaults are all-MiniLM-L6-v2's (uncased WordPiece vocab).

  dropout_rate, dtype, scan_layers, remat_policy: `layer_stack.LayersConfig`.
  """
  vocab_size: int = 30522
  hidden_size: int = 384
  num_layers: int = 6
  num_heads: int = 12
  intermediate_size: int = 1536
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  layer_norm_eps: float = 1e-12


def _dense(features: int, axes: tuple[str, str], dtype: jax.typing.DTypeLike,
           name: str) -> nn.Dense:
  """Dense layer with float32 kernel [in, features] and bias [features], named by `axes`."""
  return nn.Dense(features, dtype=dtype, param_dtype=jnp.float32,
                  kernel_init=nn.with_logical_partitioning(_INIT, axes),
                  bias_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                                         axes[1:]), name=name)


def _layer_norm(config: BertConfig, name: str) -> nn.LayerNorm:
  """Layer norm over E with float32 scale and bias (statistics in float32)."""
  return nn.LayerNorm(epsilon=config.layer_norm_eps, dtype=config.dtype, param_dtype=jnp.float32,
                      use_fast_variance=False,
                      scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
                      bias_init=nn.with_logical_partitioning(nn.initializers.zeros,
                                                             ("embed",)), name=name)


def _embed(num_embeddings: int, axis: str, config: BertConfig, name: str) -> nn.Embed:
  """Embedding table [num_embeddings, E] with logical axes (axis, "embed")."""
  return nn.Embed(num_embeddings, config.hidden_size, dtype=config.dtype, param_dtype=jnp.float32,
                  embedding_init=nn.with_logical_partitioning(_INIT, (axis, "embed")), name=name)


class Embeddings(nn.Module):
  """Sum of word, position and token type 0 embeddings, then a layer norm."""
  config: BertConfig

  @nn.compact
  def __call__(self, input_ids: jax.Array) -> jax.Array:
    """input_ids: [B, L] int32 -> [B, L, E]."""
    cfg = self.config
    length = input_ids.shape[1]
    if length > cfg.max_position_embeddings:
      raise ValueError(f"Sequence length {length} exceeds max_position_embeddings "
                       f"{cfg.max_position_embeddings}.")
    words = _embed(cfg.vocab_size, "vocab", cfg, "word_embeddings")(input_ids)
    positions = _embed(cfg.max_position_embeddings, "position", cfg,
                       "position_embeddings")(jnp.arange(length))
    token_types = _embed(cfg.type_vocab_size, "token_type", cfg, "token_type_embeddings")(jnp.zeros(
        (), jnp.int32))
    return _layer_norm(cfg, "layer_norm")(words + positions[None] + token_types)


class SelfAttention(nn.Module):
  """Multi-head self-attention with biased projections and 1/sqrt(D) logit scaling."""
  config: BertConfig

  @nn.compact
  def __call__(self, x: jax.Array, mask_bias: jax.Array, deterministic: bool) -> jax.Array:
    """x: [B, L, E]; mask_bias: [B, 1, 1, L] float32 -> [B, L, E]."""
    cfg = self.config
    head_dim = cfg.hidden_size // cfg.num_heads
    heads = lambda y: y.reshape(*y.shape[:-1], cfg.num_heads, head_dim)  # [B, L, H, D]
    q, k, v = (heads(_dense(cfg.hidden_size, ("embed", "joined_kv"), cfg.dtype, name)(x))
               for name in ("query", "key", "value"))
    dropout = functools.partial(nn.Dropout(cfg.dropout_rate), deterministic=deterministic)
    out = attention.dot_product_attention(q / math.sqrt(head_dim), k, v, mask_bias, dropout)
    return _dense(cfg.hidden_size, ("joined_kv", "embed"), cfg.dtype, "out")(out)


class Mlp(nn.Module):
  """Dense to F, exact GELU, dense back to E."""
  config: BertConfig

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [B, L, E] -> [B, L, E] (hidden [B, L, F])."""
    cfg = self.config
    h = _dense(cfg.intermediate_size, ("embed", "mlp"), cfg.dtype, "wi")(x)
    return _dense(cfg.hidden_size, ("mlp", "embed"), cfg.dtype, "wo")(nn.gelu(h, approximate=False))


class EncoderLayer(nn.Module):
  """Post-norm residual blocks: norm(x + attention(x)), then norm(x + mlp(x))."""
  config: BertConfig

  @nn.compact
  def __call__(self, x: jax.Array, mask_bias: jax.Array, deterministic: bool) -> jax.Array:
    """x: [B, L, E]; mask_bias: [B, 1, 1, L] float32 -> [B, L, E]."""
    cfg = self.config
    dropout = functools.partial(nn.Dropout(cfg.dropout_rate), deterministic=deterministic)
    y = dropout(SelfAttention(cfg, name="attention")(x, mask_bias, deterministic))
    x = _layer_norm(cfg, "attention_layer_norm")(x + y)
    x = _layer_norm(cfg, "mlp_layer_norm")(x + dropout(Mlp(cfg, name="mlp")(x)))
    return nn.with_logical_constraint(x, ("batch", "length", "embed"))


class BertEncoder(nn.Module):
  """Embeddings and `num_layers` post-norm encoder layers (no pooler)."""
  config: BertConfig

  @nn.compact
  def __call__(self, input_ids: jax.Array, input_mask: jax.Array,
               deterministic: bool = True) -> jax.Array:
    """input_ids: [B, L] int32; input_mask: [B, L] bool (True = real token).

    Returns last hidden states [B, L, E] in config.dtype. Padded positions attend to the real
    tokens like any other position (as in `BertModel`); no position attends to padding.
    """
    cfg = self.config
    x = Embeddings(cfg, name="embeddings")(input_ids)
    x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
    x = nn.with_logical_constraint(x, ("batch", "length", "embed"))
    mask_bias = jnp.where(input_mask[:, None, None, :], 0.0, _MASK_BIAS).astype(jnp.float32)
    return layer_stack.apply_layers(lambda name: EncoderLayer(cfg, name=name), x, mask_bias,
                                    num_layers=cfg.num_layers, scan_layers=cfg.scan_layers,
                                    remat_policy=cfg.remat_policy, deterministic=deterministic)
