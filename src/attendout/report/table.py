"""``attendout table``: the comparison table of an experiment grid, from its result files only.

For every model, task, evaluation split and method: the mean and standard deviation over seeds of
the task's main metric; against the baseline method (``none``): the mean paired difference, a paired
t-test over seeds with Holm's correction across every comparison of the table, and a bootstrap
interval over the evaluation examples from the stored per-example predictions; per task and split,
the smallest difference the design can detect. Written as Markdown and CSV; figures are in
:mod:`attendout.report.figures`.

Only finished cells whose configuration fingerprint matches the experiment file count; cells run
with another configuration (stale), cells not run yet, and cells whose method or task is not
available yet (pending) are counted in the header and left out of the numbers.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from ..experiments.spec import Budget, Cell, Experiment, MethodSpec, ModelSpec, TaskSpec
from ..experiments.store import ResultsStore, read_predictions
from ..tasks.metrics import METRICS, sequences_array
from .stats import (
    BootstrapInterval,
    PairedTest,
    bootstrap_difference,
    detectable_difference,
    holm,
    paired_t_test,
    pooled_sd,
)

__all__ = ["ComparisonTable", "Detectable", "Row", "RunRecord", "build_table", "to_csv", "to_markdown"]

SIGNIFICANCE = ((0.01, "**"), (0.05, "*"))


@dataclass(frozen=True)
class RunRecord:
    """One finished cell: its grid position and its result files."""

    cell: Cell
    path: Path
    results: dict[str, Any]
    config: dict[str, Any]
    record: dict[str, Any]

    def score(self, split: str, metric: str) -> float | None:
        value = self.results.get("eval", {}).get(split, {}).get(metric)
        return None if value is None else float(value)

    def predictions(self, split: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(predictions, labels) of ``split`` from predictions/SPLIT.jsonl(.gz), or None if absent.

        Token classification (a list of tags per example): 1-D object arrays of tag-name lists, named by
        the run's task (its config.json), as the sequence metrics take them.
        """
        rows = read_predictions(self.path, split)
        if rows is None:
            return None
        preds = [row["prediction"] for row in rows]
        labels = [row["label"] for row in rows]
        if preds and isinstance(preds[0], list):
            names = (self.config.get("task") or {}).get("label_names") or []
            return _tag_rows(preds, names), _tag_rows(labels, names)
        return np.asarray(preds), np.asarray(labels)


@dataclass
class Comparison:
    """A method against the baseline on one split."""

    test: PairedTest
    p_holm: float = float("nan")
    bootstrap: BootstrapInterval | None = None
    note: str = ""

    @property
    def mark(self) -> str:
        for level, mark in SIGNIFICANCE:
            if self.p_holm < level:
                return mark
        return ""


@dataclass
class Row:
    """One model, task, split and method: the scores over seeds and the comparison with the baseline."""

    model: ModelSpec
    task: TaskSpec
    split: str
    method: MethodSpec
    metric: str
    values: dict[int, float] = field(default_factory=dict)  # seed -> score
    pending: str | None = None
    comparison: Comparison | None = None

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.values.values()))) if self.values else float("nan")

    @property
    def std(self) -> float:
        return float(np.std(list(self.values.values()), ddof=1)) if self.n >= 2 else float("nan")


@dataclass
class Detectable:
    """The smallest difference the design detects on one task and split (see :func:`build_table`)."""

    model: ModelSpec
    task: TaskSpec
    split: str
    metric: str
    n_seeds: int
    sd_pooled: float
    at_alpha: float
    at_holm_first_step: float
    from_examples: float
    n_examples: int | None


