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

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from ..attention import AttentionCall, AttentionEdit, AttentionMethod, RandomDrops, RateMeter
from ..attention.masks import bernoulli_drop, keep_scale
from .base import MethodConfig, check_probability, layers_field, register_method


class WeightsDropout(AttentionMethod):
    name = "attn-dropout"

    def __init__(self, p: float, rescale: bool, layers=None):
        self.p, self.rescale, self.layers = p, rescale, layers
        self.meter = RateMeter()
        self._applied: set[int] = set()  # layers that handed SDPA their rate since the last stats()

    def edit(self, call: AttentionCall) -> AttentionEdit:
        if self.rescale:  # eq. 2 with 1/(1-p): the model's own dropout at rate p, inside SDPA
            self._applied.add(call.layer)
            return AttentionEdit(dropout=self.p)
        drop = bernoulli_drop(call.shape, self.p, call.query.device)  # (B, H, Lq, Lk)
        self.meter.add(f"{self.name}/drop_rate/L{call.layer}", *call.dropped_fraction(drop))
        return AttentionEdit(
            scale_weights=keep_scale(drop, self.p, self.rescale, call.query.dtype), dropout=0.0
        )

    def stats(self) -> dict[str, float]:
        """The realised drop rate per layer where our masks drew it; the rate handed to SDPA
        (``attn-dropout/p/L*``) where SDPA drew it, which counts no draws."""
        applied = {f"{self.name}/p/L{layer}": self.p for layer in sorted(self._applied)}
        self._applied = set()
        return {**applied, **self.meter.pop()}


class ScoresDropout(AttentionMethod):
    name = "scores-dropout"

    def __init__(self, p: float, layers=None):
        self.p, self.layers = p, layers
        self.meter = RateMeter()

    def probability(self, layer: int) -> float:
        return self.p

    def edit(self, call: AttentionCall) -> AttentionEdit | None:
        p = self.probability(call.layer)
        if p <= 0:
            return None
        # drawn by the attention path where it needs the mask (a block of rows at a time, where it can)
        count = partial(self.meter.add, f"{self.name}/drop_rate/L{call.layer}")
        return AttentionEdit(random_drops=RandomDrops(p, count))

    def stats(self) -> dict[str, float]:
        return self.meter.pop()


@register_method
@dataclass
class AttnDropoutConfig(MethodConfig):
    name = "attn-dropout"
    summary = "vanilla Bernoulli dropout on the attention weights, in place of the model's own (001 §7.1)"
    model_dropout = "replaces"

    p: float = field(default=0.2, metadata={"help": "drop probability of each attention weight"})
    rescale: bool = field(
        default=True, metadata={"help": "rescale kept weights by 1/(1-p), as standard dropout"}
    )
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self.name, "p", self.p)

    def build(self) -> AttentionMethod:
        return WeightsDropout(self.p, self.rescale, self.layers)


@register_method
@dataclass
class ScoresDropoutConfig(MethodConfig):
    name = "scores-dropout"
    summary = (
        "Bernoulli dropout on the attention scores (-inf before softmax, eq. 3), on top of the model's own"
    )

    p: float = field(default=0.1, metadata={"help": "drop probability of each attention score"})
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self.name, "p", self.p, allow_one=True)

    def build(self) -> AttentionMethod:
        return ScoresDropout(self.p, self.layers)
