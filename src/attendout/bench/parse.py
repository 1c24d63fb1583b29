"""Reading experiment files: :func:`load_experiment` parses and checks one TOML file into an
:class:`~attendout.bench.spec.Experiment` (the format is described in
:mod:`attendout.bench.spec`); :func:`find_experiment` finds a file by path or by name. Every error
is an :class:`~attendout.bench.spec.ExperimentError` of one line naming the file, key and value.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib
import types
import typing
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from ..methods import METHODS
from ..typecheck import OptionTypeError, check_values, expected_type, matches
from .spec import (
    DEFAULT_RECIPE,
    DEFAULT_TUNING,
    RESERVED_TRAINING_KEYS,
    Experiment,
    ExperimentError,
    MethodSpec,
    ModelSpec,
    TaskSpec,
)

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+=-]*$")
#: The keys of [experiment], with their types (seeds: a non-empty list of integers, none repeated).
_EXPERIMENT_KEYS = {
    "name": str,
    "description": str,
    "seeds": list[int],
    "data_seed": int,
    "baseline": str,
    "recipe": str,
    "tuning": str,
    "results": str,
}
_TOP_LEVEL = ("experiment", "training", "models", "tasks", "methods")


def default_id(name: str) -> str:
    """The id an entry named ``name`` (a model's path or hub id, a task) takes when it gives none: the
    name's last part, other characters than an id's replaced by ``-`` ("" where nothing is left)."""
    return re.sub(r"[^A-Za-z0-9._+=-]", "-", name.rstrip("/").split("/")[-1]).lstrip("-._+=")


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
                raise self.unknown_key("[experiment]", key, value, tuple(_EXPERIMENT_KEYS))
            if key != "seeds":  # seeds: below, with what else they must be
                self.typed("[experiment]", key, value, _EXPERIMENT_KEYS[key])
        seeds = head.get("seeds")
        if not seeds or not matches(seeds, list[int]):
            raise self.error(f"[experiment] seeds = {seeds!r}", "must be a non-empty list of integers")
        if len(set(seeds)) != len(seeds):
            raise self.error(f"[experiment] seeds = {seeds!r}", "repeats a seed")
        name = head.get("name") or self.path.stem
        if not _ID.match(name):
            raise self.error(f"[experiment] name = {name!r}", "use letters, digits and . _ + = - only")
        results = head.get("results")
        if results is not None and not _ID.match(results):
            raise self.error(
                f"[experiment] results = {results!r}",
                "a folder name under results/: letters, digits and . _ + = - only",
            )

        training = self.training(data.get("training", {}), "[training]")
        models = self.entries(data, "models", self.model)
        tasks = self.entries(data, "tasks", self.task)
        methods = self.entries(data, "methods", self.method)
        baseline = head.get("baseline") or "none"
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
            data_seed=head.get("data_seed", 0),
            baseline=baseline,
            description=head.get("description") or "",
            recipe=head.get("recipe") or DEFAULT_RECIPE,
            tuning=head.get("tuning") or DEFAULT_TUNING,
            results=results or "",
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
        entry_id = entry.get("id", default_id(name))
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
        if name in METHODS:  # the options' types now, naming this file; an unknown name: the plan's check
            try:
                check_values(METHODS[name], options, name)
            except OptionTypeError as error:
                raise self.error(f"{where} ({entry_id}) options", str(error)) from None
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
        """``value`` checked against ``annotation`` by :mod:`attendout.typecheck`'s one rule; an int for a
        float field comes back as a float."""
        if not matches(value, annotation):
            raise self.error(f"{where} {key} = {value!r}", f"must be {expected_type(annotation)}")
        kinds = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
        if isinstance(value, int) and not isinstance(value, bool) and float in kinds and int not in kinds:
            return float(value)  # an int where a float goes
        return value
