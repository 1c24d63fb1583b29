"""The recipe defaults of the tasks whose sizes the global defaults do not fit.

``attendout finetune`` and ``advise`` apply them to the options a user leaves unset, as
:meth:`attendout.config.TrainConfig.for_task` does; an experiment file sets its own; ``attendout
tasks`` lists them. A module of its own so that listing the tasks loads no model code.
"""

from __future__ import annotations

from typing import Any

from .base import DataError
from .core import get_task

#: Recipe defaults of the tasks whose sizes the global defaults do not fit, applied to the options a user
#: leaves unset (by ``attendout finetune`` and :meth:`TrainConfig.for_task`; an experiment file sets its
#: own). Token and multiple-choice tasks: batch 8 at lr 1e-4 (measured with the offline MiniLM, 500
#: CoNLL-2003 sentences x 1 epoch: batch 32 at 5e-5, 16 steps, left entity F1 at 0.00; batch 8 at 1e-4,
#: 63 steps, reached dev F1 0.35). Long documents: the model's whole 512-piece window.
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "conll2003": {"batch_size": 8, "learning_rate": 1e-4},
    "ptb-pos": {"batch_size": 8, "learning_rate": 1e-4},
    "arc-easy": {"batch_size": 8, "learning_rate": 1e-4},
    "arc-challenge": {"batch_size": 8, "learning_rate": 1e-4},
    "swag": {"batch_size": 16, "learning_rate": 5e-5},
    "movie-reviews": {"max_length": 512, "batch_size": 8},
    "imdb": {"max_length": 512, "batch_size": 8},
}


def task_defaults(task: str | None) -> dict[str, Any]:
    """The recipe defaults of ``task`` (:data:`TASK_DEFAULTS`; names as :func:`get_task` resolves them)."""
    if task is None:
        return {}
    try:
        name = get_task(task).name
    except DataError:
        return {}
    return dict(TASK_DEFAULTS.get(name, {}))