@dataclass
class ComparisonTable:
    """Everything ``attendout table`` prints, as data."""

    experiment: Experiment
    root: Path
    budget: Budget
    rows: list[Row]
    detectable: list[Detectable]
    runs: dict[str, RunRecord]
    status: dict[str, int]
    pending: dict[str, str]  # cell key -> reason
    alpha: float
    power: float
    n_resamples: int
    family_size: int  # comparisons with a p-value (the Holm family)
    planned_comparisons: int  # comparisons the full grid makes (pending cells included)
    floors: dict[tuple[str, str, str], float] = field(
        default_factory=dict
    )  # (model, task, split) -> majority

    def floor(self, model_id: str, task_id: str, split: str) -> float | None:
        """The score of always predicting the split's most frequent label (None: unknown or regression)."""
        return self.floors.get((model_id, task_id, split))

    def splits(self, model: ModelSpec, task: TaskSpec) -> list[str]:
        seen: list[str] = []
        for row in self.rows:
            if row.model.id == model.id and row.task.id == task.id and row.split not in seen:
                seen.append(row.split)
        return seen

    def row(self, model_id: str, task_id: str, split: str, method_id: str) -> Row | None:
        for row in self.rows:
            if (row.model.id, row.task.id, row.split, row.method.id) == (model_id, task_id, split, method_id):
                return row
        return None

    def runs_of(self, model_id: str, task_id: str, method_id: str) -> list[RunRecord]:
        return [
            r
            for r in self.runs.values()
            if (r.cell.model.id, r.cell.task.id, r.cell.method.id) == (model_id, task_id, method_id)
        ]


# --------------------------------------------------------------------------------------------------
# Building


def collect_runs(
    experiment: Experiment, store: ResultsStore, budget: Budget
) -> tuple[dict[str, RunRecord], dict[str, int], dict[str, str]]:
    """The finished, current cells of the grid; counts of every status; reasons of pending cells."""
    runs: dict[str, RunRecord] = {}
    status: dict[str, int] = {}
    pending: dict[str, str] = {}
    for cell in experiment.cells(budget):
        state, detail = store.status(cell)
        status[state] = status.get(state, 0) + 1
        if state == "pending":
            pending[cell.key] = detail
        if state != "done":
            continue
        folder = store.cell_dir(cell)
        runs[cell.key] = RunRecord(
            cell=cell,
            path=folder,
            results=json.loads((folder / "results.json").read_text()),
            config=_read_json(folder / "config.json"),
            record=_read_json(folder / "cell.json"),
        )
    return runs, status, pending


def build_table(
    experiment: Experiment,
    root: str | Path,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    n_resamples: int = 2000,
    seed: int = 0,
) -> ComparisonTable:
    """Read the results root of ``experiment`` and compute every statistic of the table.

    The budget overrides the grid was run with are read from the root's experiment.json.
    """
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1), got alpha={alpha!r}, power={power!r}")
    store = ResultsStore(root)
    budget = Budget.from_dict(store.manifest().get("budget"))
    runs, status, pending = collect_runs(experiment, store, budget)
    baseline = experiment.method(experiment.baseline)
    rows: list[Row] = []
    floors: dict[tuple[str, str, str], float] = {}
    for model in experiment.models:
        for task in experiment.tasks:
            task_runs = [
                r for r in runs.values() if r.cell.model.id == model.id and r.cell.task.id == task.id
            ]
            metric = _main_metric(task_runs, task)
            for split in _task_splits(task, task_runs):
                floor = None if metric is None else majority_floor(task_runs, split, metric)
                if floor is not None:
                    floors[(model.id, task.id, split)] = floor
                for method in experiment.methods:
                    row = Row(model=model, task=task, split=split, method=method, metric=metric or "?")
                    reasons = {
                        pending[k] for k in pending if k.startswith(f"{model.id}/{task.id}/{method.id}/")
                    }
                    row.pending = "; ".join(sorted(reasons)) or None
                    for run in task_runs:
                        if run.cell.method.id == method.id and metric is not None:
                            value = run.score(split, metric)
                            if value is not None:
                                row.values[run.cell.seed] = value
                    rows.append(row)
    # comparisons against the baseline
    for row in rows:
        if row.method.id == baseline.id or not row.values:
            continue
        base = next(
            (
                r
                for r in rows
                if (r.model.id, r.task.id, r.split, r.method.id)
                == (row.model.id, row.task.id, row.split, baseline.id)
            ),
            None,
        )
        if base is None or not base.values:
            continue
        seeds = sorted(set(row.values) & set(base.values))
        if not seeds:
            continue
        test = paired_t_test([row.values[s] for s in seeds], [base.values[s] for s in seeds])
        row.comparison = Comparison(test=test)
        row.comparison.bootstrap, row.comparison.note = _bootstrap(
            runs, row, baseline, seeds, n_resamples=n_resamples, seed=seed
        )
    comparisons = [r.comparison for r in rows if r.comparison is not None]
    adjusted = holm([c.test.p for c in comparisons])
    for comparison, p in zip(comparisons, adjusted, strict=True):
        comparison.p_holm = float(p)
    family = int(np.sum(~np.isnan(adjusted))) if len(adjusted) else 0
    planned = sum(1 for r in rows if r.method.id != baseline.id)
    detectable = _detectable(experiment, rows, planned, alpha, power)
    return ComparisonTable(
        experiment=experiment,
        root=Path(root),
        budget=budget,
        rows=rows,
        detectable=detectable,
        runs=runs,
        status=status,
        pending=pending,
        alpha=alpha,
        power=power,
        n_resamples=n_resamples,
        family_size=family,
        planned_comparisons=planned,
        floors=floors,
    )


