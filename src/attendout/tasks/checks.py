"""Checks of the splits a run trains and evaluates on, made once before training.

:func:`check_training_splits` is called where the training data is split (``split_for_training``), so
``attendout finetune``, ``attendout bench`` and the Python API all get it:

* an evaluation split with a class (or tag) that the training split never has is a :class:`DataError`:
  the model cannot learn it, and every such example is scored wrong whatever the method. (The file
  readers already refuse an evaluation label outside the train file's labels; this also covers tasks
  whose label set is fixed, such as a GLUE train file override lacking a class.)
* evaluation examples whose input is identical to a training example's (the same text, the same pair
  of texts, the same words, the same question and options) are counted per split, and one warning
  says how many: their scores measure memory rather than generalisation. The validation split is
  carved from train by index, so it is left out of the count.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Sequence
from numbers import Integral

from .base import DataError
from .core import ChoiceExamples, Examples, TaskData, TokenExamples

logger = logging.getLogger(__name__)


def input_key(examples: Examples, i: int) -> Hashable:
    """What the model reads of example ``i``: its text (a pair as a tuple), words, or question and options."""
    if isinstance(examples, ChoiceExamples):
        return examples.text_a[i], tuple((examples.choices or [])[i])
    if isinstance(examples, TokenExamples):
        return tuple((examples.words or [])[i])
    targets = getattr(examples, "targets", None)  # seq2seq: the source is what the model reads
    if targets is not None:
        return examples.text_a[i], None
    return examples.text_a[i], None if examples.text_b is None else examples.text_b[i]


def overlap_counts(train: Examples, evaluation: dict[str, Examples]) -> dict[str, int]:
    """Per evaluation split, how many of its examples have an input identical to a training example's."""
    seen = {input_key(train, i) for i in range(len(train))}
    return {
        name: sum(input_key(examples, i) in seen for i in range(len(examples)))
        for name, examples in evaluation.items()
    }


def _classes(labels: Iterable[object], tokens: bool) -> set[int] | None:
    """The class indices of a split's labels, or None when its labels are not classes (scores)."""
    flat = [tag for row in labels for tag in row] if tokens else list(labels)  # type: ignore[attr-defined]
    if not all(isinstance(y, Integral) and not isinstance(y, bool) for y in flat):
        return None
    return {int(y) for y in flat}


def _named(index: int, label_names: Sequence[str] | None) -> str:
    """``'unacceptable' (index 0)``, or ``index 0`` when the names are unknown or do not reach it."""
    if label_names is not None and 0 <= index < len(label_names):
        return f"{label_names[index]!r} (index {index})"
    return f"index {index}"


def check_training_splits(
    data: TaskData,
    train: Examples,
    evaluation: dict[str, Examples],
    label_names: Sequence[str] | None = None,
) -> None:
    """Refuse evaluation classes the training data never has; warn of train/eval input overlap.

    ``data`` is the task's data as loaded (its whole train split is what classes are checked against,
    so that a ``max_train_samples`` subsample missing a rare class is not an error); ``train`` and
    ``evaluation`` are the splits the run trains and evaluates on (after carving and subsampling).
    """
    # an answer is an option index, not a class; generation examples have texts, not labels
    if not isinstance(data.train, ChoiceExamples) and data.train.labels is not None:
        tokens = isinstance(data.train, TokenExamples)
        known = _classes(data.train.labels, tokens)
        for name, examples in data.eval_splits.items():
            present = _classes(examples.labels or [], tokens) if known is not None else None
            missing = sorted(present - known) if present is not None else []
            if missing:
                what = "tag" if tokens else "class"
                named = ", ".join(_named(i, label_names) for i in missing)
                raise DataError(
                    f"evaluation split {name!r} of {data.source} has {what} {named}, which the training "
                    "split never has: a model cannot "
                    f"learn a {what} it never sees; add training examples of it or leave those examples out"
                )
    counts = overlap_counts(train, evaluation)
    shared = [f"{n} of {len(evaluation[name])} {name!r}" for name, n in counts.items() if n]
    if shared:
        logger.warning(
            "train/eval overlap: %s examples have an input identical to a training example (their scores "
            "measure memory, not generalisation); remove them from the evaluation data or from train",
            " and ".join(shared),
        )
