"""``scheduled``: scores dropout with a per-layer piecewise-linear schedule (paper 001 §7.2).

Paper 001 approximates the per-layer drop rates that AttendOut learns (its Figure 3) by Bernoulli
scores dropout whose probability follows a line per layer: every layer starts at 0.6 and has its
own slope. A schedule here is, per layer, a list of knots (progress, p) with progress in [0, 1]
(the fraction of training done); p is linearly interpolated between knots and held flat outside
them. ``start`` + ``slopes`` is the paper's form (two knots: (0, start) and (1, start + slope));
``knots`` gives any piecewise-linear curve. Probabilities are clipped to [0, 1].

The training loop reports progress through ``MethodHandle.set_progress``; in another loop, call it
yourself (before it is first called, progress is 0). Keeps the model's own dropout.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..attention import AttentionMethod, Controller
from .base import MethodConfig, check_probability, layers_field, register_method
from .dropout import ScoresDropout

Knots = list[tuple[float, float]]


def parse_floats(value: str | Sequence[float] | None, what: str) -> list[float] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return [float(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"scheduled: {what} must be comma-separated numbers, got {value!r}") from None
    return [float(v) for v in value]


def parse_knots(value: str | Sequence[Sequence[Sequence[float]]]) -> list[Knots]:
    """ "0:0.6,1:0.1" (one curve for every layer) or "0:0.6,1:0.1;0:0.5,1:0" (one per layer, ';')."""
    if not isinstance(value, str):
        return [[(float(t), float(p)) for t, p in curve] for curve in value]
    curves = []
    for curve_text in value.split(";"):
        try:
            curve = [
                tuple(float(x) for x in knot.split(":")) for knot in curve_text.split(",") if knot.strip()
            ]
        except ValueError:
            raise ValueError(f"scheduled: knots must look like '0:0.6,1:0.1', got {curve_text!r}") from None
        if not curve or any(len(k) != 2 for k in curve):
            raise ValueError(f"scheduled: knots must look like '0:0.6,1:0.1', got {curve_text!r}")
        curves.append(curve)
    return curves


def check_knots(curves: list[Knots]) -> None:
    for curve in curves:
        times = [t for t, _ in curve]
        if any(not 0 <= t <= 1 for t in times) or times != sorted(times):
            raise ValueError(f"scheduled: knot progress values must rise within [0, 1], got {times}")
        for _, p in curve:
            check_probability("scheduled", "knot probability", p, allow_one=True)


def schedule_value(curve: Knots, progress: float) -> float:
    """The curve's probability at ``progress`` (linear between knots, flat outside, clipped)."""
    times, values = zip(*curve, strict=True)
    return float(np.clip(np.interp(progress, times, values), 0.0, 1.0))


class ScheduledScoresDropout(ScoresDropout):
    name = "scheduled"

    def __init__(self, curves: list[Knots], layers=None):
        super().__init__(p=0.0, layers=layers)
        self.curves = curves
        self.progress = 0.0

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
        return schedule_value(self.curves[layer], self.progress)

    def stats(self) -> dict[str, float]:
        out = super().stats()
        for key in list(out):
            layer = int(key.rsplit("L", 1)[1])
            out[f"{self.name}/scheduled_p/L{layer}"] = self.probability(layer)
        return out


@register_method
@dataclass
class ScheduledConfig(MethodConfig):
    name = "scheduled"
    summary = "scores dropout with a per-layer piecewise-linear schedule over training (001 §7.2)"

    start: float = field(
        default=0.6, metadata={"help": "drop probability of every layer at the start (paper: 0.6)"}
    )
    slopes: list[float] | None = field(
        default=None,
        metadata={
            "help": "change of p over the whole run, one per layer or one for all, comma-separated "
            "(default -0.5: every layer goes from start to start-0.5)"
        },
    )
    knots: str | None = field(
        default=None,
        metadata={"help": "explicit curves 'progress:p,...', one for all or one per layer separated by ';'"},
    )
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self.name, "start", self.start, allow_one=True)
        self.slopes = parse_floats(self.slopes, "slopes")
        check_knots(self.curves())

    def curves(self) -> list[Knots]:
        if self.knots is not None:
            if self.slopes is not None:
                raise ValueError("scheduled: give either knots or slopes, not both")
            return parse_knots(self.knots)
        slopes = self.slopes if self.slopes is not None else [-0.5]
        return [[(0.0, self.start), (1.0, min(max(self.start + s, 0.0), 1.0))] for s in slopes]

    def build(self) -> AttentionMethod:
        return ScheduledScoresDropout(self.curves(), self.layers)
