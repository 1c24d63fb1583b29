"""Property-based fuzzing of every reader (issue 30): nothing a user feeds it ends in a traceback or
silently changes what the model learns.

Each test generates files (clean ones in the shape of the real data, then mutated: truncated, re-encoded,
ragged, wrong JSON types, colliding columns, huge fields...) and checks one property: the reader either
returns exactly what a reference reading of the same bytes gives (Python's ``csv`` / ``json``, or a
small independent parser for CoNLL columns and treebank trees), or stops with a one-line ``DataError``
that names the file and a place the reference also finds wrong. Any other exception fails the test,
and so does a label, class, tag or text that the file did not state.

The default run takes a few hundred examples per reader; ``-m slow`` runs ten times as many. Both are
derandomized and keep no example database, so CI sees the same inputs on every run.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import math
import re
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from attendout.tasks import CLASSIFICATION, REGRESSION, DataError, get_task, load_task_data
from attendout.tasks.glue import GLUE_SPECS
from attendout.tasks.readers import check_table, infer_label_names, read_file, to_examples

FAST_EXAMPLES = 300
SLOW_EXAMPLES = 3000
PROFILE = settings(
    deadline=None,
    derandomize=True,
    database=None,  # no example database: every run, local or CI, tries the same inputs
)


def fuzz(strategy: st.SearchStrategy[Any]) -> Callable[[Callable[..., None]], tuple[Any, Any]]:
    """The property ``check(case, scratch)`` as two tests: the default tier and the ``slow`` one."""

    def make(check: Callable[..., None]) -> tuple[Any, Any]:
        fast = settings(PROFILE, max_examples=FAST_EXAMPLES)(given(case=strategy)(check))
        slow = settings(PROFILE, max_examples=SLOW_EXAMPLES)(given(case=strategy)(check))
        return fast, pytest.mark.slow(slow)

    return make


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for every example of the module (hypothesis reruns a test body in the same fixture)."""
    return tmp_path_factory.mktemp("fuzz")


# --------------------------------------------------------------------------------------------------
# What an error must look like


@dataclass
class Expected:
    """A reference reading: the rows it keeps, or where it finds the file wrong."""

    problems: set[int | None] = field(default_factory=set)  # lines; None: the file as a whole
    lines: list[int] = field(default_factory=list)
    values: list[dict[str, Any]] = field(default_factory=list)  # one per kept row: field -> value

    @property
    def ok(self) -> bool:
        return not self.problems


_LINES = re.compile(r"\blines? (\d+)(?:-(\d+))?")  # "line 7", "lines 3-5" (a record over several lines)


def assert_clear(error: DataError, path: Path | str, expected: Expected | None = None) -> None:
    """One line naming the file, and a line the reference also finds wrong (any place, or none, when the
    reference finds the file as a whole wrong: not UTF-8, no header, no usable row...)."""
    message = str(error)
    assert "\n" not in message and "\r" not in message, repr(message)
    assert str(path) in message or Path(path).name in message, message
    if expected is None:
        return
    assert expected.problems, f"the reference reads this file without a problem, but: {message}"
    if None in expected.problems:
        return
    named = {n for a, b in _LINES.findall(message) for n in range(int(a), int(b or a) + 1)}
    assert named & expected.problems, f"{message} (the reference finds lines {sorted(expected.problems)})"


def label_text(value: Any) -> str:
    """A raw label as the readers name its class (a JSON integer as written)."""
    return value if isinstance(value, str) else str(value)


