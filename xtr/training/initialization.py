"""Where a training run's parameters start: the model's random init, or pretrained weights.

gin binds an `Initialization` to `trainer.train.initialization`:

  trainer.train.initialization = @initialization.Initialization()
  initialization.Initialization:
    pretrained_backbone = @hf_weights.load_bert_backbone
    projection_init = 'pca'
"""
from collections.abc import Callable
from collections.abc import Iterator
import dataclasses
import itertools
from typing import Any

import flax.linen as nn
import gin
from jax.sharding import Mesh
import numpy as np

from xtr import typecheck
from xtr.models import layer_stack
from xtr.models import xtr_encoder
from xtr.training import partitioning

PCA_BATCHES = 4  # Training batches whose token vectors give the "pca" projection init.
PROJECTION_INITS = ("random", "pca")


@gin.configurable
@dataclasses.dataclass(frozen=True, kw_only=True)
class Initialization:
  """The parameters a new run starts from (a resumed run takes all of them from its checkpoint).

  Attributes:
    pretrained_backbone: returns backbone params (e.g. `xtr.models.hf_weights.load_t5_backbone`),
      in either layout of the layers (`xtr.models.layer_stack`); None: the model's random init.
    projection_init: "random" (the model's initializer) or "pca": the projection starts as the
      top principal directions of the pretrained backbone's token vectors on the first training
      examples (`xtr_encoder.pca_projection`), which keeps the pretrained MaxSim geometry.
    projection_sample_task: the task or mixture whose first batches give the "pca" projection
      (None: the training task), e.g. a mixture of several collections for a projection that
      keeps the geometry other domains need, not only the training collection's.
    save_initial_params: write the parameters training starts from to `model_dir/initial`, for
      WiSE-FT (`xtr.training.wise_ft`).
  """
  pretrained_backbone: Callable[[], Any] | None = None
  projection_init: str = "random"
  projection_sample_task: str | None = None
  save_initial_params: bool = False

  def __post_init__(self):
    typecheck.arguments(Initialization.__init__, dataclasses.asdict(self))
    if self.projection_init not in PROJECTION_INITS:
      raise ValueError(f"initialization.Initialization.projection_init={self.projection_init!r}: "
                       f"expected one of {PROJECTION_INITS}.")
    if self.projection_init == "pca" and self.pretrained_backbone is None:
      raise ValueError("initialization.Initialization.projection_init='pca' needs a "
                       "pretrained_backbone.")

  def backbone(self, model: nn.Module) -> Any:
    """The pretrained backbone params, laid out as `model`'s layers are."""
    return layer_stack.in_layout(self.pretrained_backbone(), model.backbone.config.scan_layers)

  def pretrained(self, model: nn.Module, first_batches: Callable[[str | None], Iterator[dict]],
                 mesh: Mesh) -> dict[str, Any]:
    """The parameter subtrees that replace `model`'s random init: {"backbone", "projection"} or
    fewer. `first_batches(task or None)` iterates a task's (None: the training task's) batches
    {"query_tokens" [B, Lq], "doc_tokens" [B, K, Ld]}; the PCA runs on batches split over the
    mesh's `data` axis."""
    if self.pretrained_backbone is None:
      return {}
    pretrained = {"backbone": self.backbone(model)}
    if self.projection_init == "pca":
      batches = itertools.islice(first_batches(self.projection_sample_task), PCA_BATCHES)
      token_ids = [
          ids for batch in batches
          for ids in (batch["query_tokens"],
                      np.reshape(batch["doc_tokens"], (-1, batch["doc_tokens"].shape[-1])))
      ]
      kernel = xtr_encoder.pca_projection(model, pretrained["backbone"], token_ids,
                                          partitioning.batch_sharding(mesh))
      pretrained["projection"] = {"kernel": kernel}
    return pretrained
