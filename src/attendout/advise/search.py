"""Stage 2 of ``advise``: each method's strength searched with Optuna on the validation split only.

One Optuna study per method (named after it) in one storage: an SQLite file in the output folder by
default, or any storage URL (``postgresql://...``) that several processes or machines share. A trial
trains the method at the chosen budget with the search seed, validating once per epoch on the split
carved from train; the evaluation splits are never encoded nor scored (``TrainConfig.evaluate`` off).
Each validation is reported to the pruner, which stops a trial below the median of the earlier trials
at the same epoch once half the budget has run. The objective is the best validation score, the one
model selection keeps; the study maximises it, or minimises it for a metric where lower is better
(perplexity: :func:`study_direction`).

Methods take turns, one trial each, so a time budget (``hours``: the summed time of the finished
trials of every method, over every invocation) cuts them evenly. Resuming is rerunning: finished and
pruned trials count; a trial whose process died (Ctrl-C, SIGTERM, a kill, a lost machine) is marked
failed and queued again with the same options, and its run folder's checkpoint (one per epoch) lets
the new trial go on where it stopped. A process that finds every trial taken waits for the ones other
processes still run (or reclaims them if their process dies), so that every process confirms the same
best settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..experiments.store import has_checkpoint, pid_alive, process_start_time, this_host
from ..interrupt import check as raise_if_stopped
from ..optim import TrainingError
from ..rundir import CHECKPOINT_DIR
from ..tasks.metrics import higher_is_better
from ..train import finetune
from .spaces import grid_of, grid_size, suggest

__all__ = ["MethodSearch", "SearchPlan", "open_storage", "run_search", "search_results", "study_direction"]

logger = logging.getLogger(__name__)

#: the fraction of the budget a trial always runs before the pruner may stop it
PRUNE_AFTER = 0.5
#: random trials before TPE models the scores (at most half the trials)
TPE_STARTUP = 4


@dataclass
class SearchPlan:
    """What every trial shares: the recipe, the budget, where trials go, how they are sampled."""

    base: TrainConfig  # the recipe: task, model, data, optimiser (method and seed are set per trial)
    out: Path
    storage: str
    methods: tuple[str, ...]
    epochs: int
    steps_per_epoch: int
    metric: str
    trials: int = 8
    hours: float | None = None
    sampler: str = "tpe"
    pruning: bool = True
    search_seed: int = 0
    fixed_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # method -> options not searched
    stale_after: float = 900.0
    poll: float = 30.0  # seconds between looks at trials other processes run, once this one has none left
    progress: bool = True
    echo: Callable[[str], None] = print

    def trials_of(self, method: str) -> int:
        """The trials ``method`` gets: ``trials``, or its whole grid if that is smaller (grid sampler)."""
        return min(self.trials, grid_size(method)) if self.sampler == "grid" else self.trials


@dataclass
class MethodSearch:
    """One method's study after the search: its trials and its best setting (None if none finished)."""

    method: str
    options: dict[str, Any] | None
    value: float | None
    trial: int | None
    trials: list[dict[str, Any]]  # one row per trial: number, state, params, value, values by epoch, seconds

    @property
    def finished(self) -> int:
        return sum(1 for t in self.trials if t["state"] in ("COMPLETE", "PRUNED") or t.get("error"))


def open_storage(url: str) -> Any:
    """An Optuna RDB storage for ``url`` (an SQLite file's folder is made first)."""
    import optuna

    if url.startswith("sqlite:///"):
        Path(url[len("sqlite:///") :]).parent.mkdir(parents=True, exist_ok=True)
    try:
        return _rdb_storage(optuna, url)
    except ImportError as error:  # the database's driver (psycopg2 for postgresql://, pymysql, ...)
        raise ValueError(f"--storage {url}: its database driver is not installed ({error})") from None
    except Exception as error:  # SQLAlchemy's: a malformed URL, a server that refuses, ...
        if type(error).__module__.startswith(("sqlalchemy", "optuna")):
            raise ValueError(f"--storage {url}: {type(error).__name__}: {error}") from None
        raise


def _rdb_storage(optuna: Any, url: str) -> Any:
    return optuna.storages.RDBStorage(
        url, engine_kwargs={"connect_args": {"timeout": 60}} if "sqlite" in url else None
    )