def _tag_rows(rows: list[list[int]], names: list[str]) -> np.ndarray:
    return sequences_array([[names[int(t)] for t in row] for row in rows] if names else rows)


def majority_floor(runs: Sequence[RunRecord], split: str, metric: str) -> float | None:
    """``metric`` of always predicting the most frequent label of ``split``: the score a model that
    learned nothing reaches (MCC 0, F1 2p/(1+p) for a positive share p). Labels come from any run's
    stored predictions (every cell of a grid sees the same split); None for regression labels."""
    scorer = METRICS.get(metric)
    for run in runs:
        stored = run.predictions(split)
        if stored is None or scorer is None:
            continue
        labels = stored[1]
        if labels.dtype == object:  # tags per word: always the most frequent tag
            tags, counts = np.unique([t for row in labels for t in row], return_counts=True)
            common = tags[np.argmax(counts)]
            constant = np.empty(len(labels), dtype=object)
            for i, row in enumerate(labels):
                constant[i] = [common] * len(row)
            score = float(scorer(constant, labels))
            return score if math.isfinite(score) else None
        if labels.dtype.kind not in "iub":  # regression: no class to predict
            return None
        values, counts = np.unique(labels, return_counts=True)
        score = float(scorer(np.full_like(labels, values[np.argmax(counts)]), labels))
        return score if math.isfinite(score) else None
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def _main_metric(runs: Sequence[RunRecord], task: TaskSpec) -> str | None:
    """The main metric the runs report; before any has finished, the registered task's."""
    names = {r.results.get("main_metric") for r in runs} - {None}
    if len(names) > 1:
        raise ValueError(f"runs of one task disagree on the main metric: {sorted(names)}")
    if names:
        return next(iter(names))
    from ..tasks import DataError, get_task

    try:
        return get_task(task.name).metrics[0]
    except DataError:  # a file task: its metric is known once a run has read the data
        return None


def _task_splits(task: TaskSpec, runs: Sequence[RunRecord]) -> list[str]:
    if task.splits is not None:
        return list(task.splits)
    seen: list[str] = []
    for run in runs:
        for split in run.results.get("eval", {}):
            if split not in seen:
                seen.append(split)
    return seen or ["dev"]


def _bootstrap(
    runs: dict[str, RunRecord],
    row: Row,
    baseline: MethodSpec,
    seeds: list[int],
    *,
    n_resamples: int,
    seed: int,
) -> tuple[BootstrapInterval | None, str]:
    """The bootstrap interval of one comparison over the split's examples (paired seeds only)."""

    def load(method_id: str) -> list[tuple[np.ndarray, np.ndarray]] | None:
        out = []
        for s in seeds:
            run = runs.get(f"{row.model.id}/{row.task.id}/{method_id}/seed-{s}")
            loaded = None if run is None else run.predictions(row.split)
            if loaded is None:
                return None
            out.append(loaded)
        return out

    a, b = load(row.method.id), load(baseline.id)
    if a is None or b is None:
        return None, "no stored predictions"
    labels = a[0][1]
    if any(len(lab) != len(labels) or not np.array_equal(lab, labels) for _, lab in [*a, *b]):
        return None, "runs were evaluated on different examples"
    interval = bootstrap_difference(
        row.metric, labels, [p for p, _ in a], [p for p, _ in b], n_resamples=n_resamples, seed=seed
    )
    return interval, ""


