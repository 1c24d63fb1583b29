"""How a game scores a model: per-sample scores and the main metric on validation samples, in eval mode.

The Defender and the Attacker are scored alike, on the same samples, by the reward kind: a classifier's
per-sample scores by :func:`~.game.batch_scores`; a generation model's (``lm``, ``seq2seq``) by the mean
log-likelihood of each sample's gold next tokens ('correct': the share predicted right), with the
per-token perplexity of the samples as the metric.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..nexttoken import label_log_likelihood
from .game import GameScores, batch_scores, collect_scores, perplexity

if TYPE_CHECKING:
    from ...contract import LoopContext
    from ...tasks import Task


@torch.no_grad()
def score_classifier(
    model: nn.Module, data: Any, indices: list[int], loop: LoopContext, task: Task, reward: str
) -> GameScores:
    """``model``'s per-sample scores (``reward`` kind) and ``task``'s main metric on ``data[indices]``."""
    model.eval()
    per_sample: list[torch.Tensor] = []
    predictions: list[Any] = []
    golds: list[Any] = []
    for start in range(0, len(indices), loop.eval_batch_size):
        batch = data.batch(indices[start : start + loop.eval_batch_size])
        labels = batch.pop("labels").to(loop.device)
        with loop.autocast():
            logits = model(**{k: v.to(loop.device) for k, v in batch.items()}).logits.float()
        scores, predicted, gold = batch_scores(logits, labels, task.kind, reward)
        per_sample.append(scores)
        predictions += predicted
        golds += gold
    return collect_scores(per_sample, predictions, golds, task)


@torch.no_grad()
def score_generation(
    model: nn.Module, data: Any, indices: list[int], loop: LoopContext, generation: str, reward: str
) -> GameScores:
    """A generation ``model``'s per-sample gold-token log-likelihood ('correct': share of gold tokens
    predicted) and the samples' per-token perplexity on ``data[indices]``."""
    model.eval()
    per_sample, likelihoods, counts = [], [], []
    for start in range(0, len(indices), loop.eval_batch_size):
        batch = data.batch(indices[start : start + loop.eval_batch_size])
        batch = {k: v.to(loop.device) for k, v in batch.items()}  # labels too: a decoder reads them
        with loop.autocast():
            logits = model(**batch).logits
        likelihood, hits, count = label_log_likelihood(logits, batch, generation)
        per_sample.append(hits if reward == "correct" else likelihood)
        likelihoods.append(likelihood)
        counts.append(count)
    return GameScores(torch.cat(per_sample).cpu(), perplexity(likelihoods, counts))
