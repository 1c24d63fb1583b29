"""Recording attention probabilities: :func:`record_attention`, which keeps an
:class:`~attendout.attention.call.AttentionRecorder` on a model while a context is open.

A layer with a recorder takes the explicit path (:func:`~attendout.attention.paths.attention_probs`),
and the hook hands each of its recorders that layer's probabilities (a DeBERTa layer's: the
probabilities step of :mod:`attendout.attention.deberta`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from torch import nn

from .call import AttentionRecorder
from .hook import install


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