def _detectable(
    experiment: Experiment, rows: list[Row], planned: int, alpha: float, power: float
) -> list[Detectable]:
    """Per model, task and split: the detectable difference of the design (see to_markdown's legend)."""
    out = []
    n_seeds = len(experiment.seeds)
    keys: list[tuple[str, str, str]] = []
    for row in rows:
        if (row.model.id, row.task.id, row.split) not in keys:
            keys.append((row.model.id, row.task.id, row.split))
    for model_id, task_id, split in keys:
        group = [
            r.comparison
            for r in rows
            if (r.model.id, r.task.id, r.split) == (model_id, task_id, split) and r.comparison is not None
        ]
        sd = pooled_sd([c.test.sd for c in group], [c.test.n for c in group])
        intervals = [c.bootstrap for c in group if c.bootstrap is not None]
        ses = [b.se for b in intervals]
        n_examples = intervals[0].n_examples if intervals else None
        z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
        first = next(r for r in rows if (r.model.id, r.task.id, r.split) == (model_id, task_id, split))
        out.append(
            Detectable(
                model=first.model,
                task=first.task,
                split=split,
                metric=first.metric,
                n_seeds=n_seeds,
                sd_pooled=sd,
                at_alpha=detectable_difference(sd, n_seeds, alpha, power),
                at_holm_first_step=detectable_difference(sd, n_seeds, alpha / max(planned, 1), power),
                from_examples=float(z * np.median(ses)) if ses else float("nan"),
                n_examples=n_examples,
            )
        )
    return out


# --------------------------------------------------------------------------------------------------
# Markdown


def _pct(value: float, signed: bool = False, digits: int = 1) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    return f"{100 * value:+.{digits}f}" if signed else f"{100 * value:.{digits}f}"


def _p(value: float) -> str:
    if not math.isfinite(value):
        return "–"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


def _column_title(task: TaskSpec, split: str, metric: str) -> str:
    return f"{task.label} {split} ({metric})"


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
        "(below). Model selection: the checkpoint with the best main metric on the validation split carved from "
        "train; the dev splits are used for this table only. No option was tuned on dev. "
        f"Seeds ({', '.join(map(str, e.seeds))}) vary the head initialisation, dropout and the method's own randomness."
    )
    lines.append("")
    lines.append(f"- Tuning of method options: {e.tuning}.")
    lines.append(f"- Recipe: {e.recipe}.")
    models = {}
    for run in runs:
        models.setdefault(
            run.cell.model.id, run.results.get("model_description") or run.config.get("model_description")
        )
    for model in e.models:
        lines.append(f"- Model {model.label}: {models.get(model.id) or model.name}.")
    for task in e.tasks:
        task_runs = [r for r in runs if r.cell.task.id == task.id]
        if not task_runs:
            lines.append(f"- {task.label}: no finished cell yet.")
            continue
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
        lines.append(
            f"- {task.label}: {size_text}; {budget}, lr {c.get('learning_rate')}, max length "
            f"{c.get('max_length')}; validation every {every}; data: {first.results.get('data_source')}."
        )
    method_text = "; ".join(
        f"{m.label} = `{m.describe()}`" + (" (baseline)" if m.id == baseline.id else "") for m in e.methods
    )
    lines.append(f"- Methods: {method_text}.")
    if not table.budget.is_empty():
        lines.append(
            f"- Budget overrides of this run: {table.budget.overrides()} (not the experiment's own budget)."
        )
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
    lines.append(
        f"- Cells: {done} of {total} finished"
        + (f" ({others})" if others else "")
        + f"; wall time of the finished "
        f"cells {wall / 3600:.2f} h{hw_text}."
    )
    lines.append(
        f"- Scores ×100, mean ± standard deviation over seeds; Δ is the mean paired difference against "
        f"{baseline.label} (same seed). Marks: paired t-test over seeds, two-sided, Holm-corrected over the "
        f"{table.family_size} comparisons of this table: * p_Holm < 0.05, ** p_Holm < 0.01."
    )
    return lines


