"""``scheduled``: scores dropout with a per-layer piecewise-linear schedule (paper 001 §7.2).

Paper 001 approximates the per-layer drop rates that AttendOut learns (its Figure 3) by Bernoulli
scores dropout whose probability follows a line per layer: every layer starts at 0.6 and has its
own slope. A schedule here is, per layer, a list of knots (progress, p) with progress in [0, 1]
(the fraction of training done); p is linearly interpolated between knots and held flat outside
them. ``start`` + ``slopes`` is the paper's form (two knots: (0, start) and (1, start + slope));
``knots`` gives any piecewise-linear curve. Probabilities are clipped to [0, 1].

``from_run`` is the paper's own route to a schedule (§7.2): it fits, per layer, a piecewise-linear
curve of ``fit_segments`` pieces (equally spaced knots, least squares) to the mean drop probabilities
that an AttendOut run logged (its Figure 3), and uses those knots. With ``fit_slopes`` it fits the
paper's own form instead: "we initialize the dropout probabilities to 0.6 for all attention layers and
set a specific slope for each of them", i.e. every layer's line starts at ``start`` and only its slope
is fitted (least squares through (0, start)). The fitted knots are stored in ``knots``, so the run's
config records the schedule it used; a config with both ``from_run`` and ``knots`` (a saved one) uses
the knots and does not read the run again.

**Why one slope by default.** The paper gives no slope values: they are read off the curves its own
AttendOut runs learned (Figure 3, per dataset), which only say that lower layers drop more (QNLI's
first layer stays near 0.55, its fourth decays faster). Per-layer slopes therefore need an AttendOut
run (``from_run`` with ``fit_slopes``) or are given by hand (``slopes``, one per layer). Without
either, every layer gets the same slope, -0.5: from the paper's 0.6 to 0.1, the fixed rate of
``scores-dropout``, at the end of training; our choice, not the paper's.

Every loop of attendout's (its own, ``attendout.hf.Trainer``, ``attendout.prepare``) reports progress
through ``set_progress``; with ``attendout.apply`` alone, call ``handle.set_progress(step / total)``
yourself: a training forward before the first call raises, rather than training at the start rate for
the whole run. Keeps the model's own dropout. Acts, as ``scores-dropout``, on every self-attention the
hook reaches (T5: its encoder's layers, then its decoder's); never on cross-attention.
"""

import lazy_loader

from ..registry import register_method
from .config import ScheduledConfig

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

register_method("scheduled", ScheduledConfig, "attendout.methods.scheduled.method:scheduled_scores_dropout")
