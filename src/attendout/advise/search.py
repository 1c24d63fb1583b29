"""Stage 2 of ``advise``: each method's setting searched with Optuna on the validation split only.

One Optuna study per method (named after it) in one storage: an SQLite file in the output folder by
default, or any storage URL (``postgresql://...``) that several processes or machines share (opened by
:mod:`attendout.advise.storage`). A trial trains the method at the chosen budget, validating once per
epoch on the split carved from train; the evaluation splits are never encoded nor scored
(``TrainConfig.evaluate`` off).

Each trial is trained at ``repeats`` search seeds and scored by the ``objective``, by default against
plain fine-tuning trained once at each of those seeds (``OUTPUT/search/none/seed-S``): see
:mod:`attendout.advise.objective` for why, and for the objective's measured noise.

Each validation of a trial's first seed is reported to the pruner (as the objective at that epoch),
which stops a trial below the median of the earlier trials at the same epoch once half the budget has
run. The study maximises the objective, or minimises it where lower is better (a loss, perplexity:
:func:`study_direction`).

Methods take turns, one trial each, so a time budget (``hours``: the summed time of the finished
trials of every method, over every invocation) cuts them evenly. The sampler is seeded by the search
seed, the recipe (task, data, model: two tasks do not try the same points), the method and the trial's
number. Resuming is rerunning: finished and pruned trials count; a trial whose process died (Ctrl-C,
SIGTERM, a kill, a lost machine) is marked failed and queued again with the same options, and its run
folders (a checkpoint per epoch, a finished seed's results) let the new trial go on where it stopped. A
process that finds every trial taken waits for the ones other processes still run (or reclaims them if
their process dies), so that every process confirms the same best settings. The budget (``trials``) is
the study's, not each process's: processes that ask for its last trial at the same moment see the same
order of trials (the storage numbers a study's trials one at a time), and all but the first give theirs
back (:func:`_within_budget`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import shutil
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from ..bench.store import has_checkpoint
from ..config import TrainConfig
from ..core.folder import CHECKPOINT_DIR, RunDir
from ..core.lock import Owner, exclusive
from ..core.optim import TrainingError
from ..run import check as raise_if_stopped
from ..run import finetune
from ..track import track_run
from .objective import (
    Measured,
    measured,
    objective_better,
    objective_name,
    reference_dir,
    score,
    score_at,
    study_direction,
    validations,
)
from .plan import MethodSearch, SearchPlan
from .spaces import queue_grid, shown, suggest
from .storage import asking, open_storage, redacted

logger = logging.getLogger(__name__)

#: the fraction of the budget a trial always runs before the pruner may stop it
PRUNE_AFTER = 0.5
#: random trials before TPE models the scores (at most half the trials)
TPE_STARTUP = 4
#: seconds a trial just asked, whose process has not yet written who it is, counts as running
ASK_GRACE = 60.0


def _sampler(plan: SearchPlan, method: str, trial_number: int) -> Any:
    """The method's sampler, seeded by the search seed, the recipe (task, data, model), the method and the
    number of the trial it samples.

    (Each option is drawn independently at suggest time, so the seed is the trial's own: a resumed search
    or a second process never proposes the settings of other trials again.)
    """
    import optuna

    # hashed: numpy's legacy generator gives nearly equal first draws for small neighbouring seeds (0 and 3)
    key = f"{plan.study.search_seed}/{plan.recipe_key}/{method}/{trial_number}".encode()
    seed = int.from_bytes(hashlib.sha256(key).digest()[:4], "little")
    if plan.study.sampler == "grid":  # the grid's points are queued in the study (queue_grid); this is unused
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(
        seed=seed,
        n_startup_trials=max(1, min(TPE_STARTUP, plan.study.trials // 2)),
        constant_liar=True,  # running trials (other processes) count as bad: TPE looks elsewhere
    )


def _study(plan: SearchPlan, storage: Any, method: str) -> Any:
    import optuna

    pruner = (
        optuna.pruners.MedianPruner(
            n_startup_trials=2, n_warmup_steps=max(1, math.ceil(plan.epochs * PRUNE_AFTER))
        )
        if plan.study.pruning
        else optuna.pruners.NopPruner()
    )
    study = optuna.create_study(
        study_name=method,
        storage=storage,
        direction=study_direction(plan.metric, plan.study.objective),
        pruner=pruner,
        load_if_exists=True,
    )
    if plan.study.sampler == "grid":
        queue_grid(study, method, plan.trials_of(method))
    identity = {
        "epochs": plan.epochs,
        "search_seed": plan.study.search_seed,
        "metric": plan.metric,
        "objective": plan.study.objective,
        "seeds": list(plan.seeds),
        "recipe": plan.recipe_key,
    }
    known = study.user_attrs.get("identity")
    if known is None:
        study.set_user_attr("identity", identity)
    elif known != identity:
        raise ValueError(
            f"the study {method!r} in {redacted(plan.study.storage_url)} was searched with {known}, not {identity}: use another "
            "--output-dir (or --storage) for another budget, seed, objective, recipe or metric"
        )
    return study


def _alive(trial: Any, stale_after: float) -> bool:
    """Whether the process running a trial is still there (same host: its pid; else: its heartbeat).

    A trial just asked has no owner yet (its process writes host, pid, start time, then the heartbeat,
    right after asking): it is alive for ``ASK_GRACE`` seconds from its start, or another worker looking
    in between would take it over, and the process that asked it would fail on a finished trial."""
    attrs = trial.user_attrs
    if "heartbeat" not in attrs:
        started = trial.datetime_start  # Optuna's datetime.now() when it was asked
        return started is None or (datetime.now() - started).total_seconds() < min(ASK_GRACE, stale_after)
    heartbeat = float(attrs.get("heartbeat", 0.0))
    if not isinstance(attrs.get("pid"), int):
        return time.time() - heartbeat < stale_after
    return Owner(str(attrs.get("host")), attrs["pid"], attrs.get("pid_start")).alive(heartbeat, stale_after)


def reclaim_stale(study: Any, storage: Any, stale_after: float, echo: Callable[[str], None]) -> int:
    """Fail the running trials whose process is gone and queue their options again (resume from their folder)."""
    from optuna.trial import TrialState

    count = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _alive(trial, stale_after):
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


def _counts(t: Any, stale_after: float, *, running: bool = True) -> bool:
    """Whether trial ``t`` uses up the budget: finished, pruned, failed with an error, running (here or
    elsewhere; left out with ``running=False``). A queued trial does not count until it runs
    (``study.ask`` takes queued trials first); an interrupted or given-back one never does."""
    from optuna.trial import TrialState

    if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
        return True
    if t.state == TrialState.FAIL:
        return "error" in t.user_attrs
    return running and t.state == TrialState.RUNNING and _alive(t, stale_after)


def _counted(study: Any, stale_after: float, *, running: bool = True) -> int:
    """Trials that use up the budget (:func:`_counts`)."""
    return sum(_counts(t, stale_after, running=running) for t in study.get_trials(deepcopy=False))


def _within_budget(study: Any, trial: Any, limit: int, stale_after: float) -> bool:
    """Whether ``trial``, just asked, is one of the study's first ``limit`` trials that count. Processes
    that both counted room for one more and both asked see the same order (the storage numbers a study's
    trials one at a time): the earlier runs, the later is given back. The budget is the study's."""
    ahead = sum(t.number < trial.number and _counts(t, stale_after) for t in study.get_trials(deepcopy=False))
    return ahead < limit


