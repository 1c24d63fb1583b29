"""Bernoulli attention dropout on the weights (eq. 2) or on the scores (eq. 3) of paper 001 §3.2.

* ``attn-dropout`` is vanilla attention dropout (paper 001 §7.1, "Vanilla Dropout"): a Bernoulli mask on
  the weights after the softmax, *in place of* the model's own attention dropout (which is already
  p = 0.1 in BERT-style models, so the default here is 0.2). It rescales the kept weights by 1/(1-p)
  like standard dropout (and like the model's own); ``rescale=False`` leaves them as they are. With
  rescaling it *is* the model's dropout at another rate, so it runs where the model's own runs: inside
  SDPA (``dropout_p``), at the cost of stock attention, with no mask of ours; its realised rate is then
  not counted: its statistic is the rate it handed SDPA (``attn-dropout/p/L*``), not a ``drop_rate``.
  ``rescale=False`` needs its own mask (the explicit path).
* ``scores-dropout`` sets scores to -inf before the softmax; the softmax renormalises the row, which
  plays the part of the 1/(1-p) rescaling. A row with every key dropped attends uniformly (eq. 4).
  It *adds to* the model's own attention dropout, which still acts on the weights. Its mask is a
  :class:`~attendout.attention.RandomDrops`: the attention path draws it where it needs it, a block
  of query rows at a time on the CPU path that fills dropped scores in place.

Both act on every self-attention the hook reaches: an encoder's, a decoder's (kept causal), both
stacks of T5; never on an encoder-decoder's cross-attention (see :mod:`attendout.methods.base`).
"""

import lazy_loader

from ..registry import register_method
from .config import AttnDropoutConfig, ScoresDropoutConfig

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

register_method("attn-dropout", AttnDropoutConfig, "attendout.methods.dropout.method:weights_dropout")

register_method("scores-dropout", ScoresDropoutConfig, "attendout.methods.dropout.method:scores_dropout")
