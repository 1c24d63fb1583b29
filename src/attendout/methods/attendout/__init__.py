"""AttendOut (paper 001, "Not All Attention Is All You Need", §4 and Algorithm 1).

A Generator (G-Net) learns, per sample and per layer, which attention scores of an Attacker (A-Net)
to drop; the Attacker and a Defender (D-Net, the model with its default dropout) train side by side
on the same batches, and every ``dropout_steps`` steps a game on validation samples rewards the
Generator when the Attacker does better (REINFORCE, eq. 5) and re-initialises both from the winner.

* :mod:`.config`    -- :class:`AttendOutConfig`, the options and their defaults (registered as ``attendout``)
* :mod:`.generator` -- :class:`Generator`, Gumbel masks, the REINFORCE loss and baseline
* :mod:`.method`    -- :class:`MaskSlot`, its part in the hook: a training forward must bring its masks
* :mod:`.policy`    -- :class:`GeneratorPolicy`, how G learns from games: rate exploration, eq. 5, the control
* :mod:`.game`      -- the game's rules as pure functions: scores, rewards, the gap, the winner
* :mod:`.players`   -- setting up the game: G and the embedding output it reads, its layers, the games' data
* :mod:`.scoring`   -- how a game scores D or A: per-sample scores and the main metric, in eval mode
* :mod:`.stats`     -- :class:`~.stats.StepStatistics`, the drop probabilities and game statistics logged
* :mod:`.strategy`  -- :class:`AttendOutStrategy`, the training loop's part: models, optimizers, cache
* :mod:`attendout.methods.droplog` -- :func:`read_drop_pattern`, a run's logged drop probabilities (plots,
  §7.2 fit), shared with ``scheduled`` and ``drophead``
"""

from typing import TYPE_CHECKING

from ...lazy import lazy_names
from ..registry import register_method
from .config import AttendOutConfig

register_method(
    "attendout",
    AttendOutConfig,
    "attendout.methods.attendout.method:mask_slot",
    "attendout.methods.attendout.strategy:AttendOutStrategy",
)

if TYPE_CHECKING:  # the lazy names, for type checkers and the API reference
    from ..droplog import DROP_PROB_KEY, EXPLORED_PROB_KEY, DropPattern, read_drop_pattern
    from .game import score_gap
    from .generator import (
        Generator,
        GeneratorSample,
        MovingAverageBaseline,
        gumbel_drop,
        reinforce_loss,
    )
    from .method import MaskSlot
    from .policy import GeneratorPolicy, RunningStats, rate_log_prob
    from .strategy import AttendOutStrategy, CachedAction, copy_optimizer_state

__getattr__ = lazy_names(
    __name__,
    {
        "score_gap": ".game",
        "MaskSlot": ".method",
        **dict.fromkeys(
            (
                "Generator",
                "GeneratorSample",
                "MovingAverageBaseline",
                "gumbel_drop",
                "reinforce_loss",
            ),
            ".generator",
        ),
        **dict.fromkeys(("GeneratorPolicy", "RunningStats", "rate_log_prob"), ".policy"),
        **dict.fromkeys(
            ("DROP_PROB_KEY", "EXPLORED_PROB_KEY", "DropPattern", "read_drop_pattern"), "..droplog"
        ),
        **dict.fromkeys(("AttendOutStrategy", "CachedAction", "copy_optimizer_state"), ".strategy"),
    },
)

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
