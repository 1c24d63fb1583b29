"""What every encoded split shares: its batches, in order or shuffled, resumable part-way.

:class:`Batches` is the base of the encoded data of every task kind (:mod:`attendout.encoding.classification`,
:mod:`attendout.encoding.generation`): a subclass says how many items it holds (``__len__``) and how
to pad a list of them into a batch (:meth:`Batches.batch`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch
from tqdm.auto import tqdm

__all__ = ["Batches"]


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