def is_int_text(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


# --------------------------------------------------------------------------------------------------
# Generated cells, rows and files

SPECIAL = [",", "\t", '"', "'", "\n", "\r", " ", "\ufeff", "\u2028", "\x00", "é", "\\", "{", "[", "0", "-"]
noise = st.text(st.one_of(st.sampled_from(SPECIAL), st.characters(exclude_categories=("Cs",))), max_size=6)
words = st.sampled_from(
    ["good film", "bad", "a plot", "fun", "dull", "ok", "Great, really", 'said "hi', "it's"]
)
cell = st.one_of(words, words, noise)
class_label = st.sampled_from(["0", "1", "2", "pos", "neg", "Pos", "pos ", "", " ", "01", "1.5", "nan", "-1"])
good_class = st.sampled_from(["0", "1", "2", "pos", "neg"])
good_score = st.sampled_from(["0", "1", "2.5", "4.75", "-0.5", "5"])
score_label = st.sampled_from(["0", "1", "2.5", "4.75", "-0.5", "5", "", "nan", "inf", "abc", "1e3"])
odd_json = st.sampled_from(
    [None, True, False, 1.0, 2.5, math.nan, math.inf, [1], ["pos"], {"a": 1}, {}, 10**30, 7, "", " "]
)


@dataclass(frozen=True)
class TableCase:
    data: bytes
    fmt: str
    kind: str
    text_columns: tuple[str, ...]
    label_column: str
    note: str  # how the file was made, for a failing example's report
    compression: str = ""  # "", "gz" or "bz2": the bytes are compressed (and maybe corrupted) data

    def __repr__(self) -> str:  # a failing example's report: its start, not a 150 KB field
        shown = self.data if len(self.data) <= 400 else self.data[:400] + b"..."
        return f"TableCase({self.note}, {len(self.data)} bytes: {shown!r})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # what hypothesis prints
        printer.text(repr(self))


def serialise(fmt: str, header: list[str], rows: list[list[Any]], newline: str, quoted: bool) -> str:
    if fmt == "jsonl":
        return "".join(json.dumps(dict(zip(header, row, strict=True))) + newline for row in rows)
    if fmt == "csv" and quoted:
        out = io.StringIO()
        csv.writer(out, lineterminator=newline).writerows([header, *rows])
        return out.getvalue()
    delimiter = "," if fmt == "csv" else "\t"
    return "".join(delimiter.join(str(c) for c in row) + newline for row in [header, *rows])


MUTATIONS = (
    "truncate", "bom", "double-bom", "crlf", "lone-cr", "bad-byte", "latin-1", "duplicate-line",
    "drop-line", "extra-delimiter", "huge-field", "nul", "blank-lines", "open-quote", "deep-json",
    "huge-int", "duplicate-key", "blank-first-line",
)  # fmt: skip


HARMLESS = ("bom", "crlf", "duplicate-line")  # the file still reads the same (or with one row twice)


def mutate(data: bytes, how: str, at: int, fmt: str) -> bytes:
    """One mutation of a file's bytes at a position drawn by the test."""
    k = at % (len(data) + 1)
    lines = data.split(b"\n")
    i = at % len(lines)
    if how == "truncate":
        return data[:k]
    if how == "bom":
        return b"\xef\xbb\xbf" + data
    if how == "double-bom":
        return b"\xef\xbb\xbf\xef\xbb\xbf" + data
    if how == "crlf":
        return data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
    if how == "lone-cr":
        return data[:k] + b"\r" + data[k:]
    if how == "bad-byte":
        return data[:k] + b"\xff" + data[k:]
    if how == "latin-1":
        return data.decode("utf-8", "replace").encode("latin-1", "replace")
    if how == "duplicate-line":
        return b"\n".join([*lines[: i + 1], lines[i], *lines[i + 1 :]])
    if how == "drop-line":
        return b"\n".join(lines[:i] + lines[i + 1 :])
    if how == "extra-delimiter":
        return data[:k] + {"csv": b",", "tsv": b"\t", "jsonl": b","}[fmt] + data[k:]
    if how == "huge-field":
        return data[:k] + b"x" * 150_000 + data[k:]
    if how == "nul":
        return data[:k] + b"\x00" + data[k:]
    if how == "blank-lines":
        return b"\n".join([*lines[:i], b"", b"  ", *lines[i:]])
    if how == "open-quote":
        return data[:k] + b'"' + data[k:]
    if how == "deep-json":
        return b"\n".join(
            [*lines[:i], b'{"text": ' + b"[" * 50_000 + b"]" * 50_000 + b', "label": 1}', *lines[i:]]
        )
    if how == "huge-int":
        return b"\n".join([*lines[:i], b'{"text": "a", "label": 1' + b"0" * 5000 + b"}", *lines[i:]])
    if how == "duplicate-key":
        return data.replace(b"{", b'{"label": "pos", ', 1)
    if how == "blank-first-line":
        return b"\n" + data
    raise AssertionError(how)


@st.composite
def table_cases(
    draw: st.DrawFn,
    formats: tuple[str, ...] = ("csv", "tsv", "jsonl"),
    kind: str | None = None,
    pair: bool | None = None,
    clean: bool | None = None,
) -> TableCase:
    """A CSV/TSV/JSONL file of one or two text columns and a label, perhaps mutated."""
    fmt = draw(st.sampled_from(formats))
    kind = kind or draw(st.sampled_from([CLASSIFICATION, REGRESSION]))
    pair = draw(st.booleans()) if pair is None else pair
    text_columns = ("text", "text2") if pair else ("text",)
    if clean is None:  # half the files hold only good cells: the read side gets checked too
        clean = draw(st.booleans())
    others = ["id", "group"] if clean else ["id", "Text", " text", "label", "text", "group"]
    extra = draw(st.lists(st.sampled_from(others), max_size=2, unique=clean))
    header = draw(st.permutations([*text_columns, "label", *extra]))
    label = (
        (good_class if clean else class_label)
        if kind == CLASSIFICATION
        else (good_score if clean else score_label)
    )
    n = draw(st.integers(2 if clean else 0, 6))
    rows: list[list[Any]] = []
    for _ in range(n):
        row: list[Any] = [draw(label if name == "label" else words if clean else cell) for name in header]
        if fmt == "jsonl" and not clean and draw(st.integers(0, 3)) == 0:  # a value of another JSON type
            row[draw(st.integers(0, len(row) - 1))] = draw(odd_json)
        elif fmt == "jsonl" and kind == REGRESSION and draw(st.booleans()):
            row[header.index("label")] = draw(st.sampled_from([0, 1, 2.5, 4.0, -0.5]))
        elif fmt == "jsonl" and draw(st.booleans()):
            row[header.index("label")] = draw(st.sampled_from([0, 1, 2]))
        rows.append(row)
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    text = serialise(fmt, header, rows, newline, quoted=draw(st.booleans()))
    data = text.encode("utf-8")
    hows = draw(st.lists(st.sampled_from(HARMLESS if clean else MUTATIONS), max_size=2))
    for how in hows:
        data = mutate(data, how, draw(st.integers(0, 10**6)), fmt)
    compression = draw(st.sampled_from(["", "", "", "", "gz", "bz2"]))
    if compression:
        data = gzip.compress(data, mtime=0) if compression == "gz" else bz2.compress(data)
        if not clean and draw(st.booleans()):  # a corrupt or cut archive
            at = draw(st.integers(0, len(data)))
            data = data[:at] + (bytes(b ^ 0x5A for b in data[at : at + 8]) if draw(st.booleans()) else b"")
    note = f"{fmt}{'.' + compression if compression else ''} {kind} header={header} rows={n} mutations={hows}"
    return TableCase(data, fmt, kind, text_columns, "label", note, compression)


# --------------------------------------------------------------------------------------------------
# Reference readings


def _decode(data: bytes) -> str | None:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


def _label_problem(value: Any, kind: str) -> bool:
    """True when a label value cannot be one of ``kind`` (blank, or the wrong JSON type or text)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return True
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return True
    if kind == CLASSIFICATION:
        return isinstance(value, float)
    try:
        return not math.isfinite(float(value))
    except (ValueError, OverflowError):
        return True


def _check_labels(expected: Expected, kind: str, label_field: str) -> None:
    """Classification labels that are one label written two ways (case, spaces, 01 and 1) are refused."""
    if kind != CLASSIFICATION:
        return
    first: dict[str, str] = {}
    for line, values in zip(expected.lines, expected.values, strict=True):
        text = label_text(values[label_field])
        key = text.strip().casefold()
        if is_int_text(text):
            key = str(int(text))
        if first.setdefault(key, text) != text:
            expected.problems.add(line)


def reference_table(case: TableCase, text_columns: tuple[str, ...], label_column: str) -> Expected:
    """What Python's csv / json read from the bytes, with the documented row rules applied."""
    expected = Expected()
    try:
        data = {"": bytes, "gz": gzip.decompress, "bz2": bz2.decompress}[case.compression](case.data)
    except Exception:  # noqa: BLE001 - an archive the reference cannot open: a problem of the file
        return Expected({None})
    text = _decode(data)
    if text is None:
        return Expected({None})
    wanted = [*text_columns, label_column]
    if case.fmt == "jsonl":
        records: list[tuple[int, Any]] = []
        for line, raw in enumerate(io.StringIO(text, newline=""), start=1):
            if not raw.strip():
                continue
            try:
                records.append((line, json.loads(raw, object_pairs_hook=_unique_pairs)))
            except Exception:  # noqa: BLE001 - any failure of the reference is a problem on this line
                expected.problems.add(line)
        for line, record in records:
            if not isinstance(record, dict) or any(name not in record for name in wanted):
                expected.problems.add(line)
                continue
            if any(not isinstance(record[c], str) or not record[c].strip() for c in text_columns):
                expected.problems.add(line)
            elif _label_problem(record[label_column], case.kind):
                expected.problems.add(line)
            else:
                expected.lines.append(line)
                expected.values.append({name: record[name] for name in wanted})
    else:
        delimiter = "," if case.fmt == "csv" else "\t"
        quoting = csv.QUOTE_MINIMAL if case.fmt == "csv" else csv.QUOTE_NONE
        reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting)
        try:
            rows = [(reader.line_num, row) for row in reader]
        except csv.Error:
            return Expected({None})
        if not rows:
            return Expected({None})
        header = rows[0][1]
        stripped = [name.strip() for name in header]
        if len(set(stripped)) != len(stripped) or any(name not in header for name in wanted):
            return Expected({1, None})
        for line, row in rows[1:]:
            if not row:
                continue
            if len(row) != len(header):
                expected.problems.add(line)
                continue
            values = {name: row[header.index(name)] for name in wanted}
            if any(not values[c].strip() for c in text_columns) or _label_problem(
                values[label_column], case.kind
            ):
                expected.problems.add(line)
                continue
            expected.lines.append(line)
            expected.values.append(values)
    _check_labels(expected, case.kind, label_column)
    if not expected.lines:
        expected.problems.add(None)  # no usable row: the split is empty
    return expected


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError("a key twice")
    return dict(pairs)


