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
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..bench import Budget, Experiment, ResultsStore, load_experiment, prepare_cells, run_cells
from ..bench.parse import default_id
from ..bench.runner import reuse_runs
from ..bench.spec import RESERVED_TRAINING_KEYS
from ..config import NEUTRAL_OPTIONS, TrainConfig
from ..configfile import dumps_toml
from ..core.folder import relative_here
from ..report.comparison import ComparisonTable, build_table
from ..report.stats import (
    TEXT_METRICS,
    ChanceFloor,
    PairedTest,
    chance_floor,
    copy_floor,
    detectable_difference,
    holm,
    pooled_sd,
)
from ..run import check as raise_if_stopped
from .power import CONFIDENCE, Noise, pooled_df
from .scales import plain_name
from .spaces import describe


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

    @classmethod
    def of_test(
        cls,
        method: str,
        options: dict[str, Any],
        test: PairedTest,
        *,
        mean: float,
        baseline_mean: float,
        boot: Any = None,
        cost: float | None = None,
    ) -> ConfirmRow:
        """The row of a paired test (method minus none over the seeds); ``p_holm`` is set by
        :meth:`Confirmation.of_rows`, ``boot`` is a bootstrap interval (``.low``, ``.high``) or None."""
        half = test.half_interval()
        return cls(
            method=method,
            options=options,
            setting=describe(method, options),
            seeds=test.n,
            mean=mean,
            baseline_mean=baseline_mean,
            delta=test.mean,
            sd=test.sd,
            p=test.p,
            p_holm=float("nan"),
            t_low=test.mean - half,
            t_high=test.mean + half,
            boot_low=None if boot is None else boot.low,
            boot_high=None if boot is None else boot.high,
            cost=cost,
        )


@dataclass
class Confirmation:
    """The confirmation's table, read back: rows per method on the main split, the detectable difference."""

    split: str
    metric: str
    seeds: tuple[int, ...]
    rows: list[ConfirmRow]
    baseline_seeds: int
    detectable: float  # smallest true difference detected with 80% power at Holm's strictest level, at
    # the noise's upper CONFIDENCE bound: the power holds whenever the true noise is below the bound
    detectable_alpha: float  # the same at alpha alone (one comparison)
    table: ComparisonTable | None
    floor: float | None = None  # the best score of a constant prediction on the split (None: unknown)
    floor_constant: str = "a constant prediction"  # which constant scores it ("always 1")
    floor_what: str = "the best any constant prediction does"  # what the floor is (ChanceFloor.what)
    plain: str = "plain fine-tuning"  # what the baseline is called (:func:`plain_name`)
    noise: Noise = Noise(float("nan"), 0.0)  # one seed's paired difference, pooled over the methods
    confidence: float = CONFIDENCE  # of the bound on the noise the detectable difference is computed at
    reused: tuple[str, ...] = ()  # the cells whose runs were copied in (--reuse-runs), not trained here

    @property
    def fresh(self) -> bool:
        """Whether every run was trained for this study (none copied in by --reuse-runs)."""
        return not self.reused

    @property
    def complete(self) -> bool:
        return self.baseline_seeds == len(self.seeds) and all(r.seeds == len(self.seeds) for r in self.rows)

    @classmethod
    def of_rows(
        cls,
        rows: Sequence[ConfirmRow],
        *,
        split: str,
        metric: str,
        seeds: Sequence[int],
        baseline_seeds: int,
        alpha: float = 0.05,
        table: ComparisonTable | None = None,
        floor: ChanceFloor | None = None,
        plain: str = "plain fine-tuning",
        confidence: float = CONFIDENCE,
        reused: Sequence[str] = (),
    ) -> Confirmation:
        """The confirmation of ``rows`` (their raw p-values): Holm over them, the answer's family (the
        methods on the main split), and the detectable difference at Holm's strictest level, alpha / m, at
        the upper ``confidence`` bound (:mod:`.power`) on the paired differences' standard deviation pooled
        over the methods (with the degrees of freedom of differences that share the plain runs)."""
        adjusted = holm([r.p for r in rows])
        rows = [dataclasses.replace(r, p_holm=float(a)) for r, a in zip(rows, adjusted, strict=True)]
        noise = Noise(
            pooled_sd([r.sd for r in rows], [r.seeds for r in rows]), pooled_df([r.seeds for r in rows])
        )
        sd = noise.upper(confidence)
        n = len(seeds)
        return cls(
            split=split,
            metric=metric,
            seeds=tuple(seeds),
            rows=rows,
            baseline_seeds=baseline_seeds,
            detectable=detectable_difference(sd, n, alpha / max(len(rows), 1)),
            detectable_alpha=detectable_difference(sd, n, alpha),
            table=table,
            floor=None if floor is None else floor.score,
            floor_constant="a constant prediction" if floor is None else floor.constant,
            floor_what="the best any constant prediction does" if floor is None else floor.what,
            plain=plain,
            noise=noise,
            confidence=confidence,
            reused=tuple(reused),
        )


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
        training["data_dir"] = relative_here(base.data_dir)  # naming no machine
    plain = plain_name(base.model_init)
    methods = [{"id": "none", "name": "none", "label": f"none ({plain})"}]
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
            "description": f"attendout advise: each method's searched setting against {plain} on fresh "
            f"seeds ({base.task}, {base.model})",
            "seeds": list(seeds),
            "data_seed": base.data_seed,
            "baseline": "none",
            "recipe": f"the recipe given to attendout advise; the budget read off {plain}'s curves",
            "tuning": tuning,
        },
        "training": training,
        "models": [
            {"id": default_id(base.model) or "model", "name": base.model, "label": model_label or base.model}
        ],
        "tasks": [{"id": default_id(base.task) or "model", "name": base.task}],
        "methods": methods,
    }