def _give_back(study: Any, trial: Any, limit: int) -> None:
    """End ``trial``, asked beyond the study's budget, as failed and marked (never counted, listed or
    queued again as an interrupted one would be); a queued trial it had taken goes back to the queue.
    Optuna has no state for a trial that was never run, so its ``given_back`` attribute says what it is
    to whoever reads the study (Optuna's dashboard, ``optuna trials``)."""
    import optuna

    frozen = study._storage.get_trial(trial._trial_id)
    trial.set_user_attr("interrupted", True)  # what every count and listing leaves out
    trial.set_user_attr(
        "given_back",
        f"not a failure: never trained; asked beyond the study's {limit} trials at the same moment as "
        "another process, and given back",
    )
    study.tell(trial, state=optuna.trial.TrialState.FAIL)
    queued = frozen.system_attrs.get("fixed_params")
    if queued and not any(  # a point of the grid, or an interrupted trial's options: still to run, once
        (t.params or t.system_attrs.get("fixed_params")) == queued
        for t in study.get_trials(deepcopy=False)
        if t.number != trial.number and not t.user_attrs.get("interrupted")
    ):
        _requeue(study, queued, frozen.user_attrs.get("resume_dir"))


def _running(studies: dict[str, Any], stale_after: float) -> str:
    """The trials still running in a live process, named (``"attendout trial 7"``), or "" if none."""
    from optuna.trial import TrialState

    return ", ".join(
        f"{method} trial {t.number}"
        for method, study in studies.items()
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        if _alive(t, stale_after)
    )


