"""Data encoding for the loop: tokenised examples, dynamically padded batches, batched prediction."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from .tasks import Examples

__all__ = ["Encoded", "predict_batches"]


class Encoded:
    """Tokenised examples (no padding), batched with dynamic padding."""

    def __init__(self, examples: Examples, tokenizer, max_length: int, regression: bool):
        pair = examples.text_b
        enc = tokenizer(
            examples.text_a,
            pair,
            truncation=True,
            max_length=max_length,
            padding=False,
            return_token_type_ids=None,
        )
        self.features = [{k: enc[k][i] for k in enc.keys()} for i in range(len(examples))]
        # Unlabelled examples (``labels`` None: text to predict) give batches without labels.
        self.labels = (
            None
            if examples.labels is None
            else torch.tensor(examples.labels, dtype=torch.float if regression else torch.long)
        )
        self.tokenizer = tokenizer

    def __len__(self) -> int:
        return len(self.features)

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        batch = self.tokenizer.pad([self.features[i] for i in indices], padding=True, return_tensors="pt")
        if self.labels is not None:
            batch["labels"] = self.labels[indices]
        return dict(batch)

    def batches(
        self, batch_size: int, generator: torch.Generator | None = None, skip: int = 0
    ) -> Iterator[dict[str, torch.Tensor]]:
        """Batches in order (or shuffled by ``generator``), leaving out the first ``skip``."""
        order = (
            torch.randperm(len(self), generator=generator).tolist()
            if generator is not None
            else range(len(self))
        )
        order = list(order)
        for start in range(skip * batch_size, len(order), batch_size):
            yield self.batch(order[start : start + batch_size])


@torch.no_grad()
def predict_batches(
    model: nn.Module,
    data: Encoded,
    batch_size: int,
    device: torch.device,
    autocast_dtype: torch.dtype | None = None,
    *,
    regression: bool = False,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray, float | None]:
    """Run ``model`` (in eval mode) over ``data`` in order: (predictions, scores, mean loss).

    Classification: predictions are class indices, scores the softmax probabilities [n, classes].
    Regression: both are the predicted values [n]. The loss is ``None`` for unlabelled data.
    ``progress`` shows a bar of the batches (on stderr).
    """
    model.eval()
    preds, scores, losses = [], [], []
    batches = data.batches(batch_size)
    if progress:
        batches = tqdm(batches, total=math.ceil(len(data) / batch_size), desc="predicting", unit="batch")
    for batch in batches:
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.autocast(device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
            out = model(**batch)
        logits = out.logits.float()
        if out.loss is not None:
            losses.append(out.loss.float() * len(logits))
        if regression:
            values = logits.squeeze(-1)
            preds.append(values.cpu())
            scores.append(values.cpu())
        else:
            preds.append(logits.argmax(-1).cpu())
            scores.append(torch.softmax(logits, -1).cpu())
    loss = (torch.stack(losses).sum() / len(data)).item() if losses else None
    return torch.cat(preds).numpy(), torch.cat(scores).numpy(), loss
