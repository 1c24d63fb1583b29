"""Plain training's validation trend where an advise study's budget stops: the regime probe's curve if it
ran, else the mean curve of the search's plain runs (:func:`plain_trend`), read by
:func:`attendout.advise.regime.read_trend`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.folder import RunDir
from .objective import measured, reference_dir
from .regime import RegimeReading, Trend, read_trend

if TYPE_CHECKING:
    from .options import AdviseConfig
    from .plan import SearchPlan


def _reference_curve(plan: SearchPlan) -> dict[int, float]:
    """Plain fine-tuning's validation score by epoch, averaged over the search seeds' reference runs."""
    sums: dict[int, list[float]] = {}
    for seed in plan.seeds:
        run = reference_dir(plan, seed)
        if RunDir(run).finished:
            for epoch, validation in measured(run, plan.metric).by_epoch.items():
                sums.setdefault(epoch, []).append(float(validation[plan.metric]))
    return {e: sum(v) / len(v) for e, v in sums.items()}


def plain_trend(config: AdviseConfig, plan: SearchPlan, regime: RegimeReading | None) -> Trend | None:
    """Plain training's validation trend where the budget stops (the probe's curve if it ran, else the mean
    of the search's plain runs); None where neither was run (a search that scores without plain runs)."""
    from ..report.regime import epoch_curves

    plain = config.plain
    if regime is not None:
        curves = epoch_curves(config.regime_dir)
        curve = {
            int(round(float(e))): float(v) for e, v in zip(curves.epochs, curves.validation, strict=True)
        }
        source = f"the {regime.epochs_run}-epoch regime probe"
        return read_trend(curve, plan.epochs, plan.metric, source, plain)
    if not plan.paired:
        return None
    source = f"the search's plain runs (seeds {', '.join(map(str, plan.seeds))}, their mean)"
    return read_trend(_reference_curve(plan), plan.epochs, plan.metric, source, plain)
