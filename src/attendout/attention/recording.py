"""Recording attention probabilities: :class:`AttentionRecorder` and :func:`record_attention`.

A layer with a recorder takes the explicit path (:func:`~attendout.attention.paths._attention_probs`),
and the hook hands each of its recorders that layer's probabilities (a DeBERTa layer's: the
probabilities step of :mod:`attendout.attention.deberta`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn

from .hook import install

__all__ = ["AttentionRecorder", "record_attention"]


class AttentionRecorder:
    """Keeps each layer's attention probabilities (B, H, Lq, Lk) of the latest forward pass.

    The probabilities are the softmax output, before any weights mask and before attention dropout.
    With ``grads=True`` they stay in the autograd graph and keep their gradient after ``backward()``
    (``recorder.probs[layer].grad``), which attribution methods need. Works in train and eval mode.
    """

    def __init__(self, layers: Sequence[int] | None = None, grads: bool = False) -> None:
        self.layers = None if layers is None else set(layers)
        self.grads = grads
        self.probs: dict[int, torch.Tensor] = {}

    def wants(self, layer: int) -> bool:
        return self.layers is None or layer in self.layers

    def record(self, layer: int, probs: torch.Tensor) -> None:
        if self.grads and probs.requires_grad:
            probs.retain_grad()
            self.probs[layer] = probs
        else:
            self.probs[layer] = probs.detach()

    def clear(self) -> None:
        self.probs = {}


@contextmanager
def record_attention(
    model: nn.Module, layers: Sequence[int] | None = None, grads: bool = False
) -> Iterator[AttentionRecorder]:
    """Record attention probabilities of ``model`` while the context is open.

    >>> with record_attention(model, layers=[0], grads=True) as rec:
    ...     model(**batch).logits[:, 1].sum().backward()
    >>> rec.probs[0].grad  # (B, H, L, L)
    """
    controller = install(model)
    recorder = AttentionRecorder(layers, grads)
    controller.recorders.append(recorder)
    try:
        yield recorder
    finally:
        controller.recorders.remove(recorder)
