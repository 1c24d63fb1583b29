"""Stage 4 of ``advise``: the answer in one sentence, its evidence, a figure and a config file.

First, whether an answer is possible at all. The answer says plainly that it cannot answer, what stands
in the way and what to do, instead of recommending, when (in this order; the sentence's own word in
quotes, for users and checks that look for it):

* plain fine-tuning is at "chance" level on the evaluation split: its mean score is within
  :data:`CHANCE_MARGIN` of always predicting the majority class (MCC 0): it learned nothing at this
  budget, and no regulariser can be judged on it;
* the budget "undertrain"s: plain fine-tuning's validation score is still rising where the budget stops
  (:func:`attendout.advise.regime.undertraining`);
* no method won and the design could not have detected a gain of ``detect`` (2 points by default): it
  then says how many seeds would detect +1 and +2 points at the noise it measured (:func:`seeds_needed`).

Otherwise the verdict follows the confirmation only: a method is recommended when its confirmed difference from
plain fine-tuning on the evaluation split is a gain (positive; negative for a metric where lower is
better, perplexity) with a Holm-adjusted p below ``alpha`` (the largest such gain if several are); otherwise the answer is plain fine-tuning, with the smallest true
gain the confirmation would have detected (80% power at Holm's strictest level), so "none of them"
says how large a gain could have hidden. The search's validation scores are shown too, but never
decide: they are the scores the settings were chosen on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ..configfile import save_config
from ..methods.registry import get_method_config
from ..report.comparison import metric_scale
from ..report.figures import method_colour
from ..tasks.metrics import higher_is_better
from .confirm import Confirmation, ConfirmRow
from .objective import SearchNoise
from .regime import RegimeReading
from .search import MethodSearch
from .spaces import Choice, describe, search_space

__all__ = [
    "CHANCE_MARGIN",
    "Verdict",
    "advice_figure",
    "advice_markdown",
    "default_detect",
    "paired_sd",
    "seeds_needed",
    "verdict",
]

#: plain fine-tuning within this much of the majority class's score (metric units) is at chance level
CHANCE_MARGIN = 0.01


@dataclass(frozen=True)
class Verdict:
    """The recommendation: a method's confirmed row, or None for plain fine-tuning."""

    winner: ConfirmRow | None
    sentence: str
    answered: bool = True  # False: the sentence says why no answer is possible (chance, undertrain, ...)


def _pts(value: float | None, signed: bool = True, metric: str = "") -> str:
    """A score or difference for display: ×100 for a fraction, as it is for perplexity, BLEU, ..."""
    if value is None or not math.isfinite(value):
        return "–"
    shown = metric_scale(metric) * value
    return f"{shown:+.1f}" if signed else f"{shown:.1f}"


def gain(metric: str, delta: float) -> float:
    """A paired difference (method minus plain) in the metric's direction: positive is better."""
    return delta if higher_is_better(metric) else -delta


def _p(value: float) -> str:
    return "–" if not math.isfinite(value) else ("< 0.001" if value < 0.001 else f"{value:.3f}")


def default_detect(metric: str) -> float:
    """The smallest gain a user cares about unless told: 2 points (0.02 of a fraction; 2 BLEU, 2 perplexity)."""
    return 2.0 / metric_scale(metric)


def seeds_needed(
    sd: float, delta: float, alpha: float = 0.05, comparisons: int = 1, power: float = 0.8, most: int = 200
) -> int | None:
    """The fewest seeds whose paired t-test, at Holm's strictest level (``alpha / comparisons``), detects a
    true difference ``delta`` with ``power``, for paired differences of standard deviation ``sd``; None if
    more than ``most`` would be needed or ``sd`` is unknown."""
    from ..report.stats import detectable_difference

    if not math.isfinite(sd) or delta <= 0:
        return None
    if sd == 0:
        return 2
    level = alpha / max(comparisons, 1)
    low, high = 2, most
    if detectable_difference(sd, high, level, power) > delta:
        return None
    while low < high:  # the detectable difference falls as n grows: bisect
        mid = (low + high) // 2
        if detectable_difference(sd, mid, level, power) <= delta:
            high = mid
        else:
            low = mid + 1
    return low


def paired_sd(confirmation: Confirmation) -> float:
    """The standard deviation of one seed's paired difference, pooled over the methods."""
    from ..report.stats import pooled_sd

    return pooled_sd([r.sd for r in confirmation.rows], [r.seeds for r in confirmation.rows])


