"""``advise``: which regulariser, at what strength, for this model and data: regime, search, confirm, answer.

>>> from attendout.advise import AdviseConfig, advise
>>> recipe = TrainConfig(task="file", train_file="train.csv", eval_files={"test": "test.csv"})
>>> advice = advise(AdviseConfig(recipe, output_dir="advice", trials=8, seeds=5))
>>> print(advice.sentence)

Every stage is resumable by running the same thing again (a kill loses at most an epoch of one run):

1. regime (:mod:`.regime`): ``none`` trained ``regime_epochs`` epochs on the validation split carved
   from train (or an existing run read with ``regime_run``); the budget is read off its curves.
2. search (:mod:`.search`): Optuna, one study per method, validation split only.
3. confirm (:mod:`.confirm`): the best settings and ``none`` on fresh seeds, scored on the evaluation
   split; paired tests with Holm, bootstrap intervals, the detectable difference, the cost.
4. answer (:mod:`.answer`): ``advice.md``, ``advice.png``, ``advice.toml`` (the winner, or ``none``) and
   ``tuned/METHOD.toml`` for every method, each taken by ``attendout finetune --config``.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import TrainConfig, split_for_training
from ..experiments.spec import config_fingerprint
from ..rundir import write_json_atomic
from ..train import finetune
from .answer import advice_figure, advice_markdown, verdict, write_setting
from .confirm import (
    Confirmation,
    confirm_experiment,
    dumps,
    read_confirmation,
    run_confirmation,
    write_experiment,
)
from .regime import RegimeReading, read_regime
from .search import MethodSearch, SearchPlan, epoch_run, run_search
from .spaces import DEFAULT_METHODS, search_space

__all__ = ["STAGES", "AdviseConfig", "Advice", "advise"]

STAGES = ("regime", "search", "confirm", "answer")


@dataclass
class AdviseConfig:
    """A study: the recipe (task, model, data, optimiser) and how much to search and confirm."""

    recipe: TrainConfig
    output_dir: str = "advice"
    methods: Sequence[str] = DEFAULT_METHODS
    #: per method, options held fixed while its strength is searched (e.g. addrop: attribution "ga")
    fixed_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    regime_epochs: int = 12
    regime_run: str | None = None  # read plain fine-tuning's curves from this finished run instead
    epochs: int | None = None  # the budget, instead of the one the regime stage reads
    trials: int = 8  # per method
    hours: float | None = None  # search time budget: summed time of finished trials, all invocations
    sampler: str = "tpe"  # or "grid"
    pruning: bool = True
    storage: str | None = None  # Optuna storage URL; default sqlite:///OUTPUT/search.db
    search_seed: int = 0
    seeds: Sequence[int] = (1, 2, 3, 4, 5)  # confirmation seeds: never the search seed
    #: a results root (e.g. an earlier `attendout bench` grid) whose finished runs with a confirmation
    #: cell's exact configuration (fingerprint, seed included) are copied in instead of retrained
    reuse_runs: str | None = None
    alpha: float = 0.05
    until: str = "answer"  # the last stage to run
    stale_after: float = 900.0
    progress: bool = True
    echo: Callable[[str], None] = print
    command: str = ""  # the command line that made the study, for advice.md

    def __post_init__(self) -> None:
        self.methods = tuple(dict.fromkeys(self.methods))
        if not self.methods:
            raise ValueError("advise needs at least one method to compare with plain fine-tuning")
        for method in self.methods:
            search_space(method)  # a method without a searchable strength: a clear error now
        unknown = sorted(set(self.fixed_options) - set(self.methods))
        if unknown:
            raise ValueError(
                f"fixed options for {unknown[0]!r}, which is not among the methods {list(self.methods)}"
            )
        for method in self.methods:
            searched = set(self.fixed_options.get(method, {})) & set(search_space(method))
            if searched:
                raise ValueError(
                    f"{method}: option {sorted(searched)[0]!r} is searched; it cannot also be fixed"
                )
        self.seeds = tuple(self.seeds)
        checks = [
            (self.trials >= 1, "trials", self.trials, "at least 1"),
            (self.hours is None or self.hours > 0, "hours", self.hours, "positive"),
            (self.sampler in ("tpe", "grid"), "sampler", self.sampler, "tpe or grid"),
            (self.regime_epochs >= 2, "regime_epochs", self.regime_epochs, "at least 2"),
            (self.epochs is None or self.epochs >= 1, "epochs", self.epochs, "at least 1"),
            (len(self.seeds) >= 2, "seeds", self.seeds, "at least 2 seeds (a paired test needs them)"),
            (len(set(self.seeds)) == len(self.seeds), "seeds", self.seeds, "distinct"),
            (0 < self.alpha < 1, "alpha", self.alpha, "in (0, 1)"),
            (self.until in STAGES, "until", self.until, " or ".join(STAGES)),
        ]
        for ok, name, value, rule in checks:
            if not ok:
                raise ValueError(f"advise: {name} must be {rule}, got {value!r}")
        if self.search_seed in self.seeds:
            raise ValueError(
                f"advise: the confirmation seeds {list(self.seeds)} include the search seed {self.search_seed}: a "
                "setting must be confirmed on runs it was not chosen on"
            )
        if self.recipe.method != "none":
            raise ValueError(
                f"advise: the recipe's method must be none (the methods are {list(self.methods)})"
            )

    @property
    def out(self) -> Path:
        return Path(self.output_dir)

    @property
    def storage_url(self) -> str:
        return self.storage or f"sqlite:///{(self.out / 'search.db').resolve()}"

    def identity(self) -> dict[str, Any]:
        """What the stored results depend on: a rerun with other values would mix two studies."""
        return {
            "recipe": config_fingerprint(self.recipe),
            "task": self.recipe.task,
            "model": self.recipe.model,
            "search_seed": self.search_seed,
            "sampler": self.sampler,
            "regime_epochs": self.regime_epochs if self.regime_run is None else None,
            "regime_run": self.regime_run,
            "epochs": self.epochs,
            "fixed_options": self.fixed_options,
        }


@dataclass
class Advice:
    """What ``advise`` found (also in OUTPUT/advice.json and advice.md)."""

    regime: RegimeReading
    searches: dict[str, MethodSearch]
    confirmation: Confirmation | None
    sentence: str
    winner: str | None  # method name; None = plain fine-tuning
    files: dict[str, Path]


def _search_recipe(recipe: TrainConfig) -> TrainConfig:
    """The recipe as the regime and search stages run it: the evaluation splits are never encoded nor scored.

    (Their files are still named, so that a file task does not carve an evaluation split out of train.)
    """
    return dataclasses.replace(recipe, evaluate=False, save_model=False)


def _steps_per_epoch(recipe: TrainConfig) -> tuple[int, str]:
    """Training batches per epoch and the task's main metric (from the data as the trainer splits it)."""
    task, data = recipe.load_data()
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
    write_json_atomic(
        path, {"identity": identity, "methods": list(config.methods), "seeds": list(config.seeds)}
    )


