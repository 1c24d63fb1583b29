"""The dropout-pattern figure: AttendOut's per-layer drop probability over training (paper 001 Figure 3).

One panel per AttendOut run directory (Figure 3 has one per dataset), one line per layer: the mean
probability with which the Generator drops a (query, key) score of that layer at its learned rates,
averaged over the units of the batches between two log lines. A control run among the runs
(``reward_control="noise"``: the same game, rewards that ignore the masks) is drawn dashed in the
panel of the run it controls (same task, seed and other options), and a last panel compares the
final per-layer rates of runs and controls (mean ± std over the pairs): a pattern that the controls
show too was not learned from the rewards. Reads each run's ``log.jsonl`` (and ``config.json`` for the
task's name, options and the total number of steps) only.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ..core.folder import RunDir
from ..methods.droplog import read_drop_pattern
from .canvas import panel_grid, save_png
from .curves import option_details


def pattern_figure(run_dirs: Sequence[Path], out: Path, title: str = "") -> Path:
    """Write a PNG with one panel per AttendOut run (its control dashed beside it): drop probability
    per layer vs training step; plus a panel of final rates, runs vs controls, when a run has one."""
    if not run_dirs:
        raise ValueError("no AttendOut run to draw the dropout pattern of")
    run_dirs = [Path(run) for run in run_dirs]
    pairs = pair_controls(run_dirs)
    paired = {control for control in pairs.values() if control is not None}
    shown = [run for run in run_dirs if run not in paired]
    patterns = {run: read_drop_pattern(run) for run in run_dirs}
    labels = dict(zip(shown, panel_labels(shown), strict=True))
    count = len(shown) + bool(paired)
    fig, axes = panel_grid(count, 6.4 if count == 1 else 4.6, 3.4)  # one panel: 6.4 inches wide
    for ax, run in zip(axes, shown, strict=False):
        pattern = patterns[run]
        for number, (layer, values) in enumerate(pattern.layers.items()):
            ax.plot(pattern.steps, values, label=f"L{layer}", linewidth=1.2, color=f"C{number % 10}")
        control = pairs.get(run)
        if control is not None:
            for number, (layer, values) in enumerate(patterns[control].layers.items()):
                ax.plot(
                    patterns[control].steps, values, label=f"L{layer} control", linewidth=1.0,
                    linestyle="--", color=f"C{number % 10}", alpha=0.8,
                )  # fmt: skip
        ax.set_title(labels[run] + (" (dashed: noise control)" if control is not None else ""), fontsize=10)
        ax.set_xlabel("training step")
        ax.set_ylabel("drop probability")
        ax.set_xlim(0, pattern.total_steps)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    if paired:
        final_rates_panel(axes[len(shown)], [(run, c) for run, c in pairs.items() if c is not None], patterns)
    fig.suptitle(title or "AttendOut dropout patterns: mean drop probability per layer (learned rates)")
    return save_png(fig, out, 150)


def final_rates_panel(ax, pairs: Sequence[tuple[Path, Path]], patterns: dict) -> None:
    """Each layer's last logged drop probability, mean ± std over the runs and over their controls."""
    for index, (name, style) in enumerate((("run", "-"), ("noise control", "--"))):
        finals = [
            {layer: values[~np.isnan(values)][-1] for layer, values in patterns[pair[index]].layers.items()}
            for pair in pairs
        ]
        layers = sorted(set.intersection(*(set(f) for f in finals)))
        table = np.array([[f[layer] for layer in layers] for f in finals])  # (pairs, layers)
        std = table.std(axis=0, ddof=1) if len(table) > 1 else np.zeros(len(layers))
        ax.errorbar(
            layers, table.mean(axis=0), yerr=std, label=f"{name} (n={len(table)})", linestyle=style,
            marker="o", capsize=3, color="C3" if index == 0 else "0.4",
        )  # fmt: skip
    ax.set_title("final drop probability by layer, mean ± std", fontsize=10)
    ax.set_xlabel("encoder layer")
    ax.set_ylabel("drop probability")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def is_control_run(run_dir: Path) -> bool:
    """True for an AttendOut run whose rewards were replaced by noise (``reward_control="noise"``)."""
    options = _saved(run_dir).get("config", {}).get("method_options") or {}
    return options.get("reward_control", "none") != "none"


def pair_controls(run_dirs: Sequence[Path]) -> dict[Path, Path | None]:
    """Each non-control run -> the control run with the same task, seed and every other option (or None)."""

    def identity(run: Path) -> str:
        saved = _saved(run)
        config = dict(saved.get("config", {}))
        options = {
            k: v for k, v in (config.pop("method_options", None) or {}).items() if k != "reward_control"
        }
        keep = {k: config.get(k) for k in ("method", "seed", "data_seed", "model")}
        return json.dumps([saved.get("task", {}).get("name"), keep, options], sort_keys=True, default=str)

    controls = {identity(run): run for run in run_dirs if is_control_run(run)}
    return {run: controls.get(identity(run)) for run in run_dirs if not is_control_run(run)}


def _saved(run_dir: Path) -> dict:
    """A run's config.json ({} when it has none)."""
    run = RunDir(run_dir)
    return run.read_config() if run.config.is_file() else {}


def is_attendout_run(run_dir: Path) -> bool:
    """True for a run directory of ``--method attendout`` (by its config.json)."""
    return _saved(run_dir).get("config", {}).get("method") == "attendout"


def panel_labels(run_dirs: Sequence[Path]) -> list[str]:
    """A title per run: its task, the options that differ between the runs, and its seed
    (``cola, init_drop=0.1, seed 1``); the folder name when a run has no config.json."""
    detail = option_details([run for run in run_dirs if RunDir(run).config.is_file()])
    labels = []
    for run in map(Path, run_dirs):
        if not RunDir(run).config.is_file():
            labels.append(run.name)
            continue
        saved = RunDir(run).read_config()
        parts = [saved.get("task", {}).get("name") or run.name, detail.get(run, "")]
        seed = saved.get("config", {}).get("seed")
        parts.append(f"seed {seed}" if seed is not None else "")
        labels.append(", ".join(p for p in parts if p))
    return labels
