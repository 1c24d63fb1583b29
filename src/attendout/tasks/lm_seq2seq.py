"""Generation tasks: causal language modelling (``lm``) and sequence-to-sequence (``seq2seq``).

Two task kinds beside the classification ones:

* ``lm``: the examples are documents (``Examples.text_a``; no labels). The loop tokenises each, ends it
  with the end-of-sequence token, joins them and cuts the stream into blocks of ``block_size`` tokens
  (:mod:`attendout.encoding.lm_seq2seq`). Metric: ``perplexity`` (lower is better) over the predicted
  tokens, whose count is reported beside it (``tokens``).
* ``seq2seq``: the examples are (source, target) pairs (:class:`Seq2SeqExamples`: ``text_a`` the
  sources, ``targets`` the references). Metrics: ``bleu`` and ``chrf`` (sacrebleu) for translation,
  ``rouge1``/``rouge2``/``rougeL`` (rouge-score) for summarization, on greedy (or beam) outputs; the
  loss beside them.

Tasks:

* ``lm``: any text file. A ``.txt`` file holds one document per line, or, when it has blank lines,
  one document per blank-line separated paragraph; a CSV/TSV/JSON-lines file holds one document per
  row in its text column (``text_columns``, default ``text``). Without ``eval_files`` a ``dev`` split is
  carved from train (10%, seed 0).
* ``seq2seq``: a CSV/TSV/JSON-lines file with a source and a target column (``text_columns`` =
  (source, target), default ``source`` and ``target``; the CLI's ``--source-column``/``--target-column``),
  or two line-aligned text files given as one value ``SOURCE_FILE,TARGET_FILE``.
* ``movie-reviews-lm``: NLTK's movie reviews (Pang & Lee v2.0, 2,000 reviews, lower-cased and tokenised by
  their authors), split by the authors' folds as task ``movie-reviews``: cv000-799 train, cv800-899
  ``dev``, cv900-999 ``test``.
* ``wikitext-2``: WikiText-2 (raw) from the hub (``--hub``; needs internet): articles split at their
  `` = Title = `` headings.
* ``multi30k``: Multi30k task 1, EN->DE (29,000 / 1,014 / 1,000 caption pairs), from a folder holding
  ``train.{en,de}``, ``val.{en,de}`` and ``test_2016_flickr.{en,de}`` (``data_dir``, or
  ``$ATTENDOUT_DATA/multi30k``). Evaluation splits ``val`` and ``test_2016_flickr``.
* ``multi30k-en-fr``: the same, EN->FR (``train.fr``, ``val.fr``, ``test_2016_flickr.fr``).
* ``wmt16-en-ro``: WMT16 EN->RO from the hub (``--hub``); evaluation splits ``dev`` (the hub's
  ``validation``: that name is the run's own split, carved from train) and ``test``.
"""

from __future__ import annotations

import itertools
import logging
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from . import textmetrics  # noqa: F401  registers perplexity, bleu... before the tasks below
from .base import LM, SEQ2SEQ, DataError
from .core import Examples, LoadOptions, Task, TaskData, carve_validation, register_task, split_data
from .documents import MOVIE_REVIEWS_ZIP, read_movie_reviews
from .hub import HUB_SPLITS, hub_only, load_hub
from .readers import EXTENSIONS, data_root, detect_format, read_file
from .tokens import find_nltk_zip
from .utf8 import not_utf8

logger = logging.getLogger(__name__)

TRANSLATION_METRICS = ("bleu", "chrf")  # a seq2seq task may ask for rouge1, rouge2, rougeL (--metrics)


