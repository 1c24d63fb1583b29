"""AttendOut (paper 001, "Not All Attention Is All You Need", §4 and Algorithm 1).

A Generator (G-Net) learns, per sample and per layer, which attention scores of an Attacker (A-Net)
to drop; the Attacker and a Defender (D-Net, the model with its default dropout) train side by side
on the same batches, and every ``dropout_steps`` steps a game on validation samples rewards the
Generator when the Attacker does better (REINFORCE, eq. 5) and re-initialises both from the winner.

* :mod:`.config`    -- :class:`AttendOutConfig`, the options and their defaults (registered as ``attendout``)
* :mod:`.generator` -- :class:`Generator`, Gumbel masks, the REINFORCE loss and baseline, the hook slot
* :mod:`.policy`    -- :class:`GeneratorPolicy`, how G learns from games: rate exploration, eq. 5, the control
* :mod:`.strategy`  -- :class:`AttendOutStrategy`, the training loop's part: the game
* :mod:`.runlog`    -- :func:`read_drop_pattern`, a run's logged drop probabilities (plots, §7.2 fit)
"""

from .config import AttendOutConfig
from .generator import (
    Generator,
    GeneratorSample,
    MaskSlot,
    MovingAverageBaseline,
    gumbel_drop,
    reinforce_loss,
)
from .policy import GeneratorPolicy, RunningStats, rate_log_prob
from .runlog import DROP_PROB_KEY, EXPLORED_PROB_KEY, DropPattern, read_drop_pattern
from .strategy import AttendOutStrategy, CachedAction, copy_optimizer_state, score_gap

__all__ = [
    "DROP_PROB_KEY",
    "EXPLORED_PROB_KEY",
    "AttendOutConfig",
    "AttendOutStrategy",
    "CachedAction",
    "DropPattern",
    "Generator",
    "GeneratorPolicy",
    "GeneratorSample",
    "MaskSlot",
    "MovingAverageBaseline",
    "RunningStats",
    "copy_optimizer_state",
    "gumbel_drop",
    "rate_log_prob",
    "read_drop_pattern",
    "reinforce_loss",
    "score_gap",
]
