"""``attendout table``: the comparison table of an experiment grid, from its result files only.

For every model, task, evaluation split and method: the mean and standard deviation over seeds of
the task's main metric; against the baseline method (``none``): the mean paired difference, a paired
t-test over seeds with Holm's correction across every comparison of the table, and a bootstrap
interval over the evaluation examples from the stored per-example predictions; per task and split,
the smallest difference the design can detect. Written as Markdown and CSV; figures are in
:mod:`attendout.report.figures`.

Only finished cells whose configuration fingerprint matches the experiment file count; cells run
with another configuration (stale), cells not run yet, and cells that cannot run (invalid: an unknown
method or task, a bad option) are counted in the header and left out of the numbers.

This module holds the command (:func:`table_main`); the statistics are built in
:mod:`attendout.report.comparison` and written out in :mod:`attendout.report.render`, and every name
of both is importable from here too.
"""

from __future__ import annotations

from pathlib import Path

from .comparison import SIGNIFICANCE as SIGNIFICANCE
from .comparison import Comparison as Comparison
from .comparison import ComparisonTable, Detectable, Row, RunRecord, build_table
from .comparison import collect_runs as collect_runs
from .comparison import majority_floor as majority_floor
from .render import CSV_COLUMNS as CSV_COLUMNS
from .render import protocol_lines as protocol_lines
from .render import to_csv, to_markdown

__all__ = ["ComparisonTable", "Detectable", "Row", "RunRecord", "build_table", "to_csv", "to_markdown"]


# --------------------------------------------------------------------------------------------------
# The command line


def table_main(argv: list[str]) -> int:
    """``attendout table``: print or write the Markdown/CSV table and the figures of a grid."""
    import argparse

    from ..experiments.parse import load_experiment
    from ..experiments.store import default_results_root

    parser = argparse.ArgumentParser(
        prog="attendout table",
        description=(
            "The comparison table of an experiment grid from its results root: mean ± std over seeds, the "
            "difference against the baseline with a paired t-test (Holm-corrected) and a bootstrap interval "
            "over dev examples, and the smallest detectable difference. Prints Markdown unless told where to write."
        ),
    )
    parser.add_argument("experiment", help="an experiment file, or the name of one in --experiments-dir")
    parser.add_argument("--results", default=None, help="results root (default: results/NAME)")
    parser.add_argument(
        "--out", default=None, help="write table.md, table.csv, bars.png, deltas.png and curves-*.png here"
    )
    parser.add_argument("--markdown", default=None, help="write the Markdown table to this file")
    parser.add_argument("--csv", default=None, help="write the CSV table to this file")
    parser.add_argument("--bar-chart", default=None, help="write the bar chart PNG to this file")
    parser.add_argument(
        "--delta-chart", default=None, help="write the PNG of differences from the baseline to this file"
    )
    parser.add_argument(
        "--curves", default=None, metavar="DIR", help="write convergence curves PNGs to this folder"
    )
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples (default: 2000)")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level (default: 0.05)")
    parser.add_argument(
        "--power", type=float, default=0.8, help="power of the detectable difference (default: 0.8)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap (default: 0)")
    parser.add_argument(
        "--experiments-dir", default="experiments", help="where experiment names are looked up"
    )
    args = parser.parse_args(argv)

    experiment = load_experiment(args.experiment, args.experiments_dir)
    root = Path(args.results) if args.results else default_results_root(experiment)
    if not root.is_dir():
        raise ValueError(
            f"results root {root} does not exist; run attendout bench {args.experiment} first (or pass --results)"
        )
    table = build_table(
        experiment, root, alpha=args.alpha, power=args.power, n_resamples=args.bootstrap, seed=args.seed
    )
    if not table.runs:
        raise ValueError(f"no finished cell of {experiment.name} in {root}")

    from .figures import bar_chart, convergence_curves, delta_chart

    markdown_path = Path(args.markdown) if args.markdown else None
    csv_path = Path(args.csv) if args.csv else None
    bars = Path(args.bar_chart) if args.bar_chart else None
    deltas = Path(args.delta_chart) if args.delta_chart else None
    curves_dir = Path(args.curves) if args.curves else None
    if args.out:
        out = Path(args.out)
        markdown_path = markdown_path or out / "table.md"
        csv_path = csv_path or out / "table.csv"
        bars = bars or out / "bars.png"
        deltas = deltas or out / "deltas.png"
        curves_dir = curves_dir or out
    figures: dict[str, str] = {}
    written: list[Path] = []
    if bars is not None:
        written.append(bar_chart(table, bars))
        figures["bar chart"] = _relative(bars, markdown_path)
    if deltas is not None and any(row.comparison is not None for row in table.rows):
        written.append(delta_chart(table, deltas))
        figures["differences from the baseline"] = _relative(deltas, markdown_path)
    if curves_dir is not None:
        for path in convergence_curves(table, curves_dir):
            written.append(path)
            figures[path.stem] = _relative(path, markdown_path)
    markdown = to_markdown(table, figures if markdown_path else None)
    if markdown_path is not None:
        markdown_path.parent.mkdir(parents=True, exist_ok=True)
        markdown_path.write_text(markdown)
        written.append(markdown_path)
    if csv_path is not None:
        csv_path.parent.mkdir(parents=True, exist_ok=True)
        csv_path.write_text(to_csv(table))
        written.append(csv_path)
    if markdown_path is None:
        print(markdown, end="")
    for path in written:
        print(f"wrote {path}")
    return 0


def _relative(path: Path, markdown: Path | None) -> str:
    """``path`` as a link from the Markdown file's folder (absolute-free when possible)."""
    import os

    if markdown is None:
        return str(path)
    return os.path.relpath(path, markdown.parent)
