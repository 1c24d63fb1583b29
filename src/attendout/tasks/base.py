"""What every module of :mod:`attendout.tasks` builds on: :class:`DataError` and the task kinds, each
defined here once: their names, what a label is for each (:data:`KINDS`) and which generate text
(:data:`GENERATION_KINDS`). :mod:`.core` (the task registry, :class:`~attendout.tasks.core.Task`) and
:mod:`.metrics` (which ``Task`` checks its metric names against) both import from here.
"""

from __future__ import annotations


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
LM = "lm"
SEQ2SEQ = "seq2seq"

#: kind -> one-line description of what a label is for that kind, in registration order
KINDS: dict[str, str] = {
    CLASSIFICATION: "one label per example: an index into Task.label_names",
    REGRESSION: "one float per example",
    TOKEN_CLASSIFICATION: "one tag per word: a list of indices into Task.label_names (TokenExamples)",
    MULTIPLE_CHOICE: "the index of the right choice among Task.choices (ChoiceExamples)",
    LM: "causal language modelling: documents (text_a), no labels; metric perplexity",
    SEQ2SEQ: "sequence to sequence: a source (text_a) and a target text (Seq2SeqExamples)",
}

#: The generation kinds (their tasks: :mod:`attendout.tasks.lm_seq2seq`).
GENERATION_KINDS = (LM, SEQ2SEQ)


def is_generation(kind: str) -> bool:
    """True for the generation kinds (``lm``, ``seq2seq``)."""
    return kind in GENERATION_KINDS