def _chance(confirmation: Confirmation) -> str | None:
    """The 'chance' sentence, if plain fine-tuning scored within CHANCE_MARGIN of the majority class."""
    floor = confirmation.floor
    rows = confirmation.rows
    if floor is None or not rows or not higher_is_better(confirmation.metric):
        return None
    base = rows[0].baseline_mean
    if not math.isfinite(base) or base > floor + CHANCE_MARGIN:
        return None
    m = confirmation.metric
    return (
        f"Cannot answer: plain fine-tuning is at chance level on {confirmation.split} ({m} {base:.4f}; always "
        f"predicting the majority class scores {floor:.4f}), so it learned nothing at this budget and no "
        "method can be judged against it. Give it more epochs (or a learning rate it learns with), check the "
        "labels, then rerun advise in a new --output-dir."
    )


def _undetectable(confirmation: Confirmation, alpha: float, detect: float) -> str | None:
    """The sentence when no method won and the design could not detect a gain of ``detect``."""
    d = confirmation.detectable
    m = confirmation.metric
    if not math.isfinite(d) or d <= detect:
        return None
    sd = paired_sd(confirmation)
    k = metric_scale(m)
    family = len(confirmation.rows)
    needs = []
    for points in (1, 2):
        n = seeds_needed(sd, points / k, alpha, family)
        needs.append(
            f"{'more than 200' if n is None else n} seeds would detect {points:+d} point{'s' * (points > 1)}"
        )
    return (
        f"Cannot answer: this design cannot detect a gain you would care about: with {len(confirmation.seeds)} "
        f"seeds only a true difference of {_pts(d, False, m)} {m} points or more would have been detected (80% "
        f"power, Holm over {family}), and the smallest gain asked for is {_pts(detect, False, m)} points "
        f"(--detect). At the noise measured here ({_pts(sd, False, m)} points a seed), {needs[0]} and {needs[1]} "
        "(--seeds N, or --seeds auto); a larger evaluation split narrows the noise too."
    )


def verdict(
    confirmation: Confirmation,
    alpha: float = 0.05,
    *,
    detect: float | None = None,
    undertrained: str | None = None,
) -> Verdict:
    """The plain answer of a (complete or partial) confirmation; see the module docstring.

    ``undertrained``: why the budget undertrains (:func:`attendout.advise.regime.undertraining`), or None;
    ``detect``: the smallest gain a user cares about (default: :func:`default_detect`).
    """
    metric, split = confirmation.metric, confirmation.split
    up = higher_is_better(metric)
    partial = (
        "" if confirmation.complete else " (the confirmation is not complete yet: rerun advise to finish it)"
    )
    chance = _chance(confirmation)
    if chance is not None:
        return Verdict(None, chance + partial, answered=False)
    if undertrained is not None:
        return Verdict(
            None,
            f"Cannot answer: the budget undertrains: {undertrained}. A method judged here is judged on a model "
            "that has not finished learning; rerun advise with more --epochs (or without --epochs, so that the "
            f"probe chooses the budget) in a new --output-dir.{partial}",
            answered=False,
        )
    good = [
        r
        for r in confirmation.rows
        if gain(metric, r.delta) > 0 and math.isfinite(r.p_holm) and r.p_holm < alpha
    ]
    best = max(confirmation.rows, key=lambda r: gain(metric, r.delta), default=None)
    closest = (
        f" The closest, {best.method} at {best.setting}, gave {_pts(best.delta, True, metric)}"
        f"{'' if up else ' ' + metric} (p_Holm {_p(best.p_holm)})."
        if best is not None
        else ""
    )
    if good:
        w = max(good, key=lambda r: gain(metric, r.delta))
        half = (w.t_high - w.t_low) / 2
        cost = f", {w.cost:.2f}x the time of a plain run" if w.cost is not None else ""
        amount = f"{_pts(w.delta, True, metric)} ± {_pts(half, False, metric)}"
        what = (
            f"{amount} {metric} points over plain fine-tuning"
            if up
            else f"{metric} {amount} against plain fine-tuning (lower is better)"
        )
        return Verdict(
            w,
            f"Use {w.method} at {w.setting}: {what} on {split} (95% interval over {w.seeds} fresh seeds, "
            f"p_Holm {_p(w.p_holm)}{cost}).{partial}",
        )
    blind = _undetectable(confirmation, alpha, default_detect(metric) if detect is None else detect)
    if blind is not None:
        return Verdict(None, f"{blind}{closest}{partial}", answered=False)
    d = confirmation.detectable
    size = (
        f"a true gain of {_pts(d, False, metric)} {metric} points or more"
        if up
        else f"a true fall of {_pts(d, False, metric)} in {metric} or more"
    )
    power = (
        f"{size} would have been detected with 80% power"
        if math.isfinite(d) and d > 0
        else "the seeds' differences had no spread, so no detectable gain can be estimated"
    )
    return Verdict(
        None,
        f"None of them: no method's tuned setting beat plain fine-tuning on {split} over "
        f"{len(confirmation.seeds)} fresh seeds; {power}.{closest} Fine-tune plainly.{partial}",
    )


