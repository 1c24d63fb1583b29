"""The options of ``attn-dropout`` and ``scores-dropout`` (see :mod:`attendout.methods.dropout`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import MethodConfig, check_probability, layers_field

__all__ = ["AttnDropoutConfig", "ScoresDropoutConfig"]


@dataclass
class AttnDropoutConfig(MethodConfig):
    name = "attn-dropout"
    summary = "vanilla Bernoulli dropout on the attention weights, in place of the model's own (001 §7.1)"
    model_dropout = "replaces"

    p: float = field(default=0.2, metadata={"help": "drop probability of each attention weight"})
    rescale: bool = field(
        default=True, metadata={"help": "rescale kept weights by 1/(1-p), as standard dropout"}
    )
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self.name, "p", self.p)


@dataclass
class ScoresDropoutConfig(MethodConfig):
    name = "scores-dropout"
    summary = (
        "Bernoulli dropout on the attention scores (-inf before softmax, eq. 3), on top of the model's own"
    )

    p: float = field(default=0.1, metadata={"help": "drop probability of each attention score"})
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self.name, "p", self.p, allow_one=True)
