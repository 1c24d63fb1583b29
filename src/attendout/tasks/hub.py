"""Reading a task's data from the Hugging Face hub: the optional ``datasets`` package, one dataset's
splits, and the columns a split must have; every failure a one-line :class:`DataError`."""

from __future__ import annotations

import importlib
from typing import Any

from .base import DataError
from .core import LoadOptions, Task

#: our split -> the hub's (our "dev" is the hub's "validation": that name is the run's carved split)
HUB_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


def import_datasets() -> Any:
    """The ``datasets`` package (imported on first use: only hub tasks need it), or a :class:`DataError`
    saying how to install it."""
    try:
        return importlib.import_module("datasets")
    except ImportError:
        raise DataError(
            "hub=True needs the optional 'datasets' package: pip install 'attendout[hub]'"
        ) from None


def first_line(error: BaseException) -> str:
    """``error`` as ``Type: its first line`` (``Type`` alone where it has no message), for a one-line message."""
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__


def load_hub(*names: str) -> Any:
    """``datasets.load_dataset(*names)`` (a dataset and its config); any failure (network, a missing
    config, the cache) is one line naming them."""
    datasets = import_datasets()
    try:
        return datasets.load_dataset(*names)
    except Exception as error:
        raise DataError(f"could not load {' '.join(names)} from the hub ({first_line(error)})") from None


def hub_splits(dataset_dict: Any, names: tuple[str, ...], splits: dict[str, str]) -> dict[str, Any]:
    """Our split -> the hub's split of that name (``splits``: ours -> the hub's); a missing one is an
    error naming the dataset (``names``)."""
    for split, hub_split in splits.items():
        if hub_split not in dataset_dict:
            raise DataError(f"hub {' '.join(names)}: no split {hub_split!r} (for {split})")
    return {split: dataset_dict[hub_split] for split, hub_split in splits.items()}


def hub_columns(dataset: Any, where: str, names: list[str] | tuple[str, ...]) -> None:
    """A :class:`DataError` unless the hub split ``dataset`` (``where``, for the message) has ``names``."""
    columns = list(getattr(dataset, "column_names", []))
    for name in names:
        if name not in columns:
            raise DataError(f"{where}: no column {name!r} (columns present: {', '.join(map(repr, columns))})")


def hub_only(task: Task, options: LoadOptions, source: str, offline: str = "") -> None:
    """Refuse to load a task that the hub alone holds without ``hub=True`` (``offline``: what stands in)."""
    if not options.hub:
        raise DataError(
            f"task {task.name!r} comes from the hub only ({source}): pass hub=True (--hub){offline}"
        )
