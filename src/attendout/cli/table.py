"""``attendout table``: its flags; the table is built by :func:`attendout.report.comparison.build_table`
and written by :func:`attendout.report.table.write_report`."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..report.table import write_report


def main(argv: list[str]) -> int:
    """``attendout table``: print or write the Markdown/CSV table and the figures of a grid."""
    from ..bench.parse import load_experiment
    from ..bench.store import default_results_root
    from ..report.comparison import build_table

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
        "--metric",
        default=None,
        help="the stored metric to compare, e.g. chrf beside a translation grid's bleu (default: each task's main metric)",
    )
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
        experiment,
        root,
        alpha=args.alpha,
        power=args.power,
        n_resamples=args.bootstrap,
        seed=args.seed,
        metric=args.metric,
    )
    if not table.runs:
        raise ValueError(f"no finished cell of {experiment.name} in {root}")

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
    markdown, written = write_report(
        table, markdown=markdown_path, csv=csv_path, bars=bars, deltas=deltas, curves=curves_dir
    )
    if markdown_path is None:
        print(markdown, end="")
    for path in written:
        print(f"wrote {path}")
    return 0