def _sampler(plan: SearchPlan, method: str, trial_number: int) -> Any:
    """The method's sampler, seeded by the search seed, the method and the number of the trial it samples.

    (Each option is drawn independently at suggest time, so the seed is the trial's own: a resumed search
    or a second process never proposes the settings of other trials again.)
    """
    import optuna

    # hashed: numpy's legacy generator gives nearly equal first draws for small neighbouring seeds (0 and 3)
    key = f"{plan.search_seed}/{method}/{trial_number}".encode()
    seed = int.from_bytes(hashlib.sha256(key).digest()[:4], "little")
    if plan.sampler == "grid":  # the grid's points are queued in the study (_queue_grid); this is unused
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=max(1, min(TPE_STARTUP, plan.trials // 2)),
        constant_liar=True,  # running trials (other processes) count as bad: TPE looks elsewhere
    )


def study_direction(metric: str) -> str:
    """Optuna's direction for a validation ``metric``: "maximize", or "minimize" where lower is better."""
    return "maximize" if higher_is_better(metric) else "minimize"


def _study(plan: SearchPlan, storage: Any, method: str) -> Any:
    import optuna

    pruner = (
        optuna.pruners.MedianPruner(
            n_startup_trials=2, n_warmup_steps=max(1, math.ceil(plan.epochs * PRUNE_AFTER))
        )
        if plan.pruning
        else optuna.pruners.NopPruner()
    )
    study = optuna.create_study(
        study_name=method,
        storage=storage,
        direction=study_direction(plan.metric),
        pruner=pruner,
        load_if_exists=True,
    )
    if plan.sampler == "grid":
        _queue_grid(study, method, plan.trials_of(method))
    identity = {"epochs": plan.epochs, "search_seed": plan.search_seed, "metric": plan.metric}
    known = study.user_attrs.get("identity")
    if known is None:
        study.set_user_attr("identity", identity)
    elif known != identity:
        raise ValueError(
            f"the study {method!r} in {plan.storage} was searched with {known}, not {identity}: use another "
            "--output-dir (or --storage) for another budget, seed or metric"
        )
    return study


def _queue_grid(study: Any, method: str, limit: int) -> None:
    """Queue the points of the method's grid the study has not tried or queued, up to ``limit`` trials.

    (Optuna's GridSampler stops its study from inside ``optimize``, which ask-and-tell does not run.)
    """
    import itertools

    from optuna.trial import TrialState

    grid = grid_of(method)
    trials = [
        t
        for t in study.get_trials(deepcopy=False)
        if not (t.state == TrialState.FAIL and t.user_attrs.get("interrupted"))
    ]
    seen = [t.params or t.system_attrs.get("fixed_params", {}) for t in trials]
    room = limit - len(trials)
    for values in itertools.product(*grid.values()):
        point = dict(zip(grid, values, strict=True))
        if room > 0 and point not in seen:
            study.enqueue_trial(point)
            room -= 1


def _alive(attrs: dict[str, Any], stale_after: float) -> bool:
    """Whether the process running a trial is still there (same host: its pid; else: its heartbeat)."""
    if attrs.get("host") == this_host() and isinstance(attrs.get("pid"), int):
        pid = attrs["pid"]
        return pid_alive(pid) and process_start_time(pid) == attrs.get("pid_start")
    return time.time() - float(attrs.get("heartbeat", 0.0)) < stale_after


def reclaim_stale(study: Any, storage: Any, stale_after: float, echo: Callable[[str], None]) -> int:
    """Fail the running trials whose process is gone and queue their options again (resume from their folder)."""
    from optuna.trial import TrialState

    count = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _alive(trial.user_attrs, stale_after):
            continue
        storage.set_trial_user_attr(trial._trial_id, "interrupted", True)
        storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
        _requeue(study, trial.params, trial.user_attrs.get("run_dir"))
        echo(
            f"search {study.study_name}: trial {trial.number} was interrupted; queued again with its options"
        )
        count += 1
    return count


def _requeue(study: Any, params: dict[str, Any], run_dir: str | None) -> None:
    study.enqueue_trial(params, user_attrs={"resume_dir": run_dir} if run_dir else None, skip_if_exists=False)


def _counted(study: Any, stale_after: float, *, running: bool = True) -> int:
    """Trials that use up the budget: finished, pruned, failed with an error, running (here or elsewhere;
    left out with ``running=False``).

    (A queued trial does not count until it runs: ``study.ask`` takes queued trials first.)
    """
    from optuna.trial import TrialState

    count = 0
    for t in study.get_trials(deepcopy=False):
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
            count += 1
        elif t.state == TrialState.FAIL and "error" in t.user_attrs:
            count += 1
        elif running and t.state == TrialState.RUNNING and _alive(t.user_attrs, stale_after):
            count += 1
    return count


def _running(studies: dict[str, Any], stale_after: float) -> str:
    """The trials still running in a live process, named (``"attendout trial 7"``), or "" if none."""
    from optuna.trial import TrialState

    names = [
        f"{method} trial {t.number}"
        for method, study in studies.items()
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if _alive(t.user_attrs, stale_after)
    ]
    return ", ".join(names)


def _spent(studies: dict[str, Any]) -> float:
    """Seconds of every finished trial of every study (the search's time budget counts these)."""
    total = 0.0
    for study in studies.values():
        for t in study.get_trials(deepcopy=False):
            if t.state.is_finished() and t.datetime_start and t.datetime_complete:
                total += (t.datetime_complete - t.datetime_start).total_seconds()
    return total


def run_search(plan: SearchPlan) -> dict[str, MethodSearch]:
    """Run the trials still missing (see the module docstring); return each method's best setting."""
    from tqdm.auto import tqdm

    storage = open_storage(plan.storage)
    studies = {m: _study(plan, storage, m) for m in plan.methods}
    total = sum(plan.trials_of(m) for m in plan.methods)
    done = sum(min(_counted(s, plan.stale_after), plan.trials_of(m)) for m, s in studies.items())
    bar = tqdm(
        total=total,
        initial=done,
        desc="advise: search",
        unit="trial",
        disable=not plan.progress,
        dynamic_ncols=True,
    )
    waiting = spent = False
    try:
        while True:
            ran = False
            for method, study in studies.items():
                reclaim_stale(study, storage, plan.stale_after, plan.echo)  # before counting: take it over
                if spent or _counted(study, plan.stale_after) >= plan.trials_of(method):
                    continue
                if plan.hours is not None and _spent(studies) >= plan.hours * 3600:
                    plan.echo(
                        f"search: the time budget ({plan.hours:g} h of trials) is spent; "
                        "rerun with a larger --hours to go on"
                    )
                    spent = True
                    continue
                _run_trial(plan, storage, study, method)
                bar.update(1)
                ran = True
            if ran:
                continue
            # every trial is taken; the ones other processes still run may change a method's best, and
            # every process must confirm the same settings: wait for them (a dead one's trial comes back)
            running = _running(studies, plan.stale_after)
            if not running:
                if spent or all(
                    _counted(s, plan.stale_after, running=False) >= plan.trials_of(m)
                    for m, s in studies.items()
                ):
                    break
                continue  # a trial counted in the pass ended without a result since (its process died)
            if not waiting:
                plan.echo(f"search: waiting for {running} running in another process before confirming")
                waiting = True
            time.sleep(plan.poll)
            raise_if_stopped()
    finally:
        bar.close()
    return search_results(plan)


def _ask(plan: SearchPlan, study: Any, method: str) -> tuple[Any, dict[str, float]]:
    """A new trial (a queued one first: its options are fixed) and its options."""
    trial = study.ask()
    # options are drawn at suggest time, by a sampler seeded with this trial's number: unique in the study,
    # so two processes on it never draw alike (a trial count read before asking may be stale in one)
    study.sampler = _sampler(plan, method, trial.number)
    return trial, suggest(trial, method)


def _run_trial(plan: SearchPlan, storage: Any, study: Any, method: str) -> None:
    import optuna

    raise_if_stopped()
    trial, options = _ask(plan, study, method)
    resume_dir = trial.user_attrs.get("resume_dir")
    run_dir = Path(resume_dir) if resume_dir else plan.out / "search" / method / f"trial-{trial.number:03d}"
    attrs = {
        "host": this_host(),
        "pid": os.getpid(),
        "pid_start": process_start_time(os.getpid()),
        "heartbeat": time.time(),
        "run_dir": str(run_dir),
        "options": options,  # what the trial runs with (the sampled params, rounded)
    }
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    config = epoch_run(
        dataclasses.replace(
            plan.base,
            method=method,
            method_options={**plan.fixed_options.get(method, {}), **options},
            evaluate=False,  # the evaluation splits are never encoded nor scored in a trial
            save_model=False,
        ),
        epochs=plan.epochs,
        seed=plan.search_seed,
        output_dir=run_dir,
        steps_per_epoch=plan.steps_per_epoch,
        progress=plan.progress,
    )
    resume = config.resume
    reported: set[int] = set()

    def report(record: dict[str, Any]) -> None:
        epoch = int(round(float(record["epoch"])))
        if epoch in reported:
            return
        reported.add(epoch)
        trial.report(float(record["validation"][plan.metric]), epoch)
        trial.set_user_attr("heartbeat", time.time())
        if trial.should_prune():
            raise optuna.TrialPruned(f"below the median of earlier trials at epoch {epoch}")

    if resume:  # the validations before the checkpoint, for the pruner
        for record in _validations(run_dir):
            report(record)

    def on_log(record: dict[str, Any]) -> None:
        raise_if_stopped()  # a stop that landed where it was swallowed
        if "validation" in record:
            report(record)

    what = f"{method} ({', '.join(f'{k} {v:.3g}' for k, v in options.items())})"
    plan.echo(f"search {method}: trial {trial.number}: {what}" + (" resumed" if resume else ""))
    try:
        results = finetune(config, on_log)
    except optuna.TrialPruned as pruned:
        shutil.rmtree(run_dir / CHECKPOINT_DIR, ignore_errors=True)  # it will not be resumed
        trial.set_user_attr("pruned", str(pruned))
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        plan.echo(f"search {method}: trial {trial.number} pruned: {pruned}")
        return
    except TrainingError as error:  # NaN loss: this setting does not train; a result, not a bug
        shutil.rmtree(run_dir / CHECKPOINT_DIR, ignore_errors=True)
        trial.set_user_attr("error", str(error))
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        plan.echo(f"search {method}: trial {trial.number} failed: {error}")
        return
    except BaseException:  # interrupted (Ctrl-C, SIGTERM) or a bug: queued again, resumed from its folder
        trial.set_user_attr("interrupted", True)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        _requeue(study, trial.params, str(run_dir))
        raise
    value = float(results["validation"][plan.metric])
    trial.set_user_attr("best_step", results["best_step"])
    trial.set_user_attr("train_time_s", results["train_time_s"])
    study.tell(trial, value)
    plan.echo(f"search {method}: trial {trial.number}: validation {plan.metric} {value:.4f}")


def epoch_run(
    recipe: TrainConfig, *, epochs: int, seed: int, output_dir: Path, steps_per_epoch: int, progress: bool
) -> TrainConfig:
    """``recipe`` as a run of ``epochs`` epochs validated at each epoch's end, with a checkpoint there:
    resumed if ``output_dir`` holds one, else started afresh (the evaluation splits left as ``recipe`` says)."""
    resume = has_checkpoint(output_dir)
    return dataclasses.replace(
        recipe,
        epochs=float(epochs),
        max_steps=None,
        seed=seed,
        output_dir=str(output_dir),
        checkpoint_steps=steps_per_epoch,
        eval_steps=None,
        early_stopping_patience=None,
        resume=resume,
        overwrite=not resume,
        progress=progress,
    )


def _validations(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "log.jsonl"
    if not path.is_file():
        return []
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if "validation" in r]


def search_results(plan: SearchPlan) -> dict[str, MethodSearch]:
    """Each method's trials and best setting, read from the storage (no training)."""
    from optuna.trial import TrialState

    storage = open_storage(plan.storage)
    out = {}
    for method in plan.methods:
        study = _study(plan, storage, method)
        rows = []
        for t in study.get_trials(deepcopy=False):
            if t.state == TrialState.FAIL and t.user_attrs.get("interrupted"):
                continue  # queued again: its retry is the trial
            seconds = (
                (t.datetime_complete - t.datetime_start).total_seconds()
                if t.datetime_start and t.datetime_complete
                else None
            )
            rows.append(
                {
                    "number": t.number,
                    "state": t.state.name,
                    "params": dict(t.user_attrs.get("options") or t.params),
                    "value": t.value,
                    "by_epoch": {int(k): float(v) for k, v in t.intermediate_values.items()},
                    "seconds": seconds,
                    "error": t.user_attrs.get("error"),
                }
            )
        complete = [r for r in rows if r["state"] == "COMPLETE" and r["value"] is not None]
        sign = 1.0 if higher_is_better(plan.metric) else -1.0  # the best in the metric's direction
        best = max(complete, key=lambda r: (sign * r["value"], -r["number"]), default=None)
        out[method] = MethodSearch(
            method=method,
            options=None if best is None else {**plan.fixed_options.get(method, {}), **best["params"]},
            value=None if best is None else best["value"],
            trial=None if best is None else best["number"],
            trials=rows,
        )
    return out
