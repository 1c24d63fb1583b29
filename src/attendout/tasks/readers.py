"""Reading CSV / TSV / JSON-lines files into :class:`RawTable` and turning those into Examples.

Reading is in two steps so that label names can come from the train file: :func:`read_file` keeps
the raw labels with the line each came from, and :func:`to_examples` maps them to class indices
(or floats) and reports a bad one with its file, line, column and value.

TSV files are read with ``csv.QUOTE_NONE`` (GLUE convention: quotes are ordinary characters);
CSV files with the standard CSV quoting. Files are decoded as UTF-8 with an optional BOM and may be
compressed (``.gz``, ``.bz2``).
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import lzma
import math
import os
import re
import zipfile
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from .base import CLASSIFICATION, REGRESSION, DataError
from .core import Examples
from .utf8 import COMPRESSED, not_utf8, not_utf8_bytes

FORMATS = ("csv", "tsv", "jsonl")
logger = logging.getLogger(__name__)

# What reading a damaged or unsupported archive raises: zipfile's own errors, a corrupt deflate or lzma
# stream, a cut file, and "compression method not supported" / "file is encrypted" (zipfile raises
# NotImplementedError and RuntimeError for those).
ARCHIVE_ERRORS = (
    OSError,
    EOFError,
    zipfile.BadZipFile,
    zlib.error,
    lzma.LZMAError,
    NotImplementedError,
    RuntimeError,
)

#: the table formats, by file extension
EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl"}


@dataclass(frozen=True)
class RawTable:
    """The rows of one file, column-major, before labels are interpreted."""

    path: str
    texts: tuple[list[str], ...]  # one list per text column, each [num_rows]
    labels: list[Any]  # raw label per row: str from CSV/TSV, JSON scalar from JSON lines
    lines: list[int]  # 1-based line number of each row (last line of a multi-line CSV record)
    label_column: str | None  # None: an unlabelled file (text to predict); labels are then all None
    groups: list[str] | None = None
    text_names: tuple[str, ...] = ()  # the names of the text columns, for errors

    def __len__(self) -> int:
        return len(self.labels)

    def filter(self, keep: Sequence[bool]) -> RawTable:
        """The rows where ``keep`` is true."""
        rows = [i for i, k in enumerate(keep) if k]
        return replace(
            self,
            texts=tuple([column[i] for i in rows] for column in self.texts),
            labels=[self.labels[i] for i in rows],
            lines=[self.lines[i] for i in rows],
            groups=None if self.groups is None else [self.groups[i] for i in rows],
        )


def detect_format(path: str | Path, file_format: str | None = None) -> str:
    """``file_format`` if given, else the format named by the extension (``.csv.gz`` -> csv)."""
    if file_format is not None:
        fmt = file_format.lower().lstrip(".")
        fmt = {"json": "jsonl", "ndjson": "jsonl"}.get(fmt, fmt)
        if fmt not in FORMATS:
            raise DataError(f"unknown file_format {file_format!r}; use one of {', '.join(FORMATS)}")
        return fmt
    suffixes = [s.lower() for s in Path(path).suffixes]
    if suffixes and suffixes[-1] in COMPRESSED:
        suffixes = suffixes[:-1]
    if suffixes and suffixes[-1] in EXTENSIONS:
        return EXTENSIONS[suffixes[-1]]
    raise DataError(
        f"cannot tell the format of {path} from its extension; pass file_format= one of {', '.join(FORMATS)}"
    )


#: the longest CSV/TSV cell read, in characters (Python's default, 131,072, refuses long documents that
#: the same text in JSONL reads; a quote left open still ends in a clear error at this size)
FIELD_LIMIT = 64 * 2**20


@contextlib.contextmanager
def _field_limit(limit: int) -> Iterator[None]:
    """csv's field size limit raised to ``limit`` while one file is read (it is process-wide)."""
    before = csv.field_size_limit()
    csv.field_size_limit(max(before, limit))
    try:
        yield
    finally:
        csv.field_size_limit(before)