@dataclass(frozen=True)
class Seq2SeqExamples(Examples):
    """Sequence to sequence: ``text_a[i]`` is the source, ``targets[i]`` its reference (None: sources to
    translate). ``labels`` is None: a target is text, not a class."""

    targets: list[str] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.targets is not None:
            for i, target in enumerate(self.targets):
                if not isinstance(target, str):
                    raise DataError(f"Seq2SeqExamples: target {i} is {type(target).__name__}, not text")

    @classmethod
    def from_pairs(cls, sources: list[str], targets: list[str] | None) -> Seq2SeqExamples:
        return cls(
            text_a=list(sources), text_b=None, labels=None, targets=None if targets is None else list(targets)
        )


def documents(texts: list[str]) -> Examples:
    """Examples of an ``lm`` task: one document each, no labels."""
    return Examples(text_a=list(texts), text_b=None, labels=None)


LM_FILE_TASK = Task(  # the file tasks are named after their kinds
    name=LM,
    kind=LM,
    metrics=("perplexity",),
    description="causal language modelling on your text files (--train-file, --eval-file; one document a "
    "line, or blank-line separated; or a text column of CSV/TSV/JSONL)",
)
SEQ2SEQ_FILE_TASK = Task(
    name=SEQ2SEQ,
    kind=SEQ2SEQ,
    text_fields=("source", "target"),
    metrics=TRANSLATION_METRICS,
    description="translation or summarization on your files (--source-column/--target-column of CSV/TSV/"
    "JSONL, or SOURCE_FILE,TARGET_FILE text files); BLEU and chrF, or --metrics rouge1,rouge2,rougeL",
)
MOVIE_REVIEWS_LM = replace(
    LM_FILE_TASK,
    name="movie-reviews-lm",
    eval_split_names=("dev", "test"),
    description="language modelling on NLTK's 2,000 movie reviews (Pang & Lee v2.0), split by cv fold",
)
# wikitext-2 and wmt16-en-ro: dev is the hub's "validation" (that name is the run's carved split)
WIKITEXT2 = replace(
    MOVIE_REVIEWS_LM, name="wikitext-2", description="WikiText-2 raw, articles as documents (hub only: --hub)"
)
MULTI30K, MULTI30K_EN_FR = (
    replace(
        SEQ2SEQ_FILE_TASK,
        name=name,
        text_fields=("en", target),
        eval_split_names=("val", "test_2016_flickr"),
        description=f"Multi30k task 1, English to {language} image captions (29,000 train pairs); a local folder",
    )
    for name, target, language in (("multi30k", "de", "German"), ("multi30k-en-fr", "fr", "French"))
)
WMT16_EN_RO = replace(
    SEQ2SEQ_FILE_TASK,
    name="wmt16-en-ro",
    text_fields=("en", "ro"),
    eval_split_names=("dev", "test"),
    description="WMT16 English to Romanian news (hub only: --hub)",
)
WIKITEXT2_HUB = ("Salesforce/wikitext", "wikitext-2-raw-v1")
WMT16_HUB = ("wmt/wmt16", "ro-en")


# --------------------------------------------------------------------------------------------------
# Readers


def read_lines(path: Path, what: str) -> list[str]:
    """The lines of a UTF-8 text file; a :class:`DataError` naming ``what`` if it is missing or unreadable."""
    if not path.is_file():
        raise DataError(f"{what} {path} does not exist or is not a file")
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise not_utf8(path) from None


def read_documents(path: str | Path, text_column: str = "text", what: str = "data file") -> list[str]:
    """The documents of an ``lm`` file (see the module docstring); an empty file is an error."""
    path = Path(path)
    fmt = text_format(path)
    if fmt == "text":
        lines = read_lines(path, what)
        if any(not line.strip() for line in lines):  # blank-line separated paragraphs
            paragraphs = itertools.groupby(lines, key=lambda line: bool(line.strip()))
            docs = [" ".join(line.strip() for line in group) for filled, group in paragraphs if filled]
        else:
            docs = [line.strip() for line in lines]
    else:
        table = read_file(path, text_columns=(text_column,), label_column=None, file_format=fmt, what=what)
        docs = [text for text in table.texts[0] if text.strip()]
    if not docs:
        raise DataError(f"{what} {path}: no text (an empty file, or only blank lines)")
    return docs


