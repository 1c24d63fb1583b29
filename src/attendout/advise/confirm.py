"""Stage 3 of ``advise``: each method's best setting against plain fine-tuning on fresh seeds.

A setting chosen as the best of many trials looks better on the runs it was chosen on than it is (the
winner's curse). So the confirmation trains ``none`` and every method at its chosen setting on seeds
the search never used, at the same budget, and scores them on the user's evaluation split. It is an
ordinary experiment grid, written as ``OUTPUT/confirm.toml`` and run by the machinery of ``attendout
bench`` into ``OUTPUT/confirm/`` (resumable cell by cell, shareable between processes), so
``attendout table OUTPUT/confirm.toml --results OUTPUT/confirm`` shows the full table. Its statistics
are the table's: paired t-tests over seeds with Holm's correction over the methods, bootstrap intervals
over the evaluation examples, and the smallest difference the design detects; plus the cost of a step
(a method's mean wall time per cell over ``none``'s, at the same steps).
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import NEUTRAL_OPTIONS, TrainConfig
from ..configfile import dumps_toml
from ..experiments.parse import load_experiment
from ..experiments.plan import prepare_cells
from ..experiments.runner import reuse_runs, run_cells
from ..experiments.spec import RESERVED_TRAINING_KEYS, Budget, Experiment
from ..experiments.store import ResultsStore
from ..interrupt import check as raise_if_stopped
from ..report.comparison import ComparisonTable, build_table
from ..report.stats import detectable_difference, holm, pooled_sd
from .spaces import describe

__all__ = ["ConfirmRow", "Confirmation", "confirm_experiment", "read_confirmation", "run_confirmation"]


@dataclass(frozen=True)
class ConfirmRow:
    """One method's confirmed comparison with ``none`` on the main evaluation split."""

    method: str
    options: dict[str, Any]
    setting: str  # "p = 0.15"
    seeds: int
    mean: float
    baseline_mean: float
    delta: float  # mean paired difference against none
    sd: float  # of the paired differences
    p: float
    p_holm: float
    t_low: float  # 95% t-interval of delta over seeds
    t_high: float
    boot_low: float | None  # 95% bootstrap interval over the split's examples
    boot_high: float | None
    cost: float | None  # wall time per cell / none's (runs trained here only; None if either has none)


@dataclass
class Confirmation:
    """The confirmation's table, read back: rows per method on the main split, the detectable difference."""

    split: str
    metric: str
    seeds: tuple[int, ...]
    rows: list[ConfirmRow]
    baseline_seeds: int
    detectable: float  # smallest true difference detected with 80% power at Holm's strictest level
    detectable_alpha: float  # the same at alpha alone (one comparison)
    table: ComparisonTable
    floor: float | None = None  # the split's majority-class score (None: unknown, or not a classification)

    @property
    def complete(self) -> bool:
        return self.baseline_seeds == len(self.seeds) and all(r.seeds == len(self.seeds) for r in self.rows)


def _id(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._+=-]", "-", text.rstrip("/").split("/")[-1]).lstrip("-._+=")
    return cleaned or "model"


