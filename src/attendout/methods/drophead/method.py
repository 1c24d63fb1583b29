"""Whole heads dropped per example at a scheduled rate (see :mod:`attendout.methods.drophead`)."""

from __future__ import annotations

import torch

from ...attention import AttentionCall, AttentionEdit, AttentionMethod, RateMeter
from ...attention.masks import bernoulli_drop
from ..schedules import Knots, schedule_value
from .config import DropHeadConfig


class HeadDrop(AttentionMethod):
    name = "drophead"

    def __init__(self, p: float, rescale: bool, layers=None, curve: Knots | None = None):
        self.p, self.rescale, self.layers = p, rescale, layers
        #: the rate over training progress; None = ``p`` throughout
        self.curve = curve
        #: training progress in [0, 1]; None until a loop says where training is
        self.progress: float | None = None
        self.meter = RateMeter()

    def set_progress(self, fraction: float) -> None:
        self.progress = fraction

    def rate(self) -> float:
        """The drop probability at the current progress."""
        if self.curve is None:
            return self.p
        if self.progress is None:
            raise RuntimeError(
                "drophead: a training forward before any progress was given, so the scheduled rate would "
                "stay at its start for the whole run. Call handle.set_progress(step / total_steps) before "
                "each step (0 at the start), train through attendout.prepare(...), attendout.hf.Trainer or "
                "`attendout finetune`, or pass schedule='fixed'"
            )
        return schedule_value(self.curve, self.progress)

    def edit(self, call: AttentionCall) -> AttentionEdit:
        b, h, _, _ = call.shape
        p = self.rate()
        drop = bernoulli_drop((b, h, 1, 1), p, call.query.device)  # one decision per (example, head)
        keep = (~drop).to(call.query.dtype)
        if self.rescale:
            kept = keep.sum(dim=1, keepdim=True).clamp(min=1)
            keep = keep * (h / kept)
        self.meter.add(f"{self.name}/drop_rate/L{call.layer}", drop.sum(), torch.tensor(float(drop.numel())))
        return AttentionEdit(scale_weights=keep)

    def stats(self) -> dict[str, float]:
        out = self.meter.pop()
        if self.curve is not None and self.progress is not None:
            out[f"{self.name}/scheduled_p"] = self.rate()
        return out


def head_drop(config: DropHeadConfig) -> HeadDrop:
    return HeadDrop(config.p, config.rescale, config.layers, config.curve())
