"""The options of ``none``: there are none."""

from __future__ import annotations

from dataclasses import dataclass

from ..config import MethodConfig


@dataclass
class NoneConfig(MethodConfig):
    summary = "plain fine-tuning: the model's own dropout only (stock attention)"
