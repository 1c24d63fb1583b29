"""What a search shares and what it finds: the plan every trial of ``advise``'s search shares
(:class:`SearchPlan`: recipe, budget, storage, sampler, objective, seeds) and one method's study after
the search (:class:`MethodSearch`). Below both the objectives (:mod:`.objective`), which read a plan, and
the search (:mod:`.search`), which runs one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import TrainConfig
from .spaces import grid_size

__all__ = ["OBJECTIVES", "SEED_STRIDE", "MethodSearch", "SearchPlan", "search_seeds"]

#: the search seeds of ``repeats`` runs a trial: search_seed, search_seed + SEED_STRIDE, ...
SEED_STRIDE = 1000
#: what a trial's score is, by ``SearchPlan.objective`` (see the module docstring)
OBJECTIVES = {
    "delta": "the method's best validation {metric} minus {plain}'s at the same seed",
    "delta-loss": "the method's lowest validation loss minus {plain}'s at the same seed",
    "score": "the method's best validation {metric}",
}


def search_seeds(search_seed: int, repeats: int) -> tuple[int, ...]:
    """The seeds every trial (and plain fine-tuning's reference) is trained at."""
    return tuple(search_seed + SEED_STRIDE * r for r in range(repeats))


@dataclass
class SearchPlan:
    """What every trial shares: the recipe, the budget, where trials go, how they are sampled."""

    base: TrainConfig  # the recipe: task, model, data, optimiser (method and seed are set per trial)
    out: Path
    storage: str
    methods: tuple[str, ...]
    epochs: int
    steps_per_epoch: int
    metric: str
    trials: int = 8
    hours: float | None = None
    sampler: str = "tpe"
    pruning: bool = True
    search_seed: int = 0
    repeats: int = 2  # seeds per trial (search_seeds)
    objective: str = "delta"  # OBJECTIVES
    recipe_key: str = ""  # the recipe's fingerprint (task, data, model): part of the sampler's seed
    fixed_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # method -> options not searched
    stale_after: float = 900.0
    poll: float = 30.0  # seconds between looks at trials other processes run, once this one has none left
    progress: bool = True
    echo: Callable[[str], None] = print
    tracking: Any = None  # --report-to: the attendout.track.Tracking of the study

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {self.objective!r}")
        if self.repeats < 1:
            raise ValueError(f"repeats (seeds per trial) must be at least 1, got {self.repeats!r}")

    @property
    def seeds(self) -> tuple[int, ...]:
        return search_seeds(self.search_seed, self.repeats)

    @property
    def paired(self) -> bool:
        """Whether a trial's score is a difference to plain fine-tuning (which is then trained per seed)."""
        return self.objective != "score"

    def trials_of(self, method: str) -> int:
        """The trials ``method`` gets: ``trials``, or its whole grid if that is smaller (grid sampler)."""
        return min(self.trials, grid_size(method)) if self.sampler == "grid" else self.trials


@dataclass
class MethodSearch:
    """One method's study after the search: its trials and its best setting (None if none finished)."""

    method: str
    options: dict[str, Any] | None
    value: float | None
    trial: int | None
    trials: list[dict[str, Any]]  # per trial: number, state, params, value, by_epoch, by_seed, seconds

    @property
    def finished(self) -> int:
        return sum(1 for t in self.trials if t["state"] in ("COMPLETE", "PRUNED") or t.get("error"))
