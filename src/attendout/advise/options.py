"""What a study is asked to do: :class:`AdviseConfig` (the recipe, and how much to search and confirm),
its checks, and the help of the ``attendout advise`` flag of each of its fields; the stages that run it
are :mod:`.study`'s."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..bench import config_fingerprint
from ..config import TrainConfig
from ..typecheck import AT_LEAST_1, POSITIVE, Must, check_rules, one_of, option
from .scales import plain_name
from .spaces import DEFAULT_METHODS, search_space

#: the search seeds of ``repeats`` runs a trial: search_seed, search_seed + SEED_STRIDE, ...
SEED_STRIDE = 1000
#: what a trial's score is, by ``AdviseConfig.objective`` (see :mod:`.objective`'s docstring)
OBJECTIVES = {
    "delta": "the method's best validation {metric} minus {plain}'s at the same seed",
    "delta-loss": "the method's lowest validation loss minus {plain}'s at the same seed",
    "score": "the method's best validation {metric}",
}

STAGES = ("regime", "search", "confirm", "answer")
_AT_LEAST_2 = Must(lambda value: value >= 2, "at least 2")


def search_seeds(search_seed: int, repeats: int) -> tuple[int, ...]:
    """The seeds every trial (and plain fine-tuning's reference) is trained at."""
    return tuple(search_seed + SEED_STRIDE * r for r in range(repeats))


@dataclass
class AdviseConfig:
    """A study: the recipe (task, model, data, optimiser) and how much to search and confirm. Field help
    texts are the CLI's (``attendout advise``)."""

    recipe: TrainConfig
    output_dir: str = option("advice", "the study's folder")
    methods: Sequence[str] = option(
        DEFAULT_METHODS,
        "methods to compare with plain fine-tuning, comma-separated",
        flag_default=",".join(DEFAULT_METHODS),
    )
    #: per method, options held fixed while its strength is searched (e.g. addrop: attribution "ga")
    fixed_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    regime_epochs: int = option(
        12,
        "epochs of the plain run the budget is read from",
        must=_AT_LEAST_2,
    )
    regime_run: str | None = option(  # read plain fine-tuning's curves from this finished run instead
        None,
        "read plain fine-tuning's curves from this finished run (one validation per epoch) instead of "
        "training one",
        metavar="RUN_DIR",
        hide_default=True,
    )
    epochs: int | None = option(  # the budget, instead of the one the regime stage reads
        None,
        "the budget of every run, instead of the one read off the curves (the probe is then skipped "
        "unless --probe asks for it)",
        hide_default=True,
        must=AT_LEAST_1,
    )
    probe: bool | None = option(  # run the regime probe (default: only when ``epochs`` is not given)
        None,
        "train (or read) plain fine-tuning's long run first (default: only without --epochs); with "
        "--epochs it is read to tell whether that budget undertrains",
    )
    trials: int = option(8, "trials per method", must=AT_LEAST_1)
    hours: float | None = option(  # search time budget: summed time of finished trials, all invocations
        None,
        "stop starting trials once the finished ones took this long, over every invocation (default: no "
        "limit)",
        must=POSITIVE,
    )
    sampler: str = option(
        "tpe",
        "Optuna's TPE, or each method's small grid",
        choices=("tpe", "grid"),
        hide_default=True,
        must=one_of(("tpe", "grid"), "tpe or grid"),
    )
    pruning: bool = option(True, "stop trials below the median early")
    storage: str | None = option(  # Optuna storage URL; default sqlite:///OUTPUT/search.db
        None,
        "Optuna storage URL shared by processes or machines (default: sqlite:///OUTPUT_DIR/search.db); "
        "postgresql://... needs psycopg ('pip install attendout[postgres]') or psycopg2",
    )
    search_seed: int = option(0, "the first search seed")
    search_repeats: int = option(  # seeds per trial: search_seed, search_seed + 1000, ...
        2,
        "seeds per trial: --search-seed, +1000, ... (default: 2; the spread of a trial's seeds is the "
        "objective's measured noise)",
        metavar="K",
        must=AT_LEAST_1,
    )
    objective: str = option(  # attendout.advise.search.OBJECTIVES
        "delta",
        "a trial's score: delta (its best validation metric minus plain fine-tuning's at the same seed; "
        "default), delta-loss (the same for the lowest validation loss), score (the validation metric "
        "itself, v0.4's)",
        choices=tuple(OBJECTIVES),
        must=one_of(OBJECTIVES, " or ".join(OBJECTIVES)),
    )
    #: confirmation seeds, never a search seed; "auto": a pilot's 5, then as many as detect ``detect`` (.seeds)
    seeds: Sequence[int] | str = option(
        (1, 2, 3, 4, 5),
        "fresh seeds of the confirmation: 1..N, skipping the search seeds (default: 5); auto: as many as "
        "detect a gain of --detect with 80% power at the 90% upper bound of the noise a pilot of 5 fresh "
        "seeds measures on the evaluation split (the pilot's runs are the first seeds), at most --max-seeds "
        "and within --confirm-hours",
        metavar="N|auto",
        flag_default="5",
        must=Must(
            lambda value: value == "auto" or len(value) >= 2, "at least 2 seeds (a paired test needs them)"
        ),
    )
    #: the smallest gain a user cares about, on the metric's scale (:mod:`.scales`): 0.02 is 2 points of
    #: accuracy, 2.0 is 2 BLEU, 0.02 is a 2% fall of perplexity; default 2 points (or 2%)
    detect: float | None = option(
        None,
        "the smallest gain you care about: in the metric's units for scores (default 2 points: 0.02 of "
        "accuracy or MCC, 2 BLEU), a share for perplexity and the loss (default 0.02: a 2% fall); the answer "
        "says when the design could not detect it",
        metavar="GAIN",
        must=POSITIVE,
    )
    confirm_hours: float | None = option(
        None,
        "with --seeds auto: at most this much confirmation training (from the search's time per run)",
        hide_default=True,
        must=POSITIVE,
    )
    max_seeds: int = option(20, "with --seeds auto: at most this many", must=_AT_LEAST_2)
    #: a results root (e.g. an earlier `attendout bench` grid) whose finished runs with a confirmation
    #: cell's exact configuration (fingerprint, seed included) are copied in instead of retrained
    reuse_runs: str | None = option(
        None,
        "copy in finished runs (e.g. of an earlier `attendout bench` grid) whose configuration, seed "
        "included, is exactly a confirmation cell's, instead of training them again",
        metavar="RESULTS_ROOT",
        hide_default=True,
    )
    alpha: float = option(0.05, "significance level", must=Must(lambda value: 0 < value < 1, "in (0, 1)"))
    until: str = option(
        "answer", "stop after this stage", choices=STAGES, must=one_of(STAGES, " or ".join(STAGES))
    )
    stale_after: float = option(
        900.0,
        "a trial or run of another host without a heartbeat for this long is taken over (default: 900)",
        metavar="SECONDS",
    )
    poll: float = 30.0  # seconds between looks at the trials other processes run (search)
    progress: bool = option(True, "progress bars with ETA (stderr)")
    echo: Callable[[str], None] = print
    tracking: Any = None  # --report-to: the attendout.track.Tracking every run of the study reports to
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
            if self.fixed_options.get(method):  # a typo or a bad value: now, not after the probe
                from ..methods import get_method_config

                try:
                    get_method_config(method, **self.fixed_options[method])
                except (TypeError, ValueError) as error:
                    raise ValueError(f"--method-option {method}.*: {error}") from None
        if isinstance(self.seeds, str):
            if self.seeds != "auto":
                raise ValueError(f"advise: seeds must be a list of seeds or 'auto', got {self.seeds!r}")
        else:
            self.seeds = tuple(self.seeds)
        check_rules(self, "advise")
        if self.seeds != "auto" and len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"advise: seeds must be distinct, got {self.seeds!r}")
        taken = set(search_seeds(self.search_seed, self.search_repeats))
        if self.seeds != "auto" and taken & set(self.seeds):
            raise ValueError(
                f"advise: the confirmation seeds {list(self.seeds)} include the search seed "
                f"{min(taken & set(self.seeds))} (search seeds: {sorted(taken)}): a setting must be confirmed "
                "on runs it was not chosen on"
            )
        if self.probe is False and self.epochs is None and self.regime_run is None:
            raise ValueError("advise: without the regime probe the budget must be given (epochs)")
        if self.recipe.method != "none":
            raise ValueError(
                f"advise: the recipe's method must be none (the methods are {list(self.methods)})"
            )

    @property
    def probes(self) -> bool:
        """Whether the regime stage reads a plain run's curves (trained, or ``regime_run``)."""
        if self.regime_run is not None:
            return True
        return self.epochs is None if self.probe is None else self.probe

    @property
    def search_recipe(self) -> TrainConfig:
        """The recipe as the regime and search stages run it: the evaluation splits are never encoded nor
        scored (their files are still named, so that a file task does not carve an evaluation split out of
        train); the search sets method and seed per trial."""
        return dataclasses.replace(self.recipe, evaluate=False, save_model=False)

    @property
    def out(self) -> Path:
        return Path(self.output_dir)

    @property
    def regime_dir(self) -> Path:
        """The plain run the regime stage reads: ``regime_run``, else OUTPUT/regime (trained by the study)."""
        return Path(self.regime_run) if self.regime_run else self.out / "regime"

    @property
    def plain(self) -> str:
        """What the baseline is called (:func:`.scales.plain_name`)."""
        return plain_name(self.recipe.model_init)

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
            "regime_epochs": self.regime_epochs if self.regime_run is None and self.probes else None,
            "regime_run": self.regime_run,
            "epochs": self.epochs,
            "search_repeats": self.search_repeats,
            "objective": self.objective,
            "fixed_options": self.fixed_options,
        }
