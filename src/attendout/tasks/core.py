"""Task specs, example containers, the task registry, and split helpers.

A :class:`Task` says what a benchmark looks like (its text inputs, label kind and label names, its
metrics, its evaluation splits); :class:`Examples` holds one split of its data as parallel lists;
:class:`TaskData` holds a train split plus the named evaluation splits. Loaders are registered with
:func:`register_task` and called through :func:`attendout.tasks.load_task_data`.

:func:`compute_metrics` scores a task's predictions with its metrics (:mod:`.metrics`).

Task kinds are plain strings checked against a small registry (:func:`register_kind`), so a later
module can add e.g. ``"token_classification"`` or ``"multiple_choice"`` without touching this file;
:class:`Examples` is a frozen dataclass whose :meth:`Examples.subset` works field by field, so a
subclass with extra per-example fields (token labels, answer choices) splits correctly too.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .base import CLASSIFICATION, KINDS, MULTIPLE_CHOICE, REGRESSION, TOKEN_CLASSIFICATION, DataError
from .metrics import METRICS, check_metric

# --------------------------------------------------------------------------------------------------
# Task kinds (the built-in ones: :data:`attendout.tasks.base.KINDS`)


def register_kind(kind: str, description: str) -> None:
    """Make a new task kind (e.g. ``"token_classification"``) acceptable to :class:`Task`."""
    if not kind or not isinstance(kind, str):
        raise DataError(f"task kind must be a non-empty string, got {kind!r}")
    KINDS[kind] = description


def known_kinds() -> tuple[str, ...]:
    """The registered task kinds, in registration order."""
    return tuple(KINDS)


# --------------------------------------------------------------------------------------------------
# Examples, tasks, task data


@dataclass(frozen=True)
class Examples:
    """One split of a task's data, as parallel lists (one entry per example).

    ``labels`` are class indices into ``Task.label_names`` for classification and floats for
    regression. ``groups`` (optional) names the group of each example (e.g. the film a review is
    about): :func:`carve_validation` never puts one group on both sides of a split.

    Subclasses may add per-example list fields; :meth:`subset` and the length check handle every
    list-valued field, so nothing else needs to change.
    """

    text_a: list[str]
    text_b: list[str] | None
    labels: list[int] | list[float]
    groups: list[str] | None = None

    def __post_init__(self) -> None:
        n = len(self.text_a)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list) and len(value) != n:
                raise DataError(
                    f"Examples: field {f.name!r} has {len(value)} entries but text_a has {n}; all must match"
                )

    def __len__(self) -> int:
        return len(self.text_a)

    def _with_labels(self, name: str, holds: str) -> Iterator[tuple[int, tuple[Any, Any]]]:
        """``(i, (value, label))`` of each example for the per-example field ``name``, which a subclass
        requires (``holds``: what it holds, for the error)."""
        values = getattr(self, name)
        if values is None:
            raise DataError(f"{type(self).__name__}: {name} is required ({holds})")
        return enumerate(zip(values, self.labels or [], strict=False))

    def subset(self, indices: Sequence[int]) -> Examples:
        """The examples at ``indices`` (in that order), as a new object of the same class."""
        picked = [int(i) for i in indices]
        n = len(self)
        for i in picked:
            if not -n <= i < n:
                raise DataError(f"Examples.subset: index {i} is out of range for {n} examples")
        updates: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, list):
                updates[f.name] = [value[i] for i in picked]
        return dataclasses.replace(self, **updates)


@dataclass(frozen=True)
class TokenExamples(Examples):
    """Token classification: ``words[i]`` are example i's words, ``labels[i]`` one tag index per word.

    ``text_a[i]`` is the words joined by single spaces (for display and hashing); ``text_b`` is None.
    """

    words: list[list[str]] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for i, (words, tags) in self._with_labels("words", "one list of words per example"):
            if len(words) != len(tags):
                raise DataError(f"TokenExamples: example {i} has {len(words)} words but {len(tags)} tags")

    @classmethod
    def from_words(
        cls, words: list[list[str]], labels: list[list[int]] | None, **kwargs: Any
    ) -> TokenExamples:
        """Examples from words and tag indices (None: words to tag); ``text_a`` is made from the words."""
        return cls(text_a=[" ".join(w) for w in words], text_b=None, labels=labels, words=words, **kwargs)


@dataclass(frozen=True)
class ChoiceExamples(Examples):
    """Multiple choice: ``text_a[i]`` is the question (or context), ``choices[i]`` its options and
    ``labels[i]`` the index of the right one. Every example has ``Task.choices`` options (a loader pads
    a shorter list with empty options, never the answer, and says so)."""

    choices: list[list[str]] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        for i, (options, label) in self._with_labels("choices", "one list of options per example"):
            if not 0 <= int(label) < len(options):
                raise DataError(f"ChoiceExamples: example {i} has answer {label} but {len(options)} options")


@dataclass(frozen=True)
class TaskData:
    """The data of one task: a train split and the evaluation splits, in the order they are reported.

    Model selection never looks at the evaluation splits: it uses a validation split carved from
    ``train`` (:func:`carve_validation`).
    """

    train: Examples
    eval_splits: dict[str, Examples]
    source: str  # human-readable, e.g. "glue folder ../shared/data/glue/CoLA"

    def __post_init__(self) -> None:
        if not self.eval_splits:
            raise DataError(f"TaskData from {self.source}: no evaluation split")

    def sizes(self) -> dict[str, int]:
        """``{"train": n, <eval split>: n, ...}``, handy for logging."""
        return {"train": len(self.train), **{name: len(ex) for name, ex in self.eval_splits.items()}}


@dataclass(frozen=True)
class Task:
    """What a benchmark task looks like.

    ``metrics[0]`` is the main metric (used for model selection). ``label_names`` is ``None`` for
    regression; for a classification *template* (the generic ``"file"`` task before its data is
    read) it may also be ``None``, and :func:`~attendout.tasks.load_task_data` returns the task with
    its label names filled in. ``label_range`` optionally bounds regression labels (STS-B: 0 to 5).
    Left out, a task reads one ``text`` field, has no label names and one evaluation split, ``dev``;
    ``metrics`` must be given (at least one).
    """

    name: str
    kind: str
    text_fields: tuple[str, ...] = ("text",)
    label_names: tuple[str, ...] | None = None
    metrics: tuple[str, ...] = ()
    eval_split_names: tuple[str, ...] = ("dev",)
    description: str = ""
    label_range: tuple[float, float] | None = field(default=None)
    choices: int | None = field(default=None)  # multiple choice: options per example

    def __post_init__(self) -> None:
        where = f"Task {self.name!r}"
        if not self.name:
            raise DataError("Task: name must be a non-empty string")
        if self.kind not in KINDS:
            raise DataError(f"{where}: kind {self.kind!r} is not one of {', '.join(KINDS)}")
        if not self.text_fields or not all(isinstance(t, str) and t for t in self.text_fields):
            raise DataError(f"{where}: text_fields must be non-empty names, got {self.text_fields!r}")
        if self.kind in (REGRESSION, MULTIPLE_CHOICE) and self.label_names is not None:
            raise DataError(f"{where}: a {self.kind} task has no label_names, got {self.label_names!r}")
        if (self.kind == MULTIPLE_CHOICE) != (self.choices is not None):
            raise DataError(
                f"{where}: choices (options per example) is for multiple choice, got {self.choices!r}"
            )
        if self.choices is not None and self.choices < 2:
            raise DataError(f"{where}: needs at least 2 choices, got {self.choices!r}")
        if self.label_names is not None:
            if len(self.label_names) < 2:
                raise DataError(f"{where}: needs at least 2 label names, got {self.label_names!r}")
            if len(set(self.label_names)) != len(self.label_names):
                raise DataError(f"{where}: label names repeat: {self.label_names!r}")
        if not self.metrics:
            raise DataError(f"{where}: needs at least one metric")
        for metric in self.metrics:
            check_metric(where, metric, self.kind)
        if not self.eval_split_names:
            raise DataError(f"{where}: needs at least one evaluation split name")

    @property
    def num_labels(self) -> int:
        """Number of outputs of the head: 1 for regression and multiple choice (one score per choice),
        else the number of label names (per word for token classification)."""
        if self.kind in (REGRESSION, MULTIPLE_CHOICE):
            return 1
        if self.label_names is None:
            raise DataError(
                f"task {self.name!r} has no label names until its data is loaded (load_task_data)"
            )
        return len(self.label_names)

    @property
    def is_pair(self) -> bool:
        """True when each example is a pair of texts (``text_a``, ``text_b``)."""
        return len(self.text_fields) == 2


# --------------------------------------------------------------------------------------------------
# Loading options and the registry


@dataclass(frozen=True)
class LoadOptions:
    """The source options of :func:`~attendout.tasks.load_task_data`, passed to every loader."""

    data_dir: str | None = None
    hub: bool = False
    train_file: str | None = None
    eval_files: dict[str, str] | None = None
    text_columns: tuple[str, ...] | None = None
    label_column: str | None = None
    label_names: tuple[str, ...] | None = None
    file_format: str | None = None
    kind: str | None = None
    group_column: str | None = None
    metrics: tuple[str, ...] | None = None
    drop_bad_rows: bool = False
    token_column: int | None = None  # token files (CoNLL columns): 0-based, negative from the end
    tag_column: int | None = None

    def __post_init__(self) -> None:
        """Paths as text and sequences as tuples, however they were given."""
        kinds = {
            "data_dir": str,
            "train_file": str,
            "text_columns": tuple,
            "label_names": tuple,
            "metrics": tuple,
        }
        for name, make in kinds.items():
            if getattr(self, name) is not None:
                object.__setattr__(self, name, make(getattr(self, name)))
        if self.eval_files is not None:
            object.__setattr__(self, "eval_files", {k: str(v) for k, v in self.eval_files.items()})


# A loader reads the data of a task: (task, options) -> (task as loaded, data). The returned task
# may differ from the registered one (e.g. fewer eval splits when an optional file is absent, or
# label names found in the data); its eval_split_names equal the keys of data.eval_splits.
TaskLoader = Callable[[Task, LoadOptions], tuple[Task, TaskData]]

_TASKS: dict[str, tuple[Task, TaskLoader]] = {}


def register_task(task: Task, loader: TaskLoader, *, replace: bool = False) -> None:
    """Make ``task`` available by name; ``loader(task, options)`` returns ``(task, TaskData)``."""
    if task.name in _TASKS and not replace:
        raise DataError(f"task name {task.name!r} is already registered (pass replace=True to override)")
    _TASKS[task.name] = (task, loader)


def list_tasks() -> list[str]:
    """Names of the registered tasks, sorted."""
    return sorted(_TASKS)


def name_key(name: str) -> str:
    """``name`` as names are matched: lower case, without ``-`` and ``_`` ("SST-2" and "sst2" match)."""
    return name.lower().replace("-", "").replace("_", "")


def _resolve(name: str) -> str:
    if name in _TASKS:
        return name
    matches = [known for known in _TASKS if name_key(known) == name_key(name)]
    if len(matches) == 1:  # "SST-2" -> "sst2", "sts_b" -> "stsb"
        return matches[0]
    raise DataError(f"unknown task {name!r}; known tasks: {', '.join(list_tasks())}")


def get_task(name: str) -> Task:
    """The registered task called ``name`` (case, ``-`` and ``_`` are ignored if unambiguous)."""
    return _TASKS[_resolve(name)][0]


def get_loader(name: str) -> TaskLoader:
    """The loader registered with task ``name``."""
    return _TASKS[_resolve(name)][1]


def split_data(task: Task, parts: dict[str, Examples], source: str) -> tuple[Task, TaskData]:
    """``task`` and its data from ``parts`` (split -> examples: ``train`` and every evaluation split of
    the task), as a loader returns them."""
    evals = {split: parts[split] for split in task.eval_split_names}
    return task, TaskData(train=parts["train"], eval_splits=evals, source=source)


# --------------------------------------------------------------------------------------------------
# Splitting helpers


def stable_unit_hash(text: str) -> float:
    """A number in [0, 1) from the SHA-256 of ``text``: the same on every machine and run."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def carve_validation(
    examples: Examples,
    fraction: float,
    seed: int,
    *,
    what: str = "the examples",
    option: str = "fraction",
) -> tuple[Examples, Examples]:
    """Split ``examples`` into ``(train, validation)`` with about ``fraction`` of them in validation.

    Deterministic given ``seed``; both sides keep the original order of the examples. When
    ``examples.groups`` is set, whole groups move: the groups are shuffled with ``seed`` and the
    first ones go to validation, stopping at the count closest to ``fraction * len(examples)``
    (at least one group on each side). A split that leaves one side empty is a :class:`DataError`
    naming ``what`` (the file: ``train.csv``) and ``option`` (what set the fraction:
    ``--validation-split``), with the fractions that would work.
    """
    n = len(examples)
    if not 0.0 < fraction < 1.0:
        raise DataError(f"{option} must be in (0, 1), got {fraction!r}")
    rng = np.random.default_rng(seed)
    target = fraction * n
    if examples.groups is None:
        n_val = int(round(target))
        if n_val == 0 or n_val == n:
            raise DataError(_one_side_empty(what, option, fraction, n, n_val))
        order = rng.permutation(n)
        val_idx = np.sort(order[:n_val])
        train_idx = np.sort(order[n_val:])
    else:
        names = sorted(set(examples.groups))  # sorted: independent of example order
        if len(names) < 2:
            raise DataError(
                f"{what}: its {n} examples are in {len(names)} group(s), and a validation split ({option} "
                f"{fraction}) takes whole groups: it needs at least 2 groups, one on each side"
            )
        shuffled = [names[i] for i in rng.permutation(len(names))]
        sizes = Counter(examples.groups)
        cumulative = np.cumsum([sizes[g] for g in shuffled])[:-1]  # k+1 groups in validation
        k = int(np.argmin(np.abs(cumulative - target)))
        val_groups = set(shuffled[: k + 1])
        in_val = np.array([g in val_groups for g in examples.groups])
        val_idx = np.flatnonzero(in_val)
        train_idx = np.flatnonzero(~in_val)
    return examples.subset(train_idx), examples.subset(val_idx)


