"""`none`: plain fine-tuning. The hook is installed but does nothing: stock SDPA attention runs."""

from __future__ import annotations

from dataclasses import dataclass

from ..attention import AttentionMethod
from .base import MethodConfig, register_method


class PlainFineTuning(AttentionMethod):
    name = "none"


@register_method
@dataclass
class NoneConfig(MethodConfig):
    name = "none"
    summary = "plain fine-tuning: the model's own dropout only (stock attention)"

    def build(self) -> AttentionMethod:
        return PlainFineTuning()
