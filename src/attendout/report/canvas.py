"""What attendout's figures share: a grid of panels, and the PNG a figure is written as."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure


def panel_grid(
    count: int, width: float, height: float, top: float = 0.0, per_row: int = 3
) -> tuple[Figure, list[Any]]:
    """A figure of ``count`` panels of ``width`` by ``height`` inches, ``per_row`` a row at most (``top``:
    inches above them, for a caption), and its panels' axes (the grid's unused ones hidden)."""
    columns = min(count, per_row)
    rows = math.ceil(count / columns)
    fig = Figure(figsize=(width * columns, height * rows + top), layout="constrained")
    axes = list(fig.subplots(rows, columns, squeeze=False).flat)
    for ax in axes[count:]:
        ax.set_visible(False)
    return fig, axes[:count]


def fitted(text: str, fig: Figure, chars_per_inch: float) -> str:
    """``text`` wrapped into lines of at most ``chars_per_inch`` times ``fig``'s width in characters, so that
    a title or caption stays inside the figure."""
    return textwrap.fill(text, width=int(chars_per_inch * fig.get_figwidth()))


def save_png(fig: Figure, out: str | Path, dpi: int) -> Path:
    """Write ``fig`` to ``out`` (its folder made if missing); returns ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    return out
