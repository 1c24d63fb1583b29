"""The comparison table of an experiment grid as data: every statistic ``attendout table`` prints.

:func:`build_table` reads the finished cells of a results root (:func:`collect_runs`) and assembles, for
every model, task, evaluation split and method, the mean and standard deviation over seeds of the
task's main metric; against the baseline method, the paired t-test over seeds with Holm's correction
and the bootstrap interval over the evaluation examples; per task and split, the smallest difference
the design can detect. The statistics are computed by :mod:`attendout.report.stats`;
:mod:`attendout.report.render` writes the result as Markdown and CSV.

Every difference is the method's score minus the baseline's, whatever the metric's direction: for a
metric where lower is better (perplexity, the loss; :func:`attendout.tasks.metrics.higher_is_better`)
a gain is a negative difference. :attr:`Comparison.gain` and :meth:`ComparisonTable.best` turn that
into "better" for every metric alike. Fractions (accuracy, F1, MCC, ...) are shown ×100; metrics with
a unit of their own (perplexity, BLEU, chrF, ROUGE) as they are (:func:`metric_scale`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..bench import Budget, Cell, Experiment, MethodSpec, ModelSpec, ResultsStore, TaskSpec
from ..bench.store import read_predictions
from ..core.folder import RunDir
from ..core.state import read_json_object
from ..tasks import METRICS, better, higher_is_better
from ..tasks.metrics import sequences_array
from .stats import (
    BootstrapInterval,
    PairedTest,
    bootstrap_difference,
    detectable_difference,
    detectable_from_examples,
    holm_family,
    majority_score,
    paired_t_test,
    pooled_sd,
)

SIGNIFICANCE = ((0.01, "**"), (0.05, "*"))

#: Metrics reported in a unit of their own (perplexity per token, BLEU, chrF and ROUGE on 0-100, the
#: loss in nats): shown as they are. Every other metric is a fraction, shown ×100.
AS_IS = frozenset({"perplexity", "loss", "bleu", "chrf", "rouge1", "rouge2", "rougeL"})


def metric_scale(metric: str) -> float:
    """What a value of ``metric`` is multiplied by for display: 1 for :data:`AS_IS`, else 100."""
    return 1.0 if metric in AS_IS else 100.0


def direction(metric: str) -> str:
    """``"higher is better"`` or ``"lower is better"`` (perplexity, loss)."""
    return "higher is better" if higher_is_better(metric) else "lower is better"


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

    def sources(self, split: str) -> list[str] | None:
        """The source text of each example of ``split`` (seq2seq runs store it beside the prediction), or
        None where the run stored none (other task kinds; runs written before sources were stored)."""
        rows = read_predictions(self.path, split)
        if not rows or any("source" not in row for row in rows):
            return None
        return [str(row["source"]) for row in rows]


@dataclass
class Comparison:
    """A method against the baseline on one split."""

    test: PairedTest  # of method - baseline: negative where the method lowers the metric
    p_holm: float = float("nan")
    bootstrap: BootstrapInterval | None = None
    note: str = ""
    higher_is_better: bool = True  # the metric's direction (False: perplexity, loss)

    @property
    def gain(self) -> float:
        """The mean difference in the metric's direction: positive when the method is better."""
        return self.test.mean if self.higher_is_better else -self.test.mean

    def better(self, alpha: float = 0.05) -> bool | None:
        """True (better) or False (worse) where p_Holm < ``alpha``; None where the difference is not significant."""
        if not (self.p_holm < alpha) or not math.isfinite(self.gain) or self.gain == 0:
            return None
        return self.gain > 0

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
    invalid: str | None = None  # why the row's cells cannot run (an unknown method, a bad option)
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
    invalid: dict[str, str]  # cell key -> why it cannot run
    alpha: float
    power: float
    n_resamples: int
    family_size: int  # comparisons with a p-value (the Holm family)
    planned_comparisons: int  # comparisons the full grid makes (invalid cells included)
    # (model, task, split) -> majority
    floors: dict[tuple[str, str, str], float] = field(default_factory=dict)

    def floor(self, model_id: str, task_id: str, split: str) -> float | None:
        """The score of always predicting the split's most frequent label (None: unknown or regression)."""
        return self.floors.get((model_id, task_id, split))

    def splits(self, model: ModelSpec, task: TaskSpec) -> list[str]:
        return list(
            dict.fromkeys(r.split for r in self.rows if (r.model.id, r.task.id) == (model.id, task.id))
        )

    def best(self, model_id: str, task_id: str, split: str) -> Row | None:
        """The row with the best mean of one column in its metric's direction (None: no finished cell).
        Ties keep the first method of the experiment."""
        best: Row | None = None
        for row in self.rows:
            if (row.model.id, row.task.id, row.split) != (model_id, task_id, split) or not row.values:
                continue
            if math.isfinite(row.mean) and (best is None or better(row.metric, row.mean, best.mean)):
                best = row
        return best

    def row(self, model_id: str, task_id: str, split: str, method_id: str) -> Row | None:
        key = (model_id, task_id, split, method_id)
        return next((r for r in self.rows if (r.model.id, r.task.id, r.split, r.method.id) == key), None)

    def model_description(self, model: ModelSpec) -> str:
        """How the finished runs of ``model`` describe it (their results' or config's model_description: the
        checkpoint, its size), else its name."""
        described = (
            r.results.get("model_description") or r.config.get("model_description")
            for r in self.runs.values()
            if r.cell.model.id == model.id
        )
        return str(next((d for d in described if d), model.name))

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
    """The finished, current cells of the grid; counts of every status; why invalid cells cannot run."""
    runs: dict[str, RunRecord] = {}
    status: dict[str, int] = {}
    invalid: dict[str, str] = {}
    for cell in experiment.cells(budget):
        state, detail = store.status(cell)
        status[state] = status.get(state, 0) + 1
        if state == "invalid":
            invalid[cell.key] = detail
        if state != "done":
            continue
        run = RunDir(store.cell_dir(cell))
        runs[cell.key] = RunRecord(
            cell=cell,
            path=run.path,
            results=run.read_results(),
            config=read_json_object(run.config),
            record=read_json_object(run.cell),
        )
    return runs, status, invalid


