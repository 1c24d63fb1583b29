"""The size of a model from scratch (:class:`ScratchSize`): plain data, checked without loading anything.

A run's config checks it when the config is made (:class:`attendout.config.TrainConfig`);
:mod:`attendout.models.decoders` builds the model from it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScratchSize:
    """The size of a model from scratch: the feed-forward width is ``4 * hidden``."""

    layers: int = 2
    hidden: int = 128
    heads: int = 4
    vocab_size: int = 8000

    def __post_init__(self) -> None:
        for name in ("layers", "hidden", "heads", "vocab_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
