"""A moved import path, kept for one release: ``attendout.train`` is now :mod:`attendout.run`.

``from attendout.train import finetune`` still works, with a :class:`DeprecationWarning`; write
``from attendout.run import finetune``. The class ``Trainer`` is now ``attendout.run.TrainingLoop``.
To be removed on 2027-03-01.
"""

from __future__ import annotations

import warnings

from .run import TrainingLoop, finetune

__all__ = ["Trainer", "finetune"]

warnings.warn(
    "attendout.train moved to attendout.run (finetune; Trainer is now TrainingLoop); "
    "the old path goes on 2027-03-01",
    DeprecationWarning,
    stacklevel=2,
)

Trainer = TrainingLoop
