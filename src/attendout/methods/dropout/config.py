"""The options of ``attn-dropout`` and ``scores-dropout`` (see :mod:`attendout.methods.dropout`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...typecheck import option
from ..config import PROBABILITY, PROBABILITY_OR_ONE, MethodConfig, layers_field


@dataclass
class AttnDropoutConfig(MethodConfig):
    summary = "vanilla Bernoulli dropout on the attention weights, in place of the model's own (001 §7.1)"
    model_dropout = "replaces"

    p: float = option(0.2, "drop probability of each attention weight", PROBABILITY)
    rescale: bool = option(True, "rescale kept weights by 1/(1-p), as standard dropout")
    layers: list[int] | None = layers_field()


@dataclass
class ScoresDropoutConfig(MethodConfig):
    summary = (
        "Bernoulli dropout on the attention scores (-inf before softmax, eq. 3), on top of the model's own"
    )

    p: float = option(0.1, "drop probability of each attention score", PROBABILITY_OR_ONE)
    layers: list[int] | None = layers_field()
