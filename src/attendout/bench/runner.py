"""``attendout bench``: check, list and run the cells of an experiment grid in a shared results root.

:func:`attendout.bench.plan.prepare_cells` builds the grid (with budget and command-line
overrides), checks every cell (configuration, model and, for local data, the data and its sizes;
nothing is downloaded) and picks a shard; :func:`~attendout.bench.plan.format_listing` prints it
(the dry run). This module holds the rest: :func:`run_cells` trains the runnable cells that are neither
finished nor claimed, one at a time, each in its own work folder published atomically (see
:mod:`attendout.bench.store`); :func:`reuse_runs` copies finished runs in from another root.
The command is :mod:`attendout.cli.bench`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import shutil
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..config import TrainConfig
from ..core.folder import CELL_FILE, RESULTS_FILE, CheckpointError, RunDir, StorageError, portable
from ..run import check as raise_if_stopped
from ..run import finetune
from ..track import Tracking, track_run
from .claims import HEARTBEAT_S, Claim
from .plan import GridPlan
from .spec import Cell, ExperimentError, config_fingerprint
from .store import ResultsStore, compact_predictions, has_checkpoint

# --------------------------------------------------------------------------------------------------
# Reusing finished runs


def reuse_runs(cells: Sequence[Cell], store: ResultsStore, source: Path) -> list[str]:
    """Copy into ``store`` the finished runs under ``source`` whose configuration is a missing cell's.

    A run is taken only when its fingerprint (every option that changes the numbers, the seed among
    them) equals the cell's: on a CPU it is the run the cell would train. A bench cell's fingerprint is
    in its cell.json; a plain ``attendout finetune`` run directory (results.json, config.json, no
    cell.json: runs made by hand or by a script on another machine) is fingerprinted from the training
    configuration its config.json records. Returns the cell keys.
    """
    by_fingerprint: dict[str, Path] = {}
    for record in sorted(source.rglob(CELL_FILE)):
        run = RunDir(record.parent)
        if run.finished:
            with contextlib.suppress(OSError, ValueError, KeyError):
                by_fingerprint.setdefault(run.read_cell()["fingerprint"], run.path)
    for results in sorted(source.rglob(RESULTS_FILE)):
        run = RunDir(results.parent)
        if run.finished and not run.cell.exists() and run.config.is_file():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                config = TrainConfig.from_dict(run.read_config()["config"])
                by_fingerprint.setdefault(config_fingerprint(config), run.path)
    reused = []
    for cell in cells:
        found = by_fingerprint.get(cell.fingerprint or "")
        if found is None or store.status(cell)[0] == "done":
            continue
        work = store.work_root / f"reuse-{cell.flat_key}-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(found, work)
        copied = RunDir(work)
        record = copied.read_cell() if copied.cell.exists() else {"fingerprint": cell.fingerprint}
        record.update(
            cell=cell.key, task=cell.task.id, method=cell.method.id, reused_from=portable(str(found))
        )
        adopted = {"seed": cell.seed, "model": cell.model.id, "method_label": cell.method.label}
        with contextlib.suppress(OSError, ValueError, KeyError):  # a plain run's wall time: its training time
            adopted["wall_time_s"] = copied.read_results()["train_time_s"]
        for key, value in adopted.items():
            record.setdefault(key, value)
        copied.write_cell(record)
        if store.publish(cell, work):
            reused.append(cell.key)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return reused


# --------------------------------------------------------------------------------------------------
# Running


@dataclass
class RunSummary:
    """What one bench job did."""

    trained: list[str] = field(default_factory=list)
    skipped_done: list[str] = field(default_factory=list)
    skipped_claimed: list[str] = field(default_factory=list)
    discarded: list[str] = field(default_factory=list)  # trained, but another job published first
    failed: list[str] = field(default_factory=list)
    out_of_memory: list[str] = field(default_factory=list)  # stopped for lack of GPU memory: to retry
    submitted: list[str] = field(default_factory=list)  # handed to a scheduler (SLURM) that runs them later

    def line(self) -> str:
        parts = [
            f"{len(self.trained)} trained",
            f"{len(self.skipped_done)} already done",
            f"{len(self.skipped_claimed)} left to other jobs",
            f"{len(self.failed)} failed",
        ]
        if self.submitted:
            parts.insert(0, f"{len(self.submitted)} submitted")
        if self.discarded:
            parts.append(f"{len(self.discarded)} discarded (another job finished them first)")
        return ", ".join(parts)

    def add(self, other: RunSummary | dict[str, list[str]]) -> None:
        """Count another process's summary (a RunSummary or its ``dataclasses.asdict``) in this one."""
        values = other if isinstance(other, dict) else dataclasses.asdict(other)
        for name, keys in values.items():
            getattr(self, name).extend(keys)


