"""``scheduled``: scores dropout with a per-layer piecewise-linear schedule (paper 001 §7.2).

Paper 001 approximates the per-layer drop rates that AttendOut learns (its Figure 3) by Bernoulli
scores dropout whose probability follows a line per layer: every layer starts at 0.6 and has its
own slope. A schedule here is, per layer, a list of knots (progress, p) with progress in [0, 1]
(the fraction of training done); p is linearly interpolated between knots and held flat outside
them. ``start`` + ``slopes`` is the paper's form (two knots: (0, start) and (1, start + slope));
``knots`` gives any piecewise-linear curve. Probabilities are clipped to [0, 1].

``from_run`` is the paper's own route to a schedule (§7.2): it fits, per layer, a piecewise-linear
curve of ``fit_segments`` pieces (equally spaced knots, least squares) to the mean drop probabilities
that an AttendOut run logged (its Figure 3), and uses those knots. With ``fit_slopes`` it fits the
paper's own form instead: "we initialize the dropout probabilities to 0.6 for all attention layers and
set a specific slope for each of them", i.e. every layer's line starts at ``start`` and only its slope
is fitted (least squares through (0, start)). The fitted knots are stored in ``knots``, so the run's
config records the schedule it used; a config with both ``from_run`` and ``knots`` (a saved one) uses
the knots and does not read the run again.

**Why one slope by default.** The paper gives no slope values: they are read off the curves its own
AttendOut runs learned (Figure 3, per dataset), which only say that lower layers drop more (QNLI's
first layer stays near 0.55, its fourth decays faster). Per-layer slopes therefore need an AttendOut
run (``from_run`` with ``fit_slopes``) or are given by hand (``slopes``, one per layer). Without
either, every layer gets the same slope, -0.5: from the paper's 0.6 to 0.1, the fixed rate of
``scores-dropout``, at the end of training; our choice, not the paper's.

Every loop of attendout's (its own, ``attendout.hf.Trainer``, ``attendout.prepare``) reports progress
through ``set_progress``; with ``attendout.apply`` alone, call ``handle.set_progress(step / total)``
yourself: a training forward before the first call raises, rather than training at the start rate for
the whole run. Keeps the model's own dropout. Acts, as ``scores-dropout``, on every self-attention the
hook reaches (T5: its encoder's layers, then its decoder's); never on cross-attention.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..attention import AttentionCall, AttentionEdit, AttentionMethod, Controller
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
    # plain Python (not numpy.interp): it runs in every training forward, which torch.compile traces
    (t0, p0), *rest = curve
    value = p0 if progress <= t0 else None
    for t1, p1 in rest:
        if value is None and progress <= t1:
            value = p1 if t1 == t0 else p0 + (p1 - p0) * (progress - t0) / (t1 - t0)
        t0, p0 = t1, p1
    return min(max(p0 if value is None else value, 0.0), 1.0)


def fit_piecewise_linear(x: np.ndarray, y: np.ndarray, segments: int) -> Knots:
    """Least-squares piecewise-linear fit of y(x), x in [0, 1], with knots at k / segments (clipped to [0, 1]).

    The curve is sum_k v_k h_k(x) with hat functions h_k peaking at knot k; the v_k solve a linear
    least-squares problem. NaN values of y are ignored.
    """
    keep = ~np.isnan(y)
    x, y = np.asarray(x, dtype=float)[keep], np.asarray(y, dtype=float)[keep]
    knots = np.linspace(0.0, 1.0, segments + 1)
    if len(np.unique(x)) < segments + 1:
        raise ValueError(
            f"scheduled: {segments} segments need at least {segments + 1} logged points at distinct steps, "
            f"got {len(np.unique(x))}"
        )
    basis = np.stack([np.interp(x, knots, np.eye(segments + 1)[k]) for k in range(segments + 1)], axis=1)
    values, *_ = np.linalg.lstsq(basis, y, rcond=None)  # (segments + 1,)
    return [(float(t), float(np.clip(v, 0.0, 1.0))) for t, v in zip(knots, values, strict=True)]


def slope_through(x: np.ndarray, y: np.ndarray, start: float) -> float:
    """Least-squares slope of the line y = start + slope * x (its intercept fixed), NaNs ignored."""
    keep = ~np.isnan(y)
    x, y = np.asarray(x, dtype=float)[keep], np.asarray(y, dtype=float)[keep]
    if not (x > 0).any():
        raise ValueError(
            "scheduled: fitting a slope needs logged drop probabilities after the start of training"
        )
    return float(np.sum(x * (y - start)) / np.sum(x * x))


def slopes_from_run(run_dir: str | Path, start: float) -> str:
    """The ``knots`` text of the paper's schedule from an AttendOut run: every layer from ``start`` with
    its own least-squares slope (001 §7.2), its end clipped to [0, 1]. Layers the run did not mask get
    a curve of zeros."""
    from .attendout.runlog import read_drop_pattern

    pattern = read_drop_pattern(run_dir)
    curves = []
    for layer in range(max(pattern.layers) + 1):
        if layer in pattern.layers:
            slope = slope_through(pattern.progress, pattern.layers[layer], start)
            curve = [(0.0, start), (1.0, min(max(start + slope, 0.0), 1.0))]
        else:
            curve = [(0.0, 0.0), (1.0, 0.0)]
        curves.append(",".join(f"{t:.4g}:{p:.4f}" for t, p in curve))
    return ";".join(curves)


def knots_from_run(run_dir: str | Path, segments: int) -> str:
    """The ``knots`` text of per-layer curves fitted to an AttendOut run's logged drop probabilities.

    Layers the run did not mask get a curve of zeros.
    """
    from .attendout.runlog import read_drop_pattern

    pattern = read_drop_pattern(run_dir)
    curves = []
    for layer in range(max(pattern.layers) + 1):
        if layer in pattern.layers:
            curve = fit_piecewise_linear(pattern.progress, pattern.layers[layer], segments)
        else:
            curve = [(0.0, 0.0), (1.0, 0.0)]
        curves.append(",".join(f"{t:.4g}:{p:.4f}" for t, p in curve))
    return ";".join(curves)


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
            "(default -0.5 for every layer, from start to start-0.5: the paper gives no values; "
            "from_run with fit_slopes fits one per layer)",
            "from_text": True,
        },
    )
    knots: str | None = field(
        default=None,
        metadata={"help": "explicit curves 'progress:p,...', one for all or one per layer separated by ';'"},
    )
    layers: list[int] | None = layers_field()
    from_run: str | None = field(
        default=None,
        metadata={
            "help": "an AttendOut run directory: fit each layer's schedule to the drop probabilities it "
            "logged (001 §7.2); replaces start/slopes"
        },
    )
    fit_segments: int = field(
        default=3,
        metadata={"help": "linear pieces per layer when fitting from_run (1 = one free line per layer)"},
    )
    fit_slopes: bool = field(
        default=False,
        metadata={
            "help": "from_run only: fit the paper's form, every layer from start with its own slope "
            "(001 §7.2), instead of free piecewise-linear curves"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        check_probability(self.name, "start", self.start, allow_one=True)
        self.slopes = parse_floats(self.slopes, "slopes")
        if not isinstance(self.fit_segments, int) or self.fit_segments < 1:
            raise ValueError(
                f"scheduled: fit_segments must be an integer of at least 1, got {self.fit_segments!r}"
            )
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

    def build(self) -> AttentionMethod:
        return ScheduledScoresDropout(self.curves(), self.layers)