def _one_side_empty(what: str, option: str, fraction: float, n: int, n_val: int) -> str:
    """Why ``fraction`` of ``n`` examples carves no validation split, and what would."""
    if n < 2:
        return (
            f"{what} has {n} example(s): too few to carve a validation split from ({option} {fraction}); "
            "it needs at least 2, one for training and one for validation"
        )
    works = [f / 100 for f in range(1, 100) if 0 < round(f / 100 * n) < n]  # round() as the split does
    side = "no validation example" if n_val == 0 else "no training example"
    return (
        f"{what}: {option} {fraction} of its {n} examples leaves {side} ({n - n_val} for training, {n_val} "
        f"for validation); use {option} between {works[0]:g} and {works[-1]:g}"
    )


def subsample(examples: Examples, n: int | None, seed: int) -> Examples:
    """A deterministic random subset of ``n`` examples (original order kept).

    ``n=None`` or ``n >= len(examples)`` returns ``examples`` unchanged; ``n < 1`` is a DataError.
    """
    if n is None or n >= len(examples):
        return examples
    if n < 1:
        raise DataError(
            f"a subsample keeps a positive number of examples, got {n!r} (--max-train-samples, --max-eval-samples)"
        )
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(len(examples), size=n, replace=False))
    return examples.subset(picked)


