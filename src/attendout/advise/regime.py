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

Whether a budget stops while plain training still learns (it undertrains) is read off the slope of its
validation curve where the budget stops, against the curve's own noise (:func:`read_trend`): "still
learning", "not rising", or, with fewer than four validations to read, "cannot tell".
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..report.comparison import metric_scale
from ..report.regime import EpochCurves
from ..tasks import higher_is_better

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
    plain: str = "plain fine-tuning"  # "plain training" for a model trained from scratch

    @property
    def sentence(self) -> str:
        """One plain sentence for the answer."""
        within = (
            f" (within {plateau(self.metric, self.best_score):.3g} of it from epoch {self.peak_epoch})"
            if self.peak_epoch != self.best_epoch
            else ""
        )
        peak = (
            f"{self.plain}'s validation {self.metric} is best at epoch {self.best_epoch} of "
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


#: a trend is read from at least this many validations (a slope, and the noise from 2 second differences)
TREND_VALIDATIONS = 4
#: one-sided level of the test that the validation score still rises where the budget stops
TREND_ALPHA = 0.025
LEARNING, FLAT, UNKNOWN = "still learning", "not rising", "cannot tell"


@dataclass(frozen=True)
class Trend:
    """Plain training's validation trend where the budget stops, read by :func:`read_trend`."""

    state: str  # LEARNING, FLAT or UNKNOWN
    metric: str
    budget: int
    source: str  # which curve: "the 12-epoch regime probe", ...
    epochs: tuple[int, ...] = ()  # the window the slope is fit on
    slope: float = float("nan")  # per epoch, in the metric's values (perplexity: negative as it falls)
    se: float = float("nan")
    plain: str = "plain fine-tuning"
    validations: int = 0

    @property
    def learning(self) -> bool:
        return self.state == LEARNING

    @property
    def evidence(self) -> str:
        """The slope and where it was read: "validation accuracy +0.40 ± 0.05 points an epoch over epochs
        4-7 of the 7-epoch regime probe" (empty when it cannot be told)."""
        if self.state == UNKNOWN:
            return ""
        k = metric_scale(self.metric)
        unit = " points" if k != 1 else ""
        return (
            f"validation {self.metric} {k * self.slope:+.2g} ± {k * self.se:.2g}{unit} an epoch over epochs "
            f"{self.epochs[0]}-{self.epochs[-1]} of {self.source}"
        )

    @property
    def sentence(self) -> str:
        """What the curve says, in one clause."""
        if self.state == UNKNOWN:
            why = (
                f"{self.validations} validation(s) to read ({self.source}), and a trend needs {TREND_VALIDATIONS}"
                if self.validations < TREND_VALIDATIONS
                else f"{self.source} has no validation at epoch {self.budget}, or no three consecutive ones"
            )
            epochs = f"{self.budget} epoch{'s' * (self.budget != 1)}"
            return f"whether {self.plain} is still learning at {epochs} cannot be told: {why}"
        if self.learning:
            return f"{self.plain} is still learning where the budget stops ({self.evidence})"
        return f"{self.plain} no longer improves significantly where the budget stops ({self.evidence})"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "sentence": self.sentence}


def read_trend(
    curve: dict[int, float], budget: int, metric: str, source: str, plain: str = "plain fine-tuning"
) -> Trend:
    """Whether plain training still learns where ``budget`` stops, read off its validation ``curve``
    (epoch -> score; ``source`` names it in the sentence).

    The slope: least squares over the validations within half a budget of the budget's end (epochs
    budget/2 to 1.5 x budget; widened to the :data:`TREND_VALIDATIONS` nearest the end where fewer).
    Its standard error: the curve's own epoch-to-epoch noise, from its second differences over the whole
    curve (independent noise of sd s gives second differences of variance 6 s²; a bend adds to them, so
    the reading errs towards "not rising"), with as many degrees of freedom as second differences.
    Still learning: the slope is positive in the metric's direction with one-sided p below
    :data:`TREND_ALPHA`, and half a budget more at that rate would gain more than the plateau margin
    (:func:`plateau`). Fewer than :data:`TREND_VALIDATIONS` validations: "cannot tell", not "no".
    """
    epochs = sorted(e for e in curve if e >= 1)
    if budget not in curve or len(epochs) < TREND_VALIDATIONS:
        return Trend(UNKNOWN, metric, budget, source, plain=plain, validations=len(epochs))
    noise, df = _epoch_noise(curve, epochs)
    if not math.isfinite(noise):  # no three consecutive epochs: no noise to set the slope against
        return Trend(UNKNOWN, metric, budget, source, plain=plain, validations=len(epochs))
    from scipy.stats import t as student_t

    window = _window(epochs, budget)
    sign = 1.0 if higher_is_better(metric) else -1.0
    x = np.array(window, dtype=np.float64)
    y = sign * np.array([curve[e] for e in window], dtype=np.float64)
    sxx = float(np.sum((x - x.mean()) ** 2))
    slope = float(np.sum((x - x.mean()) * (y - y.mean())) / sxx)
    se = noise / math.sqrt(sxx)
    rises = slope > 0 if se == 0 else slope / se > float(student_t.ppf(1 - TREND_ALPHA, df))
    worth = slope * budget / 2 > plateau(metric, float(curve[budget]))
    state = LEARNING if rises and worth else FLAT
    return Trend(state, metric, budget, source, tuple(window), sign * slope, se, plain, len(epochs))


def _window(epochs: list[int], budget: int) -> list[int]:
    """The validated epochs within half a budget of its end, or the TREND_VALIDATIONS nearest to it."""
    near = [e for e in epochs if abs(e - budget) <= budget / 2]
    if len(near) < TREND_VALIDATIONS:
        near = sorted(epochs, key=lambda e: (abs(e - budget), e))[:TREND_VALIDATIONS]
    return sorted(near)


def _epoch_noise(curve: dict[int, float], epochs: list[int]) -> tuple[float, int]:
    """The sd of one validation about the curve's trend, from the second differences of consecutive
    epochs (sqrt(mean(d²) / 6)), and their count (the degrees of freedom)."""
    seconds = [
        float(curve[e + 1]) - 2 * float(curve[e]) + float(curve[e - 1])
        for e in epochs
        if e - 1 in curve and e + 1 in curve
    ]
    if not seconds:
        return float("nan"), 0
    return math.sqrt(float(np.mean(np.square(seconds))) / 6), len(seconds)
