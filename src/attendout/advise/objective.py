"""What a search trial's score is: the objectives, a run's validation as they read it, and their noise.

**The objective** (``objective``, :data:`OBJECTIVES`). One seed's validation score moves by as much as
the effects being ranked (CoLA-500: plain fine-tuning's validation MCC spans 7.9-12.6 over five seeds),
so a trial is trained at ``repeats`` search seeds (``search_seed``, ``search_seed + 1000``, ...), and
plain fine-tuning is trained once at each of them (``OUTPUT/search/none/seed-S``, shared by every
trial). The default objective, ``delta``, is the method's best validation score minus plain
fine-tuning's at the same seed, averaged over the seeds: the same seed means the same head
initialisation, the same batch order and the same validation examples, so the part of the noise they
share cancels in the difference. ``delta-loss`` is the same difference of the lowest validation loss
(a smoother criterion than a thresholded metric on a few hundred examples); ``score`` is the mean
validation score itself (v0.4's objective, one seed by default then). :func:`search_noise` measures
the objective's own noise, the standard error of a trial's score, from the spread of each trial's
per-seed values; ``advice.md`` states it, so that a user sees which settings the search could tell
apart.

This module holds the parts that train nothing: the objectives and their direction, the seeds, reading a finished run's validations, one
seed's score and the score at an epoch (what the pruner sees), and :class:`SearchNoise`, the
objective's own standard error measured from the spread of each trial's seeds, with the chance a
search keeps a setting that is truly better than the others (:func:`chance_to_find`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.folder import RunDir
from ..report.comparison import metric_scale
from ..report.stats import pooled_sd
from ..tasks import higher_is_better
from .options import OBJECTIVES
from .plan import MethodSearch, SearchPlan
from .power import comparison_sd


def study_direction(metric: str, objective: str = "score") -> str:
    """Optuna's direction for ``objective`` on a validation ``metric``: "maximize", or "minimize" where lower
    is better (the loss; perplexity)."""
    if objective == "delta-loss":
        return "minimize"
    return "maximize" if higher_is_better(metric) else "minimize"


def objective_better(plan: SearchPlan) -> int:
    """+1 where a higher objective is better, -1 where lower is."""
    return 1 if study_direction(plan.metric, plan.study.objective) == "maximize" else -1


@dataclass(frozen=True)
class Measured:
    """A finished run's validation, as the objective reads it."""

    best: float  # the validation metric of the model selection kept (results.json)
    lowest_loss: float
    by_epoch: dict[int, dict[str, float]]  # epoch -> the validation at its end (metric, loss)


def measured(run_dir: Path, metric: str) -> Measured:
    results = RunDir(run_dir).read_results()
    by_epoch = {int(round(float(r["epoch"]))): r["validation"] for r in validations(run_dir)}
    losses = [float(v["loss"]) for v in by_epoch.values() if "loss" in v]
    return Measured(
        best=float(results["validation"][metric]),
        lowest_loss=min(losses) if losses else float("nan"),
        by_epoch=by_epoch,
    )


def score(plan: SearchPlan, run: Measured, ref: Measured | None) -> float:
    """One seed's objective (see OBJECTIVES)."""
    if plan.study.objective == "score":
        return run.best
    assert ref is not None
    if plan.study.objective == "delta-loss":
        return run.lowest_loss - ref.lowest_loss
    return run.best - ref.best


def score_at(
    plan: SearchPlan, validation: dict[str, float], ref: Measured | None, epoch: int
) -> float | None:
    """The objective at one epoch's validation (what the pruner sees); None where the reference has none."""
    if plan.study.objective == "score":
        return float(validation[plan.metric])
    assert ref is not None
    base = ref.by_epoch.get(epoch)
    if base is None:
        return None
    key = "loss" if plan.study.objective == "delta-loss" else plan.metric
    return float(validation[key]) - float(base[key])


def objective_name(plan: SearchPlan) -> str:
    return {
        "delta": f"Δ validation {plan.metric} vs none",
        "delta-loss": "Δ validation loss vs none",
        "score": f"validation {plan.metric}",
    }[plan.study.objective]


def validations(run_dir: Path) -> list[dict[str, Any]]:
    run = RunDir(run_dir)
    return run.validations() if run.log.is_file() else []


