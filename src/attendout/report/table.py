"""The files of an experiment grid's comparison: Markdown and CSV tables and their figures.

For every model, task, evaluation split and method: the mean and standard deviation over seeds of
the task's main metric; against the baseline method (``none``): the mean paired difference, a paired
t-test over seeds with Holm's correction across every comparison of the table, and a bootstrap
interval over the evaluation examples from the stored per-example predictions; per task and split,
the smallest difference the design can detect.

The table is built by :func:`attendout.report.comparison.build_table` (only finished cells whose
configuration fingerprint matches the experiment file count; cells run with another configuration
(stale), cells not run yet, and cells that cannot run (invalid: an unknown method or task, a bad
option) are counted in the header and left out of the numbers), rendered by
:mod:`attendout.report.render` and drawn by :mod:`attendout.report.figures`; :func:`write_report`
writes the files. The command is ``attendout table`` (:mod:`attendout.cli.table`).
"""

from __future__ import annotations

import os
from pathlib import Path

from .comparison import ComparisonTable
from .render import to_csv, to_markdown


def write_report(
    table: ComparisonTable,
    *,
    markdown: Path | None = None,
    csv: Path | None = None,
    bars: Path | None = None,
    deltas: Path | None = None,
    curves: Path | None = None,
) -> tuple[str, list[Path]]:
    """Write the files of ``table`` that have a path: the Markdown table (linking the figures written
    with it), the CSV table, the bar chart, the chart of differences from the baseline (when there is
    a baseline), and the convergence curves into the folder ``curves``. Returns the Markdown text and
    the paths written."""
    from .figures import bar_chart, convergence_curves, delta_chart

    figures: dict[str, str] = {}
    written: list[Path] = []
    if bars is not None:
        written.append(bar_chart(table, bars))
        figures["bar chart"] = _relative(bars, markdown)
    if deltas is not None and any(row.comparison is not None for row in table.rows):
        written.append(delta_chart(table, deltas))
        figures["differences from the baseline"] = _relative(deltas, markdown)
    if curves is not None:
        for path in convergence_curves(table, curves):
            written.append(path)
            figures[path.stem] = _relative(path, markdown)
    text = to_markdown(table, figures if markdown else None)
    if markdown is not None:
        markdown.parent.mkdir(parents=True, exist_ok=True)
        markdown.write_text(text)
        written.append(markdown)
    if csv is not None:
        csv.parent.mkdir(parents=True, exist_ok=True)
        csv.write_text(to_csv(table))
        written.append(csv)
    return text, written


def _relative(path: Path, markdown: Path | None) -> str:
    """``path`` as a link from the Markdown file's folder (absolute-free when possible)."""
    if markdown is None:
        return str(path)
    return os.path.relpath(path, markdown.parent)
