"""T5 encoder (original T5, T5 v1.1, mT5) in Flax linen, with t5x parameter names and axes.

Pre-norm Transformer encoder: RMS layer norms without bias, attention without 1/sqrt(d) scaling
or biases, one bucketed relative position bias shared by all layers, ReLU or gated-GELU MLP.
Shapes: B batch, L length, E emb_dim, H num_heads, D head_dim, F mlp_dim.
"""
import dataclasses
import functools
import math
from typing import Callable

import flax.linen as nn
import gin
import jax
import jax.numpy as jnp
import numpy as np

from xtr.models import attention
from xtr.models import layer_stack

_MASK_BIAS = -1e10  # Attention logit bias for padded keys (as in t5x).

_ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": functools.partial(jax.nn.gelu, approximate=True),  # HF "gelu_new" (tanh form).
    "relu": jax.nn.relu,
    "linear": lambda x: x,
}


@gin.configurable
@dataclasses.dataclass(frozen=True)
class T5Config(layer_stack.LayersConfig):
  """Encoder hyper-parameters, named as t5x's `network.T5Config`.

  mlp_activations: ("gelu", "linear") is the gated-GELU MLP of T5 v1.1 and mT5 (wi_0, wi_1);
  ("relu",) is the original T5 MLP (wi).
  dropout_rate, dtype, scan_layers, remat_policy: `layer_stack.LayersConfig`.
  """
  vocab_size: int
  emb_dim: int
  num_heads: int
  num_layers: int
  head_dim: int
  mlp_dim: int
  mlp_activations: tuple[str, ...] = ("gelu", "linear")
  relative_attention_num_buckets: int = 32
  relative_attention_max_distance: int = 128
  layer_norm_epsilon: float = 1e-6


def _dense(features: int, axes: tuple[str, str], init: nn.initializers.Initializer,
           dtype: jax.typing.DTypeLike, name: str) -> nn.Dense:
  """Bias-free dense layer with float32 kernel [in, features] named by logical `axes`."""
  return nn.Dense(features, use_bias=False, dtype=dtype, param_dtype=jnp.float32,
                  kernel_init=nn.with_logical_partitioning(init, axes), name=name)


def relative_position_buckets(query_length: int, key_length: int, num_buckets: int,
                              max_distance: int) -> np.ndarray:
  """Bidirectional T5 buckets of (key position - query position) -> [query_length, key_length].

  Half of the buckets are for keys after the query; within each half, distances below
  num_buckets // 4 get their own bucket and larger ones share log-spaced buckets up to max_distance.
  Static shapes, so this runs in numpy at trace time (float32 like mesh-tf and transformers).
  """
  relative_position = np.arange(key_length)[None, :] - np.arange(query_length)[:, None]
  num_buckets //= 2
  max_exact = num_buckets // 2
  distance = np.abs(relative_position)
  log_ratio = (np.log(np.maximum(distance, max_exact).astype(np.float32) / np.float32(max_exact)) /
               np.float32(math.log(max_distance / max_exact)))
  log_bucket = max_exact + (log_ratio * np.float32(num_buckets - max_exact)).astype(np.int32)
  log_bucket = np.minimum(log_bucket, num_buckets - 1)
  buckets = (relative_position > 0) * num_buckets + np.where(distance < max_exact, distance,
                                                             log_bucket)
  return buckets.astype(np.int32)


class RmsNorm(nn.Module):
  """T5 layer norm: x / sqrt(mean(x^2) + eps) * scale; no mean subtraction, no bias."""
  epsilon: float
  dtype: jax.typing.DTypeLike

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    """x: [..., E] -> [..., E] in self.dtype (computed in float32)."""
    scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
                       (x.shape[-1],), jnp.float32)
    x = x.astype(jnp.float32)
    x = x * jax.lax.rsqrt(jnp.mean(jnp.square(x), axis=-1, keepdims=True) + self.epsilon)
    return (x * scale).astype(self.dtype)


class RelativePositionBias(nn.Module):
  """Learned per-head logit bias for each relative position bucket."""
  config: T5Config

  @nn.compact
  def __call__(self, length: int) -> jax.Array:
    """Returns the self-attention bias [1, H, L, L] float32."""
    cfg = self.config
    table = self.param(
        "rel_embedding",
        nn.with_logical_partitioning(nn.initializers.variance_scaling(1.0, "fan_avg", "uniform"),
                                     ("relpos_buckets", "heads")),
        (cfg.relative_attention_num_buckets, cfg.num_heads), jnp.float32)
    buckets = relative_position_buckets(length, length, cfg.relative_attention_num_buckets,
                                        cfg.relative_attention_max_distance)
    return jnp.transpose(table[buckets], (2, 0, 1))[None]