def default_metrics(kind: str, label_names: Sequence[str] | None) -> tuple[str, ...]:
    """The metrics of a task of ``kind`` that names none (a model's head, the ``"file"`` task): Pearson
    and Spearman for regression, token accuracy for tags, accuracy (and F1 of label index 1 for two
    classes) otherwise."""
    if kind == REGRESSION:
        return ("pearson", "spearman")
    if kind == TOKEN_CLASSIFICATION:
        return ("token_accuracy",)
    if kind == CLASSIFICATION and label_names is not None and len(label_names) == 2:
        return ("accuracy", "f1")
    return ("accuracy",)


def task_of(model: Any) -> Task:
    """The task a ``transformers`` model's head implies, for loops that bring no attendout task.

    Multiple choice for a ``...ForMultipleChoice`` model (accuracy); regression for one output (or
    ``problem_type`` "regression"; metrics Pearson, Spearman); token classification for a
    ``...ForTokenClassification`` model (token accuracy); else classification over its ``id2label``
    names (metrics accuracy, F1 for two classes).
    """
    config = model.config
    head = type(model).__name__
    count = getattr(config, "num_labels", 2)
    names = None
    if head.endswith("ForMultipleChoice"):
        kind = MULTIPLE_CHOICE
    elif getattr(config, "problem_type", None) == "regression" or count == 1:
        kind = REGRESSION
    else:
        names = tuple(str((config.id2label or {}).get(i, i)) for i in range(count))
        if len(set(names)) != count:
            names = tuple(str(i) for i in range(count))
        kind = TOKEN_CLASSIFICATION if head.endswith("ForTokenClassification") else CLASSIFICATION
    return Task(
        name="model-head",
        kind=kind,
        text_fields={MULTIPLE_CHOICE: ("question",), TOKEN_CLASSIFICATION: ("tokens",)}.get(kind, ("text",)),
        label_names=names,
        metrics=default_metrics(kind, names),
        eval_split_names=("validation",),
        description=f"the {kind.replace('_', '-')} head of the model",
        choices=2 if kind == MULTIPLE_CHOICE else None,  # the batches say how many; nothing depends on it
    )


