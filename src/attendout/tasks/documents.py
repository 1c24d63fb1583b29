"""Long documents: ``movie-reviews`` (NLTK's copy of Pang & Lee's review polarity v2.0, offline) and
``imdb`` (the hub). Both are plain classification tasks, labels ``("neg", "pos")`` (pos = index 1, the
positive class of F1); metrics accuracy, F1. Fitting a document into the model's window (truncation,
sliding windows) is the model side's job: the examples hold whole documents.

**movie-reviews**: 2,000 reviews, 1,000 ``pos`` and 1,000 ``neg``, read straight from
``movie_reviews.zip`` (no nltk): ``movie_reviews/{pos,neg}/cv###_#####.txt``, one sentence per line,
lower-cased and tokenised by the authors; the lines are joined with single spaces. The ``cv###``
tag is the authors' cross-validation fold (cv000-099 fold 1, ... cv900-999 fold 10; each tag names
one pos and one neg review). Split by it: ``cv000``-``cv799`` train (1,600 reviews), ``cv800``-``cv899``
``dev`` (200), ``cv900``-``cv999`` ``test`` (200); each split is balanced. The zip is looked for as
for ``ptb-pos`` (``data_dir`` the ``nltk_data`` folder, its ``corpora`` folder or the zip; with no
``data_dir``, ``$ATTENDOUT_DATA/nltk_data``). An empty review file is a DataError naming it.

Length, in word pieces of the packaged MiniLM's tokenizer (``[CLS]`` and ``[SEP]`` included; measured
on all 2,000): median 799, 10th percentile 434, 90th 1,316, shortest 27, longest 3,253; 84.5% are
longer than 512 (98.8% longer than 256). Median 697 whitespace words.

**imdb** (hub only: ``stanfordnlp/imdb``): 25,000 train and 25,000 ``test`` reviews, labels neg/pos
(the ``unsupervised`` split is not loaded). Offline, ``movie-reviews`` stands in for it.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any

from .base import CLASSIFICATION, DataError
from .core import Examples, LoadOptions, Task, TaskData, register_task
from .readers import ARCHIVE_ERRORS
from .tokens import find_nltk_zip
from .utf8 import not_utf8_bytes

__all__ = [
    "IMDB",
    "IMDB_HUB",
    "MOVIE_REVIEWS",
    "MOVIE_REVIEWS_SPLITS",
    "load_imdb",
    "load_movie_reviews",
    "read_movie_reviews",
]

SENTIMENT = ("neg", "pos")
MOVIE_REVIEWS_ZIP = "movie_reviews.zip"
MOVIE_REVIEWS_SPLITS = {"train": (0, 799), "dev": (800, 899), "test": (900, 999)}  # cv numbers, inclusive
IMDB_HUB = "stanfordnlp/imdb"

MOVIE_REVIEWS = Task(
    name="movie-reviews",
    kind=CLASSIFICATION,
    text_fields=("text",),
    label_names=SENTIMENT,
    metrics=("accuracy", "f1"),
    eval_split_names=("dev", "test"),
    description="2,000 long movie reviews (Pang & Lee v2.0 from nltk_data), neg/pos, split by cv fold",
)

IMDB = Task(
    name="imdb",
    kind=CLASSIFICATION,
    text_fields=("text",),
    label_names=SENTIMENT,
    metrics=("accuracy", "f1"),
    eval_split_names=("test",),
    description="IMDB movie reviews, neg/pos (hub only; movie-reviews is the offline stand-in)",
)

_REVIEW = re.compile(r"movie_reviews/(neg|pos)/cv(\d{3})_\d+\.txt")


def read_movie_reviews(path: str | Path) -> dict[str, Examples]:
    """The reviews of ``movie_reviews.zip`` by split (see the module docstring), in file-name order."""
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except ARCHIVE_ERRORS as error:
        raise DataError(f"{path}: cannot read the zip ({type(error).__name__}: {error})") from None
    parts: dict[str, tuple[list[str], list[int], list[str]]] = {s: ([], [], []) for s in MOVIE_REVIEWS_SPLITS}
    with archive:
        for member in sorted(archive.namelist()):
            match = _REVIEW.fullmatch(member)
            if match is None:
                continue
            label, fold = match.group(1), int(match.group(2))
            try:
                raw = archive.read(member)
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise not_utf8_bytes(f"{path}:{member}", raw) from None
            except ARCHIVE_ERRORS as error:  # a damaged member
                raise DataError(
                    f"{path}:{member}: cannot read it from the zip ({type(error).__name__}: {error}); the zip "
                    "is damaged: download it again"
                ) from None
            text = " ".join(line.strip() for line in text.splitlines() if line.strip())
            if not text:
                raise DataError(f"{path}:{member}: the review is empty")
            split = next(s for s, (first, last) in MOVIE_REVIEWS_SPLITS.items() if first <= fold <= last)
            texts, labels, names = parts[split]
            texts.append(text)
            labels.append(SENTIMENT.index(label))
            names.append(Path(member).stem)
    examples: dict[str, Examples] = {}
    for split, (texts, labels, _names) in parts.items():
        if not texts:
            raise DataError(f"{path}: no movie_reviews/{{pos,neg}}/cv###_*.txt files for split {split!r}")
        examples[split] = Examples(text_a=texts, text_b=None, labels=labels)
    return examples


def load_movie_reviews(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Loader of ``movie-reviews`` (see the module docstring)."""
    if options.hub:
        raise DataError(
            f"task 'movie-reviews' has no hub source; for the hub's long reviews use task 'imdb' ({IMDB_HUB})"
        )
    path = find_nltk_zip(options.data_dir, MOVIE_REVIEWS_ZIP, task.name)
    parts = read_movie_reviews(path)
    eval_splits = {split: parts[split] for split in task.eval_split_names}
    return task, TaskData(train=parts["train"], eval_splits=eval_splits, source=f"nltk movie_reviews {path}")


