"""Experiment files: one TOML file per result table, parsed into a grid of cells.

An experiment file names the models, tasks, methods (with their options) and seeds of a table, the
data seed shared by the whole grid, and the training options shared by every cell::

    [experiment]
    name = "cpu-small"                  # default: the file name without .toml
    description = "..."
    seeds = [1, 2, 3]                   # model seeds: head initialisation, dropout, the method's masks
    data_seed = 0                       # validation carve, subsample, batch order: one for the grid
    baseline = "none"                   # the method id every other method is compared against
    recipe = "ours: ..."                # where the hyperparameters come from (printed in the table)
    tuning = "none: ..."                # how method options were chosen (printed in the table)
    results = "cpu-small"               # results folder (default: name): experiments that share one
                                        # run a cell with the same key and configuration once for all

    [training]                          # TrainConfig fields, the same for every cell
    epochs = 2
    learning_rate = 5e-5

    [[models]]
    id = "minilm"                       # directory name (default: derived from name)
    name = "minilm"                     # what TrainConfig.model takes: alias, folder or hub id
    label = "MiniLM-L6"                 # display name (default: id)

    [[tasks]]
    name = "cola"                       # a registered task (or "file"; unknown: its cells are invalid)
    splits = ["dev", "dev_ood"]         # evaluation splits shown in the table (default: all)
    max_train_samples = 2000            # any TrainConfig field: overrides [training] for this task

    [[methods]]
    name = "scores-dropout"             # a registered method (unknown: its cells are invalid)
    id = "scores-dropout-p0.1"
    options = { p = 0.1 }

Methods take options only, never training options: every method gets the same budget. The grid is
models x tasks x methods x seeds; :meth:`Experiment.cells` lists it seed-major (all of seed 1 first),
so an interrupted grid has complete rows of the first seeds. A structural error in the file (unknown
key, wrong type, duplicate id) raises :class:`ExperimentError` naming the file, the key and the value;
a cell whose method or task is not registered, or whose configuration
:class:`~attendout.config.TrainConfig` rejects (a bad method option), is listed as invalid: the dry run
reports it and no cell of the grid runs until it is fixed.

This module holds the grid the file describes (its parts, :class:`Cell`, :func:`config_fingerprint`,
:class:`Experiment`); reading a file into it is :mod:`attendout.bench.parse`
(:func:`~attendout.bench.parse.load_experiment`).
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import NEUTRAL_OPTIONS, TrainConfig
from ..methods import METHODS, settle_for_task
from ..tasks import DataError, get_task

#: TrainConfig fields an experiment file may not set in [training] or a task: the grid sets them.
RESERVED_TRAINING_KEYS = frozenset(
    {
        "task",
        "model",
        "method",
        "method_options",
        "seed",
        "data_seed",
        "output_dir",
        "overwrite",
        "progress",
        "resume",
    }
)
#: TrainConfig fields left out of the fingerprint: every option outside the recipe (NEUTRAL_OPTIONS,
#: with the reason for each), so that shards on machines with different data paths, devices or memory
#: agree on which cells are done. save_model too, unlike a resume (RESUME_MUST_MATCH): a job decides
#: with --save-model whether its cells keep weights, and a finished cell counts either way.
FINGERPRINT_EXCLUDE = frozenset(NEUTRAL_OPTIONS)
#: Options of the recipe added to TrainConfig after cells were published, each with the value that
#: reproduces the behaviour from before it existed (any other value changes the numbers). At that
#: value an option is left out of the fingerprint, so adding an option does not turn every finished
#: cell stale (hours of compute). A new TrainConfig field goes here or into NEUTRAL_OPTIONS; a test
#: lists the fingerprinted fields to make sure of it.
FINGERPRINT_NEUTRAL: dict[str, Any] = {
    "early_stopping_patience": None,
    "model_selection": "best",
    "label_kind": None,
    "token_column": None,
    "tag_column": None,
    # "auto" cuts a single text head+tail where older cells cut the head: the same input for every text
    # that fits max_length, so every cpu-small cell (no CoLA, SST-2 or MRPC text is longer than 128
    # pieces); offline-default (max length 64) has 7 of its 12,752 Rotten Tomatoes snippets longer,
    # which a rerun would now cut head+tail.
    "truncation": "auto",
    "window_stride": None,
    # the generation kinds (lm, seq2seq; issue 46): at these values a classification run is as before
    "block_size": None,
    "source_column": None,
    "target_column": None,
    "metrics": None,
    "model_init": "pretrained",
    "model_layers": 2,
    "model_hidden": 128,
    "model_heads": 4,
    "vocab_size": 8000,
    "num_beams": 1,
    "max_new_tokens": None,
}

#: Method options added after cells were published, each with the value that reproduces the behaviour
#: from before it existed: at that value an option is left out of the fingerprint, as FINGERPRINT_NEUTRAL
#: does for training options (a method's options enter the fingerprint with their defaults filled in).
#: A tuple lists several such values (one where the option does not apply, one where it does).
METHOD_OPTION_NEUTRAL: dict[str, Any] = {
    # issue 46: the methods name the attention they act on in an encoder-decoder; off = as before
    "cross_attention": False,
    # issue 50, AD-DROP: the drop-low ablation (high = the method); the random control's sampling
    # (None where the attribution is not rd, exact = the form every rd cell before it ran)
    "dropping": "high",
    "rd_sampling": (None, "exact"),
    # issue 50, Synthesizer: the mixing weight's form (None for variants without '+dot', head = one raw
    # weight per head, as before) and the random matrix's initialiser (None for the dense variants,
    # normal = N(0, 1), as before)
    "mixing": (None, "head"),
    "random_init": (None, "normal"),
    # issue 50, AttendOut: the Generator reads the Attacker's embedding output (as before) or its own
    "generator_embeddings": "attacker",
    # issue 50, scheduled: from_run fits free piecewise-linear curves (as before) or the paper's slopes
    "fit_slopes": False,
}


def _method_option_neutral(name: str, value: Any) -> bool:
    """Whether a method option at ``value`` behaves as before the option existed (see above)."""
    if name not in METHOD_OPTION_NEUTRAL:
        return False
    neutral = METHOD_OPTION_NEUTRAL[name]
    return value in neutral if isinstance(neutral, tuple) else value == neutral


DEFAULT_TUNING = "none: every method runs with the options listed here; nothing was tuned on dev"
DEFAULT_RECIPE = "ours (see [training] of the experiment file)"


class ExperimentError(ValueError):
    """A bad experiment file or experiment option; the message is one line naming file, key and value."""


# --------------------------------------------------------------------------------------------------
# The parts of an experiment


@dataclass(frozen=True)
class ModelSpec:
    """One encoder of the grid."""

    id: str
    name: str
    label: str


@dataclass(frozen=True)
class TaskSpec:
    """One task of the grid, with its own TrainConfig overrides (same for every method)."""

    id: str
    name: str
    label: str
    splits: tuple[str, ...] | None = None
    training: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MethodSpec:
    """One method of the grid: a registered name and its options."""

    id: str
    name: str
    label: str
    options: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """``name`` or ``name (a=1, b=x)``."""
        if not self.options:
            return self.name
        return f"{self.name} ({', '.join(f'{k}={v}' for k, v in self.options.items())})"


@dataclass(frozen=True)
class Budget:
    """Budget overrides given on the command line; each replaces the experiment's value in every cell."""

    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    epochs: float | None = None
    max_steps: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_train_samples", "max_eval_samples", "max_steps"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ExperimentError(f"--{name.replace('_', '-')} must be at least 1, got {value!r}")
        if self.epochs is not None and not self.epochs > 0:
            raise ExperimentError(f"--epochs must be positive, got {self.epochs!r}")

    def overrides(self) -> dict[str, Any]:
        """The TrainConfig fields this budget sets."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    def is_empty(self) -> bool:
        return not self.overrides()

    def suffix(self) -> str:
        """A readable results-root suffix, e.g. ``"-train200-ep1"`` ("" for no override)."""
        short = {
            "max_train_samples": "train",
            "max_eval_samples": "eval",
            "epochs": "ep",
            "max_steps": "steps",
        }
        return "".join(
            f"-{short[k]}{v:g}" if isinstance(v, float) else f"-{short[k]}{v}"
            for k, v in self.overrides().items()
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Budget:
        return cls(**(data or {}))


@dataclass(frozen=True)
class Cell:
    """One run of the grid: a model, a task, a method and a seed.

    Exactly one of ``config`` (a valid TrainConfig) and ``invalid`` (why it cannot run: an unknown
    method or task, a rejected configuration) is set.
    """

    index: int
    model: ModelSpec
    task: TaskSpec
    method: MethodSpec
    seed: int
    config: TrainConfig | None = None
    invalid: str | None = None

    @property
    def key(self) -> str:
        """``model/task/method/seed-N``: the cell's run directory under the results root."""
        return f"{self.model.id}/{self.task.id}/{self.method.id}/seed-{self.seed}"

    @property
    def flat_key(self) -> str:
        """The key as one file name (claims, work folders)."""
        return self.key.replace("/", "--")

    @property
    def runnable(self) -> bool:
        return self.config is not None

    @property
    def fingerprint(self) -> str | None:
        return None if self.config is None else config_fingerprint(self.config)