class Launcher(Protocol):
    """Runs a grid's cells somewhere other than this loop (:mod:`attendout.bench.launch`).

    ``run`` gets the job (its plan, store and options, after the checks, the store's preparation and
    the sweep) and the runnable cells of its shard; it runs or submits those that are neither done nor
    claimed, each through :meth:`BenchJob.run_cell` in a process of its own, and adds what they did
    to ``job.summary``.
    """

    def run(self, job: BenchJob, cells: list[Cell]) -> None: ...


class LauncherUnavailableError(RuntimeError):
    """A launcher that cannot act on this machine (no SLURM here, say): one line naming what is missing
    and the way out, raised before anything is written."""


class MissingExtraError(LauncherUnavailableError, ImportError):
    """A launcher whose package is not installed: the message names the extra to install."""


_launchers: list[Launcher] = []


@contextlib.contextmanager
def launching(launcher: Launcher | None):
    """Within this block, :func:`run_cells` without a ``launcher`` uses this one (None: the serial loop).
    How ``attendout advise --jobs/--launcher`` reaches the confirmation's grid."""
    _launchers.append(launcher)
    try:
        yield launcher
    finally:
        _launchers.pop()


def current_launcher() -> Launcher | None:
    """The launcher of the innermost :func:`launching` block, or None."""
    return _launchers[-1] if _launchers else None


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` is an accelerator running out of memory (torch's ``OutOfMemoryError``, or the
    "out of memory" of CUDA and MPS): a run that others' memory crowded out, to retry when they end."""
    return type(error).__name__ == "OutOfMemoryError" or "out of memory" in str(error).lower()


def run_cells(
    plan: GridPlan, store: ResultsStore, *, launcher: Launcher | None = None, **options: Any
) -> RunSummary:
    """Train every cell of this job's shard that is neither finished nor claimed by a live job.

    ``options`` are :class:`BenchJob`'s: ``train(config, on_log)`` runs one configuration (default:
    :func:`attendout.run.loop.finetune`); ``echo`` gets one line per cell event and per validation of a
    training cell; ``rerun_stale`` replaces finished cells run with another configuration; ``heartbeat`` is
    the claims' period. Raises :class:`ExperimentError` before training anything if a cell is invalid, or if
    finished cells are stale and ``rerun_stale`` is not set. ``launcher`` (default: the one of the
    enclosing :func:`launching` block, else none) runs the cells in processes of their own instead of this
    loop (``train`` is then :func:`attendout.run.loop.finetune`).
    """
    return BenchJob(plan, store, launcher=launcher or current_launcher(), **options).run()


@dataclass
class BenchJob:
    """One bench process working through its shard of a grid (see :func:`run_cells`)."""

    plan: GridPlan
    store: ResultsStore
    rerun_stale: bool = False
    heartbeat: float = HEARTBEAT_S
    # a worker's lines reach its parent now
    echo: Callable[[str], None] = functools.partial(print, flush=True)
    train: Callable[..., dict[str, Any]] = finetune
    launcher: Launcher | None = None
    retry_out_of_memory: bool = False  # a launcher's worker: a run out of GPU memory is kept to retry
    tracking: Tracking | None = None  # --report-to: each cell a run of the grid's experiment
    summary: RunSummary = field(default_factory=RunSummary)

    def run(self) -> RunSummary:
        mine = self.plan.shard_cells
        self._refuse_invalid_or_stale(mine)
        self.store.prepare(self.plan.experiment, self.plan.budget)
        for name in self.store.sweep():
            self.echo(f"removed leftover {name}")
        runnable = [c for c in mine if c.config is not None]
        k, n = self.plan.shard
        self.store.event("job-start", experiment=self.plan.experiment.name, shard=f"{k}/{n}")
        if self.launcher is not None:
            self.launcher.run(self, runnable)
        else:
            for position, cell in enumerate(runnable, 1):
                raise_if_stopped()  # a stop requested during the last cell's final evaluation: before the next one
                self._visit(cell, self.prefix(cell, position, len(runnable)))
        self.store.event("job-end", summary=self.summary.line())
        return self.summary

    @staticmethod
    def prefix(cell: Cell, position: int, total: int) -> str:
        """What every line about ``cell`` starts with: ``[position/total] KEY``."""
        return f"[{position}/{total}] {cell.key}"

    def run_cell(self, cell: Cell, prefix: str | None = None) -> RunSummary:
        """Skip ``cell`` if it is finished or claimed; otherwise claim, train, publish and release it.

        The one cell function of every launcher: a worker process builds a job of the same plan and
        store and calls this. Returns the job's summary (this cell's outcome added to it).
        """
        self._visit(cell, prefix or cell.key)
        return self.summary

    def _refuse_invalid_or_stale(self, cells: list[Cell]) -> None:
        if self.plan.models_to_set_up:
            from .plan import set_up_first

            raise ExperimentError(set_up_first(self.plan.models_to_set_up, self.plan.damaged))
        if self.plan.invalid:
            first = self.plan.invalid[0]
            raise ExperimentError(
                f"{len(self.plan.invalid)} cell(s) of {self.plan.experiment.path} are invalid; first: "
                f"{first.key}: {first.invalid} (see attendout bench {self.plan.experiment.path} --dry-run)"
            )
        stale = [c for c in cells if self.store.status(c)[0] == "stale"]
        if stale and not self.rerun_stale:
            raise ExperimentError(
                f"{len(stale)} finished cell(s) in {self.store.root} were run with another configuration "
                f"(first: {stale[0].key}); pass --rerun-stale to replace them, or use another --results folder"
            )

    def skipped(self, cell: Cell, prefix: str, queued: str = "") -> bool:
        """Whether ``cell`` is finished, or running in another job (or ``queued``: waiting in a scheduler's
        queue, in words), counted in the summary as such; what every launcher asks of a cell first."""
        status, detail = self.store.status(cell)
        if status == "done":
            self.summary.skipped_done.append(cell.key)
            return True
        if status == "running" or queued:
            self.echo(f"{prefix}: {queued or f'running in another job ({detail})'}")
            self.summary.skipped_claimed.append(cell.key)
            return True
        return False

    def _visit(self, cell: Cell, prefix: str) -> None:
        """Skip a finished or claimed cell; otherwise claim, train, publish and release it."""
        if self.skipped(cell, prefix):
            return
        claim = self.store.try_claim(cell)
        if claim is None:
            self.echo(f"{prefix}: claimed by another job")
            self.summary.skipped_claimed.append(cell.key)
            return
        try:
            if self.store.status(cell)[0] == "done":  # published between our look and our claim
                self.summary.skipped_done.append(cell.key)
                return
            self._train(cell, claim, prefix)
        finally:
            claim.release()

    def _train(self, cell: Cell, claim: Claim, prefix: str) -> None:
        config = cell.config
        if config is None:  # only runnable cells get here
            return
        work = claim.work_dir
        shutil.rmtree(work, ignore_errors=True)
        resumed_at = self.store.adopt_work(cell, work)  # a killed job's checkpoint of this cell
        resume = has_checkpoint(work)
        doing = f"resuming at step {resumed_at}" if resume else "training"
        self.echo(f"{prefix}: {doing} ({cell.method.describe()})")
        self.store.event("start", cell, work_dir=work.name, resumed_at=resumed_at if resume else None)
        claim.start_heartbeat(self.heartbeat)
        started = time.time()
        run = dataclasses.replace(
            config,
            output_dir=str(work),
            overwrite=False,
            resume=resume,
            checkpoint_steps=config.checkpoint_steps or config.eval_steps,  # at every validation
        )
        listener = track_run(
            self.tracking, cell.key, self._progress(prefix, self.plan.steps.get(cell.key), started, resumed_at or 0),
            model=cell.model.id, task=cell.task.id, method=cell.method.id, cell=cell.key, seed=str(cell.seed),
            method_label=cell.method.label,
        )  # fmt: skip
        try:
            try:
                results = self.train(run, listener)
            except CheckpointError as error:  # corrupt, or a default changed since it was written
                self.echo(f"{prefix}: cannot resume ({error}); training afresh")
                results = self.train(dataclasses.replace(run, resume=False, overwrite=True), listener)
        except Exception as error:  # TrainingError (NaN loss) or a bug: recorded, the grid goes on
            if self.retry_out_of_memory and is_out_of_memory(error):  # the launcher runs it again later
                if not has_checkpoint(work):
                    shutil.rmtree(work, ignore_errors=True)
                self.store.event("out-of-memory", cell, error=f"{type(error).__name__}: {error}")
                self.summary.out_of_memory.append(cell.key)
                self.echo(f"{prefix}: out of GPU memory; it runs again when another run frees some")
                return
            if not (isinstance(error, StorageError) and has_checkpoint(work)):  # a full disk: kept to resume
                shutil.rmtree(work, ignore_errors=True)
            message = f"{type(error).__name__}: {error}"
            self.store.record_failure(cell, message)
            self.store.event("failed", cell, error=message, traceback=traceback.format_exc(limit=-8))
            self.summary.failed.append(cell.key)
            self.echo(f"{prefix}: FAILED: {message}")
            return
        except BaseException:  # KeyboardInterrupt, SystemExit (SIGTERM): nothing half-done is published
            resumable = has_checkpoint(work)  # kept for the next run to resume from; else removed
            if not resumable:
                shutil.rmtree(work, ignore_errors=True)
            self.store.event("interrupted", cell, resumable=resumable)
            raise
        wall = time.time() - started + results.get("resumed", {}).get("train_time_before_s", 0.0)
        compact_predictions(work)  # labels and predictions only, gzipped: what the table reads
        RunDir(work).write_cell(_cell_record(cell, self.plan, self.store, started, wall))
        if self.store.publish(cell, work, replace_stale=self.rerun_stale):
            self.store.clear_failure(cell)
            self.store.event("done", cell, wall_time_s=round(wall, 2))
            self.summary.trained.append(cell.key)
            main = results["main_metric"]
            scores = ", ".join(
                f"{split} {main} {metrics.get(main, float('nan')):.4f}"
                for split, metrics in results["eval"].items()
            )
            self.echo(f"{prefix}: done in {wall:.0f} s: {scores}")
        else:
            shutil.rmtree(work, ignore_errors=True)
            self.store.event("discarded", cell, reason="another job published this cell first")
            self.summary.discarded.append(cell.key)
            self.echo(f"{prefix}: another job finished it first; this run is discarded")

    def _progress(
        self, prefix: str, steps: int | None, started: float, first_step: int = 0
    ) -> Callable[[dict[str, Any]], None]:
        """A log listener that echoes one line per validation: step, score, elapsed and remaining time.

        ``first_step``: the step a resumed cell started from (its pace counts the steps since).
        """

        def listen(record: dict[str, Any]) -> None:
            validation = record.get("validation")
            if not validation:
                return
            step, elapsed = record["step"], time.time() - started
            score = ", ".join(
                f"{k} {v:,.0f}" if k.endswith("tokens") else f"{k} {v:.4f}"  # a count, not a score
                for k, v in validation.items()
                if k != "loss"
            )
            left = (
                f", about {elapsed * (steps - step) / (step - first_step) / 60:.0f} min left"
                if steps and first_step < step < steps
                else ""
            )
            self.echo(
                f"{prefix}: step {step}/{steps or '?'}: validation {score} ({elapsed / 60:.1f} min{left})"
            )

        return listen


def _cell_record(
    cell: Cell, plan: GridPlan, store: ResultsStore, started: float, wall: float
) -> dict[str, Any]:
    from ..version import __version__

    return {
        "cell": cell.key,
        "experiment": plan.experiment.name,
        "experiment_file": portable(str(plan.experiment.path)),
        "fingerprint": cell.fingerprint,
        "model": cell.model.id,
        "task": cell.task.id,
        "method": cell.method.id,
        "method_label": cell.method.label,
        "seed": cell.seed,
        "data_seed": plan.experiment.data_seed,
        "budget": plan.budget.overrides(),
        "host": store.host,
        "pid": store.pid,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        "wall_time_s": round(wall, 2),
        "attendout": __version__,
    }