def _spent(studies: dict[str, Any]) -> float:
    """Seconds of every finished trial of every study (the search's time budget counts these)."""
    trials = [t for study in studies.values() for t in study.get_trials(deepcopy=False)]
    return sum(_seconds(t) or 0.0 for t in trials if t.state.is_finished())


def _seconds(t: Any) -> float | None:
    """How long trial ``t`` ran, from its start to its end (None where it has not both)."""
    if t.datetime_start and t.datetime_complete:
        return (t.datetime_complete - t.datetime_start).total_seconds()
    return None


def run_search(plan: SearchPlan) -> dict[str, MethodSearch]:
    """Run the trials still missing (see the module docstring); return each method's best setting."""
    from tqdm.auto import tqdm

    # (says so if postgresql:// goes through psycopg 3)
    storage = open_storage(plan.study.storage_url, plan.study.echo)
    studies = {m: _study(plan, storage, m) for m in plan.study.methods}
    total = sum(plan.trials_of(m) for m in plan.study.methods)
    done = sum(min(_counted(s, plan.study.stale_after), plan.trials_of(m)) for m, s in studies.items())
    bar = tqdm(
        total=total,
        initial=done,
        desc="advise: search",
        unit="trial",
        disable=not plan.study.progress,
        dynamic_ncols=True,
    )
    waiting = spent = False
    try:
        references(plan)
        while True:
            ran = False
            for method, study in studies.items():
                # before counting: take it over
                reclaim_stale(study, storage, plan.study.stale_after, plan.study.echo)
                if spent or _counted(study, plan.study.stale_after) >= plan.trials_of(method):
                    continue
                if plan.study.hours is not None and _spent(studies) >= plan.study.hours * 3600:
                    plan.study.echo(
                        f"search: the time budget ({plan.study.hours:g} h of trials) is spent; "
                        "rerun with a larger --hours to go on"
                    )
                    spent = True
                    continue
                if _run_trial(plan, study, method):
                    bar.update(1)
                    ran = True
            if ran:
                continue
            # every trial is taken; the ones other processes still run may change a method's best, and
            # every process must confirm the same settings: wait for them (a dead one's trial comes back)
            running = _running(studies, plan.study.stale_after)
            if not running:
                if spent or all(
                    _counted(s, plan.study.stale_after, running=False) >= plan.trials_of(m)
                    for m, s in studies.items()
                ):
                    break
                continue  # a trial counted in the pass ended without a result since (its process died)
            if not waiting:
                plan.study.echo(f"search: waiting for {running} running in another process before confirming")
                waiting = True
            time.sleep(plan.study.poll)
            raise_if_stopped()
    finally:
        bar.close()
    return search_results(plan)


def left_to_search(plan: SearchPlan) -> list[str]:
    """What the study's search still lacks, read from its storage (no training): ``"METHOD: K of N
    trials"`` for each method short of its trials, a trial still running not counted; none once every
    method has them or the time budget is spent (where :func:`run_search` stops)."""
    storage = open_storage(plan.study.storage_url)
    studies = {m: _study(plan, storage, m) for m in plan.study.methods}
    if plan.study.hours is not None and _spent(studies) >= plan.study.hours * 3600:
        return []
    done = {m: _counted(s, plan.study.stale_after, running=False) for m, s in studies.items()}
    return [f"{m}: {n} of {plan.trials_of(m)} trials" for m, n in done.items() if n < plan.trials_of(m)]


def _ask(plan: SearchPlan, study: Any, method: str) -> tuple[Any, dict[str, float]]:
    """A new trial (a queued one first: its options are fixed) and its options."""
    trial = study.ask()
    # options are drawn at suggest time, by a sampler seeded with this trial's number: unique in the study,
    # so two processes on it never draw alike (a trial count read before asking may be stale in one)
    study.sampler = _sampler(plan, method, trial.number)
    return trial, suggest(trial, method)


def references(plan: SearchPlan) -> None:
    """Train plain fine-tuning's missing reference runs, first those no other process is training (so
    that two processes at once train two seeds), then wait for the rest."""
    if not plan.paired:
        return
    for seed in plan.seeds:
        reference(plan, seed, wait=False)
    for seed in plan.seeds:
        reference(plan, seed)


