"""The comparison table as text: the Markdown report (protocol header, scores, differences against the
baseline, detectable differences, invalid cells, figures) and the CSV of raw values.

The table itself, with every statistic, is built by :func:`attendout.report.comparison.build_table`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..bench import ModelSpec, TaskSpec
from ..tasks import higher_is_better
from .comparison import Comparison, ComparisonTable, Detectable, Row, RunRecord, direction, metric_scale
from .stats import BootstrapInterval

# --------------------------------------------------------------------------------------------------
# Markdown


def format_value(value: float | None, metric: str, signed: bool = False, digits: int = 1) -> str:
    """``value`` of ``metric`` (a score or a difference) for display, in every table and sentence: ×100 for a
    fraction, as it is for perplexity, BLEU, ... (:func:`~attendout.report.comparison.metric_scale`)."""
    if value is None or not math.isfinite(value):
        return "–"
    shown = metric_scale(metric) * value
    return f"{shown:+.{digits}f}" if signed else f"{shown:.{digits}f}"


def _unit(metric: str) -> str:
    """How a metric's values are shown, and its direction: "mcc ×100, higher is better"."""
    shown = "×100" if metric_scale(metric) != 1 else "as it is"
    return f"{metric} {shown}, {direction(metric)}"


def _p(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _column_title(task: TaskSpec, split: str, metric: str) -> str:
    arrow = "" if higher_is_better(metric) else " ↓"
    return f"{task.label} {split} ({metric}{arrow})"


def protocol_lines(table: ComparisonTable) -> list[str]:
    """The header: what was compared and how, so that the numbers can be judged."""
    e = table.experiment
    runs = list(table.runs.values())
    baseline = e.method(e.baseline)
    lines = []
    if e.description:
        lines.append(f"{e.description}.")
        lines.append("")
    lines.append(
        "**Protocol (the same for every method).** One data seed "
        f"({e.data_seed}) for the whole grid: the validation split carved from train, the training subsample "
        "and the batch order are identical in every cell. The same training budget per task for every method "
        f"(below). {_selection_sentence(runs)}; the dev splits are used for this table only. No option was tuned on dev. "
        f"Seeds ({', '.join(map(str, e.seeds))}) vary the head initialisation, dropout and the method's own randomness."
    )
    lines.append("")
    lines.append(f"- Tuning of method options: {e.tuning}.")
    lines.append(f"- Recipe: {e.recipe}.")
    for model in e.models:
        lines.append(f"- Model {model.label}: {table.model_description(model)}.")
    for task in e.tasks:
        lines.append(_task_line(task, [r for r in runs if r.cell.task.id == task.id]))
    method_text = "; ".join(
        f"{m.label} = `{m.describe()}`" + (" (baseline)" if m.id == baseline.id else "") for m in e.methods
    )
    lines.append(f"- Methods: {method_text}.")
    if not table.budget.is_empty():
        lines.append(
            f"- Budget overrides of this run: {table.budget.overrides()} (not the experiment's own budget)."
        )
    lines.append(_cells_line(table, runs))
    lines.append(_scores_line(table, baseline.label))
    lines += _before_acting_lines(runs)
    lines += _seed_invariant_lines(table)
    return lines


def _seed_invariant_lines(table: ComparisonTable) -> list[str]:
    """A protocol line for each method that scores the same at every seed of a model and task: nothing in
    its runs varies with the seed (a model without dropout that gains no new head, as a decoder fine-tuned
    on language modelling), so the seeds test the other methods' own randomness in one training run, not
    what another data order or sample would do. Same to 1e-6 (relative): a resumed run may differ in the
    last digits."""
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for row in table.rows:
        groups.setdefault((row.model.id, row.task.id, row.method.id), []).append(row)
    lines = []
    for rows in groups.values():
        if all(row.n >= 2 for row in rows) and all(_one_value(row.values.values()) for row in rows):
            row = rows[0]
            lines.append(
                f"- **{row.method.label} scores the same at all {row.n} seeds on {row.task.label} "
                f"({row.model.label})**: nothing in its runs varies with the seed (as in a model without "
                "dropout that gains no new head), so its seeds repeat one run, and a paired difference with "
                "it measures the other method's own randomness in that one training run, not what another "
                "data order or sample would do."
            )
    return lines


def _one_value(values: Iterable[float]) -> bool:
    first, *others = values
    return all(math.isclose(value, first, rel_tol=1e-6) for value in others)


def _before_acting_lines(runs: list[RunRecord]) -> list[str]:
    """A protocol line for each method some of whose cells kept a model from before the method first
    acted (:func:`attendout.run.record.kept_before_acting`): those cells score plain fine-tuning."""
    from ..run.record import kept_before_acting

    counts: dict[str, list[int]] = {}
    for run in runs:
        seen = counts.setdefault(run.cell.method.label, [0, 0])
        seen[0] += kept_before_acting(run.results, run.config)
        seen[1] += 1
    return [
        "- "
        + kept_before_acting_sentence(
            label, f"{kept} of {total} cells", "cells", "their Δ measures model selection, not the method."
        )
        for label, (kept, total) in counts.items()
        if kept
    ]


def kept_before_acting_sentence(method: str, counted: str, runs: str, measures: str) -> str:
    """The warning of a method ``counted`` of whose ``runs`` ("2 of 5 cells") kept a model from before the
    method first acted (:func:`attendout.run.record.kept_before_acting`), in the table's protocol and
    advise's answer: those runs are plain fine-tuning, and ``measures`` says what their comparison measures."""
    return (
        f"**{method}: {counted} kept a model from before the method first acted** (its first phase is plain, "
        "as AD-DROP's cross-tuning's is, and the model kept is from that phase): those "
        f"{runs} are plain fine-tuning whatever the method's options, and {measures}"
    )


def _selection_sentence(runs: list[RunRecord]) -> str:
    """Which model of each run the table reports: its best validation checkpoint, or its final model
    (``model_selection = "last"``, as scripts that report their final epoch do), read from the runs."""
    chosen = {(run.config.get("config") or {}).get("model_selection", "best") for run in runs}
    if chosen == {"last"}:
        return (
            "Model selection: none: each run's final model is reported (the validation split carved from train "
            "is scored for the curves only)"
        )
    if chosen <= {"best"}:
        return "Model selection: the checkpoint with the best main metric on the validation split carved from train"
    return (
        "Model selection differs between cells: some report their best checkpoint on the validation split "
        "carved from train, others their final model (see each run's config.json)"
    )


def _task_line(task: TaskSpec, task_runs: list[RunRecord]) -> str:
    """A task's protocol line: its splits' sizes, budget, learning rate, validation and data source (from
    its first finished cell)."""
    if not task_runs:
        return f"- {task.label}: no finished cell yet."
    first = task_runs[0]
    sizes = first.config.get("sizes", {})
    c = first.config.get("config", {})
    steps = first.config.get("total_steps")
    budget = (
        f"{steps} steps of batch {c.get('batch_size')}"
        if c.get("max_steps")
        else f"{c.get('epochs'):g} epochs ({steps} steps of batch {c.get('batch_size')})"
    )
    size_text = ", ".join(f"{k} {v:,}" for k, v in sizes.items())
    every = f"{c['eval_steps']} steps and every epoch" if c.get("eval_steps") else "epoch"
    return (
        f"- {task.label}: {size_text}; {budget}, lr {c.get('learning_rate')}, max length "
        f"{c.get('max_length')}; validation every {every}; data: {first.results.get('data_source')}."
    )


def _cells_line(table: ComparisonTable, runs: list[RunRecord]) -> str:
    """The protocol line of the grid's state: cells finished (and the others'), their wall time and where
    they ran."""
    done = table.status.get("done", 0)
    total = sum(table.status.values())
    others = ", ".join(f"{v} {k}" for k, v in sorted(table.status.items()) if k != "done")
    wall = sum(float(r.record.get("wall_time_s", 0) or 0) for r in runs)
    hardware = next((r.config.get("hardware") for r in runs if r.config.get("hardware")), None)
    hw_text = ""
    if hardware:
        threads = sorted({str(r.config["hardware"].get("threads")) for r in runs if r.config.get("hardware")})
        hw_text = f" on {hardware.get('machine')} with {hardware.get('cpus')} CPUs (torch threads: {' or '.join(threads)})"
        device = next((r.config.get("device") for r in runs if r.config.get("device")), None)
        if device:
            hw_text += f", device {device}"
    return (
        f"- Cells: {done} of {total} finished"
        + (f" ({others})" if others else "")
        + f"; wall time of the finished "
        f"cells {wall / 3600:.2f} h{hw_text}."
    )


def _scores_line(table: ComparisonTable, baseline: str) -> str:
    """The protocol line on how to read the scores: units, direction, Δ and the tests' marks."""
    metrics = list(dict.fromkeys(r.metric for r in table.rows if r.metric != "?"))
    lower = [m for m in metrics if not higher_is_better(m)]
    sign = (
        f" For {', '.join(lower)} (↓) lower is better: a method that lowers it has a negative Δ, and that is a gain."
        if lower
        else ""
    )
    return (
        f"- Scores ({'; '.join(_unit(m) for m in metrics) or 'none yet'}): mean ± standard deviation over seeds; "
        f"bold: the best mean of a column in its metric's direction. Δ is the mean paired difference (method "
        f"minus {baseline}, same seed).{sign} Marks: paired t-test over seeds, two-sided, Holm-corrected "
        f"over the {table.family_size} comparisons of this table: * p_Holm < 0.05, ** p_Holm < 0.01."
    )


def to_markdown(table: ComparisonTable, figures: dict[str, str] | None = None) -> str:
    """The whole report as Markdown: header, scores, differences, detectable differences, figures."""
    e = table.experiment
    out = [f"# {e.name}", "", *protocol_lines(table), ""]
    for model in e.models:
        out += _scores_section(table, model)
    out += _differences_section(table)
    out += _detectable_section(table)
    if table.invalid:
        out += _invalid_section(table)
    if figures:
        out += ["", "## Figures", ""]
        out += [f"![{name}]({path})" for name, path in figures.items()]
    return "\n".join(out) + "\n"


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A Markdown table's lines: the header, its rule, a line per row; every table of attendout's files
    (the comparison's, advise's, a run's metrics). A pipe in a cell is escaped, so that it does not split
    the cell."""

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return [line(header), "|" + "---|" * len(header), *(line(cells) for cells in rows)]


def _per_model_table(table: ComparisonTable, header: list[str], rows: list[list[str]]) -> list[str]:
    """A table whose first column is the model: left out when the experiment has one model."""
    if len(table.experiment.models) == 1:
        header, rows = header[1:], [cells[1:] for cells in rows]
    return markdown_table(header, rows)


def _scores_section(table: ComparisonTable, model: ModelSpec) -> list[str]:
    """One model's scores: a line per method, a column per task and split, the majority floor below."""
    e = table.experiment
    title = "## Scores" + (f": {model.label}" if len(e.models) > 1 else "")
    columns = [(task, split) for task in e.tasks for split in table.splits(model, task)]
    header = ["method"] + [_column_title(t, s, _metric_of(table, model, t)) for t, s in columns]
    rows = []
    for method in e.methods:
        cells = [method.label]
        for task, split in columns:
            row = table.row(model.id, task.id, split, method.id)
            best = table.best(model.id, task.id, split)
            cells.append(_score_cell(row, len(e.seeds), best is row and _ranked(table, model, task, split)))
        rows.append(cells)
    floors = [table.floor(model.id, task.id, split) for task, split in columns]
    if any(f is not None for f in floors):
        cells = ["*majority class* (always the most frequent label: the floor)"]
        cells += [
            "–" if f is None else f"*{format_value(f, _metric_of(table, model, task))}*"
            for f, (task, _) in zip(floors, columns, strict=True)
        ]
        rows.append(cells)
    return [title, "", *markdown_table(header, rows), ""]


def _differences_section(table: ComparisonTable) -> list[str]:
    """Every comparison against the baseline: Δ with its mark, the verdict, p, p_Holm, the bootstrap."""
    baseline = table.experiment.method(table.experiment.baseline)
    legend = (
        f"Δ: mean of the paired differences (method minus baseline, in the scores' units; for a metric where lower "
        f"is better, a gain is negative). Better: where p_Holm < {table.alpha:g}, whether the method is better or "
        f"worse than {baseline.label} in the metric's direction. p: paired t-test over seeds; p_Holm: Holm-adjusted over the "
        f"{table.family_size} tests. Bootstrap: {int(100 * 0.95)}% percentile interval of the difference of seed-means "
        f"over {table.n_resamples} resamples of the evaluation examples (stored predictions); it shows how much Δ "
        "depends on which examples the split holds, which the t-test over seeds does not."
    )
    compared = [row for row in table.rows if row.comparison is not None]
    rows = [
        [cell(row, row.comparison, table.alpha) for cell in _DIFFERENCE_COLUMNS.values()] for row in compared
    ]
    return [
        f"## Differences against {baseline.label}",
        "",
        legend,
        "",
        *_per_model_table(table, list(_DIFFERENCE_COLUMNS), rows),
    ]


def _bootstrap_cell(c: Comparison, metric: str) -> str:
    """A comparison's bootstrap interval, or why it has none."""
    if c.bootstrap is None:
        return c.note or "–"
    return format_interval(c.bootstrap.low, c.bootstrap.high, metric)


def format_interval(low: float, high: float, metric: str) -> str:
    """An interval of differences of ``metric`` for a table: ``[-1.2, +3.4]`` (:func:`format_value`)."""
    return f"[{format_value(low, metric, True)}, {format_value(high, metric, True)}]"


#: The differences table's columns: each one's title, and its cell of a row compared with the baseline
#: (``c``: the row's comparison; ``alpha``: the table's level).
_DIFFERENCE_COLUMNS: dict[str, Callable[[Row, Comparison, float], str]] = {
    "model": lambda row, c, alpha: row.model.label,
    "task": lambda row, c, alpha: row.task.label,
    "split": lambda row, c, alpha: row.split,
    "method": lambda row, c, alpha: row.method.label,
    "seeds": lambda row, c, alpha: str(c.test.n),
    "Δ": lambda row, c, alpha: f"{format_value(c.test.mean, row.metric, True)}{c.mark}",
    "better": lambda row, c, alpha: {True: "better", False: "worse", None: "–"}[c.better(alpha)],
    "p": lambda row, c, alpha: _p(c.test.p),
    "p_Holm": lambda row, c, alpha: _p(c.p_holm),
    "bootstrap 95% interval": lambda row, c, alpha: _bootstrap_cell(c, row.metric),
}


def _detectable_section(table: ComparisonTable) -> list[str]:
    """The smallest difference the design detects per task and split: from the seeds and from the examples."""
    e = table.experiment
    legend = (
        f"Smallest true difference (in the scores' units, either direction) detected with {int(100 * table.power)}% power. *Seeds*: a two-sided "
        f"paired t-test over {len(e.seeds)} seeds, computed from the noncentral t distribution, with the standard "
        "deviation of the paired differences pooled over the methods of the task and split; at α = "
        f"{table.alpha:g}, and at α / m = {table.alpha:g} / {max(table.planned_comparisons, 1)} (m: the comparisons "
        "of the full grid; the threshold of Holm's "
        f"first step, which the smallest p-value of the table must pass). *Examples*: (z(1 - α/2) + z(power)) "
        "times the median bootstrap standard error of the differences: the noise of a finite dev set alone."
    )
    header = ["model", "task", "split", "sd of paired Δ", "seeds: α", "seeds: α/m", "examples", "n examples"]
    rows = [
        [
            d.model.label,
            d.task.label,
            d.split,
            format_value(d.sd_pooled, d.metric, digits=2),
            format_value(d.at_alpha, d.metric, digits=2),
            format_value(d.at_holm_first_step, d.metric, digits=2),
            format_value(d.from_examples, d.metric, digits=2),
            str(d.n_examples or "–"),
        ]
        for d in table.detectable
    ]
    return ["", "## What this design can detect", "", legend, "", *_per_model_table(table, header, rows)]


def _invalid_section(table: ComparisonTable) -> list[str]:
    """The cells that cannot run, counted by reason."""
    reasons = Counter(table.invalid.values())
    return [
        "",
        "## Invalid cells (not run)",
        "",
        *(f"- {n} cell(s): {reason}" for reason, n in sorted(reasons.items())),
    ]


def _metric_of(table: ComparisonTable, model: ModelSpec, task: TaskSpec) -> str:
    return next((r.metric for r in table.rows if r.model.id == model.id and r.task.id == task.id), "?")


def _ranked(table: ComparisonTable, model: ModelSpec, task: TaskSpec, split: str) -> bool:
    """Whether a column has two or more methods with scores (a best mark means something)."""
    rows = [r for r in table.rows if (r.model.id, r.task.id, r.split) == (model.id, task.id, split)]
    return sum(1 for r in rows if r.values) >= 2


def _score_cell(row: Row | None, n_seeds: int, best: bool = False) -> str:
    if row is None:
        return "–"
    if not row.values:
        return "invalid" if row.invalid else "–"
    m = row.metric
    text = format_value(row.mean, m)
    if row.n >= 2:
        text += f" ± {format_value(row.std, m)}"
    if best:
        text = f"**{text}**"
    if row.n != n_seeds:
        text += f" (n={row.n})"
    if row.comparison is not None:
        text += f" (Δ {format_value(row.comparison.test.mean, m, True)}{row.comparison.mark})"
    return text


# --------------------------------------------------------------------------------------------------
# CSV


@dataclass(frozen=True)
class _CsvLine:
    """What one line of the CSV is read from: a row, its comparison with the baseline (None: not compared)
    and its split's detectable difference (None: not computed)."""

    table: ComparisonTable
    row: Row
    c: Comparison | None
    d: Detectable | None

    @property
    def boot(self) -> BootstrapInterval | None:
        return self.c.bootstrap if self.c is not None else None


#: The CSV's columns, each with how its value is read (raw values, not ×100; empty where the line has no
#: comparison, bootstrap or detectable difference to read it from).
_CSV_FIELDS: dict[str, Callable[[_CsvLine], Any]] = {
    "model": lambda x: x.row.model.id,
    "task": lambda x: x.row.task.id,
    "split": lambda x: x.row.split,
    "metric": lambda x: x.row.metric,
    "higher_is_better": lambda x: higher_is_better(x.row.metric),
    "method": lambda x: x.row.method.id,
    "method_label": lambda x: x.row.method.label,
    "method_name": lambda x: x.row.method.name,
    "method_options": lambda x: json.dumps(x.row.method.options, sort_keys=True),
    "n": lambda x: x.row.n,
    "mean": lambda x: _num(x.row.mean),
    "std": lambda x: _num(x.row.std),
    "values": lambda x: ";".join(f"{s}:{v:.6g}" for s, v in sorted(x.row.values.items())),
    "invalid": lambda x: x.row.invalid or "",
    "n_pairs": lambda x: x.c.test.n if x.c else "",
    "diff": lambda x: _num(x.c.test.mean) if x.c else "",
    "diff_sd": lambda x: _num(x.c.test.sd) if x.c else "",
    "t": lambda x: _num(x.c.test.t) if x.c else "",
    "p": lambda x: _num(x.c.test.p) if x.c else "",
    "p_holm": lambda x: _num(x.c.p_holm) if x.c else "",
    "significance": lambda x: x.c.mark if x.c else "",
    "better": lambda x: {True: "better", False: "worse", None: ""}[x.c.better(x.table.alpha)] if x.c else "",
    "ci_low": lambda x: _num(x.boot.low) if x.boot else "",
    "ci_high": lambda x: _num(x.boot.high) if x.boot else "",
    "bootstrap_se": lambda x: _num(x.boot.se) if x.boot else "",
    "detectable_alpha": lambda x: _num(x.d.at_alpha) if x.d else "",
    "detectable_holm_first_step": lambda x: _num(x.d.at_holm_first_step) if x.d else "",
    "detectable_examples": lambda x: _num(x.d.from_examples) if x.d else "",
    "majority": lambda x: _num(x.table.floor(x.row.model.id, x.row.task.id, x.row.split)),
}
CSV_COLUMNS = list(_CSV_FIELDS)


def to_csv(table: ComparisonTable) -> str:
    """One line per model, task, split and method, raw values (not ×100)."""
    detectable = {(d.model.id, d.task.id, d.split): d for d in table.detectable}
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in table.rows:
        line = _CsvLine(table, row, row.comparison, detectable.get((row.model.id, row.task.id, row.split)))
        writer.writerow({name: read(line) for name, read in _CSV_FIELDS.items()})
    return buffer.getvalue()


def _num(value: float) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.6g}"