def advice_markdown(
    *,
    title: str,
    verdict: Verdict,
    regime: RegimeReading | None,
    searches: dict[str, MethodSearch],
    confirmation: Confirmation,
    provenance: Sequence[str],
    noise: SearchNoise | None = None,
    files: dict[str, str],
    commands: Sequence[str],
) -> str:
    """``advice.md``: the sentence, the confirmation table, the search, the regime, how it was made."""
    c = confirmation
    m = c.metric
    lines = [f"# {title}", "", f"**{verdict.sentence}**", ""]
    lines += [f"- {line}" for line in provenance]
    lines += [
        "",
        f"## Confirmed on {c.split} ({c.metric}{' ×100' if metric_scale(m) != 1 else ''}, "
        f"{'higher' if higher_is_better(m) else 'lower'} is better; fresh seeds {', '.join(map(str, c.seeds))})",
        "",
    ]
    lines += [
        "| method | setting | seeds | score | none | Δ | 95% interval (seeds) | p | p_Holm | bootstrap 95% (examples) | time / none |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(c.rows, key=lambda r: -gain(m, r.delta)):
        boot = (
            f"[{_pts(r.boot_low, True, m)}, {_pts(r.boot_high, True, m)}]" if r.boot_low is not None else "–"
        )
        cost = f"{r.cost:.2f}x" if r.cost is not None else "–"
        lines.append(
            f"| {r.method} | {r.setting} | {r.seeds} | {_pts(r.mean, False, m)} | {_pts(r.baseline_mean, False, m)} | "
            f"{_pts(r.delta, True, m)} | [{_pts(r.t_low, True, m)}, {_pts(r.t_high, True, m)}] | {_p(r.p)} | "
            f"{_p(r.p_holm)} | {boot} | {cost} |"
        )
    lines += [
        "",
        f"Δ: mean paired difference against none (method minus none, same seed"
        f"{'' if higher_is_better(m) else '; lower is better, so a gain is negative'}). p: paired t-test over "
        f"seeds; p_Holm: Holm over the {len(c.rows)} methods. Smallest true Δ (either way) detected with 80% power: "
        f"{_pts(c.detectable, False, m)} at Holm's strictest level, {_pts(c.detectable_alpha, False, m)} for a "
        "single comparison. Time: a method's "
        "mean wall time per run over none's (same steps, same machine), of the runs trained for this "
        "confirmation: runs copied in by --reuse-runs were timed elsewhere, so a method (or none) whose runs "
        "were all copied has no ratio (–).",
        "",
        "## Search (validation split carved from train; the settings were chosen on these scores)",
        "",
        *([noise.sentence(metric_scale(m)), ""] if noise is not None else []),
        "| method | searched | trials (complete / pruned / failed) | best setting | its score |",
        "|---|---|---|---|---|",
    ]
    for method, s in searches.items():
        counts = {
            state: sum(1 for t in s.trials if t["state"] == state) for state in ("COMPLETE", "PRUNED", "FAIL")
        }
        ranges = ", ".join(f"{k} {r.describe()}" for k, r in search_space(method).items())
        best = "–" if s.options is None else describe(method, s.options)
        value = "–" if s.value is None else f"{s.value:.4f}"
        lines.append(
            f"| {method} | {ranges} | {counts['COMPLETE']} / {counts['PRUNED']} / {counts['FAIL']} | {best} | {value} |"
        )
    reading = (
        regime.sentence
        if regime is not None
        else "Not probed: the budget was given (--epochs); --probe reads plain fine-tuning's curves first."
    )
    lines += ["", "## Regime (plain fine-tuning's curves)", "", reading, ""]
    lines += ["## Files", ""] + [f"- `{name}`: {what}" for name, what in files.items()]
    lines += ["", "## Commands", "", "```", *commands, "```", ""]
    return "\n".join(lines)


def advice_figure(
    out: Path,
    confirmation: Confirmation,
    searches: dict[str, MethodSearch],
    methods: Sequence[str],
    title: str,
    objective: str = "score",
    se: float | None = None,
) -> Path:
    """Left: Δ per method with its intervals (confirmation). Right: the search's validation score by rate."""
    fig = Figure(figsize=(11, 0.45 * max(3, len(methods)) + 2.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    rows = {r.method: r for r in confirmation.rows}
    m = confirmation.metric
    k = metric_scale(m)
    labels = []
    for y, method in enumerate(methods):
        colour = method_colour(y + 1, False)
        r = rows.get(method)
        labels.append(method if r is None else f"{method}\n{r.setting}")
        if r is None:
            continue
        if math.isfinite(r.t_low):
            left.plot([k * r.t_low, k * r.t_high], [y, y], color=colour, linewidth=5, alpha=0.5)
        if r.boot_low is not None:
            left.plot([k * r.boot_low, k * r.boot_high], [y - 0.18] * 2, color=colour, linewidth=1.2)
        left.plot([k * r.delta], [y], "o", color=colour)
        left.annotate(
            f"p_Holm {_p(r.p_holm)}",
            (k * r.delta, y),
            xytext=(0, 7),
            textcoords="offset points",
            ha="center",
            fontsize=7,
        )
    left.axvline(0, color="0.3", linewidth=1)
    left.set_yticks(range(len(methods)), labels, fontsize=8)
    left.set_ylim(len(methods) - 0.5, -0.5)  # top to bottom, one row a method, however few
    unit = " (×100)" if k != 1 else ""
    way = "" if higher_is_better(m) else "; lower is better: left of 0 is a gain"
    left.set_xlabel(f"Δ {m} vs none on {confirmation.split}{unit}{way}")
    left.set_title(
        f"confirmed on {len(confirmation.seeds)} fresh seeds\nthick: 95% over seeds; thin: bootstrap over examples",
        fontsize=9,
    )
    left.grid(axis="x", alpha=0.3)
    any_log = False
    up = objective != "delta-loss" and higher_is_better(m)
    rates = any(not isinstance(next(iter(search_space(m).values())), Choice) for m in methods)
    for i, method in enumerate(methods):
        s = searches.get(method)
        if s is None or not s.trials:
            continue
        option, rng = next(iter(search_space(method).items()))
        if isinstance(rng, Choice) and rates:
            continue  # a choice (synthesizer's variant) has no place on a rate axis; its table row has it
        any_log |= rng.log
        colour = method_colour(i + 1, False)
        done = [
            t
            for t in s.trials
            if t["state"] == "COMPLETE" and t["value"] is not None and option in t["params"]
        ]
        pruned = [t for t in s.trials if t["state"] == "PRUNED" and t["by_epoch"] and option in t["params"]]
        if se is not None and math.isfinite(se) and done:  # the objective's standard error, measured
            right.errorbar(
                [t["params"][option] for t in done],
                [t["value"] for t in done],
                yerr=se,
                fmt="none",
                ecolor=colour,
                alpha=0.5,
                capsize=3,
            )
        right.plot(
            [t["params"][option] for t in done],
            [t["value"] for t in done],
            "o",
            color=colour,
            label=f"{method} ({option})",
        )
        right.plot(
            [t["params"][option] for t in pruned],
            [(max if up else min)(t["by_epoch"].values()) for t in pruned],
            "o",
            mfc="none",
            color=colour,
        )
        if s.options is not None and s.value is not None:
            right.plot([s.options[option]], [s.value], "*", markersize=13, color=colour, mec="black")
    if any_log:
        from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

        right.set_xscale("log")
        right.xaxis.set_major_locator(FixedLocator([0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.9]))
        right.xaxis.set_major_formatter(ScalarFormatter())
        right.xaxis.set_minor_formatter(NullFormatter())
    right.set_xlabel("searched rate (the method's first option; AD-DROP: p)" if rates else "searched choice")
    right.set_ylabel("search objective (mean over the search seeds)")
    right.set_title(
        "search: filled = complete, hollow = pruned (best so far), star = chosen"
        + ("\nbars: ± the objective's standard error" if se is not None and math.isfinite(se) else ""),
        fontsize=9,
    )
    right.grid(alpha=0.3)
    if right.lines:
        right.legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    return out


def write_setting(path: Path, method: str, options: dict[str, Any], epochs: int, header: str) -> Path:
    """The setting as a config file (``finetune --config``, ``load_config``) with the budget in [training]."""
    return save_config(path, get_method_config(method, **options), {"epochs": epochs}, header)