def build_table(
    experiment: Experiment,
    root: str | Path,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    n_resamples: int = 2000,
    seed: int = 0,
    metric: str | None = None,
) -> ComparisonTable:
    """Read the results root of ``experiment`` and compute every statistic of the table.

    The budget overrides the grid was run with are read from the root's experiment.json. ``metric``: the
    stored metric to compare (chrF beside a translation grid's BLEU); None: each task's main metric.
    """
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(f"alpha and power must be in (0, 1), got alpha={alpha!r}, power={power!r}")
    store = ResultsStore(root)
    budget = Budget.from_dict(store.manifest().get("budget"))
    runs, status, invalid = collect_runs(experiment, store, budget)
    baseline = experiment.method(experiment.baseline)
    rows, floors = _score_rows(experiment, runs, invalid, metric)
    bases = {(r.model.id, r.task.id, r.split): r for r in rows if r.method.id == baseline.id}
    for row in rows:
        if row.method.id != baseline.id and row.values:
            base = bases.get((row.model.id, row.task.id, row.split))
            row.comparison = _compare(row, base, runs, baseline, n_resamples=n_resamples, seed=seed)
    family = _adjust_for_multiple_tests([r.comparison for r in rows if r.comparison is not None])
    planned = sum(1 for r in rows if r.method.id != baseline.id)
    return ComparisonTable(
        experiment=experiment,
        root=Path(root),
        budget=budget,
        rows=rows,
        detectable=_detectable(experiment, rows, planned, alpha, power),
        runs=runs,
        status=status,
        invalid=invalid,
        alpha=alpha,
        power=power,
        n_resamples=n_resamples,
        family_size=family,
        planned_comparisons=planned,
        floors=floors,
    )


def _score_rows(
    experiment: Experiment, runs: dict[str, RunRecord], invalid: dict[str, str], chosen: str | None = None
) -> tuple[list[Row], dict[tuple[str, str, str], float]]:
    """A row of scores over seeds for every model, task, split and method of the grid (in that order),
    and the majority floor of every (model, task, split) whose labels are stored; the metric is
    ``chosen``, else each task's main metric."""
    rows: list[Row] = []
    floors: dict[tuple[str, str, str], float] = {}
    for model in experiment.models:
        for task in experiment.tasks:
            task_runs = [
                r for r in runs.values() if r.cell.model.id == model.id and r.cell.task.id == task.id
            ]
            metric = chosen or _main_metric(task_runs, task)
            for split in _task_splits(task, task_runs):
                floor = None if metric is None else majority_floor(task_runs, split, metric)
                if floor is not None:
                    floors[(model.id, task.id, split)] = floor
                for method in experiment.methods:
                    values = {} if metric is None else _seed_scores(task_runs, method, split, metric)
                    why = _invalid_reason(invalid, model, task, method)
                    rows.append(Row(model, task, split, method, metric or "?", values, invalid=why))
    return rows, floors


