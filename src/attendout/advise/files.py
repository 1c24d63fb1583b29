"""The answer's files: ``advice.md`` (the sentence and its evidence), ``advice.png`` and the settings as
config files (``advice.toml``, ``tuned/METHOD.toml``); the sentence itself is :func:`.answer.verdict`'s."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from ..configfile import save_config
from ..methods import get_method_config
from ..report.canvas import save_png
from ..report.comparison import metric_scale
from ..report.figures import method_colour
from ..report.render import format_interval, format_value, markdown_table
from ..tasks import higher_is_better
from .answer import Verdict, format_p, gain
from .confirm import Confirmation, ConfirmRow
from .objective import SearchNoise
from .plan import MethodSearch
from .regime import RegimeReading, Trend
from .scales import CHANCE_POINTS, describe_amount, points
from .spaces import Choice, describe, search_space


def advice_markdown(
    title: str,
    verdict: Verdict,
    regime: RegimeReading | None,
    searches: dict[str, MethodSearch],
    confirmation: Confirmation,
    *,
    provenance: Sequence[str],
    noise: SearchNoise | None = None,
    files: dict[str, str],
    commands: Sequence[str],
    trend: Trend | None = None,
    caveats: Sequence[str] = (),
) -> str:
    """``advice.md``: the sentence, what limits it (``caveats``, a paragraph each), the confirmation table,
    the search, the regime and the budget's trend, how it was made."""
    lines = [f"# {title}", "", f"**{verdict.sentence}**", ""]
    for caveat in caveats:
        lines += [caveat, ""]
    lines += [f"- {line}" for line in provenance]
    lines += _confirmation_section(confirmation)
    lines += _search_section(searches, noise)
    lines += _regime_section(regime, trend, confirmation.plain)
    lines += ["## Files", ""] + [f"- `{name}`: {what}" for name, what in files.items()]
    lines += ["", "## Commands", "", "```", *commands, "```", ""]
    return "\n".join(lines)


#: The confirmation table's columns: each one's title, and its cell of a method's row (``m``: the metric).
_CONFIRMATION_COLUMNS: dict[str, Callable[[ConfirmRow, str], str]] = {
    "method": lambda r, m: r.method,
    "setting": lambda r, m: r.setting,
    "seeds": lambda r, m: str(r.seeds),
    "score": lambda r, m: format_value(r.mean, m),
    "none": lambda r, m: format_value(r.baseline_mean, m),
    "Δ": lambda r, m: format_value(r.delta, m, True),
    "95% interval (seeds)": lambda r, m: format_interval(r.t_low, r.t_high, m),
    "p": lambda r, m: format_p(r.p),
    "p_Holm": lambda r, m: format_p(r.p_holm),
    "bootstrap 95% (examples)": lambda r, m: (
        "–" if r.boot_low is None else format_interval(r.boot_low, r.boot_high, m)
    ),
    "time / none": lambda r, m: "–" if r.cost is None else f"{r.cost:.2f}x",
}


def _floor_sentence(c: Confirmation) -> str:
    """What the chance floor is on the confirmation's split, or that it is unknown."""
    m = c.metric
    if c.floor is None:
        return (
            f"Chance floor: not known for {m} (none is computed for the loss; BLEU, chrF and ROUGE need the sources, "
            "and perplexity the unigram model's score, that runs store since issue 57; a classifier's needs its "
            f"stored labels), so whether {c.plain} learned more than a trivial output would is not checked."
        )
    return (
        f"Chance floor: {format_value(c.floor, m)} on {c.split}, {c.floor_what} "
        f"({c.floor_constant}); {c.plain} within {describe_amount(m, points(m, CHANCE_POINTS))} of it is at chance."
    )


def _not_fresh(c: Confirmation) -> str:
    """The warning over a confirmation table some of whose runs were copied in by --reuse-runs."""
    total = len(c.table.runs) if c.table is not None else len(c.reused)
    return (
        f"**Runs not fresh to this study:** {len(c.reused)} of its {total} runs were copied in by --reuse-runs from "
        "another results folder (another study's or a grid's), not trained for this one. If those runs' scores had a part in "
        "choosing what is tested here (a recipe, a method, a setting), this table judges the choice on the runs "
        "it was chosen on and overstates it: confirm on seeds the other study never ran (--confirm-seeds)."
    )