def confirm_experiment(
    base: TrainConfig,
    tuned: dict[str, dict[str, Any]],
    seeds: Sequence[int],
    epochs: int,
    steps_per_epoch: int,
    *,
    tuning: str,
    model_label: str = "",
) -> dict[str, Any]:
    """The confirmation grid as an experiment file's data (``none`` and each method at its setting)."""
    defaults = {
        f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING
    }
    skip = RESERVED_TRAINING_KEYS | set(NEUTRAL_OPTIONS) | {"epochs", "max_steps", "evaluate"}
    training: dict[str, Any] = {
        k: v for k, v in base.to_dict().items() if k not in skip and v is not None and v != defaults.get(k)
    }
    training["epochs"] = epochs
    training["checkpoint_steps"] = steps_per_epoch  # each cell resumes from its last epoch
    if base.data_dir:
        training["data_dir"] = base.data_dir
    methods = [{"id": "none", "name": "none", "label": "none (plain fine-tuning)"}]
    for method, options in tuned.items():
        methods.append(
            {
                "id": method,
                "name": method,
                "label": f"{method} ({describe(method, options)}, tuned)",
                "options": options,
            }
        )
    return {
        "experiment": {
            "name": "advise-confirm",
            "description": f"attendout advise: each method's searched setting against plain fine-tuning on fresh "
            f"seeds ({base.task}, {base.model})",
            "seeds": list(seeds),
            "data_seed": base.data_seed,
            "baseline": "none",
            "recipe": "the recipe given to attendout advise; the budget read off plain fine-tuning's curves",
            "tuning": tuning,
        },
        "training": training,
        "models": [{"id": _id(base.model), "name": base.model, "label": model_label or base.model}],
        "tasks": [{"id": _id(base.task), "name": base.task}],
        "methods": methods,
    }


def write_experiment(path: Path, data: dict[str, Any]) -> Experiment:
    from ..rundir import write_text_atomic

    header = (
        "The confirmation grid of attendout advise (written by it; rerun advise to change it).\n"
        f"attendout table {path} --results {path.parent / 'confirm'}   # the full table"
    )
    write_text_atomic(path, dumps_toml(data, header))
    return load_experiment(path)


def run_confirmation(
    experiment: Experiment,
    root: Path,
    *,
    device: str | None = None,
    reuse: str | Path | None = None,
    progress: bool = True,
    echo: Callable[[str], None] = print,
    poll: float = 30.0,
) -> None:
    """Train the confirmation's missing cells (finished ones are kept; cells of a changed setting rerun),
    then wait for the ones other processes still run."""
    from tqdm.auto import tqdm

    store = ResultsStore(root)
    plan = prepare_cells(experiment, Budget(), device=device)
    if plan.invalid:
        first = plan.invalid[0]
        raise ValueError(f"the confirmation cell {first.key} cannot run: {first.invalid}")
    cells = [c for c in plan.cells if c.config is not None]
    if reuse is not None:
        store.prepare(experiment, Budget())
        for key in reuse_runs(cells, store, Path(reuse)):
            echo(f"confirm: {key}: reused a finished run of the same configuration from {reuse}")
    done = sum(1 for c in cells if store.status(c)[0] == "done")
    stale = sum(1 for c in cells if store.status(c)[0] == "stale")
    if stale:
        echo(
            f"confirm: {stale} finished cell(s) were of an earlier setting (the search went on); they are rerun"
        )
    bar = tqdm(
        total=len(cells),
        initial=done,
        desc="advise: confirm",
        unit="run",
        disable=not progress,
        dynamic_ncols=True,
    )

    def listen(line: str) -> None:
        raise_if_stopped()  # a stop that landed where it was swallowed
        if ": done in" in line or ": FAILED" in line:
            bar.update(1)
        if progress:
            bar.write(line)
        else:
            echo(line)

    try:
        while True:
            summary = run_cells(plan, store, rerun_stale=True, echo=listen)
            if summary.failed:
                raise RuntimeError(
                    f"confirm: {len(summary.failed)} run(s) failed (first: {summary.failed[0]}); see "
                    f"{root}/bench/events.jsonl"
                )
            if not _wait_for_others(cells, store, poll, echo):
                break
    finally:
        bar.close()


def _wait_for_others(
    cells: Sequence[Any], store: ResultsStore, poll: float, echo: Callable[[str], None]
) -> bool:
    """Wait while other live processes still run confirmation cells, so that every worker answers from
    the whole confirmation, never a partial one. True if a cell came back to do (its process died)."""
    waiting = False
    while True:
        states = [store.status(c)[0] for c in cells]
        if "todo" in states:
            return True
        running = [c.key for c, state in zip(cells, states, strict=True) if state == "running"]
        if not running:
            return False
        if not waiting:
            echo(f"confirm: waiting for {len(running)} run(s) of other processes ({running[0]}, ...)")
            waiting = True
        time.sleep(poll)
        raise_if_stopped()


