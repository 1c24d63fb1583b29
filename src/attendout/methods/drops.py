"""Scores dropout at a rate per layer (paper 001 eq. 3): the one building block of ``scores-dropout``
(one rate) and ``scheduled`` (a rate per layer that moves over training), shared so that neither method
imports the other."""

from __future__ import annotations

from functools import partial

from ..attention import AttentionCall, AttentionEdit, AttentionMethod, RandomDrops, RateMeter


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
