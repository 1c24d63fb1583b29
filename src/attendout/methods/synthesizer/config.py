"""The ``synthesizer`` method's config: which variant, in which layers, how initialised."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.limits import LimitError
from ...typecheck import AT_LEAST_1, POSITIVE, Must, one_of, option
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

    summary = "Synthesizer attention (dense/random/factorized, or mixed with dot-product) (paper 003)"

    variant: str = option(
        "random+dot",
        f"one of {', '.join(VARIANTS)}; '+dot' mixes with the model's dot-product attention",
        must=one_of(VARIANTS),
    )
    layers: list[int] | None = layers_field()
    l_max: int | None = option(
        None,
        "longest sequence the synthesized attention accepts (default: the run's --max-length; "
        "for attendout.synthesize, the model's max_position_embeddings); longer inputs raise an error",
        must=Must(AT_LEAST_1.holds, "at least 1 (or None)"),
    )
    rank: int = option(
        OFFICIAL_RANK,
        "k of factorized-random (R1 R2^T, rank k; 16 as the official code's factorized_dim) "
        "and a of factorized-dense",
        must=AT_LEAST_1,
    )
    fixed: bool = option(False, "random variants: keep the random matrix fixed (not trained)")
    shared_heads: bool = option(False, "one synthesizer for all heads of a layer (default: one per head)")
    mixing: str | None = option(
        None,
        "'+dot' variants only: 'layer' (default, the official code: (1-a) dot + a synth with one "
        "a = sigmoid(w) per layer, starting at 1/2), 'head' (one raw weight per head, attendout's form "
        "before issue 50) or 'sum' (dot + synth, the official plain-sum modes)",
        must=one_of(MIXINGS),
    )
    random_init: str | None = option(
        None,
        "random variants only: 'glorot' (default, the official code's glorot_uniform over its "
        "variable's shape: attention starts close to uniform) or 'normal' (R from N(0, 1), attendout's "
        "form before issue 50)",
        must=one_of(RANDOM_INITS),
    )
    init: str | None = option(
        None,
        "'exact' (mixing 'head': weight 0, so step 0 computes what the pretrained model did) "
        "or 'paper' (weight 1/2); default: exact for mixing 'head', paper otherwise",
        must=one_of(INITS),
    )
    cross_attention: bool = option(
        False,
        "always off: synthesize an encoder-decoder's cross-attention too. Refused, as paper 003's "
        "caveat: its findings hold for self-attention, not for attention across sequences",
    )
    synthesizer_lr: float = option(
        1e-3,
        "peak learning rate of the new synthesizer parameters and mixing weights "
        "(the pretrained weights keep --learning-rate)",
        must=POSITIVE,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.cross_attention:
            raise ValueError(CROSS_ATTENTION_REFUSED)
        factorized = base_variant(self.variant) in FACTORIZED_VARIANTS
        if factorized and self.l_max is not None and self.rank > self.l_max:
            raise ValueError(f"{self.name}: rank must be at most l_max ({self.l_max}), got {self.rank!r}")
        if is_mixture(self.variant):
            self.mixing = self.mixing or "layer"
        elif self.mixing is not None:
            raise ValueError(
                f"{self.name}: mixing {self.mixing!r} weighs a mixture with dot-product attention; variant "
                f"{self.variant!r} has none (use a '+dot' variant, or leave mixing unset)"
            )
        if base_variant(self.variant) in RANDOM_VARIANTS:
            self.random_init = self.random_init or "glorot"
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

    def check_limits(self, max_length: int, model_config: Any, *, setting: str = "--max-length") -> None:
        super().check_limits(max_length, model_config, setting=setting)
        if self.l_max is not None and max_length > self.l_max:
            raise LimitError(
                f"{self.name}: l_max {self.l_max} is less than {setting} {max_length}: the synthesized attention "
                f"has no row for a token beyond position {self.l_max}; set l_max to {max_length} or more, or "
                f"{setting} to {self.l_max} or less"
            )