class SelfAttention(nn.Module):
  """Multi-head self-attention without biases and without 1/sqrt(D) logit scaling."""
  config: T5Config

  @nn.compact
  def __call__(self, x: jax.Array, attention_bias: jax.Array, deterministic: bool) -> jax.Array:
    """x: [B, L, E]; attention_bias: [B, H, L, L] float32 -> [B, L, E]."""
    cfg = self.config
    init = nn.initializers.variance_scaling(1.0, "fan_in", "normal")
    # t5x folds the missing 1/sqrt(D) logit scaling into the query initialisation.
    query_init = nn.initializers.variance_scaling(1.0 / cfg.head_dim, "fan_in", "normal")
    inner = cfg.num_heads * cfg.head_dim
    heads = lambda y: y.reshape(*y.shape[:-1], cfg.num_heads, cfg.head_dim)  # [B, L, H, D]
    q = heads(_dense(inner, ("embed", "joined_kv"), query_init, cfg.dtype, "query")(x))
    k = heads(_dense(inner, ("embed", "joined_kv"), init, cfg.dtype, "key")(x))
    v = heads(_dense(inner, ("embed", "joined_kv"), init, cfg.dtype, "value")(x))
    dropout = functools.partial(nn.Dropout(cfg.dropout_rate), deterministic=deterministic)
    out = attention.dot_product_attention(q, k, v, attention_bias, dropout)
    return _dense(cfg.emb_dim, ("joined_kv", "embed"), init, cfg.dtype, "out")(out)


class Mlp(nn.Module):
  """Product of activated input projections (wi_i, or wi if one), then the output projection."""
  config: T5Config

  @nn.compact
  def __call__(self, x: jax.Array, deterministic: bool) -> jax.Array:
    """x: [B, L, E] -> [B, L, E] (hidden [B, L, F])."""
    cfg = self.config
    init = nn.initializers.variance_scaling(1.0, "fan_in", "truncated_normal")
    gated = len(cfg.mlp_activations) > 1
    h = math.prod(_ACTIVATIONS[act](_dense(cfg.mlp_dim, (
        "embed", "mlp"), init, cfg.dtype, f"wi_{i}" if gated else "wi")(x))
                  for i, act in enumerate(cfg.mlp_activations))
    h = nn.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
    return _dense(cfg.emb_dim, ("mlp", "embed"), init, cfg.dtype, "wo")(h)


class EncoderLayer(nn.Module):
  """Pre-norm residual blocks: x + attention(norm(x)), then x + mlp(norm(x))."""
  config: T5Config

  @nn.compact
  def __call__(self, x: jax.Array, attention_bias: jax.Array, deterministic: bool) -> jax.Array:
    """x: [B, L, E]; attention_bias: [B, H, L, L] float32 -> [B, L, E]."""
    cfg = self.config
    dropout = functools.partial(nn.Dropout(cfg.dropout_rate), deterministic=deterministic)
    y = RmsNorm(cfg.layer_norm_epsilon, cfg.dtype, name="pre_attention_layer_norm")(x)
    x = x + dropout(SelfAttention(cfg, name="attention")(y, attention_bias, deterministic))
    y = RmsNorm(cfg.layer_norm_epsilon, cfg.dtype, name="pre_mlp_layer_norm")(x)
    x = x + dropout(Mlp(cfg, name="mlp")(y, deterministic))
    return nn.with_logical_constraint(x, ("batch", "length", "embed"))


class T5Encoder(nn.Module):
  """Token embedding, `num_layers` encoder layers and a final RMS norm."""
  config: T5Config

  @nn.compact
  def __call__(self, input_ids: jax.Array, input_mask: jax.Array,
               deterministic: bool = True) -> jax.Array:
    """input_ids: [B, L] int32; input_mask: [B, L] bool (True = real token).

    Returns last hidden states [B, L, E] in config.dtype.
    """
    cfg = self.config
    dropout = functools.partial(nn.Dropout(cfg.dropout_rate), deterministic=deterministic)
    x = nn.Embed(
        cfg.vocab_size, cfg.emb_dim, dtype=cfg.dtype, param_dtype=jnp.float32,
        embedding_init=nn.with_logical_partitioning(nn.initializers.normal(1.0),
                                                    ("vocab", "embed")),
        name="token_embedder")(input_ids)
    x = nn.with_logical_constraint(dropout(x), ("batch", "length", "embed"))
    position_bias = RelativePositionBias(cfg, name="relpos_bias")(input_ids.shape[1])
    mask_bias = jnp.where(input_mask[:, None, None, :], 0.0, _MASK_BIAS).astype(jnp.float32)
    attention_bias = position_bias + mask_bias  # [B, H, L, L]
    x = layer_stack.apply_layers(lambda name: EncoderLayer(cfg, name=name), x, attention_bias,
                                 num_layers=cfg.num_layers, scan_layers=cfg.scan_layers,
                                 remat_policy=cfg.remat_policy, deterministic=deterministic)
    return dropout(RmsNorm(cfg.layer_norm_epsilon, cfg.dtype, name="encoder_norm")(x))
