"""Multiple choice tasks: ``arc-easy`` and ``arc-challenge`` (local CSV files or the hub) and ``swag``
(hub only). Metric: accuracy of the chosen option.

An example is a question (or context) in ``text_a``, its options in ``choices`` and the index of the
right option in ``labels`` (:class:`~attendout.tasks.ChoiceExamples`). Every example of a split has
``Task.choices`` options: a question with fewer is padded with empty options ``""`` at the end, and
an empty option is never the answer (a model should give empty options no chance; they carry no text).

**ARC from CSV files** (``data_dir``: the folder holding ``arc_easy_train.csv`` etc., or a folder with
an ``arc/`` sub-folder; with no ``data_dir``, ``$ATTENDOUT_DATA/arc``): ``arc_{easy,challenge}_train.csv``
(train) and ``arc_{easy,challenge}_dev.csv`` (``dev``); no header; six fields: question, options
A-D, answer (a letter ``A``-``E``, or a digit ``1``-``5`` for A-E, as the hub writes some). An empty
option field is a missing option. A row is refused (a :class:`DataError` naming file, line and field,
and how many such rows the file has) when its question is empty, when it has no option, or when its
answer is not one of its non-empty options; ``drop_bad_rows=True`` (CLI ``--drop-bad-rows``) leaves
such rows out with a warning naming how many and which lines. A row with 3 non-empty options is
valid (its empty option stays ``""``). The copies in ``../shared/data/arc``, measured:

    file                     rows   no option*  answer E  refused  3 options  kept
    arc_easy_train.csv       2,251  102         2         104      5          2,147
    arc_easy_dev.csv           570   21         0          21      1            549
    arc_challenge_train.csv  1,119   23         0          23      1          1,096
    arc_challenge_dev.csv      299    4         1           5      3            294

    * all four options empty and the answer a digit 1-4: the options were lost in conversion.

So these files load only with ``drop_bad_rows=True``. A question paired with one option is short in
word pieces of the packaged MiniLM's tokenizer (``[CLS]``/``[SEP]`` included; train, kept rows):
arc-easy median 26, 99th percentile 80, longest 122; arc-challenge median 30, 99th percentile 95,
longest 139.

**ARC from the hub** (``hub=True``): ``datasets.load_dataset("allenai/ai2_arc", "ARC-Easy" or
"ARC-Challenge")``, splits train / validation (``dev``) / test (``test``). ``answerKey`` is a letter
or a digit, matched to the option labels. Hub questions have 3, 4 or 5 options: every question is
padded with ``""`` to the largest count in the loaded splits (5 in the released data), so the task
returned from the hub has ``choices`` 5 (4 from the CSV files).

**swag** (hub only: ``allenai/swag``, config ``regular``): the context is ``sent1``; option i is
``sent2 + " " + ending{i}``, 4 options; splits train and validation (``dev``; the hub's test split has
no labels and is not loaded).
"""

from __future__ import annotations

import csv
from dataclasses import replace
from pathlib import Path
from typing import Any

from .base import MULTIPLE_CHOICE, DataError
from .core import ChoiceExamples, LoadOptions, Task, TaskData, register_task, split_data
from .hub import HUB_SPLITS, hub_columns, hub_only, hub_splits, load_hub
from .readers import check_file, data_root, find_folder, log_dropped, reading

ARC_HUB = "allenai/ai2_arc"
ARC_OPTIONS = 4  # option fields in the CSV files
ARC_FIELDS = ("question", "A", "B", "C", "D", "answer")
SWAG_HUB = "allenai/swag"
SWAG_CONFIG = "regular"
SWAG_ENDINGS = 4
LETTERS = "ABCDE"


ARC_EASY, ARC_CHALLENGE = (
    Task(
        name=f"arc-{level.lower()}",
        kind=MULTIPLE_CHOICE,
        text_fields=("question",),
        metrics=("accuracy",),
        description=f"ARC-{level}: grade-school science questions, 4 options (accuracy)",
        choices=ARC_OPTIONS,
    )
    for level in ("Easy", "Challenge")
)
SWAG = replace(
    ARC_EASY,
    name="swag",
    text_fields=("context",),
    description="SWAG: the most plausible continuation of a video caption, 4 options (accuracy; hub only)",
    choices=SWAG_ENDINGS,
)


