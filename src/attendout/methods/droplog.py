"""The per-layer drop probabilities an AttendOut run logs: their log keys, and their reader (for plots and the
fit of a schedule to them, paper 001 §7.2, which ``scheduled`` and ``drophead`` take)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.folder import LOG_FILE, RunDir

#: Log key of a layer's mean drop probability at the policy's mean rate (paper 001 Figure 3; what the
#: Generator has learned): DROP_PROB_KEY.format(layer=i).
DROP_PROB_KEY = "attendout/drop_prob/L{layer}"
#: The same at the rates the games explored (what the Attacker was trained with).
EXPLORED_PROB_KEY = "attendout/explored_prob/L{layer}"
_KEY = re.compile(r"^attendout/drop_prob/L(\d+)$")


@dataclass
class DropPattern:
    """Per-layer mean drop probability over training, from one run's log.jsonl.

    steps (S,) are the logged steps; progress (S,) is steps / total_steps in [0, 1]; layers maps a
    layer index to its (S,) probabilities (NaN where a log line lacks the layer).
    """

    run_dir: Path
    steps: np.ndarray
    progress: np.ndarray
    layers: dict[int, np.ndarray]
    total_steps: int


def read_drop_pattern(run_dir: str | Path) -> DropPattern:
    """The drop-probability curves of an AttendOut run directory (ValueError if it has none)."""
    run_dir = Path(run_dir)
    run = RunDir(run_dir)
    if not run.log.is_file():
        raise ValueError(f"{run_dir} is not a run directory: it has no {LOG_FILE}")
    rows: list[tuple[int, dict[int, float]]] = []
    for record in run.log_records():
        values = {int(m.group(1)): float(v) for k, v in record.items() if (m := _KEY.match(k))}
        if values:
            rows.append((int(record["step"]), values))
    if not rows:
        raise ValueError(
            f"{run_dir}: {LOG_FILE} has no AttendOut drop probabilities ({DROP_PROB_KEY.format(layer='N')}); "
            "is it a run of --method attendout?"
        )
    recorded = run.read_config().get("total_steps") if run.config.is_file() else None
    total = recorded or max(step for step, _ in rows)
    steps = np.array([step for step, _ in rows])
    layers = {
        layer: np.array([values.get(layer, np.nan) for _, values in rows])
        for layer in sorted({layer for _, values in rows for layer in values})
    }
    return DropPattern(run_dir, steps, np.clip(steps / total, 0.0, 1.0), layers, total)