def open_text(path: Path) -> IO[str]:
    """``path`` opened for reading as UTF-8 text (a BOM dropped, newlines as written), gzip or bz2
    decompressed by its suffix (``.gz``, ``.bz2``)."""
    opener = COMPRESSED.get(path.suffix.lower(), open)
    return opener(path, "rt", encoding="utf-8-sig", newline="")


@contextlib.contextmanager
def reading(path: Path) -> Iterator[IO[str]]:
    """``path`` opened by :func:`open_text`; a file that is not UTF-8, or an unreadable or corrupt
    compressed one, is a :class:`DataError` (raised from the reading done inside the block)."""
    try:
        with open_text(path) as handle:
            yield handle
    except UnicodeDecodeError:
        raise not_utf8(path) from None
    except ARCHIVE_ERRORS as error:
        raise DataError(f"{path}: cannot read ({type(error).__name__}: {error})") from None


def check_file(path: Path, what: str) -> None:
    """Raise :class:`DataError` naming ``what`` unless ``path`` is an existing file."""
    if not path.exists():
        raise DataError(f"file not found: {path} ({what})")
    if not path.is_file():
        raise DataError(f"not a file: {path} ({what})")


def data_root(data_dir: str | Path | None, folder: str, needs: str) -> Path:
    """Where a task's files are: ``data_dir``, else ``$ATTENDOUT_DATA/<folder>`` (``folder`` ``""``: the
    variable's folder itself); neither: a :class:`DataError` saying what the task ``needs``."""
    if data_dir:
        return Path(data_dir)
    env = os.environ.get("ATTENDOUT_DATA")
    if not env:
        raise DataError(needs)
    return Path(env) / folder


def find_folder(root: Path, task: str, file: str, *subfolders: str) -> Path | None:
    """The first of ``root`` and its ``subfolders`` that holds ``file``, or None; a ``root`` that is not a
    folder is a :class:`DataError` naming ``task``."""
    if not root.is_dir():
        raise DataError(f"data_dir not found or not a folder: {root} (task {task!r})")
    return next((f for f in (root, *(root / sub for sub in subfolders)) if (f / file).is_file()), None)


def zip_texts(path: str | Path, member: re.Pattern[str]) -> Iterator[tuple[str, re.Match[str], str]]:
    """``(name, match, text)`` of each file of the zip ``path`` whose name matches ``member`` in full, in
    name order, decoded as UTF-8; an unreadable zip or member, or one not UTF-8, is a :class:`DataError`."""
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except ARCHIVE_ERRORS as error:
        raise DataError(f"{path}: cannot read the zip ({type(error).__name__}: {error})") from None
    with archive:
        for name in sorted(archive.namelist()):
            match = member.fullmatch(name)
            if match is None:
                continue
            try:
                raw = archive.read(name)
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise not_utf8_bytes(f"{path}:{name}", raw) from None
            except ARCHIVE_ERRORS as error:  # a damaged member
                raise DataError(
                    f"{path}:{name}: cannot read it from the zip ({type(error).__name__}: {error}); the zip "
                    "is damaged: download it again"
                ) from None
            yield name, match, text


def log_dropped(path: str | Path, lines: Sequence[int], total: int, why: str) -> None:
    """Warn that the rows at ``lines`` (of ``total``) were left out, ``why`` (drop_bad_rows)."""
    shown = ", ".join(str(line) for line in lines[:10]) + (", ..." if len(lines) > 10 else "")
    logger.warning("%s: dropped %d of %d rows with %s (lines %s)", path, len(lines), total, why, shown)


