"""The options of ``scheduled`` (see :mod:`attendout.methods.scheduled`)."""

from __future__ import annotations

from dataclasses import dataclass

from ...typecheck import option
from ..config import INTEGER_AT_LEAST_1, PROBABILITY_OR_ONE, MethodConfig, layers_field
from ..schedules import Knots, check_knots, knots_from_run, parse_floats, parse_knots, slopes_from_run


@dataclass
class ScheduledConfig(MethodConfig):
    summary = "scores dropout with a per-layer piecewise-linear schedule over training (001 §7.2)"

    start: float = option(
        0.6, "drop probability of every layer at the start (paper: 0.6)", PROBABILITY_OR_ONE
    )
    slopes: list[float] | None = option(
        None,
        "change of p over the whole run, one per layer or one for all, comma-separated "
        "(default -0.5 for every layer, from start to start-0.5: the paper gives no values; "
        "from_run with fit_slopes fits one per layer)",
        from_text=True,
    )
    knots: str | None = option(
        None, "explicit curves 'progress:p,...', one for all or one per layer separated by ';'"
    )
    layers: list[int] | None = layers_field()
    from_run: str | None = option(
        None,
        "an AttendOut run directory: fit each layer's schedule to the drop probabilities it "
        "logged (001 §7.2); replaces start/slopes",
    )
    fit_segments: int = option(
        3,
        "linear pieces per layer when fitting from_run (1 = one free line per layer)",
        must=INTEGER_AT_LEAST_1,
    )
    fit_slopes: bool = option(
        False,
        "from_run only: fit the paper's form, every layer from start with its own slope "
        "(001 §7.2), instead of free piecewise-linear curves",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self.slopes = parse_floats(self.slopes, "slopes")
        if self.fit_slopes and self.from_run is None:
            raise ValueError("scheduled: fit_slopes fits an AttendOut run's rates; give from_run too")
        if self.from_run is not None:
            if self.slopes is not None:
                raise ValueError("scheduled: give either from_run or slopes, not both")
            if self.knots is None:
                if self.fit_slopes:
                    self.knots = slopes_from_run(self.from_run, self.start)
                else:
                    self.knots = knots_from_run(self.from_run, self.fit_segments)
        check_knots(self.curves())

    def curves(self) -> list[Knots]:
        if self.knots is not None:
            if self.slopes is not None:
                raise ValueError("scheduled: give either knots or slopes, not both")
            return parse_knots(self.knots)
        slopes = self.slopes if self.slopes is not None else [-0.5]
        return [[(0.0, self.start), (1.0, min(max(self.start + s, 0.0), 1.0))] for s in slopes]
