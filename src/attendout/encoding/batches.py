"""What every encoded split shares: its batches, in order or shuffled, resumable part-way.

:class:`Batches` is the base of the encoded data of every task kind (:mod:`attendout.encoding.classification`,
:mod:`attendout.encoding.lm_seq2seq`): a subclass says how many items it holds (``__len__``) and how
to pad a list of them into a batch (:meth:`Batches.batch`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

import torch
from tqdm.auto import tqdm

__all__ = ["IGNORE_INDEX", "Batches", "padded_labels"]

IGNORE_INDEX = -100  # the label of a position the loss ignores (padding, a word's later pieces)


def padded_labels(rows: list[list[int]], width: int | None = None) -> torch.Tensor:
    """Label rows padded with :data:`IGNORE_INDEX` to ``width`` (default: the longest row), as a tensor."""
    width = max(len(row) for row in rows) if width is None else width
    return torch.tensor([row + [IGNORE_INDEX] * (width - len(row)) for row in rows], dtype=torch.long)


class Batches:
    """Indexable encoded items, batched by :meth:`batches`."""

    def __len__(self) -> int:
        raise NotImplementedError

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def batches(
        self, batch_size: int, generator: torch.Generator | None = None, skip: int = 0
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Batches in order (or shuffled by ``generator``), leaving out the first ``skip``."""
        order = (
            torch.randperm(len(self), generator=generator).tolist()
            if generator is not None
            else list(range(len(self)))
        )
        for start in range(skip * batch_size, len(order), batch_size):
            yield self.batch(order[start : start + batch_size])

    def with_progress(self, batches: Iterator, batch_size: int, show: bool, what: str) -> Iterator:
        """``batches`` with a bar on stderr when ``show``."""
        if not show:
            return batches
        return tqdm(batches, total=math.ceil(len(self) / batch_size), desc=what, unit="batch")

    def on_device(
        self,
        batch_size: int,
        device: torch.device,
        progress: bool,
        what: str,
        between: Callable[[], None] | None = None,
    ) -> Iterator[dict[str, torch.Tensor]]:
        """The batches in order, on ``device``, for prediction (a bar of ``what`` when ``progress``);
        ``between`` is called before each: the loop's check for a stop request."""
        for batch in self.with_progress(self.batches(batch_size), batch_size, progress, what):
            if between is not None:
                between()
            yield {k: v.to(device) for k, v in batch.items()}
