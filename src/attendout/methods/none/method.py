"""Plain fine-tuning's method: it edits no attention call."""

from __future__ import annotations

from ...attention import AttentionMethod
from .config import NoneConfig


class PlainFineTuning(AttentionMethod):
    name = "none"

    def __init__(self, config: NoneConfig | None = None) -> None:
        self.config = config

    def acts_on(self, layer: int, training: bool) -> bool:
        """Never: every call runs stock attention, also on a route of its own (DeBERTa's, MPNet's)."""
        return False