def brief(value: Any, limit: int = 60) -> str:
    """A value for a one-line message: a string's repr, anything else as JSON writes it (``false``,
    ``null``, ``[1]``), cut to ``limit`` characters."""
    if isinstance(value, str):
        text = repr(value)
    else:
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError):  # not a JSON value (a label from elsewhere)
            text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def json_type(value: Any) -> str:
    """What a JSON value is, in the words of JSON (for messages about a value of the wrong type)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a JSON boolean"
    if isinstance(value, int):
        return "a JSON integer"
    if isinstance(value, float):
        return "a JSON number with a decimal point" if math.isfinite(value) else "a JSON NaN or Infinity"
    if isinstance(value, str):
        return "a JSON string"
    if isinstance(value, list):
        return "a JSON array"
    return "a JSON object"


def check_column_roles(
    text_columns: Sequence[str], label_column: str | None, group_column: str | None = None
) -> None:
    """Each column has one role: a text column listed twice, or a label column that is also read as text
    (the model would read the answer) or used to group examples (validation would hold whole classes),
    is a DataError naming the columns and the option to change."""
    texts = list(text_columns)
    for i, name in enumerate(texts):
        if name in texts[:i]:
            raise DataError(
                f"text_columns {texts!r} name column {name!r} twice; a pair takes two different columns "
                "(--text-columns a,b)"
            )
    if label_column is not None and label_column in texts:
        raise DataError(
            f"column {label_column!r} is both a text column (text_columns {texts!r}) and the label column: "
            "the model would read the answer as input; choose other --text-columns or --label-column"
        )
    if label_column is not None and group_column == label_column:
        raise DataError(
            f"column {label_column!r} is both the label column and the group column: grouping by label puts "
            "whole classes on one side of the validation split; choose another group_column"
        )


def _column_index(header: Sequence[str], name: str, path: Path) -> int:
    try:
        return list(header).index(name)
    except ValueError:
        present = ", ".join(repr(h) for h in header)
        raise DataError(f"{path}: no column {name!r} (columns present: {present})") from None


def _check_header(header: Sequence[str], path: Path) -> None:
    """Header names are unique (else a column option would silently pick the first of two)."""
    if not any(name.strip() for name in header):
        raise DataError(
            f"{path} line 1: the header row is empty; the first line must name the columns (remove blank "
            "lines before it)"
        )
    seen: dict[str, int] = {}
    for number, name in enumerate(header, start=1):
        key = name.strip()
        if key in seen:
            raise DataError(
                f"{path} line 1: duplicate header name {name!r} (columns {seen[key]} and {number}); "
                "rename one so that every column has its own name"
            )
        seen[key] = number


def _unique_keys(path: Path, line_no: int) -> Any:
    """A json ``object_pairs_hook`` that refuses a key given twice in one record."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        record: dict[str, Any] = {}
        for key, value in pairs:
            if key in record:
                raise DataError(f"{path} line {line_no}: key {key!r} appears twice in one record")
            record[key] = value
        return record

    return hook


def read_file(
    path: str | Path,
    *,
    text_columns: Sequence[str],
    label_column: str | None,
    file_format: str | None = None,
    group_column: str | None = None,
    column_names: Sequence[str] | None = None,
    what: str = "data file",
) -> RawTable:
    """Read the named columns of a CSV/TSV/JSON-lines file (``label_column`` None: no labels).

    ``column_names`` is for CSV/TSV files without a header row (GLUE CoLA): it names the fields,
    and every line must have exactly that many. Otherwise the first row is the header, and every
    line must have as many fields as the header. ``what`` says which split the file is, for errors.
    """
    path = Path(path)
    check_column_roles(text_columns, label_column, group_column)
    check_file(path, what)
    fmt = detect_format(path, file_format)
    columns = (text_columns, label_column, group_column)
    wanted = [*text_columns] + [c for c in (label_column, group_column) if c is not None]
    with reading(path) as handle:
        if fmt == "jsonl":
            return _table(path, _jsonl_records(handle, path, wanted, text_columns, group_column), *columns)
        delimiter = "\t" if fmt == "tsv" else ","
        quoting = csv.QUOTE_NONE if fmt == "tsv" else csv.QUOTE_MINIMAL
        reader = csv.reader(handle, delimiter=delimiter, quoting=quoting)
        with _field_limit(FIELD_LIMIT):
            return _table(path, _delimited_records(reader, path, fmt, wanted, column_names), *columns)


