"""The encoder layers of a backbone: a Python loop or one `nn.scan`, rematerialized or not.

Unscanned, layer i's parameters are the subtree `layers_i` (the layout of Hugging Face
checkpoints and of existing xtr checkpoints); scanned, they are stacked along a leading axis
(logical name "layers", replicated) in one subtree `layers`, and XLA compiles one layer instead
of `num_layers`. `stack` and `unstack` convert between the two layouts.

Remat policies (what the backward pass keeps from the forward pass of each layer):
  "none": everything (no rematerialization).
  "full": only the layer's input; the whole layer is recomputed.
  "dots_saveable": the results of matrix multiplications; the elementwise ops are recomputed.
  "dots_with_no_batch_dims_saveable": those of matmuls without batch dimensions (the
    projections, not attention's q·k and weights·v).
"""
import dataclasses
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

LAYERS = "layers"  # The scanned subtree, and the logical name of its leading axis.
_POLICIES = {
    "full": None,  # jax.checkpoint without a policy saves nothing.
    "dots_saveable": jax.checkpoint_policies.dots_saveable,
    "dots_with_no_batch_dims_saveable": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
REMAT_POLICIES = ("none", *_POLICIES)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayersConfig:
  """What every backbone's config (`t5.T5Config`, `bert.BertConfig`) has: dropout, the
  activations' dtype, and how the layers run.

  Attributes:
    scan_layers: the layers under one `nn.scan` (else a Python loop).
    remat_policy: what the backward pass of each layer keeps (module docstring).
  """
  dropout_rate: float = 0.0
  dtype: jax.typing.DTypeLike = jnp.float32
  scan_layers: bool = False
  remat_policy: str = "none"

  def __post_init__(self):
    if self.remat_policy not in REMAT_POLICIES:
      raise ValueError(f"remat_policy={self.remat_policy!r}: expected one of {REMAT_POLICIES}.")


def apply_layers(layer: Callable[[str],
                                 nn.Module], x: jax.Array, *broadcast: jax.Array, num_layers: int,
                 scan_layers: bool, remat_policy: str, deterministic: bool) -> jax.Array:
  """x -> layer_{n-1}(... layer_0(x, *broadcast, deterministic) ...).

  Args:
    layer: makes the module of the given name, called as `(x, *broadcast, deterministic)`;
      inside the caller's compact method.
    x: [B, L, E] hidden states, the carry.
    broadcast: inputs every layer sees (attention biases).
  """

  def body(module, carry, *inputs):
    return module(carry, *inputs, deterministic), None

  if remat_policy != "none":
    # A scan's loop already keeps XLA from merging the recomputation into the forward pass.
    body = nn.remat(body, policy=_POLICIES[remat_policy], prevent_cse=not scan_layers)
  if not scan_layers:
    for i in range(num_layers):
      x, _ = body(layer(f"layers_{i}"), x, *broadcast)
    return x
  scanned = nn.scan(body, variable_axes={"params": 0}, split_rngs={
      "params": True,
      "dropout": True
  }, in_axes=(nn.broadcast,) * len(broadcast), length=num_layers,
                    metadata_params={nn.PARTITION_NAME: LAYERS})
  x, _ = scanned(layer(LAYERS), x, *broadcast)
  return x


def _layer_names(params: dict) -> list[str]:
  """The unscanned layers' subtree names in `params`, in layer order."""
  names = [name for name in params if name.startswith("layers_")]
  return sorted(names, key=lambda name: int(name.removeprefix("layers_")))


def stack(params: dict) -> dict:
  """Backbone params, unscanned (`layers_0` ... `layers_{n-1}`) -> scanned (`layers`: each
  leaf [n, ...]). Host (numpy) leaves stay on the host, device arrays on their devices."""
  names = _layer_names(params)
  layers = [params[name] for name in names]
  stacked = jax.tree.map(lambda *xs: (np.stack
                                      if isinstance(xs[0], np.ndarray) else jnp.stack)(xs), *layers)
  return {**{k: v for k, v in params.items() if k not in names}, LAYERS: stacked}


def unstack(params: dict) -> dict:
  """Backbone params, scanned -> unscanned (the inverse of `stack`)."""
  rest = {k: v for k, v in params.items() if k != LAYERS}
  num_layers = jax.tree.leaves(params[LAYERS])[0].shape[0]
  return rest | {
      f"layers_{i}": jax.tree.map(lambda x, i=i: x[i], params[LAYERS]) for i in range(num_layers)
  }


def in_layout(params: dict, scan_layers: bool) -> dict:
  """Backbone params in either layout -> in the scanned (True) or unscanned layout."""
  if scan_layers and _layer_names(params):
    return stack(params)
  if not scan_layers and LAYERS in params:
    return unstack(params)
  return params
