"""The confirmation's seeds: as given, or (``--seeds auto``) as many as detect ``--detect`` with 80% power.

``auto`` sizes the confirmation from its own noise, not the search's. The search's spread is measured on
a carved validation split, over a few trials that all share the same plain runs: an estimate from it was
between half and 1.6 times the truth in nine studies of ten, and the seed count chosen from it reached
its 80% power in fewer than half of them. So ``auto`` runs an **internal pilot**: the confirmation's
first :data:`PILOT` fresh seeds (``none`` and every method), scored on the evaluation split the answer
uses. From their paired differences it takes the noise (pooled over the methods, with the degrees of
freedom of differences that share the plain runs: :func:`.power.pooled_df`) and its 90% upper bound
(:class:`.power.Noise`), and asks for the fewest seeds that detect ``--detect`` at that bound
(:func:`auto_count`), at least the pilot's, at most ``--max-seeds`` and what ``--confirm-hours`` allows.
The pilot's runs are the first seeds of the confirmation (only their spread chose the count, never their
differences' means, which keeps the test's error rate). The choice, with why, is written to
``OUTPUT/seeds.json`` and kept on resuming.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..core.folder import write_json_atomic
from .power import CONFIDENCE, Noise, seeds_needed
from .scales import default_detect, describe_amount, in_metric_units

if TYPE_CHECKING:
    from .confirm import Confirmation
    from .plan import MethodSearch, SearchPlan


#: the fresh seeds of ``--seeds auto``'s pilot (the fewest a confirmation can have that measures its noise)
PILOT = 5


def fresh_seeds(count: int, taken: Sequence[int]) -> list[int]:
    """The first ``count`` seeds from 1 up that are not search seeds."""
    seeds: list[int] = []
    candidate = 1
    while len(seeds) < count:
        if candidate not in taken:
            seeds.append(candidate)
        candidate += 1
    return seeds


def auto_count(
    noise: Noise,
    delta: float,
    *,
    alpha: float,
    methods: int,
    pilot: int,
    most: int,
    confidence: float = CONFIDENCE,
) -> tuple[int, str]:
    """How many seeds ``--seeds auto`` asks for, and why: the fewest that detect ``delta`` (a difference of
    the metric's values) with 80% power at Holm's strictest level over ``methods``, at the ``confidence``
    upper bound of the pilot's ``noise``; never fewer than the ``pilot``'s seeds, at most ``most``."""
    if not noise.known or not math.isfinite(delta) or delta <= 0:
        return pilot, "the pilot measured no noise to size the confirmation from; its seeds are kept"
    bound = noise.upper(confidence)
    needed = seeds_needed(bound, delta, alpha, methods)
    count = most if needed is None else min(max(needed, pilot), most)
    why = (
        f"{'more than 200' if needed is None else needed} seeds detect {delta:.3g} with 80% power at the "
        f"{100 * confidence:.0f}% upper bound of the pilot's noise (sd {noise.sd:.3g} a seed, bound {bound:.3g}, "
        f"{noise.df:.3g} degrees of freedom, Holm over {methods}); at least the pilot's {pilot}, at most {most}"
    )
    return count, why


def seconds_per_run(searches: dict[str, MethodSearch], repeats: int) -> float | None:
    """The mean time of one search run (a complete trial's time over its seeds), or None."""
    times = [
        t["seconds"] / repeats
        for s in searches.values()
        for t in s.trials
        if t["state"] == "COMPLETE" and t.get("seconds")
    ]
    return sum(times) / len(times) if times else None


def choose(
    *,
    seeds: Sequence[int] | str,
    out: Path,
    plan: SearchPlan,
    searches: dict[str, MethodSearch],
    methods: int,
    detect: float | None,
    alpha: float,
    max_seeds: int,
    confirm_hours: float | None,
    pilot: Callable[[Sequence[int]], Confirmation],
    echo: Callable[[str], None] = print,
) -> tuple[int, ...]:
    """The confirmation's seeds (see the module docstring); ``pilot(seeds)`` runs and reads the
    confirmation on those seeds."""
    if seeds != "auto":
        return tuple(seeds)  # type: ignore[arg-type]
    path = out / "seeds.json"
    if path.is_file():
        return tuple(json.loads(path.read_text())["seeds"])
    first = fresh_seeds(min(PILOT, max_seeds), plan.seeds)
    echo(
        f"advise: --seeds auto: a pilot on seeds {', '.join(map(str, first))} measures the confirmation's noise"
    )
    confirmation = pilot(first)
    metric = confirmation.metric
    amount = default_detect(metric) if detect is None else detect
    base = confirmation.rows[0].baseline_mean if confirmation.rows else float("nan")
    delta = in_metric_units(metric, amount, base)
    count, why = auto_count(
        confirmation.noise, delta, alpha=alpha, methods=methods, pilot=len(first), most=max_seeds
    )
    why = f"{describe_amount(metric, amount)} (--detect): {why}"
    seconds = seconds_per_run(searches, len(plan.seeds))
    if confirm_hours is not None and seconds:
        fits = int(confirm_hours * 3600 // (seconds * (methods + 1)))
        if fits < count:
            count = max(len(first), fits)
            why += f"; {confirm_hours:g} h at {seconds:.0f} s a run fit {count}"
    chosen = fresh_seeds(count, plan.seeds)
    record: dict[str, Any] = {
        "seeds": chosen,
        "why": why,
        "pilot": {
            "seeds": first,
            "noise_sd": confirmation.noise.sd,
            "noise_df": confirmation.noise.df,
            "confidence": CONFIDENCE,
        },
    }
    write_json_atomic(path, record)
    echo(f"advise: confirmation on {count} seeds ({why})")
    return tuple(chosen)