def text_format(path: Path) -> str:
    """``"text"`` for a plain text file, else the table format of :func:`detect_format`."""
    table = Path(path.name.lower().removesuffix(".gz")).suffix in EXTENSIONS
    return detect_format(path) if table else "text"


def read_parallel(
    spec: str, source_column: str = "source", target_column: str = "target", what: str = "data file"
) -> Seq2SeqExamples:
    """Pairs from ``SOURCE_FILE,TARGET_FILE`` (line-aligned text files) or a table with both columns."""
    if source_column == target_column:
        raise DataError(
            f"{what} {spec}: the source and the target column are both {source_column!r}; a pair takes two "
            "different columns (--source-column and --target-column)"
        )
    parts = spec.split(",")
    if len(parts) == 2 and all(text_format(Path(p)) == "text" for p in parts):
        sources = read_lines(Path(parts[0]), f"{what} (source)")
        targets = read_lines(Path(parts[1]), f"{what} (target)")
        if len(sources) != len(targets):
            raise DataError(
                f"{what}: {parts[0]} has {len(sources)} lines but {parts[1]} has {len(targets)}; the two files "
                "must be line-aligned (line i of one translates line i of the other)"
            )
        lines = range(1, len(sources) + 1)
        where = f"{parts[0]},{parts[1]}"
    else:
        path = Path(spec)
        if text_format(path) == "text":
            raise DataError(
                f"{what} {spec}: a seq2seq file is a CSV/TSV/JSONL table with a source and a target column, "
                "or two line-aligned text files written SOURCE_FILE,TARGET_FILE"
            )
        table = read_file(path, text_columns=(source_column, target_column), label_column=None, what=what)
        sources, targets = list(table.texts[0]), list(table.texts[1])
        lines = table.lines
        where = spec
    for line, source, target in zip(lines, sources, targets, strict=True):
        for side, text in (("source", source), ("target", target)):
            if not text.strip():
                raise DataError(f"{where} line {line}: the {side} text is empty")
    if not sources:
        raise DataError(f"{what} {where}: no sentence pairs (an empty file)")
    return Seq2SeqExamples.from_pairs([s.strip() for s in sources], [t.strip() for t in targets])


# --------------------------------------------------------------------------------------------------
# Loaders


def _file_splits(task: Task, options: LoadOptions, read: Any) -> tuple[Task, TaskData]:
    """Train and evaluation splits of a file task (a ``dev`` split carved from train when none is given)."""
    if options.train_file is None:
        raise DataError(f"task {task.name!r} needs train_file (--train-file)")
    train = read(options.train_file, "train file")
    if options.eval_files:
        evals = {name: read(path, f"eval file {name!r}") for name, path in options.eval_files.items()}
    else:
        if round(0.1 * len(train)) < 1:  # round() as carve_validation rounds: 6 examples give 1
            raise DataError(
                f"{options.train_file}: {len(train)} example(s); without --eval-file a dev split of 10% is "
                "carved from the training file, and that is no example here: give --eval-file NAME=PATH, or "
                "at least 6 examples"
            )
        train, dev = carve_validation(train, 0.1, 0, what=str(options.train_file))
        logger.warning("task %s: no eval file; dev is 10%% of %s (seed 0)", task.name, options.train_file)
        evals = {"dev": dev}
    source = f"files {options.train_file}" + "".join(f", {p}" for p in (options.eval_files or {}).values())
    return replace(task, eval_split_names=tuple(evals)), TaskData(
        train=train, eval_splits=evals, source=source
    )


