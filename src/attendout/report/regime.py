"""Where plain fine-tuning overfits: the per-epoch curves that choose a grid's budgets.

A regulariser has room only where the unregularised model overfits: its validation metric peaks and
then falls or flattens while its training loss keeps falling. :func:`epoch_curves` reads that from a
run directory's ``log.jsonl`` (training losses and the validation records, one per epoch or more) and
:func:`regime_figure` draws one panel per run: the validation metric (left axis) against the training
and validation losses (right axis), with the budget an experiment file chose for the run's task marked.
:func:`regime_summary` says the same in one line per run. They read result files only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.folder import CELL_FILE, LOG_FILE, RUN_CONFIG_FILE, RunDir
from ..tasks import higher_is_better
from .canvas import panel_grid, save_png
from .curves import main_metric, read_log


@dataclass
class EpochCurves:
    """One run's curves by epoch (validation at the end of each epoch; train loss its epoch's mean)."""

    metric: str
    epochs: np.ndarray  # (E,) the epoch at each validation (1.0, 2.0, ...)
    validation: np.ndarray  # (E,) validation metric
    validation_loss: np.ndarray  # (E,)
    train_epochs: np.ndarray  # (T,) epochs that have training-loss records
    train_loss: np.ndarray  # (T,) mean logged training loss within each epoch

    @property
    def oriented(self) -> np.ndarray:
        """The validation metric with higher better: itself, or its negative for perplexity and the loss."""
        return self.validation if higher_is_better(self.metric) else -self.validation

    @property
    def best(self) -> int:
        """Index of the best validation in the metric's direction (the first of equals, as model
        selection keeps it)."""
        return int(np.argmax(self.oriented))

    @property
    def overfits(self) -> bool:
        """The validation metric peaked before the last epoch, or the validation loss rose from its low."""
        rose = self.validation_loss[-1] > self.validation_loss.min() + 0.02
        return self.best < len(self.epochs) - 1 or bool(rose)


def epoch_curves(run_dir: Path, metric: str | None = None) -> EpochCurves:
    """The per-epoch curves of ``run_dir``; ValueError naming the run if it has no validation records."""
    run_dir = Path(run_dir)
    metric = metric or main_metric(run_dir)
    validations: dict[float, dict] = {}
    losses: dict[int, list[float]] = {}
    for record in read_log(run_dir):
        if "validation" in record:
            validations[float(record["epoch"])] = record["validation"]
        elif "loss" in record and "epoch" in record:
            # a step logged at epoch e (fraction) belongs to epoch ceil(e): 0.33 and 1.0 are epoch 1
            losses.setdefault(max(1, math.ceil(float(record["epoch"]) - 1e-9)), []).append(
                float(record["loss"])
            )
    if not validations:
        raise ValueError(f"{run_dir}: {LOG_FILE} has no validation records")
    epochs = np.array(sorted(validations))
    missing = [e for e in epochs if metric not in validations[e] or "loss" not in validations[e]]
    if missing:
        raise ValueError(f"{run_dir}: the validation at epoch {missing[0]:g} has no {metric!r} or loss")
    train_epochs = np.array(sorted(losses), dtype=float)
    return EpochCurves(
        metric=metric,
        epochs=epochs,
        validation=np.array([float(validations[e][metric]) for e in epochs]),
        validation_loss=np.array([float(validations[e]["loss"]) for e in epochs]),
        train_epochs=train_epochs,
        train_loss=np.array([float(np.mean(losses[int(e)])) for e in train_epochs]),
    )


def run_task_id(run_dir: Path) -> str:
    """The task id of a bench cell (its cell.json), else the task name of the run's config.json."""
    run = RunDir(run_dir)
    if run.cell.is_file():
        return run.read_cell()["task"]
    if run.config.is_file():
        return run.read_config()["task"]["name"]
    raise ValueError(f"{run.path} is not a run directory: it has neither {CELL_FILE} nor {RUN_CONFIG_FILE}")


def regime_summary(run_dir: Path, budget: float | None = None) -> str:
    """One line: where the validation metric peaked, where the losses went, and the budget if given."""
    c = epoch_curves(run_dir)
    low = int(np.argmin(c.validation_loss))
    line = (
        f"{run_task_id(run_dir)}: validation {c.metric} best {c.validation[c.best]:.3f} at epoch "
        f"{c.epochs[c.best]:g}, {c.validation[-1]:.3f} at the last ({c.epochs[-1]:g}); validation loss lowest "
        f"{c.validation_loss[low]:.3f} at epoch {c.epochs[low]:g}, {c.validation_loss[-1]:.3f} at the last; "
        f"training loss {c.train_loss[0]:.3f} -> {c.train_loss[-1]:.3f}"
    )
    if budget is not None:
        line += f"; grid budget {budget:g} epochs"
    return line + ("" if c.overfits else "; NOT overfitting within this budget")


def regime_figure(
    runs: Sequence[Path], out: Path, budgets: Mapping[str, float] | None = None, title: str = ""
) -> Path:
    """A PNG with one panel per run: validation metric, validation and training loss by epoch.

    ``budgets`` maps a task id (:func:`run_task_id`) to the epochs a grid gives it: a vertical line
    marks it. The best validation epoch is circled. Returns ``out``.
    """
    if not runs:
        raise ValueError("no run to draw the regime figure of")
    budgets = budgets or {}
    fig, axes = panel_grid(len(runs), 3.6, 2.9, per_row=4)
    legend_axes: list = []  # the first panel's two axes, whose lines the legend names
    for ax, run in zip(axes, runs, strict=True):
        c = epoch_curves(run)
        task = run_task_id(run)
        ax.plot(
            c.epochs,
            c.validation,
            marker="o",
            markersize=3,
            color="C0",
            label="validation metric (left axis)",
        )
        ax.plot(c.epochs[c.best], c.validation[c.best], "o", markersize=9, mfc="none", color="C0")
        ax.set_ylabel(f"validation {c.metric}", color="C0")
        ax.set_xlabel("epoch")
        losses = ax.twinx()
        losses.plot(
            c.epochs, c.validation_loss, marker="s", markersize=3, color="C3", label="validation loss"
        )
        losses.plot(c.train_epochs, c.train_loss, ls="--", color="0.4", label="training loss (right)")
        losses.set_ylabel("loss")
        legend_axes = legend_axes or [ax, losses]
        if task in budgets:
            ax.axvline(budgets[task], color="C2", lw=1.5, alpha=0.8)
            ax.text(budgets[task], ax.get_ylim()[0], " budget", color="C2", va="bottom", fontsize=8)
        ax.set_title(task, fontsize=10)
        ax.grid(alpha=0.3)
    handles, labels = [], []
    for a in legend_axes:
        h, lab = a.get_legend_handles_labels()
        handles += h
        labels += lab
    fig.legend(handles, labels, loc="outside lower center", ncols=3, fontsize=8)
    fig.suptitle(title or "Plain fine-tuning by epoch (circle: best validation)", fontsize=10)
    return save_png(fig, out, 130)