def to_markdown(table: ComparisonTable, figures: dict[str, str] | None = None) -> str:
    """The whole report as Markdown: header, scores, differences, detectable differences, figures."""
    e = table.experiment
    baseline = e.method(e.baseline)
    out = [f"# {e.name}", "", *protocol_lines(table), ""]
    for model in e.models:
        title = "## Scores" + (f": {model.label}" if len(e.models) > 1 else "")
        columns = [(task, split) for task in e.tasks for split in table.splits(model, task)]
        out += [title, ""]
        header = ["method"] + [_column_title(t, s, _metric_of(table, model, t)) for t, s in columns]
        out.append("| " + " | ".join(header) + " |")
        out.append("|" + "---|" * len(header))
        for method in e.methods:
            cells = [method.label]
            for task, split in columns:
                row = table.row(model.id, task.id, split, method.id)
                cells.append(_score_cell(row, len(e.seeds)))
            out.append("| " + " | ".join(cells) + " |")
        floors = [table.floor(model.id, task.id, split) for task, split in columns]
        if any(f is not None for f in floors):
            cells = ["*majority class* (always the most frequent label: the floor)"]
            cells += ["–" if f is None else f"*{_pct(f)}*" for f in floors]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    out += [f"## Differences against {baseline.label}", ""]
    out.append(
        f"Δ: mean of the paired differences (×100). p: paired t-test over seeds; p_Holm: Holm-adjusted over the "
        f"{table.family_size} tests. Bootstrap: {int(100 * 0.95)}% percentile interval of the difference of seed-means "
        f"over {table.n_resamples} resamples of the evaluation examples (stored predictions); it shows how much Δ "
        "depends on which examples the split holds, which the t-test over seeds does not."
    )
    out.append("")
    header = ["model", "task", "split", "method", "seeds", "Δ", "p", "p_Holm", "bootstrap 95% interval"]
    if len(e.models) == 1:
        header.remove("model")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "---|" * len(header))
    for row in table.rows:
        if row.comparison is None:
            continue
        c = row.comparison
        boot = (
            f"[{_pct(c.bootstrap.low, True)}, {_pct(c.bootstrap.high, True)}]"
            if c.bootstrap
            else c.note or "–"
        )
        cells = [
            row.model.label,
            row.task.label,
            row.split,
            row.method.label,
            str(c.test.n),
            f"{_pct(c.test.mean, True)}{c.mark}",
            _p(c.test.p),
            _p(c.p_holm),
            boot,
        ]
        if len(e.models) == 1:
            cells.pop(0)
        out.append("| " + " | ".join(cells) + " |")
    out += ["", "## What this design can detect", ""]
    out.append(
        f"Smallest true difference (×100) detected with {int(100 * table.power)}% power. *Seeds*: a two-sided "
        f"paired t-test over {len(e.seeds)} seeds, computed from the noncentral t distribution, with the standard "
        "deviation of the paired differences pooled over the methods of the task and split; at α = "
        f"{table.alpha:g}, and at α / m = {table.alpha:g} / {max(table.planned_comparisons, 1)} (m: the comparisons "
        "of the full grid; the threshold of Holm's "
        f"first step, which the smallest p-value of the table must pass). *Examples*: (z(1 - α/2) + z(power)) "
        "times the median bootstrap standard error of the differences: the noise of a finite dev set alone."
    )
    out.append("")
    header = ["model", "task", "split", "sd of paired Δ", "seeds: α", "seeds: α/m", "examples", "n examples"]
    if len(e.models) == 1:
        header.remove("model")
    out.append("| " + " | ".join(header) + " |")
    out.append("|" + "---|" * len(header))
    for d in table.detectable:
        cells = [
            d.model.label,
            d.task.label,
            d.split,
            _pct(d.sd_pooled, digits=2),
            _pct(d.at_alpha, digits=2),
            _pct(d.at_holm_first_step, digits=2),
            _pct(d.from_examples, digits=2),
            str(d.n_examples or "–"),
        ]
        if len(e.models) == 1:
            cells.pop(0)
        out.append("| " + " | ".join(cells) + " |")
    if table.pending:
        out += ["", "## Pending cells", ""]
        reasons: dict[str, int] = {}
        for reason in table.pending.values():
            reasons[reason] = reasons.get(reason, 0) + 1
        out += [f"- {n} cell(s): {reason}" for reason, n in sorted(reasons.items())]
    if figures:
        out += ["", "## Figures", ""]
        out += [f"![{name}]({path})" for name, path in figures.items()]
    return "\n".join(out) + "\n"


