"""What AttendOut logs between two of the loop's log calls: drop probabilities per layer and game statistics.

:class:`StepStatistics` sums each step's drop probabilities (at the policy's mean rates, Figure 3, and
at the games' explored rates) and collects the Attacker's losses and each game's statistics; the loop's
log call takes their means (:meth:`StepStatistics.take`) and starts afresh.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np
import torch

from ..droplog import DROP_PROB_KEY, EXPLORED_PROB_KEY
from .generator import GeneratorSample


class StepStatistics:
    """Sums of the drop probabilities per layer (``drop_sums`` over ``drop_steps`` steps) and the values
    of each statistic (``window``) since the last :meth:`take`."""

    def __init__(self) -> None:
        self.drop_sums: dict[str, torch.Tensor] = {}
        self.drop_steps = 0
        self.window: dict[str, list[float]] = defaultdict(list)

    def record_step(self, sample: GeneratorSample, attacker_loss: float) -> None:
        """Add one step's drop probabilities (policy and explored) and the Attacker's loss."""
        for key, probs in ((DROP_PROB_KEY, sample.policy_prob), (EXPLORED_PROB_KEY, sample.drop_prob)):
            for layer, p in probs.items():
                name = key.format(layer=layer)
                self.drop_sums[name] = self.drop_sums.get(name, 0) + p
        self.drop_steps += 1
        self.window["loss_attacker"].append(attacker_loss)

    def add(self, values: dict[str, Any]) -> None:
        """Add a value of each statistic (a game's)."""
        for key, value in values.items():
            self.window[key].append(value)

    def take(self) -> dict[str, float]:
        """The mean drop probability per layer and the mean of each statistic (``attendout/<name>``) since
        the last call; then start afresh."""
        out: dict[str, float] = {}
        if self.drop_steps:
            for name, total in sorted(self.drop_sums.items()):
                out[name] = (total / self.drop_steps).item()
        for key, values in self.window.items():
            if values:
                out[f"attendout/{key}"] = float(np.mean([float(v) for v in values]))
        self.drop_sums, self.drop_steps = {}, 0
        self.window = defaultdict(list)
        return out

    def state(self) -> tuple[dict[str, torch.Tensor], int, dict[str, list[float]]]:
        """What a checkpoint keeps: ``(drop_sums, drop_steps, window)``."""
        return self.drop_sums, self.drop_steps, dict(self.window)

    def load(self, state: tuple[dict[str, torch.Tensor], int, dict[str, list[float]]]) -> None:
        self.drop_sums, self.drop_steps, window = state
        self.window = defaultdict(list, window)