def _tag_names(task: Task, sequences: Any, what: str) -> list[list[str]]:
    """Per-example tag lists with indices replaced by ``task.label_names`` (names kept as they are)."""
    names = task.label_names
    out: list[list[str]] = []
    for i, seq in enumerate(sequences):
        row: list[str] = []
        for tag in seq:
            if isinstance(tag, str):
                row.append(tag)
                continue
            index = int(tag)
            if names is None or not 0 <= index < len(names):
                count = 0 if names is None else len(names)
                raise DataError(
                    f"task {task.name!r}: {what} of example {i} has tag index {index}, outside 0..{count - 1}"
                )
            row.append(names[index])
        out.append(row)
    return out


def compute_metrics(task: Task, predictions: Any, labels: Any) -> dict[str, float]:
    """All of ``task.metrics`` (in order: the first is the main one) as ``{name: value}``.

    predictions: classification -> class indices [N], or scores/logits [N, num_labels] (argmax is
    taken); regression -> floats [N] or [N, 1]; multiple choice -> choice indices [N], or scores
    [N, choices] (argmax); token classification -> one list of tags per example (tag indices into
    ``task.label_names``, or tag names), labels the same: indices are turned into names before the
    metrics see them. Other kinds are passed to their metrics unchanged.
    """
    if task.kind in (CLASSIFICATION, MULTIPLE_CHOICE):
        predictions = np.asarray(predictions)
        if predictions.ndim == 2:
            predictions = predictions.argmax(axis=-1)
    elif task.kind == TOKEN_CLASSIFICATION:
        predictions = _tag_names(task, predictions, "predictions")
        labels = _tag_names(task, labels, "labels")
    elif task.kind == REGRESSION:
        predictions = np.asarray(predictions, dtype=np.float64)
        if predictions.ndim == 2 and predictions.shape[1] == 1:
            predictions = predictions[:, 0]
    results: dict[str, float] = {}
    for name in task.metrics:
        check_metric(f"task {task.name!r}", name)
        results[name] = float(METRICS[name](predictions, labels))
    return results
