"""What both predictors share: the error, a run directory's settings, state and splits, and writing rows.

:mod:`attendout.predict.classification` (classifiers, taggers, multiple choice) and :mod:`attendout.predict.generation` (the
generation kinds, ``lm`` and ``seq2seq``) read run directories and write prediction files the same way.
Both refuse a run directory that is not finished (:func:`check_finished`), unless asked to predict with
its model as it is; the outputs then record the run's state (``run_state``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

from ..config import TrainConfig, split_for_training
from ..run.data import load_data
from ..run.folder import RunDir
from ..run.state import RunState
from ..tasks import Examples, Task

logger = logging.getLogger(__name__)

__all__ = [
    "OUTPUT_FORMATS",
    "PredictError",
    "UnfinishedRunError",
    "check_finished",
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


class UnfinishedRunError(PredictError):
    """A run directory that is not finished (stopped, or unfinished): ``state`` says where it stands."""

    def __init__(self, message: str, state: RunState) -> None:
        super().__init__(message)
        self.state = state


def check_finished(path: Path, allow_unfinished: bool = False) -> RunState | None:
    """None if the run directory ``path`` finished; else refuse it, or with ``allow_unfinished`` warn.

    The refusal (:class:`UnfinishedRunError`) is one line: the run's state (:meth:`RunDir.state`),
    which step its kept model is of, and the command that finishes it. Allowed, a warning on stderr
    says the run is not finished and which step's weights predict, and the state comes back for the
    outputs to record (``run_state``).
    """
    from ..cli.finetune import how_to_finish  # the words of a stopped finetune's line, and its flags

    state = RunDir(path).state()
    if state.finished:
        return None
    if not allow_unfinished:
        raise UnfinishedRunError(
            f"run {path} is not finished: {state.describe()}; {state.weights()}; {how_to_finish(state)}; or pass "
            "--allow-unfinished (Python: allow_unfinished=True) to predict with that model as it is",
            state,
        )
    step = "a step its files do not say" if state.best_step is None else f"step {state.best_step}"
    logger.warning(
        "run %s is not finished (%s): predicting with the weights of %s; %s",
        path,
        state.describe(),
        step,
        how_to_finish(state),
    )
    return state


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
    task, data = load_data(config)
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
    for row in rows:  # a value of several fields (run_state) is a cell of JSON
        writer.writerow({k: json.dumps(v) if isinstance(v, dict) else v for k, v in row.items()})


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
