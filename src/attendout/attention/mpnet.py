"""MPNet: the hook's edits through an instance ``forward`` on its attention, since that attention is not
an AttentionInterface function.

``MPNetSelfAttention`` (transformers 5.23, ``models/mpnet``) projects query, key and value with its own
``q``, ``k`` and ``v`` linears, adds the relative position bias its encoder computed once for the stack
(``position_bias``, (B, H, L, L)) and an additive float mask to the scaled scores, takes the softmax,
applies its ``dropout`` and projects the result with ``o``, all in its own forward. Each hooked module
gets an instance ``forward`` that:

* when nothing acts on its layer (no method, no recorder, no edit of the forward's own:
  :func:`~attendout.attention.controller.acting_on`), calls the class's forward unchanged, so the idle
  hook is stock MPNet, bit for bit, in training and in eval mode;
* otherwise projects q, k and v with the module's own linears, turns the additive mask (0 = attend, the
  dtype's lowest = masked, as ``create_bidirectional_mask`` builds it; None when nothing is padded) into
  the boolean mask the hook works with, and hands them to
  :func:`~attendout.attention.hook.edited_attention` with the position bias, MPNet's scaling
  (1/sqrt(d)) and its attention-dropout probability: every path (fused SDPA, filled, explicit) adds
  the bias, and a synthesizer's scores keep it, as T5's do. Then ``o``, as stock. With
  ``output_attentions`` the explicit path runs, so that the weights come back as stock MPNet's do.

The family table (:mod:`attendout.attention.families`) gives ``mpnet`` the route ``"mpnet"``; this
module registers that route (:func:`install_hooks`, :func:`remove_hooks`) when imported, and ``import
attendout`` imports it: the attention package never imports this module. MPNet's models pass no extra
keyword argument down to the attention, so a forward's own edits (``model(..., attendout_edits=...)``)
are held by the controller for that forward (:func:`~attendout.attention.controller.hold_forward_edits`).
"""

from __future__ import annotations

import math
import types

import torch
from torch import nn

from .controller import Controller, acting_on, hold_forward_edits, register_route, release_hooks
from .hook import edited_attention


def install_hooks(controller: Controller) -> None:
    """Give every attention module of an MPNet model its instance forward; hold each forward's edits."""
    hold_forward_edits(controller)
    for module in controller.attention_modules:
        module.forward = types.MethodType(_forward, module)  # bound: a deep copy binds to the copy


def remove_hooks(controller: Controller) -> None:
    release_hooks(controller)
    for module in controller.attention_modules:
        module.__dict__.pop("forward", None)


def _forward(
    self: nn.Module,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_bias: torch.Tensor | None = None,
    output_attentions: bool = False,
    **kwargs,
):
    """``MPNetSelfAttention.forward`` with the hook's edits; the stock forward when nothing acts."""
    slot = self.__dict__.get("_attendout_slot")
    edits = slot.controller.forward_edits if slot is not None else None
    b, length = hidden_states.shape[0], hidden_states.shape[1]
    h, d = self.num_attention_heads, self.attention_head_size
    acting = acting_on(self, edits, (b, h, length, length))
    if acting is None:
        return type(self).forward(
            self, hidden_states, attention_mask, position_bias, output_attentions=output_attentions, **kwargs
        )
    q, k, v = (proj(hidden_states).view(b, length, h, d).transpose(1, 2) for proj in (self.q, self.k, self.v))
    output, weights = edited_attention(
        self,
        q,
        k,
        v,
        _attended(attention_mask, b, length),
        acting,
        edits,
        scaling=1.0 / math.sqrt(d),
        dropout=self.dropout.p if self.training else 0.0,
        need_weights=output_attentions,
        position_bias=position_bias,
        is_causal=False,  # MPNet's attention says nothing, which SDPA would read as causal
    )  # (B, L, H, d)
    o = self.o(output.reshape(b, length, h * d))
    return (o, weights) if output_attentions else (o,)


def _attended(mask: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    """MPNet's additive float mask, (B, 1, Lq|1, Lk), as the hook's boolean one: (B, 1, L, L), True =
    attend; None (nothing padded) stays None."""
    if mask is None:
        return None
    valid = mask if mask.dtype == torch.bool else mask == 0
    return valid.expand(batch, 1, length, length)


register_route("mpnet", install_hooks, remove_hooks)
