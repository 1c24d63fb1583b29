"""``attendout plot``: figures from run directories, drawn as PNG (its parser and what it prints).

The convergence curves (validation metric vs step, mean ± std per method; paper 001 Figure 4) from
:mod:`attendout.report.curves`, AttendOut's dropout patterns (Figure 3) from
:mod:`attendout.report.patterns`, and with ``--regime`` the per-epoch regime of each run from
:mod:`attendout.report.regime`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.folder import LOG_FILE, RunDir


def main(argv: list[str]) -> int:
    """Figures from run directories: AttendOut's dropout patterns and the convergence curves (001 Fig. 3, 4)."""
    parser = argparse.ArgumentParser(
        prog="attendout plot",
        description="Draw, as PNG, the convergence curves of the runs on one axis (validation metric vs "
        "step, mean ± std over the runs of a method; paper 001 Figure 4) and the dropout pattern of every "
        "AttendOut run (drop probability per layer vs step; Figure 3).",
    )
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="run directories of `attendout finetune`")
    parser.add_argument("--out-dir", default="plots", help="folder for the PNG files (default: plots)")
    parser.add_argument(
        "--metric", default=None, help="validation metric to plot (default: the task's main metric)"
    )
    parser.add_argument(
        "--group-by",
        choices=("method", "run"),
        default="method",
        help="one curve per method (mean ± std over its runs, e.g. seeds) or per run (default: method)",
    )
    parser.add_argument("--title", default="", help="title of the convergence figure")
    parser.add_argument(
        "--regime",
        action="store_true",
        help="draw regime.png instead: per run, the validation metric and the validation and training "
        "losses by epoch (where plain fine-tuning peaks and overfits), and print one line per run",
    )
    parser.add_argument(
        "--budgets",
        default=None,
        metavar="EXPERIMENT",
        help="with --regime: mark on each run the epochs this experiment file gives the run's task id",
    )
    args = parser.parse_args(argv)
    from ..report.curves import convergence_figure, group_runs
    from ..report.patterns import is_attendout_run, pattern_figure

    runs = [Path(run) for run in args.runs]
    for run in runs:
        if not RunDir(run).log.is_file():
            raise ValueError(f"{run} is not a run directory: it has no {LOG_FILE}")
    out = Path(args.out_dir)
    if args.regime:
        return _plot_regime(runs, out, args.budgets, args.title)
    if args.budgets:
        parser.error("--budgets needs --regime")
    written = [
        convergence_figure(group_runs(runs, args.group_by), out / "convergence.png", args.metric, args.title)
    ]
    attendout_runs = [run for run in runs if is_attendout_run(run)]
    if attendout_runs:
        written.append(pattern_figure(attendout_runs, out / "dropout_pattern.png"))
    for path in written:
        print(f"wrote {path}")
    return 0


def _plot_regime(runs: list[Path], out: Path, experiment: str | None, title: str) -> int:
    """``attendout plot --regime``: regime.png and one line per run (see attendout.report.regime)."""
    from ..bench import load_experiment
    from ..report.regime import regime_figure, regime_summary, run_task_id

    budgets: dict[str, float] = {}
    if experiment:
        for cell in load_experiment(experiment).cells():
            if cell.config is not None and cell.config.max_steps is None:
                budgets[cell.task.id] = cell.config.epochs
    for run in runs:
        print(regime_summary(run, budgets.get(run_task_id(run))))
    print(f"wrote {regime_figure(runs, out / 'regime.png', budgets, title)}")
    return 0
