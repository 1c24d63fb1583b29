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
from dataclasses import replace
from pathlib import Path
from typing import Any

from .base import CLASSIFICATION, DataError
from .core import Examples, LoadOptions, Task, TaskData, register_task, split_data
from .hub import hub_columns, hub_only, load_hub
from .readers import zip_texts
from .tokens import find_nltk_zip

SENTIMENT = ("neg", "pos")
MOVIE_REVIEWS_ZIP = "movie_reviews.zip"
MOVIE_REVIEWS_SPLITS = {"train": (0, 799), "dev": (800, 899), "test": (900, 999)}  # cv numbers, inclusive
IMDB_HUB = "stanfordnlp/imdb"

MOVIE_REVIEWS = Task(
    name="movie-reviews",
    kind=CLASSIFICATION,
    label_names=SENTIMENT,
    metrics=("accuracy", "f1"),
    eval_split_names=("dev", "test"),
    description="2,000 long movie reviews (Pang & Lee v2.0 from nltk_data), neg/pos, split by cv fold",
)
IMDB = replace(
    MOVIE_REVIEWS,
    name="imdb",
    eval_split_names=("test",),
    description="IMDB movie reviews, neg/pos (hub only; movie-reviews is the offline stand-in)",
)

_REVIEW = re.compile(r"movie_reviews/(neg|pos)/cv(\d{3})_\d+\.txt")


def read_movie_reviews(path: str | Path) -> dict[str, Examples]:
    """The reviews of ``movie_reviews.zip`` by split (see the module docstring), in file-name order."""
    path = Path(path)
    parts: dict[str, tuple[list[str], list[int]]] = {s: ([], []) for s in MOVIE_REVIEWS_SPLITS}
    for member, match, text in zip_texts(path, _REVIEW):
        label, fold = match.group(1), int(match.group(2))
        text = " ".join(line.strip() for line in text.splitlines() if line.strip())
        if not text:
            raise DataError(f"{path}:{member}: the review is empty")
        split = next(s for s, (first, last) in MOVIE_REVIEWS_SPLITS.items() if first <= fold <= last)
        parts[split][0].append(text)
        parts[split][1].append(SENTIMENT.index(label))
    examples: dict[str, Examples] = {}
    for split, (texts, labels) in parts.items():
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
    return split_data(task, read_movie_reviews(path), f"nltk movie_reviews {path}")


def _imdb_examples(dataset: Any, where: str) -> Examples:
    hub_columns(dataset, where, ("text", "label"))
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
    hub_only(task, options, IMDB_HUB, "; offline, movie-reviews is the long-document stand-in")
    dataset_dict = load_hub(IMDB_HUB)
    parts: dict[str, Examples] = {}
    for split in ("train", "test"):
        if split not in dataset_dict:
            raise DataError(f"hub {IMDB_HUB}: no split {split!r}")
        parts[split] = _imdb_examples(dataset_dict[split], f"hub {IMDB_HUB} {split}")
    return split_data(task, parts, f"hub {IMDB_HUB}")


register_task(MOVIE_REVIEWS, load_movie_reviews, replace=True)
register_task(IMDB, load_imdb, replace=True)