def _invalid_reason(
    invalid: dict[str, str], model: ModelSpec, task: TaskSpec, method: MethodSpec
) -> str | None:
    """Why the cells of one model, task and method cannot run (every distinct reason), or None."""
    reasons = {invalid[k] for k in invalid if k.startswith(f"{model.id}/{task.id}/{method.id}/")}
    return "; ".join(sorted(reasons)) or None


def _seed_scores(
    task_runs: Sequence[RunRecord], method: MethodSpec, split: str, metric: str
) -> dict[int, float]:
    """seed -> ``metric`` on ``split`` of ``method``'s finished runs (of one model and task) that report it."""
    scores = {run.cell.seed: run.score(split, metric) for run in task_runs if run.cell.method.id == method.id}
    return {seed: value for seed, value in scores.items() if value is not None}


def _compare(
    row: Row,
    base: Row | None,
    runs: dict[str, RunRecord],
    baseline: MethodSpec,
    *,
    n_resamples: int,
    seed: int,
) -> Comparison | None:
    """``row`` against ``base``, the baseline's row of its column: the paired t-test over the seeds both ran
    and the bootstrap over the examples; None where the baseline has no seed in common."""
    seeds = sorted(set(row.values) & set(base.values)) if base is not None else []
    if not seeds:
        return None
    test = paired_t_test([row.values[s] for s in seeds], [base.values[s] for s in seeds])
    comparison = Comparison(test=test, higher_is_better=higher_is_better(row.metric))
    comparison.bootstrap, comparison.note = _bootstrap(
        runs, row, baseline, seeds, n_resamples=n_resamples, seed=seed
    )
    return comparison


def _adjust_for_multiple_tests(comparisons: list[Comparison]) -> int:
    """Set every comparison's Holm-adjusted p-value (:func:`~.stats.holm_family`); returns the family size."""
    adjusted, family = holm_family([c.test.p for c in comparisons])
    for comparison, p in zip(comparisons, adjusted, strict=True):
        comparison.p_holm = float(p)
    return family


def _tag_rows(rows: list[list[int]], names: list[str]) -> np.ndarray:
    return sequences_array([[names[int(t)] for t in row] for row in rows] if names else rows)


def majority_floor(runs: Sequence[RunRecord], split: str, metric: str) -> float | None:
    """``metric`` of always predicting the most frequent label of ``split``: the score a model that
    learned nothing reaches (:func:`~.stats.majority_score`). Labels come from any run's stored
    predictions (every cell of a grid sees the same split); None for regression labels."""
    for run in runs:
        stored = run.predictions(split)
        if stored is None or metric not in METRICS:
            continue
        return majority_score(metric, stored[1])
    return None


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
    return list(dict.fromkeys(split for run in runs for split in run.results.get("eval", {}))) or ["dev"]


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
    columns: dict[tuple[str, str, str], list[Row]] = {}
    for row in rows:
        columns.setdefault((row.model.id, row.task.id, row.split), []).append(row)
    for first, *rest in columns.values():
        group = [r.comparison for r in (first, *rest) if r.comparison is not None]
        sd = pooled_sd([c.test.sd for c in group], [c.test.n for c in group])
        intervals = [c.bootstrap for c in group if c.bootstrap is not None]
        n_examples = intervals[0].n_examples if intervals else None
        out.append(
            Detectable(
                model=first.model,
                task=first.task,
                split=first.split,
                metric=first.metric,
                n_seeds=n_seeds,
                sd_pooled=sd,
                at_alpha=detectable_difference(sd, n_seeds, alpha, power),
                at_holm_first_step=detectable_difference(sd, n_seeds, alpha / max(planned, 1), power),
                from_examples=detectable_from_examples([b.se for b in intervals], alpha, power),
                n_examples=n_examples,
            )
        )
    return out