#: The hub config of each ARC task (its files are named after the task: arc_easy_train.csv, ...)
_ARC_HUB_CONFIGS = {ARC_EASY.name: "ARC-Easy", ARC_CHALLENGE.name: "ARC-Challenge"}


def answer_index(answer: str) -> int | None:
    """``"A"``..``"E"`` -> 0..4, ``"1"``..``"5"`` -> 0..4 (the hub writes some answers as digits), else None."""
    text = answer.strip()
    if len(text) == 1 and text in LETTERS:
        return LETTERS.index(text)
    if len(text) == 1 and text in "12345":
        return int(text) - 1
    return None


def _arc_row_problem(row: list[str]) -> tuple[str, str] | None:
    """Why a six-field row cannot be used, as (the field, named with its 1-based number; reason), or None."""
    question, options, answer = row[0], row[1 : 1 + ARC_OPTIONS], row[1 + ARC_OPTIONS]
    present = [LETTERS[i] for i, option in enumerate(options) if option.strip()]
    if not question.strip():
        return "field 1 (question)", "the question is empty"
    if not present:
        return "fields 2-5 (options A-D)", f"all {ARC_OPTIONS} options are empty (answer {answer!r})"
    index = answer_index(answer)
    if index is None:
        return "field 6 (answer)", f"answer {answer!r} is not a letter A-E or a digit 1-5"
    if index >= ARC_OPTIONS or not options[index].strip():
        present_list = ", ".join(present)
        return (
            "field 6 (answer)",
            f"answer {answer!r} is not among the row's non-empty options ({present_list})",
        )
    return None


def read_arc_csv(path: str | Path, *, split: str, task: str, drop_bad_rows: bool = False) -> ChoiceExamples:
    """One ARC CSV file (see the module docstring) as examples with 4 options each."""
    path = Path(path)
    check_file(path, f"{split} split of task {task!r}")
    questions: list[str] = []
    choices: list[list[str]] = []
    labels: list[int] = []
    bad: list[tuple[int, str, str]] = []  # (line, field, why)
    try:
        with reading(path) as handle:
            reader = csv.reader(handle)
            for row in reader:
                if not row:
                    continue
                if len(row) != len(ARC_FIELDS):
                    raise DataError(
                        f"{path} line {reader.line_num}: expected {len(ARC_FIELDS)} comma-separated fields "
                        f"({', '.join(ARC_FIELDS)}), found {len(row)}"
                    )
                problem = _arc_row_problem(row)
                if problem is not None:
                    bad.append((reader.line_num, *problem))
                    continue
                questions.append(row[0].strip())
                choices.append([option.strip() for option in row[1 : 1 + ARC_OPTIONS]])
                index = answer_index(row[-1])
                labels.append(0 if index is None else index)  # never None here: checked above
    except csv.Error as error:
        raise DataError(f"{path} line {reader.line_num}: malformed CSV ({error})") from None
    if bad and not drop_bad_rows:
        line, field, why = bad[0]
        raise DataError(
            f"{path} line {line}, {field}: {why}; {len(bad)} such rows in this "
            "file: fix them, or leave them out with drop_bad_rows=True (--drop-bad-rows)"
        )
    if bad:
        why = "no options or an answer that is not among them"
        log_dropped(path, [line for line, _, _ in bad], len(bad) + len(questions), why)
    if not questions:
        raise DataError(f"split {split!r} is empty: {path} has no usable rows")
    return ChoiceExamples(text_a=questions, text_b=None, labels=labels, choices=choices)


