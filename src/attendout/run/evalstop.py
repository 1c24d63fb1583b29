"""A stop requested during an evaluation of the fine-tuning loop: :class:`EvaluationStopped`.

A validation or the final evaluation of a generation task decodes for a long time. Inside the loop
(:func:`attendout.run.interrupt.deferred`), a stop requested then ends it before its next batch: the loop
(:mod:`attendout.run.loop`) writes a checkpoint of the state from before that evaluation began and raises
:class:`EvaluationStopped` naming the checkpoint and the evaluation. A resumed run runs that evaluation
again from its start: a validation before the step's training goes on, the final evaluation on every
evaluation split (nothing of a part done is kept), and so reaches the uninterrupted run's numbers.
"""

from __future__ import annotations

from pathlib import Path

from .interrupt import Stopped

__all__ = ["EvaluationStopped"]


class EvaluationStopped(Stopped):
    """A stop requested during an evaluation (a validation, or the final evaluation of the evaluation
    splits), raised before its next batch. The loop writes a checkpoint of the state before that
    evaluation began and raises it again naming the checkpoint and ``during``: a resumed run runs that
    evaluation again from its start (nothing of the part done is kept)."""

    def __init__(
        self,
        signum: int,
        checkpoint: str | Path | None = None,
        step: int | None = None,
        total: int | None = None,
        during: str | None = None,
    ) -> None:
        self.during = during
        super().__init__(signum, checkpoint, step, total)

    def describe(self) -> str:
        text = super().describe()
        if self.during and self.checkpoint is not None:
            text += f" (stopped during {self.during}, which the resumed run does again from its start)"
        return text
