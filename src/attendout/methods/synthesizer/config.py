"""The ``synthesizer`` method's config: which variant, in which layers, how initialised."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ...core.limits import LimitError
from ..config import MethodConfig, layers_field
from .variants import (
    CROSS_ATTENTION_REFUSED,
    MIXINGS,
    OFFICIAL_RANK,
    RANDOM_INITS,
    RANDOM_VARIANTS,
    VARIANTS,
    base_variant,
    is_mixture,
)

__all__ = ["INITS", "SynthesizerConfig"]

INITS = ("exact", "paper")
FACTORIZED_VARIANTS = ("factorized-dense", "factorized-random")


@dataclass
class SynthesizerConfig(MethodConfig):
    """Synthesizer attention (Tay et al., "Synthesizer: Rethinking Self-Attention in Transformer Models").

    Acts on self-attention only: an encoder's, a decoder's (causally: a synthesized row never reaches a
    later position), and both stacks of an encoder-decoder (T5, whose relative positions need ``l_max``).
    Never on cross-attention: ``cross_attention=True``, or layers beyond the self-attention layers, raise
    a ValueError naming the paper's caveat (:data:`CROSS_ATTENTION_REFUSED`).

    An architectural change, not a regulariser: it acts in training and in eval mode, adds
    parameters, and a model trained with it is saved in attendout's synthesized form
    (:func:`attendout.save_synthesized`), which plain ``transformers`` refuses to load.
    """

    unused_parameters = "variants without '+dot' never use the query and key projections"
    architectural = True

    name = "synthesizer"
    summary = "Synthesizer attention (dense/random/factorized, or mixed with dot-product) (paper 003)"

    variant: str = field(
        default="random+dot",
        metadata={
            "help": f"one of {', '.join(VARIANTS)}; '+dot' mixes with the model's dot-product attention"
        },
    )
    layers: list[int] | None = layers_field()
    l_max: int | None = field(
        default=None,
        metadata={
            "help": "longest sequence the synthesized attention accepts (default: the run's --max-length; "
            "for attendout.synthesize, the model's max_position_embeddings); longer inputs raise an error"
        },
    )
    rank: int = field(
        default=OFFICIAL_RANK,
        metadata={
            "help": "k of factorized-random (R1 R2^T, rank k; 16 as the official code's factorized_dim) "
            "and a of factorized-dense"
        },
    )
    fixed: bool = field(
        default=False, metadata={"help": "random variants: keep the random matrix fixed (not trained)"}
    )
    shared_heads: bool = field(
        default=False, metadata={"help": "one synthesizer for all heads of a layer (default: one per head)"}
    )
    mixing: str | None = field(
        default=None,
        metadata={
            "help": "'+dot' variants only: 'layer' (default, the official code: (1-a) dot + a synth with one "
            "a = sigmoid(w) per layer, starting at 1/2), 'head' (one raw weight per head, attendout's form "
            "before issue 50) or 'sum' (dot + synth, the official plain-sum modes)"
        },
    )
    random_init: str | None = field(
        default=None,
        metadata={
            "help": "random variants only: 'glorot' (default, the official code's glorot_uniform over its "
            "variable's shape: attention starts close to uniform) or 'normal' (R from N(0, 1), attendout's "
            "form before issue 50)"
        },
    )
    init: str | None = field(
        default=None,
        metadata={
            "help": "'exact' (mixing 'head': weight 0, so step 0 computes what the pretrained model did) "
            "or 'paper' (weight 1/2); default: exact for mixing 'head', paper otherwise"
        },
    )
    cross_attention: bool = field(
        default=False,
        metadata={
            "help": "always off: synthesize an encoder-decoder's cross-attention too. Refused, as paper 003's "
            "caveat: its findings hold for self-attention, not for attention across sequences"
        },
    )
    synthesizer_lr: float = field(
        default=1e-3,
        metadata={
            "help": "peak learning rate of the new synthesizer parameters and mixing weights "
            "(the pretrained weights keep --learning-rate)"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cross_attention:
            raise ValueError(CROSS_ATTENTION_REFUSED)
        if self.variant not in VARIANTS:
            raise ValueError(
                f"{self.name}: variant must be one of {', '.join(VARIANTS)}, got {self.variant!r}"
            )
        if self.l_max is not None and self.l_max < 1:
            raise ValueError(f"{self.name}: l_max must be at least 1 (or None), got {self.l_max!r}")
        if self.rank < 1:
            raise ValueError(f"{self.name}: rank must be at least 1, got {self.rank!r}")
        factorized = base_variant(self.variant) in FACTORIZED_VARIANTS
        if factorized and self.l_max is not None and self.rank > self.l_max:
            raise ValueError(f"{self.name}: rank must be at most l_max ({self.l_max}), got {self.rank!r}")
        if is_mixture(self.variant):
            if self.mixing is None:
                self.mixing = "layer"
            if self.mixing not in MIXINGS:
                raise ValueError(
                    f"{self.name}: mixing must be one of {', '.join(MIXINGS)}, got {self.mixing!r}"
                )
        elif self.mixing is not None:
            raise ValueError(
                f"{self.name}: mixing {self.mixing!r} weighs a mixture with dot-product attention; variant "
                f"{self.variant!r} has none (use a '+dot' variant, or leave mixing unset)"
            )
        if base_variant(self.variant) in RANDOM_VARIANTS:
            if self.random_init is None:
                self.random_init = "glorot"
            if self.random_init not in RANDOM_INITS:
                raise ValueError(
                    f"{self.name}: random_init must be one of {', '.join(RANDOM_INITS)}, got {self.random_init!r}"
                )
        elif self.random_init is not None:
            raise ValueError(
                f"{self.name}: random_init {self.random_init!r} initialises a random matrix; variant "
                f"{self.variant!r} has none (use random, factorized-random or their +dot mixtures)"
            )
        if self.fixed and base_variant(self.variant) not in RANDOM_VARIANTS:
            raise ValueError(
                f"{self.name}: fixed=True keeps a random matrix fixed; variant {self.variant!r} has none "
                f"(use random, factorized-random or their +dot mixtures)"
            )
        if self.init is None:
            self.init = "exact" if self.mixing == "head" else "paper"
        if self.init not in INITS:
            raise ValueError(f"{self.name}: init must be one of {', '.join(INITS)}, got {self.init!r}")
        if self.init == "exact" and not is_mixture(self.variant):
            raise ValueError(
                f"{self.name}: init='exact' needs a mixture with dot-product attention (variant 'X+dot'); "
                f"variant {self.variant!r} replaces the dot-product scores, so it cannot start from them"
            )
        if self.init == "exact" and self.mixing != "head":
            raise ValueError(
                f"{self.name}: init='exact' starts the mixing weight at 0, which mixing {self.mixing!r} cannot "
                "(a sigmoid weight lies in (0, 1); a sum has no weight): use mixing='head' to start exactly "
                "at the pretrained model, or init='paper'"
            )
        if not self.synthesizer_lr > 0:
            raise ValueError(f"{self.name}: synthesizer_lr must be positive, got {self.synthesizer_lr!r}")

    def check_limits(self, max_length: int, model_config: Any, *, setting: str = "--max-length") -> None:
        super().check_limits(max_length, model_config, setting=setting)
        if self.l_max is not None and max_length > self.l_max:
            raise LimitError(
                f"{self.name}: l_max {self.l_max} is less than {setting} {max_length}: the synthesized attention "
                f"has no row for a token beyond position {self.l_max}; set l_max to {max_length} or more, or "
                f"{setting} to {self.l_max} or less"
            )