def _confirmation_section(c: Confirmation) -> list[str]:
    m = c.metric
    return [
        "",
        f"## Confirmed on {c.split} ({m}{' ×100' if metric_scale(m) != 1 else ''}, "
        f"{'higher' if higher_is_better(m) else 'lower'} is better; {'fresh ' if c.fresh else ''}seeds "
        f"{', '.join(map(str, c.seeds))})",
        "",
        *([] if c.fresh else [_not_fresh(c), ""]),
        *markdown_table(
            list(_CONFIRMATION_COLUMNS),
            [
                [cell(r, m) for cell in _CONFIRMATION_COLUMNS.values()]
                for r in sorted(c.rows, key=lambda r: -gain(m, r.delta))
            ],
        ),
        "",
        f"Δ: mean paired difference against none (method minus none, same seed"
        f"{'' if higher_is_better(m) else '; lower is better, so a gain is negative'}). p: paired t-test over "
        f"seeds; p_Holm: Holm over the {len(c.rows)} methods. Smallest true Δ (either way) detected with 80% "
        f"power: {format_value(c.detectable, m)} at Holm's strictest level, "
        f"{format_value(c.detectable_alpha, m)} for a single comparison, both at the "
        f"{100 * c.confidence:.0f}% upper bound of the seeds' noise (one seed's paired difference: sd "
        f"{format_value(c.noise.sd, m)}, {c.noise.df:.3g} degrees of freedom; bound "
        f"{format_value(c.noise.upper(c.confidence), m)}), so the 80% holds in "
        f"{100 * c.confidence:.0f}% of studies. Time: a method's mean wall time "
        "per run over none's (same steps, same machine), of the runs trained for this confirmation: runs copied "
        "in by --reuse-runs were timed elsewhere, so a method (or none) whose runs were all copied has no ratio "
        "(–).",
        "",
        *_kept_steps(c),
        _floor_sentence(c),
        "",
    ]


def _kept_steps(c: Confirmation) -> list[str]:
    """Which step's model each confirmation run kept, by method and seed: where model selection keeps the
    best validation, a Δ that follows the kept epochs (a method whose runs kept a later epoch than none's)
    is a difference of selection as much as of method."""
    if c.table is None or not c.table.runs:
        return []
    kept: dict[str, dict[int, Any]] = {}
    total = None
    for run in c.table.runs.values():
        kept.setdefault(run.cell.method.name, {})[run.cell.seed] = run.results.get("best_step")
        total = total or run.results.get("total_steps")
    steps = "; ".join(
        f"{method} {', '.join(str(by_seed[seed]) for seed in sorted(by_seed))}"
        for method, by_seed in kept.items()
    )
    return [
        f"Models kept (the step of each run's model, seeds {', '.join(map(str, c.seeds))}; the budget is {total} "
        f"steps): {steps}.",
        "",
    ]


def _search_section(searches: dict[str, MethodSearch], noise: SearchNoise | None) -> list[str]:
    lines = [
        "## Search (validation split carved from train; the settings were chosen on these scores)",
        "",
        *([noise.sentence(), ""] if noise is not None else []),
    ]
    rows = []
    for method, s in searches.items():
        counts = [sum(1 for t in s.trials if t["state"] == state) for state in ("COMPLETE", "PRUNED", "FAIL")]
        ranges = ", ".join(f"{k} {r.describe()}" for k, r in search_space(method).items())
        best = "–" if s.options is None else describe(method, s.options)
        value = "–" if s.value is None else f"{s.value:.4f}"
        rows.append([method, ranges, " / ".join(map(str, counts)), best, value])
    header = ["method", "searched", "trials (complete / pruned / failed)", "best setting", "its score"]
    return lines + markdown_table(header, rows)


def _regime_section(regime: RegimeReading | None, trend: Trend | None, plain: str) -> list[str]:
    reading = (
        regime.sentence
        if regime is not None
        else f"Not probed: the budget was given (--epochs); --probe reads {plain}'s curves first."
    )
    lines = ["", f"## Regime ({plain}'s curves)", "", reading, ""]
    if trend is not None:
        lines += [f"At the budget: {trend.sentence} (read: {trend.state}).", ""]
    return lines


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
    _confirmation_panel(left, confirmation, methods)
    _search_panel(right, searches, methods, confirmation.metric, objective, se)
    fig.suptitle(title, fontsize=10)
    return save_png(fig, out, 120)


def _confirmation_panel(left: Any, confirmation: Confirmation, methods: Sequence[str]) -> None:
    """The figure's left panel: each method's Δ to none on fresh seeds, its intervals and p_Holm."""
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
            f"p_Holm {format_p(r.p_holm)}",
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


def _search_panel(
    right: Any,
    searches: dict[str, MethodSearch],
    methods: Sequence[str],
    m: str,
    objective: str,
    se: float | None,
) -> None:
    """The figure's right panel: each method's trials, objective by its searched rate, and the one chosen."""
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
        _plot_trials(right, s, option, method_colour(i + 1, False), f"{method} ({option})", up, se)
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


def _plot_trials(
    right: Any, s: MethodSearch, option: str, colour: Any, label: str, up: bool, se: float | None
) -> None:
    """One method's trials on the search panel: complete (filled, ± ``se``), pruned (hollow, at their best
    epoch so far) and the chosen setting (a star)."""
    done = [
        t for t in s.trials if t["state"] == "COMPLETE" and t["value"] is not None and option in t["params"]
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
        [t["params"][option] for t in done], [t["value"] for t in done], "o", color=colour, label=label
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


def write_setting(path: Path, method: str, options: dict[str, Any], epochs: int, header: str) -> Path:
    """The setting as a config file (``finetune --config``, ``load_config``) with the budget in [training]."""
    return save_config(path, get_method_config(method, **options), {"epochs": epochs}, header)
