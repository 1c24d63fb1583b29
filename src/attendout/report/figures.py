"""Figures of a comparison table: a bar chart with error bars, and convergence curves per task.

:func:`bar_chart` draws, for each model, task and evaluation split, one bar per method: the mean over
seeds of the main metric, the standard deviation as error bar, the baseline's mean as a dashed line
and the table's significance marks above the bars. :func:`convergence_curves` writes one PNG per
model and task with :func:`attendout.report.curves.convergence_figure` (validation metric against
step, mean ± std over seeds, one line per method).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from matplotlib.figure import Figure

from ..tasks import higher_is_better
from .canvas import fitted, panel_grid, save_png
from .comparison import ComparisonTable, Row, metric_scale
from .curves import convergence_figure

if TYPE_CHECKING:
    from ..bench import MethodSpec, ModelSpec, TaskSpec


def _axis_label(metric: str, prefix: str = "") -> str:
    """``"mcc ×100"``; ``"perplexity (lower is better)"``."""
    unit = " ×100" if metric_scale(metric) != 1 else ""
    return f"{prefix}{metric}{unit}" + ("" if higher_is_better(metric) else " (lower is better)")


BASELINE_COLOUR = "0.55"
#: matplotlib's tab10 without its grey (C7), which is the baseline's
_PALETTE = tuple(f"C{i}" for i in range(10) if i != 7)


def method_colour(number: int, is_baseline: bool) -> str:
    """The bar colour of the ``number``-th method of an experiment: grey for the baseline, else one of
    nine distinct colours (never the baseline's grey), the same in every panel."""
    return BASELINE_COLOUR if is_baseline else _PALETTE[number % len(_PALETTE)]


def bar_chart(table: ComparisonTable, out: str | Path) -> Path:
    """Write a PNG with one panel per model, task and split (fractions ×100); returns ``out``."""
    e = table.experiment
    panels = _panels(table, lambda method, row: bool(row.values))  # panels with at least one finished cell
    if not panels:
        raise ValueError(f"no finished cell of {e.name} in {table.root} to draw bars of")
    fig, axes = panel_grid(len(panels), max(4.0, 0.55 * len(e.methods) + 1.5), 3.6, 0.6)
    for ax, (model, task, split, found) in zip(axes, panels, strict=True):
        metric = found[0][2].metric  # one metric a model and task
        k = metric_scale(metric)
        labels, means, stds, marks, colors, counts = [], [], [], [], [], []
        base_mean = math.nan
        for number, method, row in found:
            labels.append(method.label)
            means.append(k * row.mean)
            stds.append(k * row.std if math.isfinite(row.std) else 0.0)
            marks.append(row.comparison.mark if row.comparison is not None else "")
            counts.append(len(row.values))
            is_base = method.id == e.baseline
            colors.append(method_colour(number, is_base))
            if is_base:
                base_mean = k * row.mean
        positions = range(len(labels))
        yerr = [std if count >= 2 else math.nan for std, count in zip(stds, counts, strict=True)]
        bars = ax.bar(positions, means, yerr=yerr, capsize=3, color=colors, edgecolor="0.2", linewidth=0.5)
        for bar, count in zip(bars, counts, strict=True):
            if count < 2:  # one seed: no error bar to draw, and it should not look like a tight one
                bar.set_hatch("///")
                bar.set_alpha(0.6)
        if math.isfinite(base_mean):
            ax.axhline(base_mean, color="0.3", linestyle="--", linewidth=0.8)
        floor = table.floor(model.id, task.id, split)
        if floor is not None:  # what always predicting the most frequent label scores
            ax.axhline(k * floor, color="tab:red", linestyle=":", linewidth=1.2)
        for x, (mean, std, mark) in enumerate(zip(means, stds, marks, strict=True)):
            if mark:
                ax.annotate(mark, (x, mean + std), ha="center", va="bottom", fontsize=11)
        if means:
            low = min(
                [m - s for m, s in zip(means, stds, strict=True)] + ([k * floor] if floor is not None else [])
            )
            high = max(m + s for m, s in zip(means, stds, strict=True))
            pad = max(0.5, 0.15 * (high - low))
            ax.set_ylim(max(0.0, low - 3 * pad) if low > 0 else low - pad, high + 2 * pad)
        ax.set_xticks(list(positions), labels, rotation=35, ha="right", fontsize=8)
        _panel_title(ax, table, model, task, split)
        ax.set_ylabel(_axis_label(metric))
        ax.grid(axis="y", alpha=0.3)
    caption = (
        f"{e.name}: mean ± std over seeds; dashed line: {e.method(e.baseline).label}; dotted red line: "
        "the majority class (always the most frequent label); "
        "* / **: Holm-corrected paired t-test p < 0.05 / 0.01; hatched: one seed so far (no error bar); "
        "the y axes do not start at 0"
    )
    return _save(fig, caption, 11, out)


#: Characters per line of a method's label beside a panel of :func:`delta_chart` (longer ones wrap).
LABEL_WIDTH = 36


def delta_chart(table: ComparisonTable, out: str | Path) -> Path:
    """Write a PNG of every method's difference from the baseline, one panel per model, task and split.

    Each method is a row: the mean paired difference over seeds (method minus baseline, fractions ×100:
    the point; for a metric where lower is better, left of 0 is a gain), its 95% t-interval
    over seeds (the thick bar: what another set of seeds would give) and the 95% bootstrap interval over
    the split's examples (the thin bar: what another sample of examples would give), with the table's
    Holm marks. The baseline is the line at 0. Returns ``out``.
    """
    e = table.experiment
    others = [m for m in e.methods if m.id != e.baseline]
    panels = _panels(
        table,
        lambda m, row: m.id != e.baseline and row.comparison is not None and row.comparison.test.n >= 1,
    )
    if not panels:
        raise ValueError(
            f"no method of {e.name} has finished cells paired with {e.baseline!r} (the same seeds) in {table.root}: "
            "no difference to draw"
        )
    # long method labels are wrapped, and each panel leaves room for its own labels beside the axis
    wrapped = [textwrap.wrap(m.label, LABEL_WIDTH) or [""] for m in others]
    label_lines = max(len(lines) for lines in wrapped)
    label_chars = max(len(line) for lines in wrapped for line in lines)
    width = 3.0 + 0.065 * label_chars
    height = (0.18 + 0.14 * label_lines) * len(others) + 1.4
    fig, axes = panel_grid(len(panels), width, height, 0.7)
    for ax, (model, task, split, found) in zip(axes, panels, strict=True):
        labels = []
        k = metric_scale(found[0][2].metric)
        for y, (number, method, row) in enumerate(found):
            c = row.comparison
            n, mean, sd = c.test.n, k * c.test.mean, k * c.test.sd
            colour = method_colour(number, False)
            if n >= 2 and math.isfinite(sd):
                half = k * c.test.half_interval()
                ax.plot([mean - half, mean + half], [y, y], color=colour, linewidth=4, alpha=0.55)
            if c.bootstrap is not None:
                b = c.bootstrap
                ax.plot([k * b.low, k * b.high], [y - 0.22, y - 0.22], color=colour, linewidth=1.2)
            ax.plot([mean], [y], "o", color=colour, markersize=5)
            label = f"{method.label} {c.mark}".strip() + ("" if n >= 2 else " (1 seed)")
            labels.append(textwrap.fill(label, LABEL_WIDTH))
        ax.axvline(0.0, color="0.3", linestyle="--", linewidth=0.8)
        ax.set_yticks(range(len(found)), labels, fontsize=8)
        ax.set_ylim(len(found) - 0.5, -0.7)  # first method on top
        _panel_title(ax, table, model, task, split)
        ax.set_xlabel(f"{_axis_label(found[0][2].metric, 'Δ ')} vs {e.baseline}", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
    caption = (
        f"{e.name}: difference from {e.method(e.baseline).label}, paired by seed; dot: mean over seeds; "
        "thick bar: 95% t-interval over seeds; thin bar: 95% bootstrap interval over the split's examples; "
        "* / **: Holm-corrected paired t-test p < 0.05 / 0.01"
    )
    return _save(fig, caption, 14, out)


def _panels(
    table: ComparisonTable, keep: Callable[[MethodSpec, Row], bool]
) -> list[tuple[ModelSpec, TaskSpec, str, list[tuple[int, MethodSpec, Row]]]]:
    """``(model, task, split, rows)`` of each panel: the rows of the split that ``keep`` takes, each
    ``(the method's number in the experiment, the method, the row)``; a split with none has no panel."""
    e = table.experiment
    panels = []
    for model in e.models:
        for task in e.tasks:
            for split in table.splits(model, task):
                found = [
                    (number, m, row)
                    for number, m in enumerate(e.methods)
                    if (row := table.row(model.id, task.id, split, m.id)) is not None and keep(m, row)
                ]
                if found:
                    panels.append((model, task, split, found))
    return panels


def _panel_title(ax: Any, table: ComparisonTable, model: ModelSpec, task: TaskSpec, split: str) -> None:
    """A panel's title: the task and split (and the model, where the experiment has several)."""
    prefix = f"{model.label}: " if len(table.experiment.models) > 1 else ""
    ax.set_title(f"{prefix}{task.label} {split}", fontsize=10)


def _save(fig: Figure, caption: str, chars_per_inch: int, out: str | Path) -> Path:
    """``fig`` under its ``caption`` (wrapped at ``chars_per_inch`` of its width) as a PNG at ``out``."""
    fig.suptitle(fitted(caption, fig, chars_per_inch), fontsize=9)
    return save_png(fig, out, 130)


def convergence_curves(table: ComparisonTable, out_dir: str | Path) -> list[Path]:
    """One PNG per model and task, ``curves-MODEL-TASK.png``: validation metric vs step, per method."""
    e = table.experiment
    written = []
    for model in e.models:
        for task in e.tasks:
            groups = {}
            for method in e.methods:
                runs = table.runs_of(model.id, task.id, method.id)
                if runs:
                    groups[method.label] = [r.path for r in sorted(runs, key=lambda r: r.cell.seed)]
            if not groups:
                continue
            prefix = f"{model.label}, " if len(e.models) > 1 else ""
            title = f"{prefix}{task.label}: validation (carved from train), mean ± std over seeds"
            path = Path(out_dir) / f"curves-{model.id}-{task.id}.png"
            written.append(convergence_figure(groups, path, title=title))
    return written
