"""The Bernoulli attention dropouts that act through the hook (see :mod:`attendout.methods.dropout`)."""

from __future__ import annotations

from ...attention import AttentionCall, AttentionEdit, AttentionMethod, RateMeter
from ...attention.masks import bernoulli_drop, keep_scale
from ..drops import ScoresDropout
from .config import AttnDropoutConfig, ScoresDropoutConfig


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


def weights_dropout(config: AttnDropoutConfig) -> WeightsDropout:
    return WeightsDropout(config.p, config.rescale, config.layers)


def scores_dropout(config: ScoresDropoutConfig) -> ScoresDropout:
    return ScoresDropout(config.p, config.layers)
