"""``drophead``: drop whole attention heads (Zhou et al., 2020, "Scheduled DropHead").

In training, each head of each layer is dropped per example with probability p: its attention
weights become zero, so the head contributes nothing to the layer output. The kept heads are scaled
by H / (number kept), DropHead's rescaling that keeps the expected sum of head outputs. If every head
of an example is dropped, its layer output is zero for that example. Keeps the model's own dropout.

**Schedule.** The paper trains with a scheduled rate shaped like a V (its dropout-rate scheduler, as
we read it): the rate starts at ``p_start``, falls linearly to 0 over the steps of the learning-rate
warm-up, then rises linearly to ``p_end`` at the end of training, and the paper sets
``p_start = p_end`` to avoid another hyperparameter. Here that is
``schedule="v"`` (the default), a piecewise-linear curve with three knots over the fraction of
training done::

    (0, p)  ->  (warmup, 0)  ->  (1, p)

``warmup`` (0.1) is attendout's default ``--warmup-ratio``; keep the two equal if you change one (the
method does not see the loop's learning-rate schedule). ``p`` (0.1) is attendout's default, not a
value taken from the paper; the mean rate over a run is about ``p / 2``. ``schedule="fixed"`` drops at
``p`` throughout (attendout before issue 20); ``schedule="0:0.2,0.5:0.1,1:0"`` gives any other curve
(``progress:p`` knots, as ``scheduled``'s). A scheduled rate needs the training progress: attendout's
loops give it (``attendout finetune``, ``attendout.prepare``, ``attendout.hf.Trainer``); with
``attendout.apply`` alone, call ``handle.set_progress(step / total_steps)`` before each step, or a
training forward raises instead of dropping at one rate for the whole run.

Heads of every self-attention layer the hook reaches are dropped (decoders and both stacks of T5);
an encoder-decoder's cross-attention heads never are (see :mod:`attendout.methods.base`).
"""

import lazy_loader

from ..registry import register_method
from .config import DropHeadConfig

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

register_method("drophead", DropHeadConfig, "attendout.methods.drophead.method:head_drop")