def reference(plan: SearchPlan, seed: int, wait: bool = True) -> Measured | None:
    """Plain fine-tuning at ``seed`` and the budget, trained once (the first process to need it trains it,
    others wait on its lock, or return None with ``wait=False``; a stopped one resumes from its checkpoint)
    and read back."""
    run_dir = reference_dir(plan, seed)
    with exclusive(run_dir.parent / f"seed-{seed}.lock", wait) as taken:
        if not taken:
            return None
        if not RunDir(run_dir).finished:
            config = _seed_run(
                plan,
                dataclasses.replace(plan.study.search_recipe, method="none", method_options={}),
                seed,
                run_dir,
            )
            plan.study.echo(
                f"search: plain fine-tuning at search seed {seed}, the reference of every trial's score"
                + (" (resumed)" if config.resume else "")
            )
            tracked = track_run(
                plan.study.tracking, f"search/reference/seed-{seed}", stage="reference", seed=str(seed)
            )
            finetune(config, tracked)
    return measured(run_dir, plan.metric)


def _run_trial(plan: SearchPlan, study: Any, method: str) -> bool:
    """Ask a trial and run it; False where another process took the study's last trial at the same
    moment (the trial is given back, :func:`_within_budget`)."""
    import optuna

    raise_if_stopped()
    with asking(plan.study.storage_url):  # (an SQLite file: one process at a time takes a queued trial)
        trial, options = _ask(plan, study, method)
        within = _within_budget(study, trial, plan.trials_of(method), plan.study.stale_after)
        if not within:
            _give_back(study, trial, plan.trials_of(method))
    if not within:
        plan.study.echo(
            f"search {method}: trial {trial.number} given back: the study's {plan.trials_of(method)} trials "
            "are taken (another process asked at the same moment)"
        )
        return False
    resume_dir = trial.user_attrs.get("resume_dir")
    trial_dir = (
        Path(resume_dir) if resume_dir else plan.study.out / "search" / method / f"trial-{trial.number:03d}"
    )
    owner = Owner.this_process()
    attrs = {
        "host": owner.host,
        "pid": owner.pid,
        "pid_start": owner.pid_start,
        "heartbeat": time.time(),
        "run_dir": str(trial_dir),
        "options": options,  # what the trial runs with (the sampled params, rounded)
    }
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    what = f"{method} ({', '.join(f'{k} {shown(v)}' for k, v in options.items())})"
    plan.study.echo(f"search {method}: trial {trial.number}: {what}" + (" resumed" if resume_dir else ""))
    by_seed: dict[str, float] = {}
    seconds = 0.0
    try:
        for index, seed in enumerate(plan.seeds):
            ref = reference(plan, seed) if plan.paired else None  # (waits while another process trains it)
            run_dir = trial_dir / f"seed-{seed}"
            if not RunDir(run_dir).finished:
                seconds += _train_seed(plan, trial, method, options, seed, run_dir, ref, prune=index == 0)
            by_seed[str(seed)] = score(plan, measured(run_dir, plan.metric), ref)
            trial.set_user_attr("by_seed", by_seed)
            trial.set_user_attr("heartbeat", time.time())
    except optuna.TrialPruned as pruned:
        shutil.rmtree(trial_dir / f"seed-{plan.seeds[0]}" / CHECKPOINT_DIR, ignore_errors=True)
        trial.set_user_attr("pruned", str(pruned))
        study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        plan.study.echo(f"search {method}: trial {trial.number} pruned: {pruned}")
        return True
    except TrainingError as error:  # NaN loss: this setting does not train; a result, not a bug
        for seed in plan.seeds:
            shutil.rmtree(trial_dir / f"seed-{seed}" / CHECKPOINT_DIR, ignore_errors=True)
        trial.set_user_attr("error", str(error))
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        plan.study.echo(f"search {method}: trial {trial.number} failed: {error}")
        return True
    except BaseException:  # interrupted (Ctrl-C, SIGTERM) or a bug: queued again, resumed from its folders
        trial.set_user_attr("interrupted", True)
        study.tell(trial, state=optuna.trial.TrialState.FAIL)
        _requeue(study, trial.params, str(trial_dir))
        raise
    value = sum(by_seed.values()) / len(by_seed)
    trial.set_user_attr("train_time_s", seconds)
    study.tell(trial, value)
    # each seed's run: the trial's objective
    for seed in plan.seeds if plan.study.tracking is not None else ():
        plan.study.tracking.add(trial_dir / f"seed-{seed}", {"trial/objective": value})
    per_seed = ", ".join(f"{v:+.4f}" if plan.paired else f"{v:.4f}" for v in by_seed.values())
    plan.study.echo(
        f"search {method}: trial {trial.number}: {objective_name(plan)} {value:.4f}"
        + (f" (seeds: {per_seed})" if len(by_seed) > 1 else "")
    )
    return True