def _table(
    path: Path,
    records: Iterator[tuple[int, dict[str, Any]]],
    text_columns: Sequence[str],
    label_column: str | None,
    group_column: str | None,
) -> RawTable:
    """The table of a file's ``(line, {column: value})`` records (``label_column`` None: no labels)."""
    rows = list(records)
    return RawTable(
        str(path),
        tuple([record[name] for _, record in rows] for name in text_columns),
        [None if label_column is None else record[label_column] for _, record in rows],
        [line for line, _ in rows],
        label_column,
        None if group_column is None else [str(record[group_column]) for _, record in rows],
        tuple(text_columns),
    )


def _delimited_records(
    reader: Any, path: Path, fmt: str, wanted: list[str], column_names: Sequence[str] | None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, {column: cell})`` of each row of a CSV/TSV file, its columns checked against the header."""
    rows: Iterator[list[str]] = reader
    try:
        if column_names is None:
            header = next(rows, None)
            if header is None:
                raise DataError(f"{path}: file is empty (expected a header row)")
            _check_header(header, path)
        else:
            header = list(column_names)
        index = {name: _column_index(header, name, path) for name in wanted}
        kind = "tab-separated" if fmt == "tsv" else "comma-separated"
        names = ", ".join(brief(name, 30) for name in header)
        last_line = 0 if column_names is not None else reader.line_num  # the line before each record
        for row in rows:
            first_line, last_line = last_line + 1, reader.line_num
            if not row:  # blank line
                continue
            if len(row) != len(header):
                lines_of = (
                    f"line {last_line}" if first_line == last_line else f"lines {first_line}-{last_line}"
                )
                hint = (
                    "; a field that holds a comma must be in double quotes"
                    if fmt == "csv" and first_line == last_line
                    else "; is a double quote left open on the first of these lines?"
                    if fmt == "csv"
                    else "; a text must not hold a tab"
                )
                raise DataError(
                    f"{path} {lines_of}: expected {len(header)} {kind} fields ({names}), found {len(row)}{hint}"
                )
            yield reader.line_num, {name: row[i] for name, i in index.items()}
    except csv.Error as error:
        hint = ""
        if "field limit" in str(error):
            hint = (
                f"; a field over {csv.field_size_limit():,} characters: a double quote left open earlier in the "
                "file (the rest became one field), or a text too long to read: shorten it"
            )
        raise DataError(f"{path} line {reader.line_num}: malformed {fmt.upper()} ({error}){hint}") from None


def _jsonl_records(
    handle: IO[str], path: Path, wanted: list[str], text_columns: Sequence[str], group_column: str | None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, record)`` of each JSON object of a JSON-lines file, its text and group values checked."""
    for line_no, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line, object_pairs_hook=_unique_keys(path, line_no))
        except json.JSONDecodeError as error:
            raise DataError(
                f"{path} line {line_no}: not valid JSON ({error.msg} at column {error.colno}); "
                "expected one JSON object per line"
            ) from None
        except DataError:
            raise
        except (ValueError, RecursionError) as error:  # an integer of 4,300+ digits; arrays nested too deep
            why = "nested too deeply" if isinstance(error, RecursionError) else str(error).split(";")[0]
            raise DataError(
                f"{path} line {line_no}: cannot read this JSON ({why}); expected one flat JSON object per line"
            ) from None
        if not isinstance(record, dict):
            raise DataError(
                f"{path} line {line_no}: expected a JSON object, found {json_type(record)}; write one "
                '{"key": value, ...} object per line'
            )
        for name in wanted:
            if name not in record:
                present = ", ".join(brief(k, 30) for k in record)
                raise DataError(f"{path} line {line_no}: no key {name!r} (keys present: {present})")
        for name in text_columns:
            value = record[name]
            if not isinstance(value, str):  # str(5.0), str(True), a dict's repr: never what the file says
                raise DataError(
                    f"{path} line {line_no}, key {name!r}: expected text, found {json_type(value)} "
                    f"({brief(value)}); write the text as a JSON string"
                )
        if group_column is not None:
            value = record[group_column]
            if isinstance(value, bool) or not isinstance(value, str | int):
                raise DataError(
                    f"{path} line {line_no}, key {group_column!r}: a group must be a JSON string or integer, "
                    f"found {json_type(value)} ({brief(value)}); write it as one"
                )
        yield line_no, record


