"""What every encoded split shares: its batches, in order or shuffled, resumable part-way.

:class:`Batches` is the base of the encoded data of every task kind (:mod:`attendout.encoding.classification`,
:mod:`attendout.encoding.lm_seq2seq`): a subclass says how many items it holds (``__len__``) and how
to pad a list of them into a batch (:meth:`Batches.batch`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

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

    def examples_count(self) -> int:
        """How many examples the predictions are for (a kind whose items are windows or blocks of its
        examples folds them back into these)."""
        return len(self)

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

    #: what predicting is, for the progress bar
    predicting = "predicting"

    @torch.no_grad()
    def predict(
        self,
        model: nn.Module,
        batch_size: int,
        device: torch.device,
        autocast_dtype: torch.dtype | None = None,
        progress: bool = False,
        between: Callable[[], None] | None = None,
    ) -> tuple[Any, Any, float | None]:
        """``model`` (in eval mode) over the batches in order: (predictions, scores, mean loss; None
        without labels), as each kind makes them (:func:`attendout.encoding.classification.predict_batches`).
        ``progress`` shows a bar of the batches (on stderr); ``between`` is called before each batch: the
        loop's check for a stop request, which ends a long evaluation at the next batch by raising."""
        model.eval()
        batches = self.batches(batch_size)
        if progress:
            batches = tqdm(
                batches, total=math.ceil(len(self) / batch_size), desc=self.predicting, unit="batch"
            )

        def on_device() -> Iterator[dict[str, torch.Tensor]]:
            for batch in batches:
                if between is not None:
                    between()
                yield {k: v.to(device) for k, v in batch.items()}

        def autocast() -> torch.autocast:
            return torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None)

        return self._predictions(model, on_device(), autocast)

    def _predictions(
        self, model: nn.Module, batches: Iterator[dict[str, torch.Tensor]], autocast: Callable[[], Any]
    ) -> tuple[Any, Any, float | None]:
        """:meth:`predict`'s result from ``batches`` (on the device), calling the model in ``autocast()``."""
        raise NotImplementedError