def _train_seed(
    plan: SearchPlan,
    trial: Any,
    method: str,
    options: dict[str, Any],
    seed: int,
    run_dir: Path,
    ref: Measured | None,
    *,
    prune: bool,
) -> float:
    """Train one seed of a trial (resumed from its checkpoint if it has one); its training seconds.

    The first seed's validations are reported to the pruner (the objective at each epoch)."""
    import optuna

    recipe = dataclasses.replace(
        plan.study.search_recipe,
        method=method,
        method_options={**plan.study.fixed_options.get(method, {}), **options},
        evaluate=False,  # the evaluation splits are never encoded nor scored in a trial
        save_model=False,
    )
    config = _seed_run(plan, recipe, seed, run_dir)
    reported: set[int] = set()

    def report(record: dict[str, Any]) -> None:
        epoch = int(round(float(record["epoch"])))
        trial.set_user_attr("heartbeat", time.time())
        if not prune or epoch in reported:
            return
        reported.add(epoch)
        value = score_at(plan, record["validation"], ref, epoch)
        if value is None:
            return
        trial.report(value, epoch)
        if trial.should_prune():
            raise optuna.TrialPruned(f"below the median of earlier trials at epoch {epoch}")

    if config.resume:  # the validations before the checkpoint, for the pruner
        for record in validations(run_dir):
            report(record)

    def on_log(record: dict[str, Any]) -> None:
        raise_if_stopped()  # a stop that landed where it was swallowed
        if "validation" in record:
            report(record)

    tags = {"stage": "trial", "method": method, "trial": str(trial.number), "seed": str(seed)}
    tags.update({f"param.{k}": str(v) for k, v in options.items()})
    name = f"search/{method}/trial-{trial.number:03d}/seed-{seed}"
    results = finetune(config, track_run(plan.study.tracking, name, on_log, **tags))
    return float(results.get("train_time_s") or 0.0)


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


def _seed_run(plan: SearchPlan, recipe: TrainConfig, seed: int, run_dir: Path) -> TrainConfig:
    """``recipe`` as a search run at ``seed`` in ``run_dir`` (a trial's seed, or plain fine-tuning's reference
    there), at the plan's budget (:func:`epoch_run`)."""
    return epoch_run(
        recipe,
        epochs=plan.epochs,
        seed=seed,
        output_dir=run_dir,
        steps_per_epoch=plan.steps_per_epoch,
        progress=plan.study.progress,
    )


def search_results(plan: SearchPlan) -> dict[str, MethodSearch]:
    """Each method's trials and best setting, read from the storage (no training)."""
    from optuna.trial import TrialState

    storage = open_storage(plan.study.storage_url)
    out = {}
    for method in plan.study.methods:
        study = _study(plan, storage, method)
        rows = []
        for t in study.get_trials(deepcopy=False):
            if t.state == TrialState.FAIL and t.user_attrs.get("interrupted"):
                continue  # queued again: its retry is the trial
            rows.append(
                {
                    "number": t.number,
                    "state": t.state.name,
                    "params": dict(t.user_attrs.get("options") or t.params),
                    "value": t.value,
                    "by_epoch": {int(k): float(v) for k, v in t.intermediate_values.items()},
                    "by_seed": {int(k): float(v) for k, v in (t.user_attrs.get("by_seed") or {}).items()},
                    "seconds": _seconds(t),
                    "error": t.user_attrs.get("error"),
                }
            )
        complete = [r for r in rows if r["state"] == "COMPLETE" and r["value"] is not None]
        sign = objective_better(plan)  # the best in the objective's direction
        best = max(complete, key=lambda r: (sign * r["value"], -r["number"]), default=None)
        out[method] = MethodSearch(
            method=method,
            options=None if best is None else {**plan.study.fixed_options.get(method, {}), **best["params"]},
            value=None if best is None else best["value"],
            trial=None if best is None else best["number"],
            trials=rows,
        )
    return out
