"""``advise``: which regulariser, at what strength, for this model and data: regime, search, confirm, answer.

>>> from attendout.advise import AdviseConfig, advise
>>> recipe = TrainConfig(task="file", train_file="train.csv", eval_files={"test": "test.csv"})
>>> advice = advise(AdviseConfig(recipe, output_dir="advice", trials=8, seeds=5))
>>> print(advice.sentence)

Every stage is resumable by running the same thing again (a kill loses at most an epoch of one run):

1. regime (:mod:`.regime`): ``none`` trained ``regime_epochs`` epochs on the validation split carved
   from train (or an existing run read with ``regime_run``); the budget is read off its curves. With
   ``epochs`` given, this probe is skipped unless ``probe`` asks for it.
2. search (:mod:`.search`): Optuna, one study per method, validation split only; a trial's score is its
   paired difference to ``none`` over ``search_repeats`` seeds by default, and its noise is measured.
3. confirm (:mod:`.confirm`): the best settings and ``none`` on fresh seeds (``seeds="auto"``: as many
   as detect a gain of ``detect`` at the bound of a pilot's noise, :mod:`.seeds`), scored on the
   evaluation split; paired tests with Holm, bootstrap intervals, the detectable difference, the cost.
4. answer (:mod:`.answer`): ``advice.md``, ``advice.png``, ``advice.toml`` (the winner, or ``none``) and
   ``tuned/METHOD.toml`` for every method, each taken by ``attendout finetune --config``. Where no
   answer is possible (plain training at chance, a design that cannot detect a gain of ``detect``) the
   answer says so first, and what to do, instead of recommending; where plain training is still learning
   when the budget stops, the answer's first sentence says so (:func:`.regime.read_trend`).

The output folder:

    OUTPUT/advise.json       the study's identity (recipe, methods, seeds): a rerun that differs is refused
    OUTPUT/regime/           the plain run of the regime stage; regime.json, regime.png its reading
    OUTPUT/search.db         the Optuna studies (default storage); search/METHOD/trial-N/ their runs
    OUTPUT/confirm.toml      the confirmation grid; confirm/ its runs (an `attendout bench` results root)
    OUTPUT/advice.md, advice.png, advice.toml, tuned/METHOD.toml, advice.json
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config import TrainConfig, split_for_training
from ..core.folder import LOG_FILE, RunDir, portable, write_json_atomic
from ..core.lock import RunBusyError, RunLock
from ..report.render import kept_before_acting_sentence
from ..run import check as raise_if_stopped
from ..run import finetune, load_data
from ..track import track_run
from .answer import Verdict, verdict
from .confirm import (
    Confirmation,
    confirm_experiment,
    dumps,
    read_confirmation,
    run_confirmation,
    write_experiment,
)
from .files import advice_figure, advice_markdown, write_setting
from .objective import SearchNoise, search_noise
from .options import AdviseConfig
from .plan import MethodSearch, SearchPlan
from .regime import RegimeReading, read_regime
from .search import epoch_run, run_search
from .seeds import choose as choose_seeds
from .trend import plain_trend


@dataclass
class Advice:
    """What ``advise`` found (also in OUTPUT/advice.json and advice.md)."""

    regime: RegimeReading | None  # None: not probed (the budget was given)
    searches: dict[str, MethodSearch]
    confirmation: Confirmation | None
    sentence: str
    winner: str | None  # method name; None = plain fine-tuning (or no answer: see ``answered``)
    files: dict[str, Path]
    noise: SearchNoise | None = None
    answered: bool = True  # False: the sentence says why no answer is possible


def _steps_per_epoch(recipe: TrainConfig) -> tuple[int, str]:
    """Training batches per epoch and the task's main metric (from the data as the trainer splits it)."""
    task, data = load_data(recipe)
    train, _, _ = split_for_training(data, recipe, task.label_names)
    return math.ceil(len(train) / recipe.batch_size), task.metrics[0]


def _check_identity(config: AdviseConfig) -> None:
    path = config.out / "advise.json"
    identity = config.identity()
    if path.is_file():
        known = json.loads(path.read_text()).get("identity", {})
        changed = sorted(k for k in set(known) | set(identity) if known.get(k) != identity.get(k))
        if changed:
            raise ValueError(
                f"{config.out} holds a study with another {', '.join(changed)} ({changed[0]}: "
                f"{known.get(changed[0])!r}, now {identity.get(changed[0])!r}); rerun with the same settings "
                "to resume it, or use another --output-dir"
            )
    config.out.mkdir(parents=True, exist_ok=True)
    seeds = config.seeds if isinstance(config.seeds, str) else list(config.seeds)
    write_json_atomic(path, {"identity": identity, "methods": list(config.methods), "seeds": seeds})


