"""What ``advise`` searches for each method: the options that set its strength, and their ranges.

Each range brackets the method's default (the paper's rate) on both sides, from a rate too small to
matter to one well above the rates the papers use; each :class:`Range` also has a
small grid (``--sampler grid``). Only strength options are searched: every other option keeps its
default (or what ``--method-option METHOD.OPTION=VALUE`` sets), so a tuned method is still the method of its paper.

==============  =====================  ==========================  =====================================
method          option(s)              range (TPE)                 grid
==============  =====================  ==========================  =====================================
attn-dropout    p                      0.02 - 0.5, log             0.05, 0.1, 0.2, 0.3
scores-dropout  p                      0.02 - 0.5, log             0.05, 0.1, 0.2, 0.3
drophead        p                      0.02 - 0.5, log             0.05, 0.1, 0.2, 0.3
attn-layerdrop  p                      0.05 - 0.6                  0.1, 0.2, 0.4
layerdrop       p                      0.05 - 0.5                  0.1, 0.2, 0.3
scheduled       start                  0.1 - 0.9                   0.3, 0.6, 0.9
addrop          p (candidate region)   0.1 - 0.9                   0.1, 0.3, 0.5 x
                q (drop within it)     0.1 - 0.9                   0.1, 0.3, 0.5
attendout       init_drop              0.02 - 0.5, log             0.05, 0.1, 0.2, 0.3
synthesizer     variant (a choice)     the six variants            random, dense, factorized-random,
                                                                   factorized-dense
==============  =====================  ==========================  =====================================

Defaults: attention dropout 0.2 (001 §7.1), scores dropout 0.1, DropHead 0.1, attention LayerDrop
0.2, LayerDrop 0.2, scheduled start 0.6, AD-DROP p 0.3 and q 0.2 (002), AttendOut's initial drop
rate 0.1 (the rate its Generator starts from and moves).

Synthesizer has no rate: its searched option is the variant (:class:`Choice`), an architecture, so it
belongs in a study of a model trained from scratch, where attention itself is being chosen (issue 47's
positive control: ``experiments/advise-multi30k-small.sh``). It is not among the default methods.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..methods import METHODS


@dataclass(frozen=True)
class Range:
    """One searched option: a float in [low, high] (log-uniform if ``log``) and its small grid."""

    low: float
    high: float
    grid: tuple[float, ...]
    log: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.low < self.high:
            raise ValueError(f"a range needs 0 <= low < high, got {self.low!r}, {self.high!r}")
        outside = [g for g in self.grid if not self.low <= g <= self.high]
        if not self.grid or outside:
            raise ValueError(f"a range's grid must be non-empty and inside it, got {self.grid!r}")

    def describe(self) -> str:
        return f"{self.low:g}-{self.high:g}{', log' if self.log else ''}"


@dataclass(frozen=True)
class Choice:
    """One searched option that takes one of a few named values (Optuna's categorical); its grid is a
    subset of them, in the order a grid search tries them."""

    values: tuple[str, ...]
    grid: tuple[str, ...]
    log: bool = False  # (a choice has no scale; here so that code reading ``log`` needs no type check)

    def __post_init__(self) -> None:
        if len(self.values) < 2 or len(set(self.values)) != len(self.values):
            raise ValueError(f"a choice needs at least two distinct values, got {self.values!r}")
        outside = [g for g in self.grid if g not in self.values]
        if not self.grid or outside:
            raise ValueError(f"a choice's grid must be non-empty and among its values, got {self.grid!r}")

    def describe(self) -> str:
        return " | ".join(self.values)


def _rate(low: float = 0.02, high: float = 0.5) -> Range:
    return Range(low, high, (0.05, 0.1, 0.2, 0.3), log=True)


#: method name -> option -> its range (see the module docstring's table).
SEARCH_SPACES: dict[str, dict[str, Range | Choice]] = {
    "attn-dropout": {"p": _rate()},
    "scores-dropout": {"p": _rate()},
    "drophead": {"p": _rate()},
    "attn-layerdrop": {"p": Range(0.05, 0.6, (0.1, 0.2, 0.4))},
    "layerdrop": {"p": Range(0.05, 0.5, (0.1, 0.2, 0.3))},
    "scheduled": {"start": Range(0.1, 0.9, (0.3, 0.6, 0.9))},
    "addrop": {"p": Range(0.1, 0.9, (0.1, 0.3, 0.5)), "q": Range(0.1, 0.9, (0.1, 0.3, 0.5))},
    "attendout": {"init_drop": _rate()},
    "synthesizer": {
        "variant": Choice(
            ("random", "dense", "factorized-random", "factorized-dense", "random+dot", "dense+dot"),
            grid=("random", "dense", "factorized-random", "factorized-dense"),
        )
    },
}

#: What ``advise`` compares when ``--methods`` is not given: one method of each family of the papers.
DEFAULT_METHODS = ("attn-dropout", "scores-dropout", "drophead", "addrop", "attendout")


def search_space(method: str) -> dict[str, Range | Choice]:
    """The searched options of ``method``; ValueError for a method without a strength to search."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(sorted(METHODS))}")
    if method not in SEARCH_SPACES:
        searchable = ", ".join(SEARCH_SPACES)
        raise ValueError(
            f"advise has no strength to search for method {method!r} (none is plain fine-tuning, the "
            f"baseline); searchable: {searchable}"
        )
    return SEARCH_SPACES[method]


def suggest(trial: Any, method: str) -> dict[str, Any]:
    """The options of one Optuna trial: ``trial.suggest_float`` per searched rate, to 2 significant digits,
    ``trial.suggest_categorical`` per choice.

    (Rates finer than that are below what a run can tell apart, and a setting someone reads and types
    should look like one: p = 0.12, not 0.11701414134690252. The trial runs with the rounded value.)
    """
    options: dict[str, Any] = {}
    for name, r in search_space(method).items():
        if isinstance(r, Choice):
            options[name] = trial.suggest_categorical(name, list(r.values))
        else:
            options[name] = float(f"{trial.suggest_float(name, r.low, r.high, log=r.log):.2g}")
    return options


def grid_of(method: str) -> dict[str, Sequence[Any]]:
    """The grid of ``method`` as Optuna's GridSampler takes it."""
    return {name: list(r.grid) for name, r in search_space(method).items()}


def grid_size(method: str) -> int:
    return len(list(itertools.product(*grid_of(method).values())))


def describe(method: str, options: Mapping[str, Any]) -> str:
    """``p = 0.15``, ``p = 0.3, q = 0.2`` or ``variant = dense``: the searched options of a setting, rounded
    for reading."""
    return ", ".join(f"{name} = {shown(options[name])}" for name in search_space(method) if name in options)


def shown(value: Any) -> str:
    return (
        f"{float(value):.3g}"
        if isinstance(value, int | float) and not isinstance(value, bool)
        else str(value)
    )


def queue_grid(study: Any, method: str, limit: int) -> None:
    """Queue the points of the method's grid the study has not tried or queued, up to ``limit`` trials.

    (Optuna's GridSampler stops its study from inside ``optimize``, which ask-and-tell does not run.)
    """
    from optuna.trial import TrialState

    grid = grid_of(method)
    trials = [
        t
        for t in study.get_trials(deepcopy=False)
        if not (t.state == TrialState.FAIL and t.user_attrs.get("interrupted"))
    ]
    seen = [t.params or t.system_attrs.get("fixed_params", {}) for t in trials]
    room = limit - len(trials)
    for values in itertools.product(*grid.values()):
        point = dict(zip(grid, values, strict=True))
        if room > 0 and point not in seen:
            study.enqueue_trial(point)
            room -= 1
