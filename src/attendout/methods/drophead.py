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

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..attention import AttentionCall, AttentionEdit, AttentionMethod, RateMeter
from ..attention.masks import bernoulli_drop
from .base import MethodConfig, check_probability, layers_field, register_method
from .scheduled import Knots, check_knots, parse_knots, schedule_value

SCHEDULES = ("v", "fixed")


def v_schedule(p: float, warmup: float) -> Knots:
    """DropHead's V (Zhou et al. 2020): ``p`` at the start, 0 at ``warmup``, ``p`` again at the end."""
    return [(0.0, p), (warmup, 0.0), (1.0, p)]


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


@register_method
@dataclass
class DropHeadConfig(MethodConfig):
    name = "drophead"
    summary = (
        "drop whole attention heads per example, rescaling the kept ones, at a V-shaped scheduled rate "
        "(Scheduled DropHead)"
    )

    p: float = field(
        default=0.1,
        metadata={"help": "probability of dropping each head (with schedule v: at the start and at the end)"},
    )
    schedule: str = field(
        default="v",
        metadata={
            "help": "v = the paper's V: knots (0, p), (warmup, 0), (1, p) over the fraction of training done; "
            "fixed = p throughout; or knots 'progress:p,...' (e.g. '0:0.2,1:0')"
        },
    )
    warmup: float = field(
        default=0.1,
        metadata={
            "help": "schedule v: the fraction of training where the rate reaches 0 (the paper: the end of the "
            "learning-rate warm-up; keep it equal to --warmup-ratio)"
        },
    )
    rescale: bool = field(default=True, metadata={"help": "scale kept heads by H / kept, as DropHead does"})
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self.name, "p", self.p)
        if not 0 < self.warmup < 1:
            raise ValueError(f"{self.name}: warmup must be in (0, 1), got {self.warmup!r}")
        if self.schedule not in SCHEDULES:
            if ":" not in str(self.schedule):
                raise ValueError(
                    f"{self.name}: schedule must be v, fixed or knots like '0:0.2,1:0', got {self.schedule!r}"
                )
            curves = parse_knots(self.schedule)
            if len(curves) != 1:
                raise ValueError(f"{self.name}: schedule takes one curve for every layer, got {len(curves)}")
            check_knots(curves)
            for _, value in curves[0]:
                check_probability(self.name, "schedule probability", value)

    def curve(self) -> Knots | None:
        """The rate over training progress (None: ``p`` throughout)."""
        if self.schedule == "fixed":
            return None
        if self.schedule == "v":
            return v_schedule(self.p, self.warmup)
        return parse_knots(self.schedule)[0]

    def build(self) -> AttentionMethod:
        return HeadDrop(self.p, self.rescale, self.layers, self.curve())
