"""Synthesizer's options as data: the variants, the mixing forms, the initialisers, and the caveat that
keeps it off cross-attention. No torch: :class:`~attendout.methods.synthesizer.config.SynthesizerConfig`
is made from these alone."""

from __future__ import annotations

BASE_VARIANTS = ("dense", "factorized-dense", "random", "factorized-random")
#: the forms of a mixture's weight (see the module docstring)
MIXINGS = ("layer", "head", "sum")
#: the initialisers of the random variants' matrices
RANDOM_INITS = ("glorot", "normal")
#: k of the factorized random synthesizer in the official code (``factorized_dim=16``, line 172)
OFFICIAL_RANK = 16
#: Every variant: the four synthesizers and each one mixed with dot-product attention ("+dot").
VARIANTS = BASE_VARIANTS + tuple(f"{v}+dot" for v in BASE_VARIANTS)
RANDOM_VARIANTS = ("random", "factorized-random")
MIX_SUFFIX = "+dot"


def base_variant(variant: str) -> str:
    """'random+dot' -> 'random'."""
    return variant.removesuffix(MIX_SUFFIX)


def is_mixture(variant: str) -> bool:
    return variant.endswith(MIX_SUFFIX)


#: Why Synthesizer never replaces cross-attention (the ``cross_attention`` option, or layers past the
#: self-attention layers of an encoder-decoder).
CROSS_ATTENTION_CAVEAT = (
    "Synthesizer replaces self-attention only. Paper 003's caveat: its findings hold for self-attention, not for attention across sequences (synthesized "
    "attention did worse where self-attention played the part of cross-sentence attention), and a "
    "synthesized alignment has no query-key product through which a decoder could read its source. "
    "In an encoder-decoder, the encoder's and the decoder's self-attention are synthesized and the "
    "cross-attention stays dot-product"
)
CROSS_ATTENTION_REFUSED = f"synthesizer: cross_attention=True is refused. {CROSS_ATTENTION_CAVEAT}"