PROBE_POLL = 30.0  # seconds between looks at a probe another process is training


def _wait_for_probe(config: AdviseConfig, run: Path) -> None:
    """A second worker started while another trains the probe waits for it (as for trials), rather than
    failing on the folder's lock; if that process dies, this one resumes the probe from its checkpoint."""
    lock = RunLock(run)
    waited = False
    while not RunDir(run).finished:
        try:  # taken, not looked at: two workers started at once would both see it free, and one fail
            return lock.acquire()  # this one trains it (its finetune takes the lock over: one per process)
        except RunBusyError:
            holder = lock.holder() or "a process"
        if not waited:
            config.echo(f"advise: regime: waiting for the probe another process is training ({holder})")
            waited = True
        time.sleep(PROBE_POLL)
        raise_if_stopped()


def run_regime(config: AdviseConfig, steps_per_epoch: int) -> RegimeReading:
    """Stage 1: train (or read) plain fine-tuning's long run; read and record its regime."""
    from ..report.regime import epoch_curves, regime_figure, run_task_id

    run = RunDir(config.regime_dir)
    if config.regime_run is None:
        _wait_for_probe(config, run.path)
        if not run.finished:
            plain = epoch_run(
                config.search_recipe,
                epochs=config.regime_epochs,
                seed=config.search_seed,
                output_dir=run.path,
                steps_per_epoch=steps_per_epoch,
                progress=config.progress,
            )
            resumed = " (resumed)" if plain.resume else ""
            config.echo(f"advise: regime: {config.plain} for {config.regime_epochs} epochs{resumed}")
            finetune(plain, track_run(config.tracking, "regime", stage="regime", method="none"))
    if not run.log.is_file():
        raise ValueError(f"--regime-run {run.path} is not a run directory (it has no {LOG_FILE})")
    state = run.state()
    if not state.finished:  # its curve stops where the run did: not the budget it claims to show
        raise ValueError(
            f"--regime-run {run.path} is not finished: it is {state.describe()}; finish it with --resume"
        )
    reading = read_regime(epoch_curves(run.path))
    budget = reading.budget if config.epochs is None else config.epochs
    reading = dataclasses.replace(reading, plain=config.plain, budget=budget)
    write_json_atomic(config.out / "regime.json", {"run": portable(str(run.path)), **reading.to_dict()})
    budgets = {run_task_id(run.path): reading.budget}
    regime_figure([run.path], config.out / "regime.png", budgets, f"advise: {config.plain} by epoch")
    config.echo(f"advise: regime: {reading.sentence}")
    return reading


def advise(config: AdviseConfig) -> Advice:
    """Run (or resume) every stage up to ``config.until``; see the module docstring."""
    _check_identity(config)
    if config.until != "regime":  # the storage opens (a bad URL, a missing driver) before anything trains
        from .storage import open_storage

        open_storage(config.storage_url)
    steps_per_epoch, metric = _steps_per_epoch(config.search_recipe)
    regime = run_regime(config, steps_per_epoch) if config.probes else None
    budget = regime.budget if regime is not None else int(config.epochs or 0)
    if regime is None:
        config.echo(
            f"advise: regime: not probed; the budget is the {budget} epoch(s) given (--probe reads it)"
        )
    plan = SearchPlan(config, budget, steps_per_epoch, metric)
    files: dict[str, Path] = {}
    if config.until == "regime":
        return Advice(regime, {}, None, regime.sentence if regime else "regime: not probed", None, files)
    searches = run_search(plan)
    noise = search_noise(plan, searches)
    config.echo(f"advise: {noise.sentence()}")
    tuned = {m: s.options for m, s in searches.items() if s.options is not None}
    for m, s in searches.items():
        if s.options is None:
            config.echo(f"advise: search: {m} has no finished trial; it is left out of the confirmation")
    searched = ", ".join(f"{m}: {s.finished} trials" for m, s in searches.items())
    if config.until == "search" or not tuned:
        sentence = f"search: {searched}" + ("" if tuned else "; no method has a finished trial to confirm")
        return Advice(regime, searches, None, sentence, None, files, noise)
    confirmation = _confirm(config, plan, searches, tuned)
    if config.until == "confirm":
        return Advice(regime, searches, confirmation, "confirmed; run the answer stage", None, files, noise)
    advice = _answer(config, plan, regime, searches, noise, confirmation, tuned)
    if config.tracking is not None:  # the answer, as a note on the study's experiment
        config.tracking.note("answer", advice.sentence)
    return advice