def expected_label_names(texts: list[str]) -> tuple[str, ...]:
    seen = set(texts)
    if all(is_int_text(t) for t in seen):
        return tuple(sorted(seen, key=lambda t: (int(t), t)))
    return tuple(sorted(seen))


# --------------------------------------------------------------------------------------------------
# The generic table readers: read_file, check_table, to_examples


def write_case(scratch: Path, case: TableCase, stem: str = "train") -> Path:
    path = scratch / f"{stem}.{case.fmt}{'.' + case.compression if case.compression else ''}"
    path.write_bytes(case.data)
    return path


def read_table(path: Path, case: TableCase) -> tuple[Any, tuple[str, ...] | None]:
    raw = read_file(path, text_columns=case.text_columns, label_column=case.label_column)
    raw = check_table(raw, case.kind)
    names = infer_label_names(raw) if case.kind == CLASSIFICATION else None
    return to_examples(raw, kind=case.kind, label_names=names, split="train"), names


def check_table_reader(case: TableCase, scratch: Path) -> None:
    path = write_case(scratch, case)
    expected = reference_table(case, case.text_columns, case.label_column)
    try:
        examples, names = read_table(path, case)
    except DataError as error:
        event("refused")
        assert_clear(error, path, expected)
        return
    event("read")
    assert expected.ok, f"read a file the reference refuses at lines {expected.problems}: {case.note}"
    assert examples.text_a == [v[case.text_columns[0]] for v in expected.values]
    if len(case.text_columns) == 2:
        assert examples.text_b == [v[case.text_columns[1]] for v in expected.values]
    labels = [v[case.label_column] for v in expected.values]
    if case.kind == CLASSIFICATION:
        assert names == expected_label_names([label_text(v) for v in labels])
        assert [names[i] for i in examples.labels] == [label_text(v) for v in labels]
    else:
        assert examples.labels == [float(v) for v in labels]


test_table_reader, test_table_reader_slow = fuzz(table_cases())(check_table_reader)


# --------------------------------------------------------------------------------------------------
# The "file" task: load_task_data with a train and a dev file, and column options that may collide


@dataclass(frozen=True)
class FileTaskCase:
    train: TableCase
    dev: TableCase
    text_columns: tuple[str, ...]
    label_column: str

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(
            f"FileTaskCase({self.text_columns}, {self.label_column!r}, train={self.train!r}, dev={self.dev!r})"
        )


@st.composite
def file_task_cases(draw: st.DrawFn) -> FileTaskCase:
    fmt = draw(st.sampled_from(["csv", "tsv", "jsonl"]))
    kind = draw(st.sampled_from([CLASSIFICATION, REGRESSION]))
    pair = draw(st.booleans())
    clean = draw(st.booleans())  # both files good, or each as it comes
    train = draw(table_cases(formats=(fmt,), kind=kind, pair=pair, clean=clean or None))
    dev = draw(table_cases(formats=(fmt,), kind=kind, pair=pair, clean=clean or None))
    first = train.text_columns[0]
    colliding = [(first, first), (first, "label"), ("label",), ("label", first)]
    text_columns = draw(st.sampled_from([train.text_columns] * 8 + colliding))
    label_column = draw(st.sampled_from(["label"] * 10 + [first, "text2"]))
    return FileTaskCase(train, dev, text_columns, label_column)


