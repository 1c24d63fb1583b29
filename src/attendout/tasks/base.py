"""What every module of :mod:`attendout.tasks` builds on: :class:`DataError` and the names of the
built-in task kinds. :mod:`.core` (the task registry, :class:`~attendout.tasks.core.Task`) and
:mod:`.metrics` (which ``Task`` checks its metric names against) both import from here, and
:mod:`.core` re-exports every name.
"""

from __future__ import annotations

__all__ = [
    "CLASSIFICATION",
    "LM",
    "MULTIPLE_CHOICE",
    "REGRESSION",
    "SEQ2SEQ",
    "TOKEN_CLASSIFICATION",
    "DataError",
    "is_generation",
]


class DataError(ValueError):
    """A bad input: missing file, malformed line, unknown label, unknown task, empty split...

    The message is always one line and names the file, line number, column and value involved.
    """


# --------------------------------------------------------------------------------------------------
# Task kinds (further kinds are registered with attendout.tasks.core.register_kind)

CLASSIFICATION = "classification"
REGRESSION = "regression"
TOKEN_CLASSIFICATION = "token_classification"
MULTIPLE_CHOICE = "multiple_choice"
LM = "lm"  # the generation kinds (:mod:`attendout.tasks.generation` registers them)
SEQ2SEQ = "seq2seq"


def is_generation(kind: str) -> bool:
    """True for the generation kinds (``lm``, ``seq2seq``)."""
    return kind in (LM, SEQ2SEQ)
