"""The options of ``layerdrop`` and ``attn-layerdrop`` (see :mod:`attendout.methods.layerdrop`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...typecheck import option
from ..config import PROBABILITY_OR_ONE, MethodConfig, layers_field


@dataclass
class LayerDropConfig(MethodConfig):
    summary = "skip whole blocks (layers) with probability p in training (LayerDrop, Fan et al. 2019)"
    unused_parameters = "a skipped block's weights get no gradient in that step"

    p: float = option(0.2, "probability of skipping each block, per batch", PROBABILITY_OR_ONE)
    layers: list[int] | None = layers_field()


@dataclass
class AttnLayerDropConfig(MethodConfig):
    summary = "skip a layer's attention with probability p: uniform attention by eq. 4 (001 §7.1)"
    unused_parameters = "a skipped layer's query and key projections get no gradient in that step"

    p: float = option(0.2, "probability of skipping each layer's attention", PROBABILITY_OR_ONE)
    per_sample: bool = option(False, "decide per example instead of per batch")
    layers: list[int] | None = layers_field()
