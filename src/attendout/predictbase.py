"""What both predictors share: the error, a run directory's settings and splits, and writing rows.

:mod:`attendout.predict` (classifiers, taggers, multiple choice) and :mod:`attendout.generate` (the
generation kinds, ``lm`` and ``seq2seq``) read run directories and write prediction files the same way.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from .config import TrainConfig, split_for_training
from .rundir import RunDir
from .tasks import Examples, Task

__all__ = [
    "OUTPUT_FORMATS",
    "PredictError",
    "check_output_path",
    "run_settings",
    "run_split",
    "task_from_settings",
    "write_rows",
    "write_rows_atomic",
]

#: The formats of an output file, by its extension.
OUTPUT_FORMATS = (".jsonl", ".csv", ".tsv")


class PredictError(ValueError):
    """A folder that cannot be predicted with, or inputs that do not fit the model."""


def run_settings(path: Path) -> dict[str, Any] | None:
    """The settings of the run directory ``path`` (its config.json), or None for a model folder."""
    run = RunDir(path)
    if not run.config.is_file():
        return None
    try:
        settings = run.read_config()
    except json.JSONDecodeError as error:
        raise PredictError(f"{run.config}: not valid JSON ({error.msg}, line {error.lineno})") from None
    return settings if isinstance(settings, dict) and "config" in settings and "task" in settings else None


def task_from_settings(settings: dict[str, Any]) -> Task:
    """The task a run recorded in its config.json."""
    fields = {f.name for f in dataclasses.fields(Task)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in settings["task"].items() if k in fields}
    return Task(**values)


def run_split(settings: dict[str, Any], name: str, data_dir: str | None, source: str) -> Examples:
    """Split ``name`` of a run's data as the run saw it: ``train``, the carved ``validation``, or an
    evaluation split (subsampled like the run's). ``data_dir`` replaces the run's data folder."""
    values = dict(settings["config"])
    if data_dir is not None:
        values["data_dir"] = str(data_dir)
    config = TrainConfig.from_dict(values)
    task, data = config.load_data()
    train, validation, evals = split_for_training(data, config, task.label_names)
    splits = {"train": train, "validation": validation, **evals}
    if name not in splits:
        raise PredictError(f"run {source} has no split {name!r}; its splits: {', '.join(splits)}")
    return splits[name]


def write_rows(handle: Any, rows: list[dict[str, Any]], fmt: str) -> None:
    """Write prediction rows to an open text ``handle`` as ``jsonl``, ``csv`` or ``tsv`` (with a header)."""
    import csv

    if fmt == "jsonl":
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        return
    writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t" if fmt == "tsv" else ",")
    writer.writeheader()
    writer.writerows(rows)


def check_output_path(path: str | os.PathLike) -> Path:
    """``path`` as a ``Path`` if its extension names an output format, else a :class:`PredictError`."""
    path = Path(path)
    if path.suffix.lower() not in OUTPUT_FORMATS:
        raise PredictError(f"{path}: the output must end in .jsonl, .csv or .tsv")
    return path


def write_rows_atomic(path: str | os.PathLike, rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` to ``path`` in the format of its extension; the file appears complete or not at all."""
    path = check_output_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", newline="") as handle:
            write_rows(handle, rows, path.suffix.lower().lstrip("."))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