def _numbers_with_fractions(expected: Expected, label_column: str) -> set[int]:
    """The lines of fractions in a classification file whose labels are all finite numbers (an STS-style
    score column read as classes), or no line when some label is not a number."""
    fractions: set[int] = set()
    for line, values in zip(expected.lines, expected.values, strict=True):
        text = label_text(values[label_column]).strip()
        try:
            number = float(text)
        except ValueError:
            return set()
        if not math.isfinite(number):
            return set()
        if not number.is_integer():
            fractions.add(line)
    return fractions


def check_file_task(case: FileTaskCase, scratch: Path) -> None:
    train_path, dev_path = write_case(scratch, case.train, "train"), write_case(scratch, case.dev, "dev")
    kind, columns, label = case.train.kind, case.text_columns, case.label_column
    try:
        task, data = load_task_data(
            "file",
            train_file=str(train_path),
            eval_files={"dev": str(dev_path)},
            text_columns=list(columns),
            label_column=label,
            kind=kind,
        )
    except DataError as error:
        event("refused")
        message = str(error)
        assert "\n" not in message, repr(message)
        if label in columns or len(set(columns)) < len(columns):  # named before any file is read
            assert "text_columns" in message and repr(label if label in columns else columns[0]) in message
            return
        train, dev = _file_task_reference(case, kind, columns, label)
        if str(train_path) in message:
            assert_clear(error, train_path, train)
        else:
            assert_clear(error, dev_path, dev)
        return
    event("loaded")
    assert len(set(columns)) == len(columns) and label not in columns, "the columns collide, yet it loaded"
    train, dev = _file_task_reference(case, kind, columns, label)
    assert train.ok and dev.ok, (
        f"loaded, yet the reference finds train lines {train.problems}, dev {dev.problems}"
    )
    assert task.text_fields == columns
    for examples, expected in ((data.train, train), (data.eval_splits["dev"], dev)):
        assert examples.text_a == [v[columns[0]] for v in expected.values]
        assert examples.text_b == (None if len(columns) == 1 else [v[columns[1]] for v in expected.values])
    if kind == REGRESSION:
        assert data.train.labels == [float(v[label]) for v in train.values]
        assert data.eval_splits["dev"].labels == [float(v[label]) for v in dev.values]
        return
    names = task.label_names
    assert names == expected_label_names([label_text(v[label]) for v in train.values])
    assert [names[i] for i in data.train.labels] == [label_text(v[label]) for v in train.values]
    for i, values in zip(data.eval_splits["dev"].labels, dev.values, strict=True):
        text = label_text(values[label])
        assert names[i] == text or (text not in names and int(text) == i), (names, text, i)


def _file_task_reference(
    case: FileTaskCase, kind: str, columns: tuple[str, ...], label: str
) -> tuple[Expected, Expected]:
    """Each file's reference reading, plus the rules across files: train's labels make the label set
    (2 or more; numbers with fractions are refused), and every dev label is one of them, or an index
    into them when they are not numbers."""
    train = reference_table(case.train, columns, label)
    dev = reference_table(case.dev, columns, label)
    if kind == REGRESSION:
        return train, dev
    for expected in (train, dev):
        expected.problems |= _numbers_with_fractions(expected, label)
    names = expected_label_names([label_text(v[label]) for v in train.values])
    if len(names) < 2:
        train.problems.add(None)
    by_index = not any(is_int_text(n) for n in names)
    for line, values in zip(dev.lines, dev.values, strict=True):
        text = label_text(values[label])
        if text not in names and not (by_index and is_int_text(text) and 0 <= int(text) < len(names)):
            dev.problems.add(line)
    return train, dev


test_file_task, test_file_task_slow = fuzz(file_task_cases())(check_file_task)


# --------------------------------------------------------------------------------------------------
# GLUE folders: each task's files in the distribution's layout (tab-separated, quotes as text)

