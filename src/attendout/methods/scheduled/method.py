"""Scores dropout at a per-layer scheduled rate (see :mod:`attendout.methods.scheduled`)."""

from __future__ import annotations

from ...attention import AttentionCall, AttentionEdit, Controller
from ..drops import ScoresDropout
from ..schedules import Knots, schedule_value
from .config import ScheduledConfig


class ScheduledScoresDropout(ScoresDropout):
    name = "scheduled"

    def __init__(self, curves: list[Knots], layers=None):
        super().__init__(p=0.0, layers=layers)
        self.curves = curves
        #: training progress in [0, 1]; None until a loop says where training is
        self.progress: float | None = None

    def attach(self, controller: Controller) -> None:
        super().attach(controller)
        n = controller.num_layers
        if len(self.curves) == 1:
            self.curves = self.curves * n
        if len(self.curves) != n:
            raise ValueError(
                f"scheduled: got {len(self.curves)} per-layer schedules for a model with {n} layers"
            )

    def set_progress(self, fraction: float) -> None:
        self.progress = fraction

    def probability(self, layer: int) -> float:
        return schedule_value(self.curves[layer], 0.0 if self.progress is None else self.progress)

    def edit(self, call: AttentionCall) -> AttentionEdit | None:
        if self.progress is None:
            raise RuntimeError(
                "scheduled: a training forward before any progress was given, so the rate would stay at its "
                "start for the whole run. Call handle.set_progress(step / total_steps) before each step "
                "(0 at the start), or train through attendout.prepare(...), attendout.hf.Trainer or "
                "`attendout finetune`"
            )
        return super().edit(call)

    def stats(self) -> dict[str, float]:
        out = super().stats()
        for key in list(out):
            layer = int(key.rsplit("L", 1)[1])
            out[f"{self.name}/scheduled_p/L{layer}"] = self.probability(layer)
        return out


def scheduled_scores_dropout(config: ScheduledConfig) -> ScheduledScoresDropout:
    return ScheduledScoresDropout(config.curves(), config.layers)
