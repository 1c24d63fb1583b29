"""The options of ``layerdrop`` and ``attn-layerdrop`` (see :mod:`attendout.methods.layerdrop`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import MethodConfig, check_probability, layers_field

__all__ = ["AttnLayerDropConfig", "LayerDropConfig"]


@dataclass
class LayerDropConfig(MethodConfig):
    name = "layerdrop"
    summary = "skip whole blocks (layers) with probability p in training (LayerDrop, Fan et al. 2019)"
    unused_parameters = "a skipped block's weights get no gradient in that step"

    p: float = field(default=0.2, metadata={"help": "probability of skipping each block, per batch"})
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self.name, "p", self.p, allow_one=True)


@dataclass
class AttnLayerDropConfig(MethodConfig):
    name = "attn-layerdrop"
    summary = "skip a layer's attention with probability p: uniform attention by eq. 4 (001 §7.1)"
    unused_parameters = "a skipped layer's query and key projections get no gradient in that step"

    p: float = field(default=0.2, metadata={"help": "probability of skipping each layer's attention"})
    per_sample: bool = field(default=False, metadata={"help": "decide per example instead of per batch"})
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self.name, "p", self.p, allow_one=True)
