"""What a search shares and what it finds: the plan every trial of ``advise``'s search shares
(:class:`SearchPlan`: the study's options at the budget the regime stage chose) and one method's study
after the search (:class:`MethodSearch`). Below both the objectives (:mod:`.objective`), which read a
plan, and the search (:mod:`.search`), which runs one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..bench import config_fingerprint
from .options import AdviseConfig, search_seeds
from .spaces import grid_size


@dataclass
class SearchPlan:
    """What every trial shares: the study (its recipe, budget of trials, storage, sampler, objective,
    seeds) and what the regime stage read: the epochs of every run, the batches of one and the metric."""

    study: AdviseConfig
    epochs: int
    steps_per_epoch: int
    metric: str

    @cached_property
    def recipe_key(self) -> str:
        """The recipe's fingerprint (task, data, model; not the evaluation files, which the search never
        reads): part of the sampler's seed and of each study's identity."""
        return config_fingerprint(dataclasses.replace(self.study.recipe, eval_files=None))

    @property
    def seeds(self) -> tuple[int, ...]:
        return search_seeds(self.study.search_seed, self.study.search_repeats)

    @property
    def paired(self) -> bool:
        """Whether a trial's score is a difference to plain fine-tuning (which is then trained per seed)."""
        return self.study.objective != "score"

    def trials_of(self, method: str) -> int:
        """The trials ``method`` gets: ``trials``, or its whole grid if that is smaller (grid sampler)."""
        trials = self.study.trials
        return min(trials, grid_size(method)) if self.study.sampler == "grid" else trials


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