def run_regime(config: AdviseConfig, steps_per_epoch: int) -> RegimeReading:
    """Stage 1: train (or read) plain fine-tuning's long run; read and record its regime."""
    from ..report.regime import epoch_curves, regime_figure, run_task_id

    run = Path(config.regime_run) if config.regime_run else config.out / "regime"
    if config.regime_run is None and not (run / "results.json").is_file():
        plain = epoch_run(
            _search_recipe(config.recipe),
            epochs=config.regime_epochs,
            seed=config.search_seed,
            output_dir=run,
            steps_per_epoch=steps_per_epoch,
            progress=config.progress,
        )
        resumed = " (resumed)" if plain.resume else ""
        config.echo(f"advise: regime: plain fine-tuning for {config.regime_epochs} epochs{resumed}")
        finetune(plain)
    if not (run / "log.jsonl").is_file():
        raise ValueError(f"--regime-run {run} is not a run directory (it has no log.jsonl)")
    reading = read_regime(epoch_curves(run))
    if config.epochs is not None:
        reading = dataclasses.replace(reading, budget=config.epochs)
    write_json_atomic(config.out / "regime.json", {"run": str(run), **reading.to_dict()})
    regime_figure(
        [run],
        config.out / "regime.png",
        {run_task_id(run): reading.budget},
        "advise: plain fine-tuning by epoch",
    )
    config.echo(f"advise: regime: {reading.sentence}")
    return reading


