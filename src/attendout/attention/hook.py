"""The hook itself: installing it on a model, removing it, and the registered attention function.

:func:`install` finds a model's attention modules and blocks by its family
(:mod:`~attendout.attention.families`), gives it a :class:`~attendout.attention.controller.Controller`
and switches its attention implementation to ``"attendout"``, the name under which
:func:`attendout_attention` is registered with ``transformers.AttentionInterface`` (families on another
route get their registered module hooks instead). :func:`attendout_attention` combines the edits of
one call (:func:`edited_attention`, which a route of its own calls too) and sends it down one of the
paths of :mod:`~attendout.attention.paths`, or straight to stock SDPA when nothing acts.
"""

from __future__ import annotations

import re

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ..contract import EDITS_KWARG, ForwardEdits
from . import paths  # looked up there on every call, so that a test can stand in for a path
from .call import AttentionCall, combine_edits, rewrites_scores
from .controller import Acting, Controller, acting_on, get_controller, route_of
from .families import Family, UnsupportedModelError, causal_mask, family_of, is_causal, stack_sizes

HOOK_NAME = "attendout"


_STACK_ORDER = {None: 0, "encoder": 0, "decoder": 1}


def _numbered(model: nn.Module, pattern: str, shared: bool) -> list[nn.Module]:
    regex = re.compile(pattern)
    found = [(match, module) for name, module in model.named_modules() if (match := regex.search(name))]
    if not shared:  # by stack (encoder, then decoder), then by the layer number ("10" sorts after "2")
        found.sort(key=lambda item: (_STACK_ORDER[item[0].groupdict().get("stack")], int(item[0]["n"])))
    return [module for _, module in found]


def _expected_layers(model: nn.Module, family: Family, found: int) -> int:
    config = model.config
    if family.stacks:  # T5, BART: both stacks; T5EncoderModel: the encoder's alone
        encoder, decoder = stack_sizes(config) or (int(config.num_layers), 0)
        return encoder + decoder if found > encoder else encoder
    return int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layers", 0))


def install(model: nn.Module) -> Controller:
    """Install the hook on ``model`` (idempotent) and return its controller.

    Switches the model's attention implementation to ``"attendout"``; :func:`uninstall` restores the
    previous one. Raises :class:`UnsupportedModelError` naming the model's class for families the
    hook cannot reach.
    """
    controller = get_controller(model)
    if controller is not None:
        return controller
    family = family_of(model)
    route = route_of(family)  # None: the registered attention function
    attention = _numbered(model, family.attention, family.shared)
    blocks = _numbered(model, family.block, family.shared)
    num_layers = _expected_layers(model, family, len(attention))
    if not attention or (not family.shared and len(attention) != num_layers):
        raise UnsupportedModelError(
            f"attendout cannot hook {type(model).__name__}: found {len(attention)} self-attention modules "
            f"for {num_layers} layers"
        )
    _register()
    previous = getattr(model.config, "_attn_implementation", None)
    controller = Controller(
        model=model,
        family=family,
        attention_modules=attention,
        blocks=blocks,
        num_layers=num_layers,
        previous_implementation=previous,
    )
    controller.mark_modules()
    if route is not None:
        route.install(controller)
    else:
        model.set_attn_implementation(HOOK_NAME)
    model._attendout_controller = controller
    return controller


def uninstall(model: nn.Module) -> None:
    """Remove every method, recorder and the hook itself; the model is stock again."""
    controller = get_controller(model)
    if controller is None:
        return
    for method in list(controller.methods):
        controller.remove(method)
    controller.recorders.clear()
    controller.unmark_modules()
    route = route_of(controller.family)
    if route is not None:
        route.remove(controller)
    else:
        model.set_attn_implementation(controller.previous_implementation or "sdpa")
    del model._attendout_controller


def attendout_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The registered attention function. Shapes: query/key/value (B, H, L, d); returns (B, L, H, d).

    A forward's own edits arrive as the keyword argument ``attendout_edits`` (a
    :class:`~attendout.contract.ForwardEdits`) and act in training mode, with the methods' edits.
    """
    edits: ForwardEdits | None = kwargs.pop(EDITS_KWARG, None)
    shape = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
    acting = acting_on(module, edits, shape)
    if acting is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    return edited_attention(
        module, query, key, value, attention_mask, acting, edits, scaling=scaling, dropout=dropout, **kwargs
    )


def edited_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    acting: Acting,
    edits: ForwardEdits | None,
    *,
    scaling: float | None = None,
    dropout: float = 0.0,
    need_weights: bool = False,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One attention call that something acts on (``acting``, from :func:`acting_on`), down the path
    that fits it: (B, L, H, d) and the weights (None from the fused paths).

    ``attention_mask`` is boolean (True = attend) or None; ``kwargs`` go on to transformers' SDPA
    attention (``position_bias``: a relative position bias added to the scores on every path;
    ``is_causal``). ``need_weights`` takes the explicit path, which returns the weights, as a recorder
    does (a route whose model asked for them: MPNet's ``output_attentions``).
    """
    methods, recorders, layer = acting.methods, acting.recorders, acting.layer
    training = module.training
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        raise TypeError(f"attendout expects a boolean attention mask, got {attention_mask.dtype}")
    valid = attention_mask
    if valid is None and is_causal(module) and kwargs.get("is_causal", True) is not False:
        # transformers leaves an unpadded causal batch's mask to SDPA's is_causal; every edit below
        # needs it explicit (with a KV cache, the Lq queries are the last of Lk positions)
        b, lq, lk = query.shape[0], query.shape[2], key.shape[2]
        valid = causal_mask(lq, lk, query.device).expand(b, 1, lq, lk)
    call = AttentionCall(layer, module, query, key, value, valid, training, edits)
    combined = combine_edits(call, methods, acting.own, dropout)
    scale, dropout = combined.scale, combined.dropout
    transforms = any(rewrites_scores(m) for m in methods)
    explicit = bool(recorders) or transforms or need_weights
    if not combined.drops_any and scale is None and not explicit:
        # Only the dropout probability changed: stock SDPA can still do the work.
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if not explicit and (scale is None or paths.per_head(scale)):
        if combined.drops_any and paths.fills_in_place(call, dropout):
            return paths.filled_softmax(call, combined, scaling, kwargs.get("position_bias"))
        # Dropped scores and per-head scales fit SDPA too: the drops join the padding mask, a scale
        # of whole rows of weights scales the output. About 1.4x faster than the softmax below on CPU.
        return paths.masked_sdpa(
            call, attention_mask, combined.drops(call), scale, scaling, dropout, **kwargs
        )

    bias = kwargs.get("position_bias")  # a relative position bias (T5, MPNet), (1|B, H, Lq, Lk)
    probs = paths.attention_probs(call, methods, scaling, combined.drops(call), bias)  # (B, H, Lq, Lk)
    for recorder in recorders:
        recorder.record(layer, probs)
    weights = probs if scale is None else probs * scale.to(probs.dtype)  # eq. 2
    weights = nn.functional.dropout(weights, p=dropout, training=training)  # the model's own, as stock
    output = torch.matmul(weights, paths.per_query_head(call, call.value))  # (B, H, Lq, d)
    return output.transpose(1, 2).contiguous(), weights


_REGISTERED = False


def _register() -> None:
    global _REGISTERED
    if not _REGISTERED:
        AttentionInterface.register(HOOK_NAME, attendout_attention)
        AttentionMaskInterface.register(HOOK_NAME, sdpa_mask)  # boolean masks, True = attend
        _REGISTERED = True


_register()
