"""Stage 1 of ``advise``: read plain fine-tuning's curves and choose the budget every method gets.

A regulariser can only help where the plain model overfits: its validation metric peaks and then falls
(by more than ``PLATEAU``), or its validation loss climbs from its low (by more than ``LOSS_RISE``),
while the training loss keeps falling. A flat curve is not overfitting.
:func:`read_regime` says whether that happened within the long budget ``none`` was given, and chooses
the budget of the search and the confirmation from where the metric peaked:

    budget = ceil(1.5 x peak epoch) + 1, made odd, at least 3 and at most the epochs that were run

where the peak epoch is the first whose validation score is within ``PLATEAU`` (0.005) of the best (for
perplexity, where lower is better, "best" is the lowest and the margin 0.5% of it: :func:`plateau`): on
a plateau (SST-2-500: 0.840 at epoch 3, 0.844 at epoch 6) the model has learned what it will by its
start, and a noise-level gain later should not double every method's budget.

The margin lets a regularised model, which learns more slowly, peak later than the plain one; the odd
count makes AD-DROP's cross-tuning (plain, AD-DROP, plain, ... by epoch) end on a plain epoch. (Issue
28 chose 7 epochs for CoLA-500 and SST-2-500 by hand from these curves; the rule gives 7 for both.)
If the plain model does not overfit, the reading says so plainly: the regularisers have little room,
and the budget is every epoch that was run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..report.regime import EpochCurves
from ..tasks.metrics import higher_is_better

__all__ = ["RegimeReading", "choose_budget", "read_regime", "undertraining"]

#: the validation loss must climb this much above its low to count as rising (curves are noisy)
LOSS_RISE = 0.02
#: a validation score this close to the best counts as the peak (the first such epoch is the peak)
PLATEAU = 0.005


@dataclass(frozen=True)
class RegimeReading:
    """What plain fine-tuning's curves say, and the budget chosen from them."""

    metric: str
    epochs_run: int
    best_epoch: int
    peak_epoch: int  # the first epoch within PLATEAU of the best: what the budget is chosen from
    best_score: float
    last_score: float
    loss_low_epoch: int
    loss_low: float
    loss_last: float
    train_loss_first: float
    train_loss_last: float
    overfits: bool
    budget: int

    @property
    def sentence(self) -> str:
        """One plain sentence for the answer."""
        within = (
            f" (within {plateau(self.metric, self.best_score):.3g} of it from epoch {self.peak_epoch})"
            if self.peak_epoch != self.best_epoch
            else ""
        )
        peak = (
            f"plain fine-tuning's validation {self.metric} is best at epoch {self.best_epoch} of "
            f"{self.epochs_run}{within} ({self.best_score:.3f}, {self.last_score:.3f} at the last)"
        )
        loss = (
            f"validation loss lowest at epoch {self.loss_low_epoch} ({self.loss_low:.3f}, "
            f"{self.loss_last:.3f} at the last) while training loss falls {self.train_loss_first:.3f} -> "
            f"{self.train_loss_last:.3f}"
        )
        learning = (
            " Training loss hardly fell: the model is not learning with this recipe (try another learning rate "
            "or a longer budget) and no regulariser can fix that."
            if self.train_loss_last > 0.9 * self.train_loss_first
            else ""
        )
        if self.best_epoch == self.epochs_run:
            learning = (
                f" Its validation {self.metric} was still best at the last epoch: a longer --regime-epochs "
                "would show where it peaks." + learning
            )
        if self.overfits:
            return f"It overfits: {peak}; {loss}. Every method gets {self.budget} epochs.{learning}"
        return (
            f"It does NOT overfit within {self.epochs_run} epochs: {peak}; {loss}. Regularisers have little "
            f"room here (more data per step than the model can memorise, or too short a budget); every "
            f"method gets all {self.budget} epochs.{learning}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sentence": self.sentence}


def plateau(metric: str, best: float) -> float:
    """How close to the best a validation score counts as the peak: ``PLATEAU`` for a fraction (accuracy,
    MCC, ...), ``100 x PLATEAU`` points for a 0-100 score (BLEU, chrF, ROUGE), and ``PLATEAU`` of the best
    value, relative, for perplexity and the loss (lower is better; their scale is the model's)."""
    from ..report.comparison import metric_scale

    if not higher_is_better(metric):
        return PLATEAU * abs(best)
    return 100 * PLATEAU if metric_scale(metric) == 1 else PLATEAU


