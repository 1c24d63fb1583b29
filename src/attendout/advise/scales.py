"""How ``advise`` sizes a gain in each metric: its direction, its scale, ``--detect`` and the chance margin.

* Direction: :func:`attendout.tasks.metrics.higher_is_better` (lower is better for perplexity and the
  loss).
* Scale: a gain in a metric where lower is better (perplexity, the loss) is **relative**, a share of the
  plain run's value (a 2% fall: at perplexity 3,000 that is 60, at 20 it is 0.4); a gain in any other
  metric is in **absolute points**: 0.01 of a fraction (accuracy, F1, MCC, Pearson, Spearman: shown
  ×100) or 1 of a 0-100 score (BLEU, chrF, ROUGE).
* ``--detect``, the smallest gain a user cares about, is given on that scale: 0.02 is 2 points of
  accuracy or MCC, 2.0 is 2 BLEU, 0.02 is a 2% fall of perplexity. Default: :data:`DETECT_POINTS` (2).
* The chance margin: plain training within :data:`CHANCE_POINTS` (1) of the chance floor (a point, or 1%
  of the floor for a relative metric) has learned nothing worth judging a method on.
"""

from __future__ import annotations

from ..report.comparison import metric_scale
from ..tasks import higher_is_better

#: the default smallest gain a user cares about: 2 points (or 2%)
DETECT_POINTS = 2.0
#: plain training within this many points (or per cent) of the chance floor is at chance
CHANCE_POINTS = 1.0


def plain_name(model_init: str | None) -> str:
    """What the baseline is called: "plain training" from scratch, else "plain fine-tuning"."""
    return "plain training" if model_init == "scratch" else "plain fine-tuning"


def is_relative(metric: str) -> bool:
    """Whether a gain in ``metric`` is a share of its value: metrics where lower is better (perplexity,
    the loss), whose scale is the model's and the data's."""
    return not higher_is_better(metric)


def points(metric: str, count: float) -> float:
    """``count`` points of ``metric`` on its scale: ``count / 100`` of the value for a relative metric, else
    ``count`` display points (0.01 each of a fraction, 1 each of BLEU)."""
    return count / 100 if is_relative(metric) else count / metric_scale(metric)


def default_detect(metric: str) -> float:
    """The smallest gain a user cares about unless told: 2 points (0.02 of a fraction; 2 BLEU) or 2%."""
    return points(metric, DETECT_POINTS)


def in_metric_units(metric: str, amount: float, reference: float) -> float:
    """``amount`` on the metric's scale (:func:`default_detect`'s) as a difference of its values:
    ``amount x |reference|`` for a relative metric, ``amount`` itself for any other."""
    return amount * abs(reference) if is_relative(metric) else amount


def chance_margin(metric: str, floor: float) -> float:
    """How close to the chance ``floor`` (in the metric's values) counts as at chance: 1 point or 1%."""
    return in_metric_units(metric, points(metric, CHANCE_POINTS), floor)


def describe_amount(metric: str, amount: float) -> str:
    """``amount`` on the metric's scale for a sentence: "2 points" (×100 for a fraction) or "2%"."""
    if is_relative(metric):
        return f"{100 * amount:.3g}%"
    shown = metric_scale(metric) * amount
    return f"{shown:.3g} point{'' if shown == 1 else 's'}"
