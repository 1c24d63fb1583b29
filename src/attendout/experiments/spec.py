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
    name = "cola"                       # a registered task (unknown: its cells are PENDING)
    splits = ["dev", "dev_ood"]         # evaluation splits shown in the table (default: all)
    max_train_samples = 2000            # any TrainConfig field: overrides [training] for this task

    [[methods]]
    name = "scores-dropout"             # a registered method (unknown: its cells are PENDING)
    id = "scores-dropout-p0.1"
    options = { p = 0.1 }

Methods take options only, never training options: every method gets the same budget. The grid is
models x tasks x methods x seeds; :meth:`Experiment.cells` lists it seed-major (all of seed 1 first),
so an interrupted grid has complete rows of the first seeds. A structural error in the file (unknown
key, wrong type, duplicate id) raises :class:`ExperimentError` naming the file, the key and the value;
a cell whose configuration :class:`~attendout.train.TrainConfig` rejects (a bad method option) is
listed as invalid, and a cell whose method or task is not registered yet is listed as pending.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import re
import tomllib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import NEUTRAL_OPTIONS, TrainConfig
from ..methods import METHODS, settle_for_task
from ..tasks import DataError, get_task

__all__ = [
    "Budget",
    "Cell",
    "Experiment",
    "ExperimentError",
    "MethodSpec",
    "ModelSpec",
    "TaskSpec",
    "config_fingerprint",
    "find_experiment",
    "load_experiment",
]

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
    "label_kind": None,
    "token_column": None,
    "tag_column": None,
    # "auto" cuts a single text head+tail where older cells cut the head: the same input for every text
    # that fits max_length, so every cpu-small cell (no CoLA, SST-2 or MRPC text is longer than 128
    # pieces); offline-default (max length 64) has 7 of its 12,752 Rotten Tomatoes snippets longer,
    # which a rerun would now cut head+tail.
    "truncation": "auto",
    "window_stride": None,
}
_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")
_EXPERIMENT_KEYS = ("name", "description", "seeds", "data_seed", "baseline", "recipe", "tuning", "results")
_TOP_LEVEL = ("experiment", "training", "models", "tasks", "methods")
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
        parts = [
            f"{short[k]}{v:g}" if isinstance(v, float) else f"{short[k]}{v}"
            for k, v in self.overrides().items()
        ]
        return "".join(f"-{p}" for p in parts)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> Budget:
        return cls(**(data or {}))


@dataclass(frozen=True)
class Cell:
    """One run of the grid: a model, a task, a method and a seed.

    Exactly one of ``config`` (a valid TrainConfig), ``pending`` (why it cannot run yet) and
    ``invalid`` (why its configuration is rejected) is set.
    """

    index: int
    model: ModelSpec
    task: TaskSpec
    method: MethodSpec
    seed: int
    config: TrainConfig | None = None
    pending: str | None = None
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
        cells: list[Cell] = []
        for seed in self.seeds:
            for model in self.models:
                for task in self.tasks:
                    for method in self.methods:
                        index = len(cells)
                        base = Cell(index=index, model=model, task=task, method=method, seed=seed)
                        reason = _pending_reason(task, method)
                        if reason is not None:
                            cells.append(dataclasses.replace(base, pending=reason))
                            continue
                        values = self.cell_config_values(model, task, method, seed, budget, **extra)
                        try:
                            config = TrainConfig(**values)
                        except (ValueError, TypeError) as error:
                            cells.append(dataclasses.replace(base, invalid=str(error)))
                        else:
                            cells.append(dataclasses.replace(base, config=config))
        return cells


def _pending_reason(task: TaskSpec, method: MethodSpec) -> str | None:
    """Why a cell cannot run yet (its task or method is not registered), or None."""
    reasons = []
    try:
        get_task(task.name)
    except DataError:
        reasons.append(f"task {task.name!r} is not built yet")
    if method.name not in METHODS:
        hint = difflib.get_close_matches(method.name, list(METHODS), n=1, cutoff=0.8)
        reasons.append(
            f"method {method.name!r} is not registered yet"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
        )
    return "; ".join(reasons) or None


# --------------------------------------------------------------------------------------------------
# Parsing


