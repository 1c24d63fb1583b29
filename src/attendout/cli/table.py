"""``attendout table``: its flags; the table is built by :func:`attendout.report.comparison.build_table`
and written by :func:`attendout.report.table.write_report`."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..report.table import write_report
from .flags import experiment_parser, load_grid


def table_parser() -> argparse.ArgumentParser:
    """The flags of ``attendout table``: the grid, where to write, and the statistics' settings."""
    parser = experiment_parser(
        "attendout table",
        "The comparison table of an experiment grid from its results root: mean ± std over seeds, the "
        "difference against the baseline with a paired t-test (Holm-corrected) and a bootstrap interval "
        "over dev examples, and the smallest detectable difference. Prints Markdown unless told where to write.",
        "results/NAME",
    )
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
    return parser


#: Each output of :func:`write_report`: the destination of its own flag, and its file under ``--out``
#: (the curves: ``--out`` itself).
_OUTPUTS = {
    "markdown": ("markdown", "table.md"),
    "csv": ("csv", "table.csv"),
    "bars": ("bar_chart", "bars.png"),
    "deltas": ("delta_chart", "deltas.png"),
    "curves": ("curves", ""),
}


def _output_paths(args: argparse.Namespace) -> dict[str, Path | None]:
    """Where each output goes (:func:`write_report`'s arguments): its own flag, else under ``--out``,
    else nowhere (the Markdown is then printed)."""
    out = Path(args.out) if args.out else None
    return {
        name: Path(getattr(args, flag)) if getattr(args, flag) else out and out / under_out
        for name, (flag, under_out) in _OUTPUTS.items()
    }


def main(argv: list[str]) -> int:
    """``attendout table``: print or write the Markdown/CSV table and the figures of a grid."""
    from ..report.comparison import build_table

    args = table_parser().parse_args(argv)
    experiment, root = load_grid(args)
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
    paths = _output_paths(args)
    markdown, written = write_report(table, **paths)
    if paths["markdown"] is None:
        print(markdown, end="")
    for path in written:
        print(f"wrote {path}")
    return 0
