"""``drophead``: drop whole attention heads (Zhou et al., 2020, "Scheduled DropHead").

In training, each head of each layer is dropped per example with probability p: its attention
weights become zero, so the head contributes nothing to the layer output. The kept heads are scaled
by H / (number kept), DropHead's rescaling that keeps the expected sum of head outputs. If every head
of an example is dropped, its layer output is zero for that example. Keeps the model's own dropout.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..attention import AttentionCall, AttentionEdit, AttentionMethod, RateMeter
from .base import MethodConfig, check_probability, layers_field, register_method
from .masks import bernoulli_drop


class HeadDrop(AttentionMethod):
    name = "drophead"

    def __init__(self, p: float, rescale: bool, layers=None):
        self.p, self.rescale, self.layers = p, rescale, layers
        self.meter = RateMeter()

    def edit(self, call: AttentionCall) -> AttentionEdit:
        b, h, _, _ = call.shape
        drop = bernoulli_drop((b, h, 1, 1), self.p, call.query.device)  # one decision per (example, head)
        keep = (~drop).to(call.query.dtype)
        if self.rescale:
            kept = keep.sum(dim=1, keepdim=True).clamp(min=1)
            keep = keep * (h / kept)
        self.meter.add(f"{self.name}/drop_rate/L{call.layer}", drop.sum(), torch.tensor(float(drop.numel())))
        return AttentionEdit(scale_weights=keep)

    def stats(self) -> dict[str, float]:
        return self.meter.pop()


@register_method
@dataclass
class DropHeadConfig(MethodConfig):
    name = "drophead"
    summary = "drop whole attention heads with probability p per example, rescaling the kept ones (DropHead)"

    p: float = field(default=0.1, metadata={"help": "probability of dropping each head"})
    rescale: bool = field(default=True, metadata={"help": "scale kept heads by H / kept, as DropHead does"})
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self.name, "p", self.p)

    def build(self) -> AttentionMethod:
        return HeadDrop(self.p, self.rescale, self.layers)
