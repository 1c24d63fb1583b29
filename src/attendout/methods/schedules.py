"""Piecewise-linear schedules over training progress: knots, their checks, their value, and fits to
the drop rates an AttendOut run logged (paper 001 §7.2). numpy only: configs use them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .config import check_probability

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

    def line(progress: Any, rates: Any) -> Knots:
        slope = slope_through(progress, rates, start)
        return [(0.0, start), (1.0, min(max(start + slope, 0.0), 1.0))]

    return _fitted_to_run(run_dir, line)


def knots_from_run(run_dir: str | Path, segments: int) -> str:
    """The ``knots`` text of per-layer curves fitted to an AttendOut run's logged drop probabilities.

    Layers the run did not mask get a curve of zeros.
    """
    return _fitted_to_run(run_dir, lambda progress, rates: fit_piecewise_linear(progress, rates, segments))


def _fitted_to_run(run_dir: str | Path, fit: Callable[[Any, Any], Knots]) -> str:
    """The ``knots`` text of ``fit(progress, rates)`` for each layer of an AttendOut run's logged drop
    probabilities, a curve of zeros for each layer it did not mask."""
    from .droplog import read_drop_pattern

    pattern = read_drop_pattern(run_dir)
    curves = []
    for layer in range(max(pattern.layers) + 1):
        curve = (
            fit(pattern.progress, pattern.layers[layer])
            if layer in pattern.layers
            else [(0.0, 0.0), (1.0, 0.0)]
        )
        curves.append(",".join(f"{t:.4g}:{p:.4f}" for t, p in curve))
    return ";".join(curves)