@dataclass(frozen=True)
class SearchNoise:
    """The search objective's own noise: how far one trial's score is from what more seeds would give.

    Two measures. ``sd``: one seed's score about its trial's mean, pooled over the trials (for ``delta``,
    the spread of one seed's paired difference, plain run's noise included). ``own_sd``: the part of it
    that is the trial's own (:func:`.power.comparison_sd`, the residual of a trial + seed fit): every
    trial is paired with the same plain runs at the same seeds, so when two trials are compared the plain
    runs' noise and each seed's shared part cancel, and only this part decides which one the search
    keeps. :attr:`se` and what follows from it use ``own_sd`` where there are two complete trials to
    measure it on, else ``sd`` (an upper bound)."""

    objective: str
    metric: str
    seeds: tuple[int, ...]
    sd: float  # of one seed's score about its trial's mean, pooled over trials (NaN: fewer than 2 seeds)
    trials: int  # complete trials pooled
    reference: dict[int, float]  # plain fine-tuning's best validation metric at each search seed (paired)
    own_sd: float = float("nan")  # the trials' own noise: the residual sd of a trial + seed fit
    own_df: float = 0.0  # its degrees of freedom, (trials - 1)(seeds - 1)
    plain: str = "plain fine-tuning"  # what the reference is called ("plain training" from scratch)

    @property
    def comparable(self) -> bool:
        """Whether the trials' own noise was measured (two complete trials over the same seeds)."""
        return math.isfinite(self.own_sd) and self.own_df > 0

    @property
    def se(self) -> float:
        """The standard error of a trial's score (the mean over its seeds) when it is compared with another
        trial's: from ``own_sd`` where measured, else from ``sd`` (which overstates it)."""
        sd = self.own_sd if self.comparable else self.sd
        return sd / math.sqrt(len(self.seeds)) if math.isfinite(sd) else float("nan")

    @property
    def resolution(self) -> float:
        """Two trials' true scores this far apart differ by 2 standard errors of their difference, the
        smallest gap the search separates more often than not (2 x sqrt(2) x se)."""
        return 2 * math.sqrt(2) * self.se

    def chance_to_find(self, gap: float, settings: int) -> float:
        """The probability that the search keeps the best of ``settings`` tried settings when it is truly
        ``gap`` better than the others (which tie), each trial's score off by its standard error,
        independently: P = integral phi(z) Phi(z + gap / se)^(settings - 1) dz."""
        return chance_to_find(gap, self.se, settings)

    def sentence(self, scale: float | None = None) -> str:
        """One sentence for ``advice.md``: the objective and its standard error (``scale``: x100 for a fraction;
        by default, the metric's :func:`~attendout.report.comparison.metric_scale`)."""
        scale = metric_scale(self.metric) if scale is None else scale
        what = OBJECTIVES[self.objective].format(metric=self.metric, plain=self.plain)
        seeds = ", ".join(map(str, self.seeds))
        head = f"Search objective: {what}, averaged over the search seeds ({seeds})"
        if not math.isfinite(self.sd):
            reason = (
                "one seed per trial, so its noise cannot be measured (--search-repeats 2 measures it)"
                if len(self.seeds) < 2
                else "no complete trial to measure its noise on yet"
            )
            return f"{head}; {reason}."
        unit = "" if scale == 1 or self.objective == "delta-loss" else " points"
        k = 1.0 if self.objective == "delta-loss" else scale
        gap = 2.0 * self.se if self.objective == "delta-loss" else 2.0 / scale  # 2 points of the metric
        measured_on = (
            f"from the part of each trial's per-seed scores that is its own ({self.trials} complete trials: "
            "the plain runs and each seed's share, common to every trial, cancel between trials)"
            if self.comparable
            else f"from the spread of each trial's seeds ({self.trials} complete trial(s): without two over "
            "the same seeds, the part common to every trial cannot be taken out, so this overstates it)"
        )
        return (
            f"{head}. Its standard error for comparing two settings, {measured_on}: {k * self.se:.2g}{unit} "
            f"(one seed's paired difference, plain run included: {k * self.sd:.2g}); settings whose true "
            f"scores differ by less than about {k * self.resolution:.2g}{unit} could not be told apart by this "
            f"search (a setting {k * gap:.2g}{unit} better than 7 others would be kept with probability "
            f"{self.chance_to_find(gap, 8):.2f})."
        )


def search_noise(plan: SearchPlan, searches: dict[str, MethodSearch]) -> SearchNoise:
    """The objective's noise, measured on the complete trials' per-seed scores (see :class:`SearchNoise`)."""
    import numpy as np

    sds: list[float] = []
    ns: list[int] = []
    table: list[list[float]] = []  # complete trials x search seeds, for their own noise
    for s in searches.values():
        for t in s.trials:
            by_seed = t.get("by_seed", {})
            values = list(by_seed.values())
            if t["state"] == "COMPLETE" and len(values) >= 2:
                sds.append(float(np.std(values, ddof=1)))
                ns.append(len(values))
                row = [by_seed.get(seed, by_seed.get(str(seed))) for seed in plan.seeds]
                if all(v is not None for v in row):
                    table.append([float(v) for v in row])
    runs = {seed: reference_dir(plan, seed) for seed in plan.seeds} if plan.paired else {}
    reference = {seed: measured(run, plan.metric).best for seed, run in runs.items() if RunDir(run).finished}
    own = comparison_sd(table)
    return SearchNoise(
        objective=plan.study.objective,
        metric=plan.metric,
        seeds=plan.seeds,
        sd=pooled_sd(sds, ns) if sds else float("nan"),
        trials=len(sds),
        reference=reference,
        own_sd=own.sd,
        own_df=own.df,
        plain=plan.study.plain,
    )


def chance_to_find(gap: float, se: float, settings: int) -> float:
    """See :meth:`SearchNoise.chance_to_find` (NaN for an unknown ``se``; 1 or 1/settings for se 0)."""
    import numpy as np
    from scipy import special

    if settings < 1:
        raise ValueError(f"settings must be at least 1, got {settings}")
    if settings == 1:
        return 1.0
    if not math.isfinite(se):
        return float("nan")
    if se == 0:
        return 1.0 if gap > 0 else 1.0 / settings
    z, w = _hermite_nodes()
    value = np.sum(w * special.ndtr(z + gap / se) ** (settings - 1)) / math.sqrt(2 * math.pi)
    return float(min(max(value, 0.0), 1.0))


@functools.lru_cache(maxsize=1)
def _hermite_nodes():
    """Gauss-Hermite nodes of weight exp(-z^2 / 2), the standard normal's (computed once)."""
    import numpy as np

    return np.polynomial.hermite_e.hermegauss(160)


def reference_dir(plan: SearchPlan, seed: int) -> Path:
    """Plain fine-tuning's run at a search seed: every trial's score at that seed is paired with it."""
    return plan.study.out / "search" / "none" / f"seed-{seed}"
