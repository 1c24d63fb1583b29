"""A search plan for tests of advise's search, from the keywords the tests speak in: the study's options
(an :class:`~attendout.advise.AdviseConfig`) and what the regime stage read (epochs, steps, metric)."""

from __future__ import annotations

from attendout.advise import AdviseConfig
from attendout.advise.plan import SearchPlan


def search_plan(base, out, epochs, steps_per_epoch, metric, repeats=2, recipe_key="", **study) -> SearchPlan:
    """``base``: the recipe; ``out``: the study's folder; ``repeats``: seeds per trial; ``recipe_key``: the
    recipe's fingerprint as the sampler's seed reads it (default: none, a key the tests choose);
    ``study``: :class:`AdviseConfig`'s other options (confirmation seeds "auto": never a search seed)."""
    study.setdefault("seeds", "auto")
    config = AdviseConfig(recipe=base, output_dir=str(out), search_repeats=repeats, **study)
    plan = SearchPlan(config, epochs, steps_per_epoch, metric)
    plan.recipe_key = recipe_key
    return plan
