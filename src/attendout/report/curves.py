"""Convergence curves: the validation metric of several runs over training, on one axis.

Paper 001's Figure 4 plots the accuracy of RoBERTa with and without AttendOut over training.
:func:`convergence_figure` draws the same kind of figure from run directories: one line per group of
runs (e.g. ``{"none": [seed1, seed2, seed3], "attendout": [...]}``), the mean over the group's runs
with a band of ± one standard deviation (the band is absent for a group of one run).

It reads result files only: each run's ``log.jsonl`` (the ``validation`` records the fine-tuning loop
writes at every evaluation) and ``results.json`` / ``config.json`` (for the main metric's name).
The validation split is the one carved from train for model selection; dev is not in the log.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..core.folder import LOG_FILE, RESULTS_FILE, RUN_CONFIG_FILE, RunDir
from ..tasks import higher_is_better
from .canvas import fitted, save_png


def convergence_figure(
    groups: dict[str, list[Path]], out: Path, metric: str | None = None, title: str = ""
) -> Path:
    """Write a PNG of validation ``metric`` vs step, mean ± std over the run directories of each group.

    ``metric`` defaults to the main metric of the first run (its task's first metric). Within a group,
    the curve uses the evaluation steps that every run of the group shares. Returns ``out``.
    Raises ``ValueError`` naming the run or group when a run has no validation records or a group's
    runs share no evaluation step.
    """
    if not groups or not any(groups.values()):
        raise ValueError("no run to draw convergence curves of")
    first_run = next(Path(p) for runs in groups.values() for p in runs)
    metric = metric or main_metric(first_run)
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    for label, runs in groups.items():
        if not runs:
            continue
        steps, mean, std = _group_curve([Path(r) for r in runs], metric, label)
        (line,) = ax.plot(steps, mean, marker="o", markersize=3, label=f"{label} (n={len(runs)})")
        if len(runs) > 1:
            ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("training step")
    if higher_is_better(metric):
        ax.set_ylabel(f"validation {metric}")
    else:  # perplexity falls by orders of magnitude from a model trained from scratch
        ax.set_ylabel(f"validation {metric} (lower is better)")
        if metric == "perplexity":
            ax.set_yscale("log")
    ax.set_title(
        fitted(title or f"Convergence (validation {metric}, mean ± std over runs)", fig, 8), fontsize=10
    )
    ax.grid(alpha=0.3)
    ax.legend()
    return save_png(fig, out, 150)


def group_runs(run_dirs: Sequence[Path], by: str = "method") -> dict[str, list[Path]]:
    """Group run directories for :func:`convergence_figure`: by their method (``by="method"``; the
    options that differ between runs of one method name join the label, e.g. ``addrop (attribution=ga)``,
    and the task does when the runs span several tasks) or one group per run (``by="run"``)."""
    if by not in ("method", "run"):
        raise ValueError(f"runs are grouped by 'method' or 'run' (--group-by), got {by!r}")
    described = [(Path(run), *_method_and_task(Path(run))) for run in run_dirs]
    several_tasks = len({task for _, _, _, task in described}) > 1
    details = _varying_options(described)
    groups: dict[str, list[Path]] = {}
    for run, method, _, task in described:
        if by == "run":
            label = run.name
        else:
            label = f"{method} ({details[run]})" if details[run] else method
            label = f"{task} {label}" if several_tasks else label
        groups.setdefault(label, []).append(run)
    return groups


def option_details(run_dirs: Sequence[Path]) -> dict[Path, str]:
    """Per run, the options whose values differ between the runs of its method (``"init_drop=0.1"``;
    ``""`` when none do), as :func:`group_runs` puts them in its labels."""
    return _varying_options([(Path(run), *_method_and_task(Path(run))) for run in run_dirs])


def _varying_options(described: list[tuple[Path, str, dict, str]]) -> dict[Path, str]:
    """(run, method, options, task) rows -> per run, ``k=v, ...`` of its method's varying options."""
    values: dict[str, dict[str, set[str]]] = {}
    for _, method, options, _ in described:
        for key, value in options.items():
            values.setdefault(method, {}).setdefault(key, set()).add(json.dumps(value, sort_keys=True))
    return {
        run: ", ".join(f"{k}={options.get(k)}" for k, seen in values.get(method, {}).items() if len(seen) > 1)
        for run, method, options, _ in described
    }


def _method_and_task(run_dir: Path) -> tuple[str, dict, str]:
    """(method name, its options and the attention variant, task name) from RUN_DIR/config.json."""
    run = RunDir(run_dir)
    if not run.config.is_file():
        raise ValueError(f"{run_dir} is not a run directory: it has no {RUN_CONFIG_FILE}")
    saved = run.read_config()
    options = {k: v for k, v in (saved["config"].get("method_options") or {}).items() if k != "name"}
    if saved["config"].get("attention"):
        options["attention"] = saved["config"]["attention"]
    return saved["config"]["method"], options, saved["task"]["name"]


def read_log(run_dir: Path) -> list[dict]:
    """The records of ``RUN_DIR/log.jsonl`` (ValueError if the file is missing)."""
    run = RunDir(run_dir)
    if not run.log.is_file():
        raise ValueError(f"{run_dir} is not a run directory: it has no {LOG_FILE}")
    return run.log_records()


def main_metric(run_dir: Path) -> str:
    """The run's main metric: ``results.json`` main_metric, else the task's first metric in config.json."""
    run = RunDir(run_dir)
    if run.finished:
        return run.read_results()["main_metric"]
    if run.config.is_file():
        return run.read_config()["task"]["metrics"][0]
    raise ValueError(
        f"{run.path} has neither {RESULTS_FILE} nor {RUN_CONFIG_FILE}: cannot tell its main metric"
    )


def validation_curve(run_dir: Path, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of validation ``metric`` in a run's log, in step order (last record per step)."""
    by_step: dict[int, float] = {}
    for record in read_log(run_dir):
        validation = record.get("validation")
        if validation is None:
            continue
        if metric not in validation:
            raise ValueError(
                f"{run_dir}: validation records have no metric {metric!r}; they have {', '.join(validation)}"
            )
        by_step[int(record["step"])] = float(validation[metric])
    if not by_step:
        raise ValueError(f"{run_dir}: {LOG_FILE} has no validation records")
    steps = np.array(sorted(by_step))
    return steps, np.array([by_step[s] for s in steps])


def _group_curve(runs: Sequence[Path], metric: str, label: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps shared by every run, mean, std) of one group."""
    curves = [validation_curve(run, metric) for run in runs]
    shared = set(curves[0][0].tolist())
    for steps, _ in curves[1:]:
        shared &= set(steps.tolist())
    if not shared:
        raise ValueError(
            f"group {label!r}: its runs share no evaluation step; evaluate them at the same steps"
        )
    steps = np.array(sorted(shared))
    values = np.stack([vals[np.searchsorted(s, steps)] for s, vals in curves])  # (runs, steps)
    return steps, values.mean(axis=0), values.std(axis=0)