def write_experiment(path: Path, data: dict[str, Any]) -> Experiment:
    from ..core.folder import write_text_atomic

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
    tracking: Any = None,
) -> None:
    """Train the confirmation's missing cells (finished ones are kept; cells of a changed setting rerun),
    then wait for the ones other processes still run; ``tracking``: where each run reports (--report-to)."""
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
    states = Counter(store.status(c)[0] for c in cells)
    if states["stale"]:
        echo(
            f"confirm: {states['stale']} finished cell(s) were of an earlier setting (the search went on); "
            "they are rerun"
        )
    bar = tqdm(
        total=len(cells),
        initial=states["done"],
        desc="advise: confirm",
        unit="run",
        disable=not progress,
        dynamic_ncols=True,
    )

    confirming = None
    if tracking is not None:  # each cell a run of the study's experiment, under TENSORBOARD/confirm
        folder = str(Path(tracking.tensorboard_dir) / "confirm")
        confirming = dataclasses.replace(tracking, tensorboard_dir=folder, tags={"stage": "confirmation"})

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
            summary = run_cells(plan, store, rerun_stale=True, echo=listen, tracking=confirming)
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
    """The confirmation's statistics on the main (first) evaluation split (:meth:`Confirmation.of_rows`:
    paired tests over seeds, Holm over the methods, the detectable difference at alpha / methods), with the
    split's chance floor (:func:`split_floor`)."""

    table = build_table(experiment, root, alpha=alpha)
    if not table.runs:
        raise ValueError(f"the confirmation in {root} has no finished run yet")
    model, task = experiment.models[0], experiment.tasks[0]
    split = table.splits(model, task)[0]
    base = table.row(model.id, task.id, split, "none")
    walls = _walls(table)
    rows = []
    for method, options in tuned.items():
        row = table.row(model.id, task.id, split, method)
        if row is None or row.comparison is None or base is None:
            continue
        c = row.comparison
        seeds = sorted(set(row.values) & set(base.values))
        rows.append(
            ConfirmRow.of_test(
                method,
                options,
                c.test,
                mean=float(sum(row.values[s] for s in seeds) / c.test.n),
                baseline_mean=float(sum(base.values[s] for s in seeds) / c.test.n),
                boot=c.bootstrap,
                cost=walls[method] / walls["none"] if method in walls and walls.get("none") else None,
            )
        )
    metric = base.metric if base is not None else "?"
    return Confirmation.of_rows(
        rows,
        split=split,
        metric=metric,
        seeds=experiment.seeds,
        baseline_seeds=0 if base is None else base.n,
        alpha=alpha,
        table=table,
        floor=split_floor(list(table.runs.values()), split, metric),
        plain=plain_name(experiment.training.get("model_init")),
        reused=reused(table),
    )


def reused(table: ComparisonTable) -> list[str]:
    """The confirmation's runs copied in by ``--reuse-runs`` (their cell keys): runs trained for another
    study, so not fresh to this one (a setting chosen on their scores would be judged on them again)."""
    return sorted(key for key, run in table.runs.items() if "reused_from" in run.record)


def split_floor(runs: Sequence[Any], split: str, metric: str) -> ChanceFloor | None:
    """The chance floor of ``split``, from what any run stored with its predictions (every cell of the grid
    sees the same split): for a text metric of seq2seq (BLEU, chrF, ROUGE), the score of copying the source
    (:func:`attendout.report.stats.copy_floor`, from the sources the run stored); for any other metric, the
    best constant prediction's (:func:`attendout.report.stats.chance_floor`, from the labels); for perplexity,
    a unigram model's (``unigram_perplexity`` in the run's results: :func:`attendout.encoding.
    generation.score_unigram_floor`). None where no run stored what it needs (runs stored before issue 57's floors)."""
    for run in runs:
        if metric == "perplexity":  # a language model stores no predictions: its floor is in its results
            floor = ((run.results.get("eval") or {}).get(split) or {}).get("unigram_perplexity")
            if floor is not None:
                return ChanceFloor(
                    float(floor),
                    "a unigram model of the training text",
                    "what a model that ignores context does",
                )
            continue
        stored = run.predictions(split)
        if stored is None:
            continue
        if metric in TEXT_METRICS:
            sources = run.sources(split)
            return None if sources is None else copy_floor(metric, sources, list(stored[1]))
        return chance_floor(metric, stored[1])
    return None


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


def dumps(confirmation: Confirmation) -> str:
    record = {
        "split": confirmation.split,
        "metric": confirmation.metric,
        "seeds": list(confirmation.seeds),
        "detectable": confirmation.detectable,
        "floor": confirmation.floor,
        "floor_constant": confirmation.floor_constant if confirmation.floor is not None else None,
        "plain": confirmation.plain,
        "noise_sd": confirmation.noise.sd,
        "noise_df": confirmation.noise.df,
        "noise_bound": confirmation.noise.upper(confirmation.confidence),
        "confidence": confirmation.confidence,
        "reused": list(confirmation.reused),
        "rows": [dataclasses.asdict(r) for r in confirmation.rows],
    }
    return json.dumps(record, indent=2, default=str)
