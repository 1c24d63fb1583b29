"""Plain fine-tuning's method: it edits no attention call."""

from __future__ import annotations

from ...attention import AttentionMethod
from .config import NoneConfig


class PlainFineTuning(AttentionMethod):
    name = "none"

    def __init__(self, config: NoneConfig | None = None) -> None:
        self.config = config
