"""DeBERTa-v2 and v3: the hook's edits through module hooks, since their attention is not an
AttentionInterface function.

``DisentangledSelfAttention`` (transformers 5.23, ``models/deberta_v2``) computes content-to-content plus
disentangled position scores, masks them with the boolean ``attention_mask`` it is given (a
``masked_fill`` with the lowest float), takes the softmax and passes the probabilities through its
``dropout`` child, all inside its own forward. Two places reach every edit of
:class:`~attendout.attention.AttentionEdit` there without copying that forward:

* a forward pre-hook on the module: eq. 3's dropped scores join the boolean mask it receives, so a
  dropped key is masked exactly as padding is; a row whose every real key was dropped keeps its real
  keys in the mask (``allowed_keys``, as every family does);
* an instance ``forward`` on its ``dropout`` child (the probabilities after the softmax): eq. 4 makes
  those emptied rows, and every row of a skipped layer, uniform over their real keys; a padding query's
  row (DeBERTa masks it whole) attends to nothing, as in the other families; recorders record; eq. 2
  scales the weights; then the model's own dropout, or a method's replacement, is applied.

The family table (:mod:`attendout.attention.families`) gives ``deberta-v2`` the route ``"deberta"``;
this module registers that route (:func:`install_hooks`, :func:`remove_hooks`) when imported, and
``import attendout`` imports it: the attention package never imports this module.

DeBERTa's forward passes no extra keyword argument down to its attention, so a forward's own edits
(``model(..., attendout_edits=...)``) are taken off the model's keyword arguments by a pre-hook on the
model and held by the controller for that forward. Methods that rewrite the scores themselves
(Synthesizer) are refused: the scores never leave DeBERTa's forward. Every hook does nothing unless a
method acts, a recorder records or the forward brought edits, so the idle hook gives stock logits.

The query, key and value of the :class:`~attendout.attention.AttentionCall` a method sees here are
zero placeholders of the right shape, dtype and device (DeBERTa projects them inside its forward, after
the mask is fixed); the methods read shapes, devices and dtypes only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .call import AttentionCall, AttentionRecorder, combine_edits
from .controller import Controller, acting_on, hold_forward_edits, register_route, release_hooks
from .paths import allowed_keys, no_key_rows_zero, uniform_weights


@dataclass
class _Pending:
    """What the pre-hook decided for one attention call, for its probabilities step."""

    call: AttentionCall
    recorders: list[AttentionRecorder]
    uniform_rows: torch.Tensor | None  # (B, H|1, Lq, 1) bool: rows eq. 4 makes uniform; None = none
    scale: torch.Tensor | None
    dropout: float | None  # None: the model's own dropout module as it is


def install_hooks(controller: Controller) -> None:
    """Hook every attention module of a DeBERTa-v2 model and its top-level forward."""
    hold_forward_edits(controller)
    for module in controller.attention_modules:
        controller.handles.append(module.register_forward_pre_hook(_before_attention, with_kwargs=True))
        module.dropout.forward = _probabilities_step(module)


def remove_hooks(controller: Controller) -> None:
    release_hooks(controller)
    for module in controller.attention_modules:
        module.dropout.__dict__.pop("forward", None)
        module.__dict__.pop("_attendout_pending", None)


def _before_attention(module: nn.Module, args: tuple, kwargs: dict[str, Any]):
    """Decide this call's edits; put eq. 3's drops into DeBERTa's boolean mask (args: hidden, mask, ...)."""
    module.__dict__.pop("_attendout_pending", None)
    slot = module.__dict__.get("_attendout_slot")
    if slot is None:
        return None
    hidden, mask = args[0], args[1] if len(args) > 1 else kwargs["attention_mask"]
    edits = slot.controller.forward_edits
    b, length = hidden.shape[0], hidden.shape[1]
    h, d = module.num_attention_heads, module.attention_head_size
    acting = acting_on(module, edits, (b, h, length, length))
    if acting is None:
        return None
    layer, training = acting.layer, module.training
    valid = mask.bool()
    if valid.dim() == 3:  # (B, Lq, Lk), as DeBERTa's encoder accepts too
        valid = valid.unsqueeze(1)
    placeholder = hidden.new_zeros(()).expand(b, h, length, d)  # shapes only: see the module docstring
    call = AttentionCall(layer, module, placeholder, placeholder, placeholder, valid, training, edits)
    combined = combine_edits(call, acting.methods, acting.own, module.dropout.p)
    scale, skip, dropout = combined.scale, combined.skip, combined.dropout
    drop = None if skip else combined.drops(call)
    uniform_rows = None
    if skip:
        uniform_rows = valid.any(dim=-1, keepdim=True)  # every row with a real key: the whole layer
    elif drop is not None:
        allowed, empty = allowed_keys(call, drop)
        # rows emptied by the drops; a padding query's row (no real key in DeBERTa's mask) stays as stock
        uniform_rows = empty & valid.any(dim=-1, keepdim=True)
        args = (args[0], allowed, *args[2:]) if len(args) > 1 else args
        if "attention_mask" in kwargs:
            kwargs = {**kwargs, "attention_mask": allowed}
    own_dropout = None if dropout == module.dropout.p else dropout
    module._attendout_pending = _Pending(call, acting.recorders, uniform_rows, scale, own_dropout)
    return args, kwargs


def _probabilities_step(module: nn.Module):
    """The instance forward of ``module.dropout``: eq. 4, recording, eq. 2, then the dropout."""
    dropout_module = module.dropout
    original = type(dropout_module).forward

    def forward(probs: torch.Tensor) -> torch.Tensor:  # (B, H, Lq, Lk)
        pending: _Pending | None = module.__dict__.pop("_attendout_pending", None)
        if pending is None:
            return original(dropout_module, probs)
        if pending.uniform_rows is not None:
            probs = torch.where(pending.uniform_rows, uniform_weights(pending.call).to(probs.dtype), probs)
        # a padding query's row (every key masked) attends to nothing, as in the other families
        probs = no_key_rows_zero(probs, pending.call.key_valid)
        for recorder in pending.recorders:
            recorder.record(pending.call.layer, probs)
        weights = probs if pending.scale is None else probs * pending.scale.to(probs.dtype)  # eq. 2
        if pending.dropout is None:
            return original(dropout_module, weights)
        return nn.functional.dropout(weights, p=pending.dropout, training=module.training)

    return forward


register_route("deberta", install_hooks, remove_hooks)