def read_confirmation(
    experiment: Experiment, root: Path, tuned: dict[str, dict[str, Any]], alpha: float = 0.05
) -> Confirmation:
    """The confirmation's statistics on the main (first) evaluation split: paired tests over seeds, Holm
    over the methods (the answer's family: the main split only), the detectable difference at Holm's
    strictest level (alpha / methods) from the paired differences' pooled standard deviation."""

    table = build_table(experiment, root, alpha=alpha)
    if not table.runs:
        raise ValueError(f"the confirmation in {root} has no finished run yet")
    model, task = experiment.models[0], experiment.tasks[0]
    splits = table.splits(model, task)
    split = splits[0]
    base = table.row(model.id, task.id, split, "none")
    walls = _walls(table)
    rows = []
    for method, options in tuned.items():
        row = table.row(model.id, task.id, split, method)
        if row is None or row.comparison is None or base is None:
            continue
        c = row.comparison
        n, half = c.test.n, c.test.half_interval()
        seeds = sorted(set(row.values) & set(base.values))
        boot = c.bootstrap
        rows.append(
            ConfirmRow(
                method=method,
                options=options,
                setting=describe(method, options),
                seeds=n,
                mean=float(sum(row.values[s] for s in seeds) / n),
                baseline_mean=float(sum(base.values[s] for s in seeds) / n),
                delta=c.test.mean,
                sd=c.test.sd,
                p=c.test.p,
                p_holm=c.p_holm,
                t_low=c.test.mean - half,
                t_high=c.test.mean + half,
                boot_low=None if boot is None else boot.low,
                boot_high=None if boot is None else boot.high,
                cost=walls[method] / walls["none"] if method in walls and walls.get("none") else None,
            )
        )
    # the answer's family is the methods on the main split (the table's Holm runs over every split too)
    adjusted = holm([r.p for r in rows])
    rows = [dataclasses.replace(r, p_holm=float(a)) for r, a in zip(rows, adjusted, strict=True)]
    sd = pooled_sd([r.sd for r in rows], [r.seeds for r in rows])
    n_seeds = len(experiment.seeds)
    return Confirmation(
        split=split,
        metric=base.metric if base is not None else "?",
        seeds=tuple(experiment.seeds),
        rows=rows,
        baseline_seeds=0 if base is None else base.n,
        detectable=detectable_difference(sd, n_seeds, alpha / max(len(rows), 1)),
        detectable_alpha=detectable_difference(sd, n_seeds, alpha),
        table=table,
        floor=table.floor(model.id, task.id, split),
    )


def _walls(table: ComparisonTable) -> dict[str, float]:
    """Mean wall time of a method's finished cells (its record's wall_time_s), per method id: of the runs
    trained for this confirmation only, since one copied in by ``--reuse-runs`` was timed at another
    time, perhaps on another machine (a method whose runs were all copied has no entry)."""
    by_method: dict[str, list[float]] = {}
    for run in table.runs.values():
        wall = run.record.get("wall_time_s")
        if isinstance(wall, (int, float)) and "reused_from" not in run.record:
            by_method.setdefault(run.cell.method.id, []).append(float(wall))
    return {m: sum(v) / len(v) for m, v in by_method.items()}


def _json(confirmation: Confirmation) -> dict[str, Any]:
    return {
        "split": confirmation.split,
        "metric": confirmation.metric,
        "seeds": list(confirmation.seeds),
        "detectable": confirmation.detectable,
        "rows": [dataclasses.asdict(r) for r in confirmation.rows],
    }


def dumps(confirmation: Confirmation) -> str:
    return json.dumps(_json(confirmation), indent=2, default=str)