def _load_arc_hub(task: Task) -> tuple[Task, TaskData]:
    names = (ARC_HUB, _ARC_HUB_CONFIGS[task.name])
    dataset_dict = load_hub(*names)
    splits = {split: hub for split, hub in HUB_SPLITS.items() if split != "test" or "test" in dataset_dict}
    parts: dict[str, ChoiceExamples] = {}
    for split, dataset in hub_splits(dataset_dict, names, splits).items():
        where = f"hub {' '.join(names)} {splits[split]}"
        questions: list[str] = []
        options_of: list[list[str]] = []
        labels: list[int] = []
        for row_no, record in enumerate(dataset, start=1):
            texts = [str(t) for t in record["choices"]["text"]]
            keys = [str(k).strip() for k in record["choices"]["label"]]
            answer = str(record["answerKey"]).strip()
            if answer not in keys:
                raise DataError(f"{where} row {row_no}, answerKey: {answer!r} is not among the labels {keys}")
            index = keys.index(answer)
            if not texts[index].strip():
                raise DataError(f"{where} row {row_no}, answerKey: the answer {answer!r} is an empty option")
            questions.append(str(record["question"]))
            options_of.append(texts)
            labels.append(index)
        parts[split] = ChoiceExamples(text_a=questions, text_b=None, labels=labels, choices=options_of)
    count = max(ARC_OPTIONS, *(len(o) for examples in parts.values() for o in examples.choices or []))
    for split, examples in parts.items():  # every question padded with empty options to the most
        parts[split] = replace(
            examples, choices=[o + [""] * (count - len(o)) for o in examples.choices or []]
        )
    task = replace(task, choices=count, eval_split_names=tuple(split for split in parts if split != "train"))
    return split_data(task, parts, f"hub {' '.join(names)} (options padded to {count})")


def load_arc(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Loader of ``arc-easy`` and ``arc-challenge`` (see the module docstring)."""
    if options.hub:
        return _load_arc_hub(task)
    prefix = task.name.replace("-", "_")  # arc_easy, arc_challenge
    needs = (
        f"task {task.name!r} needs data_dir=<folder with {prefix}_train.csv> (or the "
        "ATTENDOUT_DATA environment variable), or hub=True to download it"
    )
    root = data_root(options.data_dir, "arc", needs)
    first = f"{prefix}_train.csv"
    folder = find_folder(root, task.name, first, "arc")
    if folder is None:
        raise DataError(
            f"no ARC data for task {task.name!r} in {root}: expected {first} there or in {root / 'arc'}"
        )
    parts = {
        split: read_arc_csv(
            folder / f"{prefix}_{split}.csv",
            split=split,
            task=task.name,
            drop_bad_rows=options.drop_bad_rows,
        )
        for split in ("train", *task.eval_split_names)
    }
    return split_data(task, parts, f"arc folder {folder}")


def _swag_examples(dataset: Any, where: str) -> ChoiceExamples:
    hub_columns(dataset, where, ["sent1", "sent2", "label", *(f"ending{i}" for i in range(SWAG_ENDINGS))])
    contexts: list[str] = []
    choices: list[list[str]] = []
    labels: list[int] = []
    for row_no, record in enumerate(dataset, start=1):
        label = int(record["label"])
        if not 0 <= label < SWAG_ENDINGS:
            raise DataError(
                f"{where} row {row_no}, label: {label} is not an option index 0..{SWAG_ENDINGS - 1}"
            )
        contexts.append(str(record["sent1"]))
        start = str(record["sent2"])
        choices.append([f"{start} {record[f'ending{i}']}".strip() for i in range(SWAG_ENDINGS)])
        labels.append(label)
    return ChoiceExamples(text_a=contexts, text_b=None, labels=labels, choices=choices)


def load_swag(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Loader of ``swag``: the hub only (see the module docstring)."""
    hub_only(task, options, SWAG_HUB, "; offline, arc-easy is the multiple-choice stand-in")
    names = (SWAG_HUB, SWAG_CONFIG)
    splits = {"train": "train", "dev": "validation"}  # the hub's test split has no labels
    parts = {
        split: _swag_examples(dataset, f"hub {SWAG_HUB} {SWAG_CONFIG} {splits[split]}")
        for split, dataset in hub_splits(load_hub(*names), names, splits).items()
    }
    return split_data(task, parts, f"hub {SWAG_HUB} {SWAG_CONFIG}")


register_task(ARC_EASY, load_arc, replace=True)
register_task(ARC_CHALLENGE, load_arc, replace=True)
register_task(SWAG, load_swag, replace=True)