def search_plan(config: AdviseConfig) -> SearchPlan | None:
    """The search's plan as :func:`advise` makes it, without training anything: None where the regime
    stage has not chosen the budget yet (no ``regime.json``)."""
    regime = config.out / "regime.json"
    if config.probes and not regime.is_file():
        return None
    budget = json.loads(regime.read_text())["budget"] if config.probes else config.epochs
    return SearchPlan(config, int(budget or 0), *_steps_per_epoch(config.search_recipe))


def _confirm(
    config: AdviseConfig,
    plan: SearchPlan,
    searches: dict[str, MethodSearch],
    tuned: dict[str, dict[str, Any]],
) -> Confirmation:
    """Stage 3: the searched settings against plain fine-tuning on fresh seeds (``config.seeds``, or as many
    as a pilot's noise asks for), run (or resumed) and read."""
    budget, steps_per_epoch = plan.epochs, plan.steps_per_epoch
    tuning = (
        f"attendout advise: each method's setting searched with Optuna ({config.sampler}, up to {config.trials} "
        f"trials, search seeds {', '.join(map(str, plan.seeds))}, objective {config.objective}) on the validation "
        "split carved from train; confirmed here on seeds the search never used"
    )

    def confirm(seeds: Sequence[int]) -> Confirmation:
        """Run (or resume) the confirmation on ``seeds`` and read it."""
        data = confirm_experiment(config.recipe, tuned, seeds, budget, steps_per_epoch, tuning=tuning)
        experiment = write_experiment(config.out / "confirm.toml", data)
        run_confirmation(
            experiment,
            config.out / "confirm",
            device=config.recipe.device,
            reuse=config.reuse_runs,
            progress=config.progress,
            echo=config.echo,
            tracking=config.tracking,
        )
        return read_confirmation(experiment, config.out / "confirm", tuned, config.alpha)

    seeds = choose_seeds(
        seeds=config.seeds,
        out=config.out,
        plan=plan,
        searches=searches,
        methods=len(tuned),
        detect=config.detect,
        alpha=config.alpha,
        max_seeds=config.max_seeds,
        confirm_hours=config.confirm_hours,
        pilot=confirm,
        echo=config.echo,
    )
    return confirm(seeds)


def _answer(
    config: AdviseConfig,
    plan: SearchPlan,
    regime: RegimeReading | None,
    searches: dict[str, MethodSearch],
    noise: SearchNoise,
    confirmation: Confirmation,
    tuned: dict[str, dict[str, Any]],
) -> Advice:
    """Stage 4: the verdict, and the files that give it: the settings, advice.png, advice.md, advice.json."""
    from ..core.folder import write_text_atomic
    from ..version import __version__

    out = config.out
    trend = plain_trend(config, plan, regime)
    v = verdict(confirmation, config.alpha, detect=config.detect, trend=trend)
    recipe = config.recipe
    header = f"attendout advise {__version__}: {recipe.task} with {recipe.model}\n{v.sentence}"
    files = _write_settings(out, tuned, v, plan.epochs, header)
    title = f"attendout advise: {recipe.task}, {recipe.model}"
    files["advice.png"] = advice_figure(
        out / "advice.png", confirmation, searches, list(config.methods), title, config.objective, noise.se
    )
    md = advice_markdown(
        title,
        v,
        regime,
        searches,
        confirmation,
        provenance=_provenance(config, plan, regime, noise, confirmation),
        files=_described_files(out, regime, confirmation),
        commands=[config.command or "attendout.advise.advise(AdviseConfig(...)) from Python"],
        noise=noise,
        trend=trend,
        caveats=_kept_before_acting(out, confirmation, list(config.methods)),
    )
    write_text_atomic(out / "advice.md", md)
    files["advice.md"] = out / "advice.md"
    winner = v.winner
    write_json_atomic(
        out / "advice.json",
        {
            "sentence": v.sentence,
            "answered": v.answered,
            "winner": None if winner is None else {"method": winner.method, "options": winner.options},
            "regime": None if regime is None else regime.to_dict(),
            "budget": None if trend is None else trend.to_dict(),
            "search": {m: dataclasses.asdict(s) for m, s in searches.items()},
            "search_noise": {**dataclasses.asdict(noise), "se": noise.se},
            "confirmation": json.loads(dumps(confirmation)),
        },
    )
    config.echo(f"\n{v.sentence}\n")
    for name in ("advice.md", "advice.png", "advice.toml"):
        config.echo(f"wrote {files[name]}")
    return Advice(
        regime,
        searches,
        confirmation,
        v.sentence,
        None if winner is None else winner.method,
        files,
        noise,
        v.answered,
    )


