"""The dropout-pattern figure: AttendOut's per-layer drop probability over training (paper 001 Figure 3).

One panel per AttendOut run directory (Figure 3 has one per dataset), one line per layer: the mean
probability with which the Generator drops a (query, key) score of that layer, averaged over the
units of the batches between two log lines. Reads each run's ``log.jsonl`` (and ``config.json`` for
the task's name and the total number of steps) only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from matplotlib.figure import Figure

from ..methods.attendout.runlog import read_drop_pattern
from .curves import option_details

__all__ = ["is_attendout_run", "panel_labels", "pattern_figure"]


def pattern_figure(run_dirs: Sequence[Path], out: Path, title: str = "") -> Path:
    """Write a PNG with one panel per AttendOut run: drop probability per layer vs training step."""
    if not run_dirs:
        raise ValueError("pattern_figure: no runs given")
    patterns = [read_drop_pattern(run) for run in run_dirs]
    labels = panel_labels(run_dirs)
    columns = min(len(patterns), 3)
    rows = math.ceil(len(patterns) / columns)
    fig = Figure(figsize=(max(6.4, 4.6 * columns), 3.4 * rows), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax, pattern, label in zip(axes, patterns, labels, strict=False):
        for layer, values in pattern.layers.items():
            ax.plot(pattern.steps, values, label=f"L{layer}", linewidth=1.2)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("training step")
        ax.set_ylabel("drop probability")
        ax.set_xlim(0, pattern.total_steps)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    for ax in axes[len(patterns) :]:
        ax.set_visible(False)
    fig.suptitle(title or "AttendOut dropout patterns: mean drop probability per layer")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=150)
    return out


def is_attendout_run(run_dir: Path) -> bool:
    """True for a run directory of ``--method attendout`` (by its config.json)."""
    config = Path(run_dir) / "config.json"
    return config.is_file() and json.loads(config.read_text())["config"]["method"] == "attendout"


def panel_labels(run_dirs: Sequence[Path]) -> list[str]:
    """A title per run: its task, the options that differ between the runs, and its seed
    (``cola, init_drop=0.1, seed 1``); the folder name when a run has no config.json."""
    detail = option_details([run for run in run_dirs if (Path(run) / "config.json").is_file()])
    labels = []
    for run in map(Path, run_dirs):
        config = run / "config.json"
        if not config.is_file():
            labels.append(run.name)
            continue
        saved = json.loads(config.read_text())
        parts = [saved.get("task", {}).get("name") or run.name, detail.get(run, "")]
        seed = saved.get("config", {}).get("seed")
        parts.append(f"seed {seed}" if seed is not None else "")
        labels.append(", ".join(p for p in parts if p))
    return labels