def advise(config: AdviseConfig) -> Advice:
    """Run (or resume) every stage up to ``config.until``; see the module docstring."""
    _check_identity(config)
    steps_per_epoch, metric = _steps_per_epoch(_search_recipe(config.recipe))
    regime = run_regime(config, steps_per_epoch)
    plan = SearchPlan(
        base=_search_recipe(config.recipe),
        out=config.out,
        storage=config.storage_url,
        methods=tuple(config.methods),
        epochs=regime.budget,
        steps_per_epoch=steps_per_epoch,
        metric=metric,
        trials=config.trials,
        hours=config.hours,
        sampler=config.sampler,
        pruning=config.pruning,
        search_seed=config.search_seed,
        fixed_options=dict(config.fixed_options),
        stale_after=config.stale_after,
        progress=config.progress,
        echo=config.echo,
    )
    files: dict[str, Path] = {}
    if config.until == "regime":
        return Advice(regime, {}, None, regime.sentence, None, files)
    searches = run_search(plan)
    tuned = {m: s.options for m, s in searches.items() if s.options is not None}
    for m, s in searches.items():
        if s.options is None:
            config.echo(f"advise: search: {m} has no finished trial; it is left out of the confirmation")
    searched = ", ".join(f"{m}: {s.finished} trials" for m, s in searches.items())
    if config.until == "search" or not tuned:
        sentence = f"search: {searched}" + ("" if tuned else "; no method has a finished trial to confirm")
        return Advice(regime, searches, None, sentence, None, files)
    tuning = (
        f"attendout advise: each method's strength searched with Optuna ({config.sampler}, up to {config.trials} "
        f"trials, seed {config.search_seed}) on the validation split carved from train; confirmed here on seeds "
        "the search never used"
    )
    data = confirm_experiment(
        config.recipe, tuned, config.seeds, regime.budget, steps_per_epoch, tuning=tuning
    )
    experiment = write_experiment(config.out / "confirm.toml", data)
    root = config.out / "confirm"
    run_confirmation(
        experiment,
        root,
        device=config.recipe.device,
        reuse=config.reuse_runs,
        progress=config.progress,
        echo=config.echo,
    )
    confirmation = read_confirmation(experiment, root, tuned, config.alpha)
    if config.until == "confirm":
        return Advice(regime, searches, confirmation, "confirmed; run the answer stage", None, files)
    return _answer(config, regime, searches, confirmation, tuned, steps_per_epoch)


def _answer(
    config: AdviseConfig,
    regime: RegimeReading,
    searches: dict[str, MethodSearch],
    confirmation: Confirmation,
    tuned: dict[str, dict[str, Any]],
    steps_per_epoch: int,
) -> Advice:
    from ..version import __version__

    out = config.out
    v = verdict(confirmation, config.alpha)
    recipe = config.recipe
    header = f"attendout advise {__version__}: {recipe.task} with {recipe.model}\n{v.sentence}"
    files: dict[str, Path] = {}
    for method, options in tuned.items():
        files[f"tuned/{method}.toml"] = write_setting(
            out / "tuned" / f"{method}.toml", method, options, regime.budget, f"{method} as advise tuned it"
        )
    winner = v.winner
    files["advice.toml"] = write_setting(
        out / "advice.toml",
        winner.method if winner else "none",
        winner.options if winner else {},
        regime.budget,
        header,
    )
    title = f"attendout advise: {recipe.task}, {recipe.model}"
    files["advice.png"] = advice_figure(
        out / "advice.png", confirmation, searches, list(config.methods), title
    )
    description = _model_description(confirmation)
    provenance = [
        f"Task {recipe.task}; model {description}; budget {regime.budget} epochs of batch {recipe.batch_size} "
        f"({steps_per_epoch} steps each), lr {recipe.learning_rate:g}, max length {recipe.max_length}.",
        f"Search: seed {config.search_seed}, validation split carved from train ({recipe.validation_split:g} of it); "
        f"confirmation: seeds {', '.join(map(str, confirmation.seeds))}, scored on {confirmation.split}.",
        f"Device: {_device(confirmation)}.",
    ]
    described = {
        "advice.toml": "the answer: `attendout finetune --config advice.toml ...` or "
        "`attendout.apply(model, attendout.load_config('advice.toml'))`",
        "tuned/METHOD.toml": "each method at its searched setting, in the same form",
        "advice.png": "left: Δ per method with intervals; right: the search's validation scores by rate",
        "confirm.toml": f"the confirmation grid: `attendout table {out / 'confirm.toml'} --results {out / 'confirm'}`",
        "search.db": "the Optuna studies (one per method); regime.png: plain fine-tuning's curves",
    }
    md = advice_markdown(
        title=title,
        verdict=v,
        regime=regime,
        searches=searches,
        confirmation=confirmation,
        provenance=provenance,
        files=described,
        commands=[config.command or "attendout.advise.advise(AdviseConfig(...)) from Python"],
    )
    from ..rundir import write_text_atomic

    write_text_atomic(out / "advice.md", md)
    files["advice.md"] = out / "advice.md"
    write_json_atomic(
        out / "advice.json",
        {
            "sentence": v.sentence,
            "winner": None if winner is None else {"method": winner.method, "options": winner.options},
            "regime": regime.to_dict(),
            "search": {m: dataclasses.asdict(s) for m, s in searches.items()},
            "confirmation": json.loads(dumps(confirmation)),
        },
    )
    config.echo(f"\n{v.sentence}\n")
    for name in ("advice.md", "advice.png", "advice.toml"):
        config.echo(f"wrote {files[name]}")
    return Advice(
        regime, searches, confirmation, v.sentence, None if winner is None else winner.method, files
    )


def _model_description(confirmation: Confirmation) -> str:
    for run in confirmation.table.runs.values():
        described = run.results.get("model_description")
        if described:
            return str(described)
    return confirmation.table.experiment.models[0].name


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
