"""MkDocs hooks (registered in ``mkdocs.yml``): the figures of ``results/`` join the site at build time.

The result pages show the PNG files committed under ``results/`` (written by ``attendout table``,
``attendout plot`` and the benchmark scripts). They are not copied into ``docs/``: this hook adds every
``results/**/*.png`` to the site's files under the same path, so a page links to
``/results/regime/report/deltas.png`` (``validation.links.absolute_links: relative_to_docs`` resolves
it against the site root, and GitHub against the repository root: the same link works in both).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.attendout")

ROOT = Path(__file__).resolve().parents[1]
#: Folders of the repository whose figures the site carries, relative to its root.
FIGURE_DIRS = ("results",)


def figure_paths(root: Path = ROOT) -> list[str]:
    """Every PNG under the figure folders, as paths relative to ``root`` (with ``/``), sorted."""
    found = []
    for folder in FIGURE_DIRS:
        found += [p.relative_to(root).as_posix() for p in (root / folder).rglob("*.png") if p.is_file()]
    return sorted(found)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File  # here: the tests read figure_paths without the docs extras

    for path in figure_paths():
        if files.get_file_from_path(path) is not None:
            log.warning(f"docs/{path} hides the figure {path} of the repository; rename one of them")
            continue
        files.append(File.generated(config, path, abs_src_path=str(ROOT / path)))
    return files