def choose_budget(peak_epoch: int, epochs_run: int) -> int:
    """``ceil(1.5 * peak) + 1``, odd, within [3, epochs_run], never below the peak (see the module docstring)."""
    budget = math.ceil(1.5 * peak_epoch) + 1
    budget += 1 - budget % 2  # odd
    budget = max(3, budget)
    if budget > epochs_run:  # odd if that keeps the peak inside the budget; the peak comes first
        budget = epochs_run if epochs_run % 2 == 1 or epochs_run - 1 < max(peak_epoch, 3) else epochs_run - 1
    return max(1, budget)


def read_regime(curves: EpochCurves) -> RegimeReading:
    """The reading of ``curves`` (one validation per epoch, as the regime stage runs ``none``)."""
    if len(curves.epochs) < 2:
        raise ValueError(
            f"the regime needs at least 2 validations (one per epoch) to read a trend; got {len(curves.epochs)}"
        )
    epochs_run = int(round(float(curves.epochs[-1])))
    best = curves.best
    low = int(np.argmin(curves.validation_loss))
    last = len(curves.epochs) - 1
    rose = float(curves.validation_loss[-1]) > float(curves.validation_loss[low]) + LOSS_RISE
    oriented = curves.oriented  # higher is better (perplexity: its negative)
    tolerance = plateau(curves.metric, float(curves.validation[best]))
    fell = float(oriented[best]) - float(oriented[last]) > tolerance
    overfits = fell or rose
    best_epoch = int(round(float(curves.epochs[best])))
    peak = int(np.argmax(oriented >= oriented[best] - tolerance))
    peak_epoch = int(round(float(curves.epochs[peak])))
    budget = choose_budget(peak_epoch, epochs_run) if overfits else epochs_run
    train_first = float(curves.train_loss[0]) if len(curves.train_loss) else float("nan")
    train_last = float(curves.train_loss[-1]) if len(curves.train_loss) else float("nan")
    return RegimeReading(
        metric=curves.metric,
        epochs_run=epochs_run,
        best_epoch=best_epoch,
        peak_epoch=peak_epoch,
        best_score=float(curves.validation[best]),
        last_score=float(curves.validation[-1]),
        loss_low_epoch=int(round(float(curves.epochs[low]))),
        loss_low=float(curves.validation_loss[low]),
        loss_last=float(curves.validation_loss[-1]),
        train_loss_first=train_first,
        train_loss_last=train_last,
        overfits=overfits,
        budget=budget,
    )


def undertraining(curve: dict[int, float], budget: int, metric: str, source: str) -> str | None:
    """Why ``budget`` undertrains, read off plain fine-tuning's validation ``curve`` (epoch -> score), or
    None where it does not (or where the curve cannot tell: a single validation).

    Model selection keeps the best validation, so what a budget gives is the best score up to it. It
    undertrains when that is still improving where the budget stops: where the curve goes on past the
    budget (the regime probe), when a later epoch beats the best up to the budget by more than the
    plateau margin (:func:`plateau`; a wiggle after an earlier peak is not a rise); where it ends at the
    budget, when its last epoch beats every earlier one by more than that margin. ``source`` names the
    curve in the sentence ("the regime probe", ...).
    """
    epochs = sorted(e for e in curve if e >= 1)
    if budget not in curve or len(epochs) < 2:
        return None
    sign = 1.0 if higher_is_better(metric) else -1.0
    within = [e for e in epochs if e <= budget]
    best_in = max(within, key=lambda e: sign * float(curve[e]))
    kept = float(curve[best_in])
    later = [e for e in epochs if e > budget]
    if later:
        best = max(later, key=lambda e: sign * float(curve[e]))
        if sign * (float(curve[best]) - kept) > plateau(metric, float(curve[best])):
            return (
                f"plain fine-tuning's validation {metric} is still improving where the budget stops (best "
                f"{kept:.3f} at epoch {best_in} within it, {float(curve[best]):.3f} at epoch {best} of {source})"
            )
        return None
    before = [e for e in within if e < budget]
    if not before:
        return None
    previous = max(before, key=lambda e: sign * float(curve[e]))
    at = float(curve[budget])
    if sign * (at - float(curve[previous])) > plateau(metric, at):
        return (
            f"plain fine-tuning's validation {metric} is still improving at the budget's last epoch "
            f"({float(curve[previous]):.3f} at epoch {previous}, {at:.3f} at epoch {budget}, {source})"
        )
    return None