# --------------------------------------------------------------------------------------------------
# Labels


def _label_text(value: Any) -> str:
    """A raw label as text: JSON numbers/bools as written in JSON, strings unchanged."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    return str(value)


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _label_key(text: str) -> str:
    """One label, however it is written: case and surrounding whitespace folded, integers by value."""
    number = _as_int(text)
    return str(number) if number is not None else text.strip().casefold()


def _refuse_label_type(raw: RawTable, value: Any, line: int, kind: str) -> None:
    """A (non-blank) label value of the wrong JSON type for ``kind`` is a :class:`DataError` saying why.
    CSV and TSV cells are strings and always pass; a regression string is parsed by :func:`to_examples`."""
    if kind == CLASSIFICATION and (isinstance(value, bool) or not isinstance(value, str | int)):
        why = (
            f"is {json_type(value)}; a class label must be a JSON string or integer: write it as one "
            "(for a numeric target use kind='regression', --label-kind regression)"
        )
    elif kind == REGRESSION and (isinstance(value, bool) or not isinstance(value, str | int | float)):
        why = f"is {json_type(value)}, not a number; write the score as a JSON number"
    else:
        return
    raise DataError(f"{raw.path} line {line}, column {raw.label_column!r}: label {brief(value)} {why}")


def check_table(raw: RawTable, kind: str, *, drop_bad_rows: bool = False) -> RawTable:
    """The data boundary's checks of one file, each a :class:`DataError` naming file, line and column.

    Text cells must hold text once stripped; a labelled file needs a label on every row (a blank cell
    or JSON ``null`` would otherwise become a class of its own); classification labels that differ only
    by case or surrounding whitespace (``pos`` and ``Pos ``) are refused rather than read as two
    classes. Regression labels (numbers, finite) and unknown labels are checked by :func:`to_examples`.

    ``drop_bad_rows``: rows with an empty text or a blank label are left out instead, and a warning
    says how many and which lines. Returns the table (without those rows).
    """
    names = raw.text_names or tuple(f"text {i + 1}" for i in range(len(raw.texts)))
    bad: dict[int, str] = {}  # row -> why
    for name, column in zip(names, raw.texts, strict=True):
        for row, (text, line) in enumerate(zip(column, raw.lines, strict=True)):
            if not text.strip():
                bad.setdefault(row, f"{raw.path} line {line}, column {name!r}: the text is empty")
    if raw.label_column is not None:
        for row, (value, line) in enumerate(zip(raw.labels, raw.lines, strict=True)):
            if value is None or (isinstance(value, str) and not value.strip()):  # blank
                why = f"{raw.path} line {line}, column {raw.label_column!r}: the label is blank ({value!r})"
                bad.setdefault(row, why)
            else:
                _refuse_label_type(raw, value, line, kind)
    if bad and not drop_bad_rows:
        first = bad[min(bad)]
        raise DataError(
            f"{first}; fill it in, leave the row out, or pass --drop-bad-rows (drop_bad_rows=True) to drop "
            f"such rows ({len(bad)} in this file)"
        )
    if bad:
        log_dropped(
            raw.path, [raw.lines[row] for row in sorted(bad)], len(raw), "an empty text or a blank label"
        )
        raw = raw.filter([row not in bad for row in range(len(raw))])
    if raw.label_column is None or kind != CLASSIFICATION:
        return raw
    first: dict[str, tuple[str, int]] = {}  # folded label -> (label as written, its first line)
    for value, line in zip(raw.labels, raw.lines, strict=True):
        text = _label_text(value)
        seen = first.setdefault(_label_key(text), (text, line))
        if seen[0] != text:
            raise DataError(
                f"{raw.path} line {line}, column {raw.label_column!r}: label {brief(text)} differs from label "
                f"{brief(seen[0])} (line {seen[1]}) only by case, surrounding whitespace or the way a number is "
                "written; write each label one way"
            )
    return raw


def infer_label_names(raw: RawTable) -> tuple[str, ...]:
    """The sorted set of labels in ``raw``: numerically if all are integers, else as text."""
    seen = {_label_text(v) for v in raw.labels}
    try:  # ties ("1", "01"; refused by check_table) by text: never in the set's hash order
        return tuple(sorted(seen, key=lambda text: (int(text), text)))
    except ValueError:
        return tuple(sorted(seen))


def _class_index(
    value: Any, label_names: Sequence[str], index_of: dict[str, int], by_index: bool
) -> int | None:
    """The class of a raw label: an exact label name, else (``by_index``) an integer index in range, else None."""
    text = _label_text(value)
    if text in index_of:
        return index_of[text]
    index = _as_int(text) if by_index else None
    return index if index is not None and 0 <= index < len(label_names) else None


def to_examples(
    raw: RawTable,
    *,
    kind: str,
    label_names: Sequence[str] | None,
    split: str,
    label_range: tuple[float, float] | None = None,
) -> Examples:
    """Examples from a raw table: labels to class indices (classification) or floats (regression).

    A classification label is matched against ``label_names`` first; failing that, an integer in
    ``[0, len(label_names))`` is taken as the class index (GLUE files write ``0``/``1``), unless the label
    names are integers themselves (then ``0`` with labels ``1, 2, 3`` would silently be class ``1``).
    A label of the wrong JSON type (an array, an object; a boolean or fraction for a class) is refused.
    """
    if len(raw) == 0:
        raise DataError(f"split {split!r} is empty: {raw.path} has no data rows")
    if not 1 <= len(raw.texts) <= 2:
        raise DataError(f"{raw.path}: {len(raw.texts)} text columns; a task takes 1 or 2")
    labels: list[Any] = []
    if kind == CLASSIFICATION:
        if label_names is None:
            raise DataError(f"split {split!r} from {raw.path}: classification needs label names")
        index_of = {name: i for i, name in enumerate(label_names)}
        by_index = not any(_as_int(name) is not None for name in label_names)
        for value, line in zip(raw.labels, raw.lines, strict=True):
            _refuse_label_type(raw, value, line, kind)
            index = _class_index(value, label_names, index_of, by_index)
            if index is None:
                also = f" nor an index 0..{len(label_names) - 1}" if by_index else ""
                raise DataError(
                    f"{raw.path} line {line}, column {raw.label_column!r}: label {brief(value)} is not in the "
                    f"label set ({', '.join(label_names)}){also}; use one of these labels, or leave the row out"
                )
            labels.append(index)
    elif kind == REGRESSION:
        for value, line in zip(raw.labels, raw.lines, strict=True):
            _refuse_label_type(raw, value, line, kind)
            try:
                number = float(value)
            except (TypeError, ValueError, OverflowError):
                number = math.nan
            if not math.isfinite(number):
                raise DataError(
                    f"{raw.path} line {line}, column {raw.label_column!r}: regression label {brief(value)} is not "
                    "a number; write a finite number"
                )
            if label_range is not None and not label_range[0] <= number <= label_range[1]:
                raise DataError(
                    f"{raw.path} line {line}, column {raw.label_column!r}: regression label {brief(value)} is "
                    f"outside the range {label_range[0]:g}..{label_range[1]:g}"
                )
            labels.append(number)
    else:
        raise DataError(f"split {split!r} from {raw.path}: cannot read labels of kind {kind!r} from a table")
    text_b = raw.texts[1] if len(raw.texts) > 1 else None
    return Examples(text_a=raw.texts[0], text_b=text_b, labels=labels, groups=raw.groups)
