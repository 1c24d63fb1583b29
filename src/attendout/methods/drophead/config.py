"""The options of ``drophead`` and its V schedule (see :mod:`attendout.methods.drophead`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...typecheck import Must, option
from ..config import PROBABILITY, MethodConfig, check_probability, layers_field
from ..schedules import Knots, check_knots, parse_knots

SCHEDULES = ("v", "fixed")


def v_schedule(p: float, warmup: float) -> Knots:
    """DropHead's V (Zhou et al. 2020): ``p`` at the start, 0 at ``warmup``, ``p`` again at the end."""
    return [(0.0, p), (warmup, 0.0), (1.0, p)]


@dataclass
class DropHeadConfig(MethodConfig):
    summary = (
        "drop whole attention heads per example, rescaling the kept ones, at a V-shaped scheduled rate "
        "(Scheduled DropHead)"
    )

    p: float = option(
        0.1, "probability of dropping each head (with schedule v: at the start and at the end)", PROBABILITY
    )
    schedule: str = option(
        "v",
        "v = the paper's V: knots (0, p), (warmup, 0), (1, p) over the fraction of training done; "
        "fixed = p throughout; or knots 'progress:p,...' (e.g. '0:0.2,1:0')",
    )
    warmup: float = option(
        0.1,
        "schedule v: the fraction of training where the rate reaches 0 (the paper: the end of the "
        "learning-rate warm-up; keep it equal to --warmup-ratio)",
        Must(lambda value: 0 < value < 1, "in (0, 1)"),
    )
    rescale: bool = option(True, "scale kept heads by H / kept, as DropHead does")
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
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
