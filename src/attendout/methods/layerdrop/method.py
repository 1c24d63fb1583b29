"""The block and attention skips that act on a model (see :mod:`attendout.methods.layerdrop`)."""

from __future__ import annotations

import torch

from ...attention import AttentionCall, AttentionEdit, AttentionMethod, Controller, RateMeter
from ...attention.masks import bernoulli_drop
from .config import AttnLayerDropConfig, LayerDropConfig


class BlockDrop(AttentionMethod):
    name = "layerdrop"

    def __init__(self, p: float, layers=None):
        self.p, self.layers = p, layers
        self.meter = RateMeter()
        self._wrapped: list[torch.nn.Module] = []

    def attach(self, controller: Controller) -> None:
        super().attach(controller)
        shared = controller.family.shared
        for position, block in enumerate(controller.blocks):
            if "forward" in block.__dict__:
                raise ValueError(
                    f"{self.name}: block {position} already has a wrapped forward (applied twice?)"
                )
            block.forward = self._wrap(controller, block, None if shared else position)
            self._wrapped.append(block)

    def _wrap(self, controller: Controller, block: torch.nn.Module, position: int | None):
        original = block.forward  # the bound class forward

        def forward(hidden_states, *args, **kwargs):
            layer = controller.block_index(position)
            if block.training and (self.layers is None or layer in self.layers):
                dropped = bool(torch.rand(()) < self.p)
                self.meter.add(
                    f"{self.name}/drop_rate/L{layer}", torch.tensor(float(dropped)), torch.tensor(1.0)
                )
                if dropped:
                    if position is None:  # shared attention module: keep its call counter in step
                        controller.next_layer()
                    return _skipped(controller.family.block_output, block, hidden_states, args, kwargs)
            return original(hidden_states, *args, **kwargs)

        return forward

    def detach(self, controller: Controller) -> None:
        for block in self._wrapped:
            block.__dict__.pop("forward", None)
        self._wrapped = []

    def stats(self) -> dict[str, float]:
        return self.meter.pop()


def _skipped(output: str, block: torch.nn.Module, hidden_states: torch.Tensor, args: tuple, kwargs: dict):
    """What a skipped block returns: its input, in the form the family's blocks return."""
    if output == "pair":  # DeBERTa: (hidden states, attention weights)
        return hidden_states, None
    if output == "tuple":  # MPNet: (hidden states,), and the attention weights when they were asked for
        return (hidden_states, None) if kwargs.get("output_attentions") else (hidden_states,)
    if output == "t5":  # (hidden states, self-attention bias, cross-attention bias), shared down the stack
        bias = args[1] if len(args) > 1 else kwargs.get("position_bias")
        attention = block.layer[0].SelfAttention
        if bias is None and attention.has_relative_attention_bias:
            # the stack's first block computes the relative bias every later block reuses: compute it
            # though the block is skipped, or the whole stack would lose its positions for this step
            length = hidden_states.shape[1]
            bias = attention.compute_bias(length, length, device=hidden_states.device)
        cross = args[4] if len(args) > 4 else kwargs.get("encoder_decoder_position_bias")
        return hidden_states, bias, cross
    return hidden_states


class AttentionSkip(AttentionMethod):
    name = "attn-layerdrop"

    def __init__(self, p: float, per_sample: bool, layers=None):
        self.p, self.per_sample, self.layers = p, per_sample, layers
        self.meter = RateMeter()

    def edit(self, call: AttentionCall) -> AttentionEdit | None:
        key = f"{self.name}/drop_rate/L{call.layer}"
        if self.per_sample:
            b = call.shape[0]
            drop = bernoulli_drop((b, 1, 1, 1), self.p, call.query.device)  # every score of the sample
            self.meter.add(key, drop.sum(), torch.tensor(float(b)))
            return AttentionEdit(drop_scores=drop)  # all dropped rows -> eq. 4
        if torch.compiler.is_compiling():
            # a decision on the host would break the graph: every score of the layer dropped at once,
            # a (1, 1, 1, 1) mask that eq. 4 turns into the same uniform layer, branch-free
            drop = bernoulli_drop((1, 1, 1, 1), self.p, call.query.device)
            self.meter.add(key, drop.sum(), torch.tensor(1.0))
            return AttentionEdit(drop_scores=drop)
        skipped = bool(torch.rand(()) < self.p)  # eager: a layer not skipped stays on stock attention
        self.meter.add(key, torch.tensor(float(skipped)), torch.tensor(1.0))
        return AttentionEdit(skip=True) if skipped else None

    def stats(self) -> dict[str, float]:
        return self.meter.pop()


def block_drop(config: LayerDropConfig) -> BlockDrop:
    return BlockDrop(config.p, config.layers)


def attention_skip(config: AttnLayerDropConfig) -> AttentionSkip:
    return AttentionSkip(config.p, config.per_sample, config.layers)