def config_fingerprint(config: TrainConfig) -> str:
    """A short hash of everything in ``config`` that changes a run's numbers.

    The method's options are taken after defaults are filled in, so ``{}`` and the explicit defaults
    hash alike; a changed default in the code changes the hash (the old result is then stale).
    """
    data = {
        k: v
        for k, v in config.to_dict().items()
        if k not in FINGERPRINT_EXCLUDE and not (k in FINGERPRINT_NEUTRAL and v == FINGERPRINT_NEUTRAL[k])
    }
    if isinstance(data.get("method_options"), dict):
        data["method_options"] = {
            k: v for k, v in data["method_options"].items() if not _method_option_neutral(k, v)
        }
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# --------------------------------------------------------------------------------------------------
# The experiment


@dataclass(frozen=True)
class Experiment:
    """A parsed experiment file (see the module docstring for the format)."""

    name: str
    path: Path
    seeds: tuple[int, ...]
    models: tuple[ModelSpec, ...]
    tasks: tuple[TaskSpec, ...]
    methods: tuple[MethodSpec, ...]
    training: dict[str, Any] = field(default_factory=dict)
    data_seed: int = 0
    baseline: str = "none"
    description: str = ""
    recipe: str = DEFAULT_RECIPE
    tuning: str = DEFAULT_TUNING
    results: str = ""  # the results folder's name; "" = the experiment's name

    @property
    def results_name(self) -> str:
        """The results folder under ``results/``: ``results`` when set, else the experiment's name."""
        return self.results or self.name

    @property
    def size(self) -> int:
        return len(self.models) * len(self.tasks) * len(self.methods) * len(self.seeds)

    def shape(self) -> str:
        """``"1 model x 3 tasks x 8 methods x 3 seeds = 72 cells"``."""

        def count(n: int, word: str) -> str:
            return f"{n} {word}{'' if n == 1 else 's'}"

        return (
            f"{count(len(self.models), 'model')} x {count(len(self.tasks), 'task')} x "
            f"{count(len(self.methods), 'method')} x {count(len(self.seeds), 'seed')} = {count(self.size, 'cell')}"
        )

    def method(self, method_id: str) -> MethodSpec:
        return next(m for m in self.methods if m.id == method_id)

    def cell_config_values(
        self,
        model: ModelSpec,
        task: TaskSpec,
        method: MethodSpec,
        seed: int,
        budget: Budget | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The TrainConfig keyword arguments of one cell: defaults < [training] < task < budget < extra."""
        values: dict[str, Any] = {"progress": False, "save_model": False}
        values.update(self.training)
        values.update(task.training)
        if budget is not None:
            values.update(budget.overrides())
        values.update(
            task=task.name,
            model=model.name,
            method=method.name,
            # options that depend on the task (AD-DROP's layers) written out: the fingerprint and the
            # run's config record what the cell runs with
            method_options=settle_for_task(method.name, method.options, task.name),
            seed=seed,
            data_seed=self.data_seed,
        )
        values.update({k: v for k, v in extra.items() if v is not None})
        return values

    def cells(self, budget: Budget | None = None, **extra: Any) -> list[Cell]:
        """Every cell of the grid, seed-major: seed, then model, task, method (the order of the file).

        ``extra`` sets further TrainConfig fields in every cell (``data_dir``, ``save_model``,
        ``device``, ``micro_batch_size``); a ``None`` value leaves the experiment's own.
        """
        cells = []
        grid = itertools.product(self.seeds, self.models, self.tasks, self.methods)
        for index, (seed, model, task, method) in enumerate(grid):
            config, invalid = None, _unknown_names(task, method)
            if invalid is None:
                try:
                    config = TrainConfig(
                        **self.cell_config_values(model, task, method, seed, budget, **extra)
                    )
                except (ValueError, TypeError) as error:
                    invalid = str(error)
            cells.append(Cell(index, model, task, method, seed, config, invalid))
        return cells


def _unknown_names(task: TaskSpec, method: MethodSpec) -> str | None:
    """The cell's task or method name that nothing is registered under (a sentence), or None."""
    reasons = []
    try:
        get_task(task.name)
    except DataError as error:
        reasons.append(str(error))
    if method.name not in METHODS:
        hint = difflib.get_close_matches(method.name, list(METHODS), n=1, cutoff=0.6)
        reasons.append(
            f"unknown method {method.name!r}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
            + f"; methods: {', '.join(sorted(METHODS))}"
        )
    return "; ".join(reasons) or None