def _imdb_examples(dataset: Any, where: str) -> Examples:
    columns = list(getattr(dataset, "column_names", []))
    for name in ("text", "label"):
        if name not in columns:
            raise DataError(f"{where}: no column {name!r} (columns present: {', '.join(map(repr, columns))})")
    names = list(getattr(dataset.features["label"], "names", SENTIMENT))
    texts: list[str] = []
    labels: list[int] = []
    for row_no, (text, label) in enumerate(zip(dataset["text"], dataset["label"], strict=True), start=1):
        if not 0 <= int(label) < len(names) or names[int(label)] not in SENTIMENT:
            raise DataError(f"{where} row {row_no}, label: {label!r} is not one of {', '.join(SENTIMENT)}")
        if not str(text).strip():
            raise DataError(f"{where} row {row_no}, text: the review is empty")
        texts.append(str(text))
        labels.append(SENTIMENT.index(names[int(label)]))
    return Examples(text_a=texts, text_b=None, labels=labels)


def load_imdb(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Loader of ``imdb``: the hub only (see the module docstring)."""
    if not options.hub:
        raise DataError(
            f"task 'imdb' comes from the hub only ({IMDB_HUB}): pass hub=True (--hub); offline, movie-reviews "
            "is the long-document stand-in"
        )
    from .glue import import_datasets

    datasets = import_datasets()
    try:
        dataset_dict = datasets.load_dataset(IMDB_HUB)
    except Exception as error:
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise DataError(
            f"could not load {IMDB_HUB} from the hub ({type(error).__name__}: {message})"
        ) from None
    parts: dict[str, Examples] = {}
    for split in ("train", "test"):
        if split not in dataset_dict:
            raise DataError(f"hub {IMDB_HUB}: no split {split!r}")
        parts[split] = _imdb_examples(dataset_dict[split], f"hub {IMDB_HUB} {split}")
    return task, TaskData(train=parts["train"], eval_splits={"test": parts["test"]}, source=f"hub {IMDB_HUB}")


register_task(MOVIE_REVIEWS, load_movie_reviews, replace=True)
register_task(IMDB, load_imdb, replace=True)
