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
* :mod:`attendout.methods.droplog` -- :func:`~attendout.methods.droplog.read_drop_pattern`, a run's logged
  drop probabilities (plots, §7.2 fit), shared with ``scheduled`` and ``drophead``
"""

import lazy_loader

from ..registry import register_method
from .config import AttendOutConfig

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

register_method(
    "attendout",
    AttendOutConfig,
    "attendout.methods.attendout.method:mask_slot",
    "attendout.methods.attendout.strategy:AttendOutStrategy",
)