def _metric_of(table: ComparisonTable, model: ModelSpec, task: TaskSpec) -> str:
    return next((r.metric for r in table.rows if r.model.id == model.id and r.task.id == task.id), "?")


def _score_cell(row: Row | None, n_seeds: int) -> str:
    if row is None:
        return "–"
    if not row.values:
        return "pending" if row.pending else "–"
    text = _pct(row.mean) if row.n < 2 else f"{_pct(row.mean)} ± {_pct(row.std)}"
    if row.n != n_seeds:
        text += f" (n={row.n})"
    if row.comparison is not None:
        text += f" (Δ {_pct(row.comparison.test.mean, True)}{row.comparison.mark})"
    return text


# --------------------------------------------------------------------------------------------------
# CSV

CSV_COLUMNS = [
    "model",
    "task",
    "split",
    "metric",
    "method",
    "method_label",
    "method_name",
    "method_options",
    "n",
    "mean",
    "std",
    "values",
    "pending",
    "n_pairs",
    "diff",
    "diff_sd",
    "t",
    "p",
    "p_holm",
    "significance",
    "ci_low",
    "ci_high",
    "bootstrap_se",
    "detectable_alpha",
    "detectable_holm_first_step",
    "detectable_examples",
    "majority",
]


def to_csv(table: ComparisonTable) -> str:
    """One line per model, task, split and method, raw values (not ×100)."""
    detectable = {(d.model.id, d.task.id, d.split): d for d in table.detectable}
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in table.rows:
        c = row.comparison
        d = detectable.get((row.model.id, row.task.id, row.split))
        writer.writerow(
            {
                "model": row.model.id,
                "task": row.task.id,
                "split": row.split,
                "metric": row.metric,
                "method": row.method.id,
                "method_label": row.method.label,
                "method_name": row.method.name,
                "method_options": json.dumps(row.method.options, sort_keys=True),
                "n": row.n,
                "mean": _num(row.mean),
                "std": _num(row.std),
                "values": ";".join(f"{s}:{v:.6g}" for s, v in sorted(row.values.items())),
                "pending": row.pending or "",
                "n_pairs": c.test.n if c else "",
                "diff": _num(c.test.mean) if c else "",
                "diff_sd": _num(c.test.sd) if c else "",
                "t": _num(c.test.t) if c else "",
                "p": _num(c.test.p) if c else "",
                "p_holm": _num(c.p_holm) if c else "",
                "significance": c.mark if c else "",
                "ci_low": _num(c.bootstrap.low) if c and c.bootstrap else "",
                "ci_high": _num(c.bootstrap.high) if c and c.bootstrap else "",
                "bootstrap_se": _num(c.bootstrap.se) if c and c.bootstrap else "",
                "detectable_alpha": _num(d.at_alpha) if d else "",
                "detectable_holm_first_step": _num(d.at_holm_first_step) if d else "",
                "detectable_examples": _num(d.from_examples) if d else "",
                "majority": _num(table.floor(row.model.id, row.task.id, row.split)),
            }
        )
    return buffer.getvalue()


def _num(value: float) -> str:
    return "" if value is None or not math.isfinite(value) else f"{value:.6g}"


