"""The family table: where each model family keeps its self-attention modules and its blocks.

A model is hooked by its ``config.model_type``: :data:`FAMILIES` says where its attention modules
and blocks sit (module-name regexes), whether one module serves every layer (ALBERT), what a block
returns, and how the edits reach its attention (its ``route``). The ``"interface"`` route is the
attention function registered with transformers (:mod:`attendout.attention.hook`); any other route
is a pair of functions that put module hooks in place and take them away, which the module
implementing it registers with :func:`~attendout.attention.controller.register_route`
(:mod:`attendout.attention.deberta` registers ``"deberta"``, :mod:`attendout.attention.mpnet`
``"mpnet"``, when ``import attendout`` imports them), so that the hook imports no family's own code.

Also here: what makes a layer causal (:func:`is_causal`, :func:`causal_mask`), which every path
keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


class UnsupportedModelError(ValueError):
    """The model's attention cannot be reached by the hook."""


@dataclass(frozen=True)
class Family:
    """Where a family keeps its self-attention modules and its blocks (module-name regexes).

    ``shared`` families (ALBERT) run one attention module for every layer; their layer index is the
    call order within one forward pass instead of the module's position.
    """

    attention: str
    block: str
    shared: bool = False
    #: how the edits reach the attention: "interface" = the registered attention function (every family
    #: whose attention goes through transformers' AttentionInterface); any other name = a route
    #: registered with :func:`~attendout.attention.controller.register_route`: "deberta" = module hooks around DeBERTa's own
    #: disentangled attention (:mod:`attendout.attention.deberta`); "mpnet" = an instance forward on
    #: MPNet's attention that sends its projections to the hook's paths (:mod:`attendout.attention.mpnet`)
    route: str = "interface"
    #: what a block returns: the hidden states ("tensor"), a (hidden states, attention weights) pair
    #: ("pair", DeBERTa), a tuple of the hidden states and, with ``output_attentions``, the attention
    #: weights ("tuple", MPNet), or T5's (hidden states, self-attention bias, cross-attention bias) ("t5")
    block_output: str = "tensor"
    #: encoder-decoders (T5): the attention regex matches both stacks; layers are numbered through the
    #: encoder first, then the decoder (a 6+6 T5 has layers 0-5 in its encoder and 6-11 in its decoder)
    stacks: bool = False


#: an encoder-decoder's two stacks, named in its module names
_STACKS = r"(?P<stack>encoder|decoder)"


def _blocks(blocks: str, attention: str, **options: Any) -> Family:
    """A family whose blocks are ``BLOCKS.N`` and whose attention modules are ``BLOCKS.N.ATTENTION``
    (module-name regexes); ``options``: the rest of its :class:`Family`."""
    block = rf"(^|\.){blocks}\.(?P<n>\d+)"
    return Family(attention=rf"{block}\.{attention}$", block=f"{block}$", **options)


_BERT_LIKE = _blocks(r"encoder\.layer", r"attention\.self")
# Llama-style decoders (and EuroBERT, an encoder on Llama's layout): model.layers.N.self_attn
_LLAMA_LIKE = _blocks("layers", "self_attn")

FAMILIES: dict[str, Family] = {
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "xlm-roberta": _BERT_LIKE,
    "electra": _BERT_LIKE,
    "distilbert": _blocks(r"transformer\.layer", "attention"),
    "albert": Family(
        attention=r"(^|\.)albert_layer_groups\.\d+\.albert_layers\.\d+\.attention$",
        block=r"(^|\.)albert_layer_groups\.\d+$",
        shared=True,
    ),
    # RoPE encoders: rotary positions are applied to query and key before the attention function, and
    # ModernBERT's local layers arrive with the sliding window already in the boolean mask (built through
    # AttentionMaskInterface, as for every family), so every edit stays inside the window.
    "modernbert": _blocks("layers", "attn"),
    "eurobert": _LLAMA_LIKE,
    # DeBERTa-v2 and v3 (model_type deberta-v2): disentangled attention in the module's own code
    "deberta-v2": _blocks(r"encoder\.layer", r"attention\.self", route="deberta", block_output="pair"),
    # MPNet (sentence-transformers' all-mpnet-base-v2): its attention adds a relative position bias in
    # its own code; the route hands its projections and that bias to the hook's paths
    "mpnet": _blocks(r"encoder\.layer", r"attention\.attn", route="mpnet", block_output="tuple"),
    # Decoders. Their attention modules are causal (``is_causal``): the hook keeps every edit causal.
    "gpt2": _blocks("h", "attn"),
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    # Encoder-decoders: the self-attention of both stacks (the decoder's is causal); the decoder's
    # cross-attention (layer.1.EncDecAttention) is left to stock attention. T5's relative position
    # bias arrives with each call and is added to the scores on every path.
    "t5": _blocks(_STACKS + r"\.block", r"layer\.0\.SelfAttention", block_output="t5", stacks=True),
}
FAMILIES["mt5"] = FAMILIES["t5"]
# BART-style encoder-decoders (BART, mBART, Marian): model.{encoder,decoder}.layers.N.self_attn; the
# decoder's cross-attention (layers.N.encoder_attn) is left to stock attention, as T5's.
_BART_LIKE = _blocks(_STACKS + r"\.layers", "self_attn", stacks=True)
for _name in ("bart", "mbart", "marian"):
    FAMILIES[_name] = _BART_LIKE


def stack_sizes(config) -> tuple[int, int] | None:
    """(encoder layers, decoder layers) of an encoder-decoder's config (T5's ``num_layers`` and
    ``num_decoder_layers``, BART's ``encoder_layers`` and ``decoder_layers``); None for one stack."""
    if not getattr(config, "is_encoder_decoder", False):
        return None
    if hasattr(config, "encoder_layers"):  # BART, mBART, Marian
        return int(config.encoder_layers), int(config.decoder_layers)
    encoder = int(config.num_layers)
    return encoder, int(getattr(config, "num_decoder_layers", None) or encoder)


# Families whose attention does not go through AttentionInterface in transformers 5.x.
_WHY_NOT = {
    "deberta": "DeBERTa (v1) computes disentangled attention in its own code, outside AttentionInterface "
    "(DeBERTa-v2 and v3, model_type deberta-v2, are supported)",
}


def is_causal(module: nn.Module) -> bool:
    """Whether an attention module is causal, as transformers' SDPA attention reads it (default True)."""
    return bool(getattr(module, "is_causal", True))


def query_key_distance(lq: int, lk: int, device: torch.device) -> torch.Tensor:
    """(Lq, Lk): query position minus key position; query i sits at Lk - Lq + i (after a KV cache)."""
    return torch.arange(lk - lq, lk, device=device)[:, None] - torch.arange(lk, device=device)


def causal_mask(lq: int, lk: int, device: torch.device) -> torch.Tensor:
    """(1, 1, Lq, Lk) bool: query i (at absolute position Lk - Lq + i, after a KV cache) sees keys 0..that."""
    return (query_key_distance(lq, lk, device) >= 0).view(1, 1, lq, lk)


def supported_model_types() -> list[str]:
    return sorted(FAMILIES)


def family_of(model: nn.Module) -> Family:
    """The :class:`Family` of ``model`` (by ``config.model_type``); :class:`UnsupportedModelError` if none."""
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        why = _WHY_NOT.get(model_type, "its attention layout is not one attendout knows")
        raise UnsupportedModelError(
            f"attendout cannot hook {type(model).__name__} (model_type {model_type!r}): {why}; "
            f"supported model types: {', '.join(supported_model_types())}"
        )
    return FAMILIES[model_type]