def _kept_before_acting(out: Path, confirmation: Confirmation, methods: list[str]) -> list[str]:
    """advice.md's warning for each method some of whose runs (search or confirmation) kept a model from
    before the method first acted (:func:`attendout.run.record.kept_before_acting`): those runs are plain
    fine-tuning, so the search could not tell the method's settings apart there and the confirmation
    compares plain fine-tuning with itself."""
    from ..run.record import kept_before_acting

    def kept_before(run: RunDir) -> bool:
        return kept_before_acting(run.read_results(), run.read_config() if run.config.is_file() else {})

    lines = []
    for method in methods:
        runs = [RunDir(path) for path in sorted((out / "search" / method).glob("trial-*/seed-*"))]
        search = [kept_before(run) for run in runs if run.results.is_file()]
        confirmed = [
            kept_before_acting(run.results, run.config)
            for run in (confirmation.table.runs.values() if confirmation.table is not None else ())
            if run.cell.method.name == method
        ]
        if not any(search) and not any(confirmed):
            continue
        counted = (
            f"{sum(search)} of {len(search)} search runs and {sum(confirmed)} of {len(confirmed)} "
            "confirmation runs"
        )
        measures = (
            "the search could not tell the settings apart on them, and the confirmation measures model selection "
            "there, not the method. To measure the method itself: a budget whose best epoch comes after it acts, "
            "the final model (model_selection='last' in the recipe, from Python), or a first phase that is not "
            "plain (AD-DROP: start='addrop')."
        )
        lines.append(kept_before_acting_sentence(method, counted, "runs", measures))
    return lines


def _write_settings(
    out: Path, tuned: dict[str, dict[str, Any]], v: Verdict, budget: int, header: str
) -> dict[str, Path]:
    """Every method at its searched setting (tuned/METHOD.toml), and the answer's (advice.toml: the
    winner, or none), each a config file for ``attendout finetune --config``."""
    files: dict[str, Path] = {}
    for method, options in tuned.items():
        files[f"tuned/{method}.toml"] = write_setting(
            out / "tuned" / f"{method}.toml", method, options, budget, f"{method} as advise tuned it"
        )
    winner = v.winner
    files["advice.toml"] = write_setting(
        out / "advice.toml",
        winner.method if winner else "none",
        winner.options if winner else {},
        budget,
        header,
    )
    return files


def _provenance(
    config: AdviseConfig,
    plan: SearchPlan,
    regime: RegimeReading | None,
    noise: SearchNoise,
    confirmation: Confirmation,
) -> list[str]:
    """advice.md's sentences on how the answer was reached: recipe and budget, seeds and splits, the
    search's noise, the device."""
    recipe = config.recipe
    description = confirmation.table.model_description(confirmation.table.experiment.models[0])
    probe = "" if regime is not None else " (given, not probed)"
    return [
        f"Task {recipe.task}; model {description}; budget {plan.epochs} epochs{probe} of batch {recipe.batch_size} "
        f"({plan.steps_per_epoch} steps each), lr {recipe.learning_rate:g}, max length {recipe.max_length}.",
        f"Search: seeds {', '.join(map(str, plan.seeds))}, objective {config.objective}, validation split carved "
        f"from train ({recipe.validation_split:g} of it); confirmation: seeds "
        f"{', '.join(map(str, confirmation.seeds))}, scored on {confirmation.split}.",
        noise.sentence(),
        f"Device: {_device(confirmation)}.",
    ]


def _described_files(out: Path, regime: RegimeReading | None, confirmation: Confirmation) -> dict[str, str]:
    """advice.md's list of the study's files, each with what it holds."""
    return {
        "advice.toml": "the answer: `attendout finetune --config advice.toml ...` or "
        "`attendout.apply(model, attendout.load_config('advice.toml'))`",
        "tuned/METHOD.toml": "each method at its searched setting, in the same form",
        "advice.png": "left: Δ per method with intervals; right: the search's scores by setting",
        "confirm.toml": f"the confirmation grid: `attendout table {out / 'confirm.toml'} --results {out / 'confirm'}`",
        "search.db": f"the Optuna studies (one per method); search/none/: {confirmation.plain} at the search seeds"
        + (f"; regime.png: {confirmation.plain}'s curves" if regime is not None else ""),
    }


def _device(confirmation: Confirmation) -> str:
    """Where the confirmation ran: device, machine, CPUs and torch threads, from its runs' config.json."""
    for run in confirmation.table.runs.values():
        hardware = run.config.get("hardware") or {}
        versions = run.config.get("versions") or {}
        if hardware:
            return (
                f"{run.config.get('device', '?')} ({hardware.get('machine')}, {hardware.get('cpus')} CPUs, "
                f"{hardware.get('threads')} torch threads; torch {versions.get('torch')}, transformers "
                f"{versions.get('transformers')})"
            )
    return "unknown (no run recorded it)"