# task -> (folder, header or None (CoLA), the fields of a row from (text_a, text_b, label))
GLUE_LAYOUTS: dict[str, tuple[str, list[str] | None, Callable[[str, str, str], list[str]]]] = {
    "cola": ("CoLA", None, lambda a, b, y: ["gj04", y, "" if y == "1" else "*", a]),
    "sst2": ("SST-2", ["sentence", "label"], lambda a, b, y: [a, y]),
    "mrpc": (
        "MRPC",
        ["\ufeffQuality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
        lambda a, b, y: [y, "11", "12", a, b],
    ),
    "qnli": ("QNLI", ["index", "question", "sentence", "label"], lambda a, b, y: ["0", a, b, y]),
    "mnli": (
        "MNLI",
        ["index", "genre", "sentence1", "sentence2", "gold_label"],
        lambda a, b, y: ["0", "fiction", a, b, y],
    ),
    "rte": ("RTE", ["index", "sentence1", "sentence2", "label"], lambda a, b, y: ["0", a, b, y]),
    "stsb": (
        "STS-B",
        ["index", "genre", "sentence1", "sentence2", "score"],
        lambda a, b, y: ["0", "news", a, b, y],
    ),
    "qqp": (
        "QQP",
        ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
        lambda a, b, y: ["0", "1", "2", a, b, y],
    ),
    "wnli": ("WNLI", ["index", "sentence1", "sentence2", "label"], lambda a, b, y: ["0", a, b, y]),
}


@dataclass(frozen=True)
class GlueCase:
    task: str
    files: dict[str, bytes]  # file name -> bytes
    note: str

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        shown = {name: data if len(data) < 300 else data[:300] + b"..." for name, data in self.files.items()}
        printer.text(f"GlueCase({self.task}, {self.note}, {shown!r})")


@st.composite
def glue_cases(draw: st.DrawFn) -> GlueCase:
    name = draw(st.sampled_from(sorted(GLUE_LAYOUTS)))
    _, header, layout = GLUE_LAYOUTS[name]
    task = get_task(name)
    good = list(task.label_names or ["0", "2.5", "5", "4.2"]) + (["0", "1"] if task.label_names else [])
    labels = st.sampled_from(good) | (
        st.sampled_from(["3", "-1", "", "7.5", "nan", "Entailment", "1 "]) | noise
    )
    files: dict[str, bytes] = {}
    all_clean = draw(st.booleans())
    for file_name in [
        "train.tsv",
        *(f"{split}.tsv" for split in task.eval_split_names if split != "dev_ood"),
    ]:
        clean = all_clean or draw(st.booleans())
        rows = [
            layout(
                draw(words if clean else cell),
                draw(words if clean else cell),
                draw(st.sampled_from(good) if clean else labels),
            )
            for _ in range(draw(st.integers(1 if clean else 0, 5)))
        ]
        text = "".join("\t".join(row) + "\n" for row in ([header] if header else []) + rows)
        files[file_name] = text.encode("utf-8")
    target = draw(st.sampled_from(sorted(files)))
    hows = draw(st.lists(st.sampled_from(HARMLESS if all_clean else MUTATIONS), max_size=2))
    for how in hows:
        files[target] = mutate(files[target], how, draw(st.integers(0, 10**6)), "tsv")
    return GlueCase(name, files, f"{target} mutations={hows}")


def reference_glue_file(name: str, data: bytes) -> Expected:
    """Python's csv (tab, QUOTE_NONE) on the bytes, read by the task's declared columns: every row has
    the header's field count; a class label is a label name or an index; a score a number in 0..5."""
    spec, task = GLUE_SPECS[name], get_task(name)
    text = _decode(data)
    if text is None:
        return Expected({None})
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    try:
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error:
        return Expected({None})
    header = list(spec.column_names) if spec.column_names else (rows.pop(0)[1] if rows else None)
    wanted = [*spec.text_columns, spec.label_column]
    if (
        not header
        or any(column not in header for column in wanted)
        or len(set(map(str.strip, header))) < len(header)
    ):
        return Expected({1, None})
    expected = Expected()
    for line, row in rows:
        if not row:
            continue
        values = dict(zip(header, row, strict=False))
        label = values.get(spec.label_column, "")
        if len(row) != len(header):
            expected.problems.add(line)
        elif (
            task.label_names is not None
            and label not in task.label_names
            and not (is_int_text(label) and 0 <= int(label) < len(task.label_names))
        ):
            expected.problems.add(line)
        elif task.label_names is None and not _in_range(label, task.label_range):
            expected.problems.add(line)
        else:
            expected.lines.append(line)
            expected.values.append(values)
    if not expected.lines:
        expected.problems.add(None)
    return expected


def _in_range(text: str, bounds: tuple[float, float] | None) -> bool:
    try:
        number = float(text)
    except ValueError:
        return False
    return math.isfinite(number) and (bounds is None or bounds[0] <= number <= bounds[1])


def check_glue_folder(case: GlueCase, scratch: Path) -> None:
    folder = scratch / "glue" / GLUE_LAYOUTS[case.task][0]
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for file_name, data in case.files.items():
        (folder / file_name).write_bytes(data)
    expected = {file_name: reference_glue_file(case.task, data) for file_name, data in case.files.items()}
    try:
        task, data = load_task_data(case.task, data_dir=str(scratch / "glue"))
    except DataError as error:
        event("refused")
        named = [f for f in case.files if str(folder / f) in str(error)]
        assert named, str(error)
        assert_clear(error, folder / named[0], expected[named[0]])
        return
    event("loaded")
    spec = GLUE_SPECS[case.task]
    splits = {"train.tsv": data.train, **{f"{split}.tsv": ex for split, ex in data.eval_splits.items()}}
    for file_name, examples in splits.items():
        reference = expected[file_name]
        assert reference.ok, f"{file_name} loaded, yet the reference finds lines {reference.problems}"
        assert examples.text_a == [v[spec.text_columns[0]] for v in reference.values]
        if task.is_pair:
            assert examples.text_b == [v[spec.text_columns[1]] for v in reference.values]
        for value, label in zip(reference.values, examples.labels, strict=True):
            written = value[spec.label_column]
            if task.label_names is None:
                assert label == float(written)
            else:
                assert task.label_names[label] == written or int(written) == label, (written, label)


test_glue_folder, test_glue_folder_slow = fuzz(glue_cases())(check_glue_folder)


# --------------------------------------------------------------------------------------------------
# CoNLL-style column files: conll2003 folders and token files of the "file" task

CONLL_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
FIELD_SEPARATOR = re.compile(
    r"[ \t\r\n\f\v]+"
)  # the documented one: spaces and tabs, not every Unicode space
token = st.sampled_from(["EU", "rejects", "German", ".", "-", "1996-08-22", "Peter", "l'avion", '"'])
bad_tag = st.sampled_from(["B-XYZ", "X", "i-PER", "I-", "B-PER-", "-DOCSTART-"]) | noise


@dataclass(frozen=True)
class ColumnCase:
    files: dict[str, bytes]
    token_column: int | None
    tag_column: int | None
    note: str

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        shown = {name: data if len(data) < 300 else data[:300] + b"..." for name, data in self.files.items()}
        printer.text(f"ColumnCase(token {self.token_column}, tag {self.tag_column}, {self.note}, {shown!r})")


def column_file(draw: st.DrawFn, columns: int, clean: bool, tags: st.SearchStrategy[str]) -> bytes:
    separator = draw(st.sampled_from([" ", "\t"]))
    lines: list[str] = []
    if draw(st.booleans()):
        lines += [separator.join(["-DOCSTART-", "-X-", "-X-", "O"][:columns]), ""]
    for _ in range(draw(st.integers(1 if clean else 0, 3))):
        for _ in range(draw(st.integers(1, 4))):
            middle = [draw(st.sampled_from(["NNP", "VBZ", "I-NP", "O"])) for _ in range(columns - 2)]
            lines.append(separator.join([draw(token if clean else token | noise), *middle, draw(tags)]))
        lines += [""] * draw(st.integers(1, 2))
    return "\n".join(lines).encode("utf-8")


@st.composite
def conll_folders(draw: st.DrawFn) -> ColumnCase:
    all_clean = draw(st.booleans())
    files = {}
    for name in ("eng.train", "eng.testa", "eng.testb"):
        clean = all_clean or draw(st.booleans())
        tags = st.sampled_from(CONLL_TAGS) if clean else st.sampled_from(CONLL_TAGS) | bad_tag
        files[name] = column_file(draw, 4, clean, tags)
    target = draw(st.sampled_from(sorted(files)))
    hows = draw(st.lists(st.sampled_from(HARMLESS if all_clean else MUTATIONS), max_size=2))
    for how in hows:
        files[target] = mutate(files[target], how, draw(st.integers(0, 10**6)), "tsv")
    return ColumnCase(files, 0, 3, f"{target} mutations={hows}")


@st.composite
def token_file_cases(draw: st.DrawFn) -> ColumnCase:
    columns = draw(st.integers(2, 4))
    all_clean = draw(st.booleans())
    tag_sets = [CONLL_TAGS, ("NN", "VB", "DT", "."), ("O", "B-X", "I-X", "B-Y")]
    tags = st.sampled_from(draw(st.sampled_from(tag_sets)))
    files = {}
    for name in ("train.conll", "dev.conll"):
        clean = all_clean or draw(st.booleans())
        files[name] = column_file(draw, columns, clean, tags if clean else tags | bad_tag)
    target = draw(st.sampled_from(sorted(files)))
    hows = draw(st.lists(st.sampled_from(HARMLESS if all_clean else MUTATIONS), max_size=2))
    for how in hows:
        files[target] = mutate(files[target], how, draw(st.integers(0, 10**6)), "tsv")
    choices = [None, 0, 1, -1, columns - 1, -columns]
    token_column = draw(st.sampled_from([None] * 6 + choices))
    tag_column = draw(st.sampled_from([None] * 6 + choices))
    return ColumnCase(files, token_column, tag_column, f"{columns} columns, {target} mutations={hows}")


@dataclass
class Sentences:
    """A reference reading of a column file: sentences of (word, tag, line), or where it is wrong."""

    problems: set[int | None] = field(default_factory=set)
    sentences: list[list[tuple[str, str, int]]] = field(default_factory=list)
    columns: int | None = None

    @property
    def ok(self) -> bool:
        return not self.problems


def reference_columns(
    data: bytes, token_column: int, tag_column: int, columns: int | None = None
) -> Sentences:
    """Lines split as Python's universal newlines split them, fields on spaces and tabs; a blank line or
    ``-DOCSTART-`` ends a sentence; every token line has the first one's number of fields."""
    out = Sentences(columns=columns)
    text = _decode(data)
    if text is None:
        return Sentences({None})
    current: list[tuple[str, str, int]] = []
    for line_no, line in enumerate(io.StringIO(text, newline=""), start=1):
        stripped = line.strip(" \t\r\n\f\v")
        fields = FIELD_SEPARATOR.split(stripped) if stripped else []
        if not fields or fields[0] == "-DOCSTART-":
            if current:
                out.sentences.append(current)
            current = []
            continue
        out.columns = out.columns or len(fields)
        if len(fields) != out.columns or not all(
            -len(fields) <= i < len(fields) for i in (token_column, tag_column)
        ):
            out.problems.add(line_no)
            return out  # the reader stops at the first such line
        current.append((fields[token_column], fields[tag_column], line_no))
    if current:
        out.sentences.append(current)
    if not out.sentences:
        out.problems.add(None)
    return out


def reference_iob2(tags: list[str]) -> list[str]:
    out: list[str] = []
    for tag in tags:
        kind = tag[2:]
        if tag.startswith("I-") and (not out or out[-1] == "O" or out[-1][2:] != kind):
            tag = "B-" + kind
        out.append(tag)
    return out


def _is_iob(tag: str) -> bool:
    return tag == "O" or (tag[:2] in ("B-", "I-") and len(tag) > 2)


def _check_tags(reference: Sentences, allowed: set[str]) -> None:
    for sentence in reference.sentences:
        reference.problems |= {line for _, tag, line in sentence if tag not in allowed}


def check_columns_loaded(examples: Any, names: tuple[str, ...], reference: Sentences, iob: bool) -> None:
    assert examples.words == [[w for w, _, _ in s] for s in reference.sentences]
    tags = [[t for _, t, _ in s] for s in reference.sentences]
    assert [[names[i] for i in seq] for seq in examples.labels] == [
        reference_iob2(t) if iob else t for t in tags
    ]


def write_files(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


def assert_clear_in(error: DataError, folder: Path, expected: dict[str, Any]) -> None:
    """``assert_clear`` for the file of ``folder`` that the message names."""
    named = [name for name in expected if str(folder / name) in str(error)]
    assert named, str(error)
    assert_clear(error, folder / named[0], expected[named[0]])


def check_conll_folder(case: ColumnCase, scratch: Path) -> None:
    folder = write_files(scratch / "conll2003", case.files)
    expected = {name: reference_columns(data, 0, 3, columns=4) for name, data in case.files.items()}
    for reference in expected.values():
        _check_tags(reference, set(CONLL_TAGS))
    try:
        task, data = load_task_data("conll2003", data_dir=str(folder))
    except DataError as error:
        event("refused")
        assert_clear_in(error, folder, expected)
        return
    event("loaded")
    splits = {
        "eng.train": data.train,
        "eng.testa": data.eval_splits["dev"],
        "eng.testb": data.eval_splits["test"],
    }
    for name, examples in splits.items():
        assert expected[name].ok, f"{name} loaded, yet the reference finds lines {expected[name].problems}"
        check_columns_loaded(examples, task.label_names, expected[name], iob=True)


def check_token_files(case: ColumnCase, scratch: Path) -> None:
    folder = write_files(scratch / "tokens", case.files)
    token_column = 0 if case.token_column is None else case.token_column
    tag_column = -1 if case.tag_column is None else case.tag_column
    options = {
        k: v
        for k, v in (("token_column", case.token_column), ("tag_column", case.tag_column))
        if v is not None
    }
    expected = {name: reference_columns(data, token_column, tag_column) for name, data in case.files.items()}
    train, dev = expected["train.conll"], expected["dev.conll"]
    seen = sorted({tag for s in train.sentences for _, tag, _ in s})
    if seen and all(_is_iob(t) for t in seen):
        kinds = sorted({t[2:] for t in seen if t != "O"})
        names = ("O", *(f"{p}-{k}" for k in kinds for p in "BI"))
        _check_tags(dev, {*names})
    else:
        names = tuple(sorted(seen, key=lambda t: (t != "O", t)))
        _check_tags(dev, set(names))
    if train.ok and len(names) < 2:
        train.problems.add(None)
    same = [token_column == tag_column] + [
        reference.columns is not None and token_column % reference.columns == tag_column % reference.columns
        for reference in (train, dev)
    ]
    try:
        task, data = load_task_data(
            "file",
            train_file=str(folder / "train.conll"),
            eval_files={"dev": str(folder / "dev.conll")},
            kind="token_classification",
            **options,
        )
    except DataError as error:
        event("refused")
        if any(same) and "token_column" in str(error) and "tag_column" in str(error):
            return  # the words would be their own tags: refused, naming both options
        assert_clear_in(error, folder, expected)
        return
    event("loaded")
    assert not any(same), "the token and tag columns are one column, yet it loaded"
    assert train.ok and dev.ok, (
        f"loaded, yet the reference finds train lines {train.problems}, dev {dev.problems}"
    )
    assert task.label_names == names
    iob = all(_is_iob(t) for t in names)
    check_columns_loaded(data.train, names, train, iob)
    check_columns_loaded(data.eval_splits["dev"], names, dev, iob)


test_conll_folder, test_conll_folder_slow = fuzz(conll_folders())(check_conll_folder)
test_token_files, test_token_files_slow = fuzz(token_file_cases())(check_token_files)


# --------------------------------------------------------------------------------------------------
# The treebank sample: bracketed trees in treebank/combined/wsj_NNNN.mrg members of a zip

PTB_WORD = st.sampled_from(["Pierre", "Vinken", ",", "61", "years", "old", "*T*-1", "0", "-LRB-"])
PTB_TAG = st.sampled_from(["NNP", ",", "CD", "NNS", "JJ", "-NONE-", "-LRB-", "VBD", "."])
PTB_BAD = st.sampled_from(["(", ")", "", "NN a", "X", "nn"]) | noise


@st.composite
def ptb_tree(draw: st.DrawFn, depth: int = 0, clean: bool = True) -> str:
    if depth >= 2 or draw(st.booleans()):
        tag = draw(PTB_TAG if clean else PTB_TAG | PTB_BAD)
        return f"({tag} {draw(PTB_WORD if clean else PTB_WORD | PTB_BAD)})"
    label = draw(st.sampled_from(["S", "NP-SBJ", "VP", ""]))
    children = [draw(ptb_tree(depth + 1, clean)) for _ in range(draw(st.integers(1, 3)))]
    separator = draw(st.sampled_from([" ", "\n  "]))
    return f"({label}{' ' if label else ''}{separator.join(children)})"


@dataclass(frozen=True)
class TreebankCase:
    members: dict[int, bytes]  # wsj file number -> its bytes
    note: str
    damage: int | None = None  # where 8 bytes of the written zip are flipped

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        shown = {n: data if len(data) < 300 else data[:300] + b"..." for n, data in self.members.items()}
        printer.text(f"TreebankCase({self.note}, {shown!r})")


@st.composite
def treebank_cases(draw: st.DrawFn) -> TreebankCase:
    all_clean = draw(st.booleans())
    members = {}
    for number in (1, 160, 180):  # one file of each split
        clean = all_clean or draw(st.booleans())
        trees = [f"( {draw(ptb_tree(0, clean))} )" for _ in range(draw(st.integers(1 if clean else 0, 3)))]
        members[number] = ("\n\n".join(trees) + "\n").encode("utf-8")
    target = draw(st.sampled_from(sorted(members)))
    hows = draw(st.lists(st.sampled_from(HARMLESS if all_clean else MUTATIONS), max_size=2))
    for how in hows:
        members[target] = mutate(members[target], how, draw(st.integers(0, 10**6)), "tsv")
    damage = None if all_clean or draw(st.integers(0, 4)) else draw(st.integers(0, 10**6))
    return TreebankCase(members, f"wsj_{target:04d} mutations={hows} damage={damage}", damage)


_TREE_TOKEN = re.compile(r"\(|\)|[^ \t\r\n\f\v()]+")


def reference_trees(data: bytes, tags: set[str]) -> Sentences:
    """A recursive-descent reading: a tree is ``( label? child... )``, a child is a tree or, for
    ``(TAG word)`` only, a word; -NONE- leaves are dropped; every tree keeps a word."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Sentences({None})
    tokens = [(m.group(), text.count("\n", 0, m.start()) + 1) for m in _TREE_TOKEN.finditer(text)]
    out = Sentences()
    position = 0

    def tree() -> list[tuple[str, str, int]]:  # tokens[position] is "("
        nonlocal position
        start = position
        position += 1
        ahead = [t for t, _ in tokens[position : position + 3]]
        if len(ahead) == 3 and "(" not in ahead[:2] and ")" not in ahead[:2] and ahead[2] == ")":
            position += 3
            return [(ahead[1], ahead[0], tokens[start][1])]
        if position < len(tokens) and tokens[position][0] not in "()":
            position += 1  # the label
        leaves: list[tuple[str, str, int]] = []
        while position < len(tokens) and tokens[position][0] != ")":
            if tokens[position][0] != "(":
                raise ValueError(tokens[position][1])  # a word outside a (TAG word) leaf
            leaves += tree()
        if position >= len(tokens):
            raise ValueError(None)  # never closed
        position += 1
        return leaves

    while position < len(tokens):
        line = tokens[position][1]
        if tokens[position][0] != "(":
            out.problems.add(line)
            return out
        try:
            leaves = tree()
        except ValueError as error:
            out.problems.add(error.args[0])
            return out
        kept = [leaf for leaf in leaves if leaf[1] != "-NONE-"]
        if not kept:  # the reader checks this once every tree of the file is read
            out.problems.add(leaves[0][2] if leaves else tokens[position - 1][1])
        out.sentences.append(kept)
    for sentence in out.sentences:
        out.problems |= {line for _, tag, line in sentence if tag not in tags}
    return out


def check_treebank(case: TreebankCase, scratch: Path) -> None:
    from attendout.tasks.tokens import PTB_TAGS

    path = scratch / "nltk_data" / "corpora" / "treebank.zip"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for number, data in case.members.items():
            archive.writestr(f"treebank/combined/wsj_{number:04d}.mrg", data)
    readable = True
    if case.damage is not None:  # a damaged download: the reference is Python's zipfile reading it
        whole = path.read_bytes()
        at = case.damage % len(whole)
        path.write_bytes(whole[:at] + bytes(b ^ 0x5A for b in whole[at : at + 8]) + whole[at + 8 :])
        try:
            with zipfile.ZipFile(path) as archive:
                members = {n: archive.read(f"treebank/combined/wsj_{n:04d}.mrg") for n in case.members}
            case = TreebankCase(members, case.note)
        except Exception:  # noqa: BLE001 - any failure: the zip as a whole is the problem
            readable = False
    expected = {number: reference_trees(data, set(PTB_TAGS)) for number, data in case.members.items()}
    try:
        task, data = load_task_data("ptb-pos", data_dir=str(scratch / "nltk_data"))
    except DataError as error:
        event("refused")
        message = str(error)
        if not readable:
            assert_clear(error, path)
            return
        named = [n for n in case.members if f"wsj_{n:04d}.mrg" in message]
        assert named, message
        assert_clear(error, path, expected[named[0]])
        return
    event("loaded")
    assert readable, "a zip that Python's zipfile cannot read, yet it loaded"
    splits = {1: data.train, 160: data.eval_splits["dev"], 180: data.eval_splits["test"]}
    for number, examples in splits.items():
        assert expected[number].ok, (
            f"wsj_{number:04d} loaded, yet the reference finds {expected[number].problems}"
        )
        check_columns_loaded(examples, task.label_names, expected[number], iob=False)


test_treebank, test_treebank_slow = fuzz(treebank_cases())(check_treebank)


# --------------------------------------------------------------------------------------------------
# ARC: headerless CSV rows of question, options A-D and the answer

ANSWERS = st.sampled_from(["A", "B", "C", "D", "1", "2", "3", "4"])
BAD_ANSWERS = st.sampled_from(["E", "5", "", " B ", "a", "F", "0", "AB", "２"]) | noise


@dataclass(frozen=True)
class ArcCase:
    files: dict[str, bytes]
    drop_bad_rows: bool
    note: str

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        shown = {name: data if len(data) < 300 else data[:300] + b"..." for name, data in self.files.items()}
        printer.text(f"ArcCase(drop_bad_rows={self.drop_bad_rows}, {self.note}, {shown!r})")


@st.composite
def arc_cases(draw: st.DrawFn) -> ArcCase:
    all_clean = draw(st.booleans())
    files = {}
    for name in ("arc_easy_train.csv", "arc_easy_dev.csv"):
        clean = all_clean or draw(st.booleans())
        rows = []
        for _ in range(draw(st.integers(1 if clean else 0, 5))):
            options = [draw(words if clean else words | noise | st.just("")) for _ in range(4)]
            rows.append(
                [draw(words if clean else cell), *options, draw(ANSWERS if clean else ANSWERS | BAD_ANSWERS)]
            )
        text = serialise(
            "csv", ["Which one?", "a", "b", "c", "d", "A"], rows, "\n", quoted=clean or draw(st.booleans())
        )
        files[name] = text.encode("utf-8")
    target = draw(st.sampled_from(sorted(files)))
    hows = draw(st.lists(st.sampled_from(HARMLESS if all_clean else MUTATIONS), max_size=2))
    for how in hows:
        files[target] = mutate(files[target], how, draw(st.integers(0, 10**6)), "csv")
    return ArcCase(files, draw(st.booleans()), f"{target} mutations={hows}")


def reference_arc(data: bytes, drop_bad_rows: bool) -> Expected:
    """Python's csv on the bytes: six fields a row; a row with no question, no option, or an answer (a
    letter A-E or a digit 1-5) that is not one of its non-empty options is refused or, asked to, left out."""
    text = _decode(data)
    if text is None:
        return Expected({None})
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        rows = [(reader.line_num, row) for row in reader]
    except csv.Error:
        return Expected({None})
    expected, bad = Expected(), set()
    for line, row in rows:
        if not row:
            continue
        if len(row) != 6:
            expected.problems.add(line)
            return expected  # refused whatever drop_bad_rows says
        question, options, answer = row[0], row[1:5], row[5].strip()
        index = (
            "ABCDE".index(answer)
            if answer in tuple("ABCDE")
            else "12345".index(answer)
            if answer in tuple("12345")
            else None
        )
        if not question.strip() or index is None or index >= 4 or not options[index].strip():
            bad.add(line)
            continue
        expected.lines.append(line)
        expected.values.append(
            {"question": question.strip(), "options": [o.strip() for o in options], "answer": index}
        )
    if bad and not drop_bad_rows:
        expected.problems |= bad
    if not expected.lines:
        expected.problems.add(None)
    return expected


def check_arc(case: ArcCase, scratch: Path) -> None:
    folder = write_files(scratch / "arc", case.files)
    expected = {name: reference_arc(data, case.drop_bad_rows) for name, data in case.files.items()}
    try:
        _, data = load_task_data("arc-easy", data_dir=str(folder), drop_bad_rows=case.drop_bad_rows)
    except DataError as error:
        event("refused")
        assert_clear_in(error, folder, expected)
        return
    event("loaded")
    for name, examples in (("arc_easy_train.csv", data.train), ("arc_easy_dev.csv", data.eval_splits["dev"])):
        reference = expected[name]
        assert reference.ok, f"{name} loaded, yet the reference finds lines {reference.problems}"
        assert examples.text_a == [v["question"] for v in reference.values]
        assert examples.choices == [v["options"] for v in reference.values]
        assert examples.labels == [v["answer"] for v in reference.values]


test_arc, test_arc_slow = fuzz(arc_cases())(check_arc)