def load_lm_files(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Loader of task ``lm``: documents from text or table files."""
    columns = options.text_columns or ("text",)
    if len(columns) != 1:
        raise DataError(f"task 'lm' reads one text column, got {len(columns)}: {', '.join(columns)}")
    return _file_splits(task, options, lambda path, what: documents(read_documents(path, columns[0], what)))


def load_seq2seq_files(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Loader of task ``seq2seq``: pairs from a table or two parallel text files."""
    columns = options.text_columns or ("source", "target")
    if len(columns) != 2:
        raise DataError(
            f"task 'seq2seq' reads a source and a target column, got {len(columns)}: {', '.join(columns)}"
        )
    return _file_splits(task, options, lambda path, what: read_parallel(path, columns[0], columns[1], what))


def load_movie_reviews_lm(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    if options.hub:
        raise DataError("task 'movie-reviews-lm' has no hub source; for the hub use task 'wikitext-2'")
    path = find_nltk_zip(options.data_dir, MOVIE_REVIEWS_ZIP, task.name)
    parts = {name: documents(examples.text_a) for name, examples in read_movie_reviews(path).items()}
    return split_data(task, parts, f"nltk movie_reviews {path} (as text)")


_HEADING = re.compile(r"^ = [^=].* = $")


def wikitext_articles(lines: list[str]) -> list[str]:
    """WikiText's lines as articles: a new article at each top-level `` = Title = `` heading."""
    articles: list[list[str]] = []
    for line in lines:
        if _HEADING.match(line.rstrip("\n")):
            articles.append([])
        if line.strip():
            if not articles:
                articles.append([])
            articles[-1].append(line.strip())
    return [" ".join(a) for a in articles if a]


def load_wikitext2(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    hub_only(task, options, " ".join(WIKITEXT2_HUB))
    data = load_hub(*WIKITEXT2_HUB)
    parts = {
        split: documents(wikitext_articles(list(data[HUB_SPLITS[split]]["text"])))
        for split in ("train", *task.eval_split_names)
    }
    return split_data(task, parts, f"hub {WIKITEXT2_HUB[0]}")


def multi30k_dir(data_dir: str | None) -> Path:
    """The Multi30k folder: ``data_dir`` itself, or its ``multi30k`` subfolder, or ``$ATTENDOUT_DATA/multi30k``."""
    root = data_root(
        data_dir,
        "multi30k",
        "task 'multi30k' needs data_dir=<folder with train.en, train.de...> (or ATTENDOUT_DATA)",
    )
    for folder in (root, root / "multi30k"):
        if (folder / "train.en").is_file():
            return folder
    raise DataError(
        f"task 'multi30k': no train.en in {root} or {root / 'multi30k'} (the Multi30k task 1 files)"
    )


def load_multi30k(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    if options.hub:
        raise DataError("task 'multi30k' reads a local folder (data_dir); for the hub use task 'wmt16-en-ro'")
    folder = multi30k_dir(options.data_dir)
    src, tgt = task.text_fields
    parts = {
        split: read_parallel(f"{folder / split}.{src},{folder / split}.{tgt}", what=f"multi30k {split}")
        for split in ("train", *task.eval_split_names)
    }
    return split_data(task, parts, f"multi30k {folder}")


def load_wmt16_en_ro(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    hub_only(task, options, " ".join(WMT16_HUB))
    data = load_hub(*WMT16_HUB)
    parts = {}
    for split in ("train", *task.eval_split_names):
        rows = data[HUB_SPLITS[split]]["translation"]
        parts[split] = Seq2SeqExamples.from_pairs([r["en"] for r in rows], [r["ro"] for r in rows])
    return split_data(task, parts, f"hub {WMT16_HUB[0]}")


register_task(LM_FILE_TASK, load_lm_files, replace=True)
register_task(SEQ2SEQ_FILE_TASK, load_seq2seq_files, replace=True)
register_task(MOVIE_REVIEWS_LM, load_movie_reviews_lm, replace=True)
register_task(WIKITEXT2, load_wikitext2, replace=True)
register_task(MULTI30K, load_multi30k, replace=True)
register_task(MULTI30K_EN_FR, load_multi30k, replace=True)
register_task(WMT16_EN_RO, load_wmt16_en_ro, replace=True)