# --------------------------------------------------------------------------------------------------
# The command line


def table_main(argv: list[str]) -> int:
    """``attendout table``: print or write the Markdown/CSV table and the figures of a grid."""
    import argparse

    from ..experiments.spec import load_experiment
    from ..experiments.store import default_results_root

    parser = argparse.ArgumentParser(
        prog="attendout table",
        description=(
            "The comparison table of an experiment grid from its results root: mean ± std over seeds, the "
            "difference against the baseline with a paired t-test (Holm-corrected) and a bootstrap interval "
            "over dev examples, and the smallest detectable difference. Prints Markdown unless told where to write."
        ),
    )
    parser.add_argument("experiment", help="an experiment file, or the name of one in --experiments-dir")
    parser.add_argument("--results", default=None, help="results root (default: results/NAME)")
    parser.add_argument(
        "--out", default=None, help="write table.md, table.csv, bars.png, deltas.png and curves-*.png here"
    )
    parser.add_argument("--markdown", default=None, help="write the Markdown table to this file")
    parser.add_argument("--csv", default=None, help="write the CSV table to this file")
    parser.add_argument("--bar-chart", default=None, help="write the bar chart PNG to this file")
    parser.add_argument(
        "--delta-chart", default=None, help="write the PNG of differences from the baseline to this file"
    )
    parser.add_argument(
        "--curves", default=None, metavar="DIR", help="write convergence curves PNGs to this folder"
    )
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples (default: 2000)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (default: 0.05)")
    parser.add_argument(
        "--power", type=float, default=0.8, help="power of the detectable difference (default: 0.8)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default: 0)")
    parser.add_argument(
        "--experiments-dir", default="experiments", help="where experiment names are looked up"
    )
    args = parser.parse_args(argv)

    experiment = load_experiment(args.experiment, args.experiments_dir)
    root = Path(args.results) if args.results else default_results_root(experiment)
    if not root.is_dir():
        raise ValueError(
            f"results root {root} does not exist; run attendout bench {args.experiment} first (or pass --results)"
        )
    table = build_table(
        experiment, root, alpha=args.alpha, power=args.power, n_resamples=args.bootstrap, seed=args.seed
    )
    if not table.runs:
        raise ValueError(f"no finished cell of {experiment.name} in {root}")

    from .figures import bar_chart, convergence_curves, delta_chart

    markdown_path = Path(args.markdown) if args.markdown else None
    csv_path = Path(args.csv) if args.csv else None
    bars = Path(args.bar_chart) if args.bar_chart else None
    deltas = Path(args.delta_chart) if args.delta_chart else None
    curves_dir = Path(args.curves) if args.curves else None
    if args.out:
        out = Path(args.out)
        markdown_path = markdown_path or out / "table.md"
        csv_path = csv_path or out / "table.csv"
        bars = bars or out / "bars.png"
        deltas = deltas or out / "deltas.png"
        curves_dir = curves_dir or out
    figures: dict[str, str] = {}
    written: list[Path] = []
    if bars is not None:
        written.append(bar_chart(table, bars))
        figures["bar chart"] = _relative(bars, markdown_path)
    if deltas is not None and any(row.comparison is not None for row in table.rows):
        written.append(delta_chart(table, deltas))
        figures["differences from the baseline"] = _relative(deltas, markdown_path)
    if curves_dir is not None:
        for path in convergence_curves(table, curves_dir):
            written.append(path)
            figures[path.stem] = _relative(path, markdown_path)
    markdown = to_markdown(table, figures if markdown_path else None)
    if markdown_path is not None:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(markdown)
        written.append(markdown_path)
    if csv_path is not None:
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        csv_path.write_text(to_csv(table))
        written.append(csv_path)
    if markdown_path is None:
        print(markdown, end="")
    for path in written:
        print(f"wrote {path}")
    return 0


def _relative(path: Path, markdown: Path | None) -> str:
    """``path`` as a link from the Markdown file's folder (absolute-free when possible)."""
    import os

    if markdown is None:
        return str(path)
    return os.path.relpath(path, markdown.parent)