def find_experiment(name_or_path: str | Path, search_dir: str | Path = "experiments") -> Path:
    """An experiment file from a path, or from a name looked up as ``search_dir/NAME.toml``."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    candidate = Path(search_dir) / f"{path.name}.toml"
    if path.suffix != ".toml" and len(path.parts) == 1 and candidate.is_file():
        return candidate
    known = sorted(p.stem for p in Path(search_dir).glob("*.toml")) if Path(search_dir).is_dir() else []
    hint = f"; experiments in {search_dir}/: {', '.join(known)}" if known else ""
    raise ExperimentError(f"experiment file not found: {name_or_path}{hint}")


def load_experiment(name_or_path: str | Path, search_dir: str | Path = "experiments") -> Experiment:
    """Parse and check an experiment file (a path, or a name under ``search_dir``)."""
    path = find_experiment(name_or_path, search_dir)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as error:
        raise ExperimentError(f"{path}: not valid TOML ({error})") from None
    return _Parser(path).experiment(data)


class _Parser:
    """Turns the TOML dict of one file into an :class:`Experiment`; errors name the file and key."""

    def __init__(self, path: Path):
        self.path = path
        self.train_hints = typing.get_type_hints(TrainConfig)
        self.train_fields = [f.name for f in dataclasses.fields(TrainConfig)]

    def error(self, where: str, message: str) -> ExperimentError:
        return ExperimentError(f"{self.path}: {where}: {message}")

    def unknown_key(
        self, where: str, key: str, value: Any, known: list[str] | tuple[str, ...]
    ) -> ExperimentError:
        hint = difflib.get_close_matches(key, list(known), n=1)
        did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
        return self.error(
            f"{where} {key} = {value!r}", f"unknown key{did_you_mean}; known keys: {', '.join(known)}"
        )

    def experiment(self, data: dict[str, Any]) -> Experiment:
        for key, value in data.items():
            if key not in _TOP_LEVEL:
                raise self.unknown_key("top level", key, value, _TOP_LEVEL)
        head = data.get("experiment")
        if not isinstance(head, dict):
            raise self.error("[experiment]", "missing table (it needs at least seeds = [...])")
        for key, value in head.items():
            if key not in _EXPERIMENT_KEYS:
                raise self.unknown_key("[experiment]", key, value, _EXPERIMENT_KEYS)
        seeds = head.get("seeds")
        if (
            not isinstance(seeds, list)
            or not seeds
            or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
        ):
            raise self.error(f"[experiment] seeds = {seeds!r}", "must be a non-empty list of integers")
        if len(set(seeds)) != len(seeds):
            raise self.error(f"[experiment] seeds = {seeds!r}", "repeats a seed")
        data_seed = head.get("data_seed", 0)
        if not isinstance(data_seed, int) or isinstance(data_seed, bool):
            raise self.error(f"[experiment] data_seed = {data_seed!r}", "must be an integer")
        texts = {}
        for key in ("name", "description", "baseline", "recipe", "tuning", "results"):
            if key in head and not isinstance(head[key], str):
                raise self.error(f"[experiment] {key} = {head[key]!r}", "must be a string")
            texts[key] = head.get(key)
        name = texts["name"] or self.path.stem
        if not _ID.match(name):
            raise self.error(f"[experiment] name = {name!r}", "use letters, digits and . _ + = - only")
        if texts["results"] is not None and not _ID.match(texts["results"]):
            raise self.error(
                f"[experiment] results = {texts['results']!r}",
                "a folder name under results/: letters, digits and . _ + = - only",
            )

        training = self.training(data.get("training", {}), "[training]")
        models = self.entries(data, "models", self.model)
        tasks = self.entries(data, "tasks", self.task)
        methods = self.entries(data, "methods", self.method)
        baseline = texts["baseline"] or "none"
        if baseline not in {m.id for m in methods}:
            raise self.error(
                f"[experiment] baseline = {baseline!r}",
                f"not a method id of this file; method ids: {', '.join(m.id for m in methods)}",
            )
        return Experiment(
            name=name,
            path=self.path,
            seeds=tuple(seeds),
            models=models,
            tasks=tasks,
            methods=methods,
            training=training,
            data_seed=data_seed,
            baseline=baseline,
            description=texts["description"] or "",
            recipe=texts["recipe"] or DEFAULT_RECIPE,
            tuning=texts["tuning"] or DEFAULT_TUNING,
            results=texts["results"] or "",
        )

    def entries(self, data: dict[str, Any], table: str, parse: Any) -> tuple[Any, ...]:
        raw = data.get(table)
        if not isinstance(raw, list) or not raw or not all(isinstance(e, dict) for e in raw):
            raise self.error(f"[[{table}]]", "needs at least one entry (an array of tables)")
        parsed = [parse(entry, f"[[{table}]] #{i + 1}") for i, entry in enumerate(raw)]
        seen: dict[str, int] = {}
        for i, item in enumerate(parsed):
            if item.id in seen:
                raise self.error(
                    f"[[{table}]] #{i + 1} id = {item.id!r}",
                    f"repeats the id of entry #{seen[item.id] + 1}; give each entry its own id",
                )
            seen[item.id] = i
        return tuple(parsed)

    def common(self, entry: dict[str, Any], where: str) -> tuple[str, str, str]:
        """(id, name, label) of a model, task or method entry."""
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise self.error(f"{where} name = {name!r}", "must be a non-empty string")
        default_id = re.sub(r"[^A-Za-z0-9._+=-]", "-", name.rstrip("/").split("/")[-1]).lstrip("-._+=")
        entry_id = entry.get("id", default_id)
        if not isinstance(entry_id, str) or not _ID.match(entry_id):
            raise self.error(
                f"{where} id = {entry_id!r}",
                "must start with a letter or digit and use letters, digits, . _ + = -",
            )
        label = entry.get("label", entry_id)
        if not isinstance(label, str) or not label:
            raise self.error(f"{where} label = {label!r}", "must be a non-empty string")
        return entry_id, name, label

    def model(self, entry: dict[str, Any], where: str) -> ModelSpec:
        for key, value in entry.items():
            if key not in ("id", "name", "label"):
                raise self.unknown_key(where, key, value, ("id", "name", "label"))
        return ModelSpec(*self.common(entry, where))

    def task(self, entry: dict[str, Any], where: str) -> TaskSpec:
        entry_id, name, label = self.common(entry, where)
        splits = entry.get("splits")
        if splits is not None and (
            not isinstance(splits, list) or not splits or not all(isinstance(s, str) and s for s in splits)
        ):
            raise self.error(
                f"{where} ({entry_id}) splits = {splits!r}", "must be a non-empty list of split names"
            )
        rest = {k: v for k, v in entry.items() if k not in ("id", "name", "label", "splits")}
        training = self.training(rest, f"{where} ({entry_id})", extra_known=("id", "name", "label", "splits"))
        return TaskSpec(entry_id, name, label, tuple(splits) if splits else None, training)

    def method(self, entry: dict[str, Any], where: str) -> MethodSpec:
        for key, value in entry.items():
            if key not in ("id", "name", "label", "options"):
                extra = (
                    " (methods take options only; training options go in [training] or a task, the same for every method)"
                    if key in self.train_fields
                    else ""
                )
                raise self.error(
                    f"{where} {key} = {value!r}", f"unknown key{extra}; known keys: id, name, label, options"
                )
        entry_id, name, label = self.common(entry, where)
        options = entry.get("options", {})
        if not isinstance(options, dict):
            raise self.error(
                f"{where} ({entry_id}) options = {options!r}", "must be a table, e.g. { p = 0.1 }"
            )
        return MethodSpec(entry_id, name, label, dict(options))

    def training(self, values: Any, where: str, extra_known: tuple[str, ...] = ()) -> dict[str, Any]:
        """Check TrainConfig keys and value types (the values' ranges are TrainConfig's to check)."""
        if not isinstance(values, dict):
            raise self.error(where, f"must be a table, got {values!r}")
        allowed = [f for f in self.train_fields if f not in RESERVED_TRAINING_KEYS]
        out = {}
        for key, value in values.items():
            if key in RESERVED_TRAINING_KEYS:
                raise self.error(
                    f"{where} {key} = {value!r}",
                    "is set by the grid (use [experiment] seeds/data_seed, [[models]], [[tasks]], [[methods]])",
                )
            if key not in self.train_hints:
                raise self.unknown_key(where, key, value, [*extra_known, *allowed])
            out[key] = self.typed(where, key, value, self.train_hints[key])
        return out

    def typed(self, where: str, key: str, value: Any, annotation: Any) -> Any:
        kinds = [a for a in _union_args(annotation) if a is not type(None)]
        for kind in kinds:
            origin = typing.get_origin(kind) or kind
            if origin is bool and isinstance(value, bool):
                return value
            if isinstance(value, bool):
                continue
            if origin is int and isinstance(value, int):
                return value
            if origin is float and isinstance(value, (int, float)) and math.isfinite(value):
                return float(value)
            if origin is str and isinstance(value, str):
                return value
            if origin is list and isinstance(value, list) and all(isinstance(v, str) for v in value):
                return list(value)
            if origin is dict and isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
                return dict(value)
        wanted = " or ".join(_type_name(k) for k in kinds)
        raise self.error(f"{where} {key} = {value!r}", f"must be {wanted}")


def _union_args(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _type_name(kind: Any) -> str:
    origin = typing.get_origin(kind) or kind
    return {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list of strings",
        dict: "a table of strings",
    }.get(origin, str(kind))
