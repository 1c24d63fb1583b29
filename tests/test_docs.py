"""The documentation site: every page reachable from the navigation, a short README, figures that exist.

Cheap checks (no build) run in the default suite. The strict build runs in ``make docs`` (CI runs it
after the tests: an image link the hook did not satisfy fails it), and here as a slow test where the
``docs`` extras are installed (about 10-20 s).
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
FIGURE = re.compile(r"!\[[^\]]*\]\((/results/[^)\s]+\.png)\)")


def nav_pages(node) -> list[str]:
    """Every page path named in mkdocs.yml's ``nav`` (nested sections included)."""
    if isinstance(node, str):
        return [node]
    if isinstance(node, list):
        return [page for item in node for page in nav_pages(item)]
    if isinstance(node, dict):
        return [page for value in node.values() for page in nav_pages(value)]
    return []


def load_hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", DOCS / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def config() -> dict:
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text())


def test_every_page_under_docs_is_in_the_navigation_and_every_entry_exists(config):
    listed = nav_pages(config["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    missing = [p for p in pages if p not in listed]
    assert not missing, f"pages not in mkdocs.yml's nav (add them, or uncomment their entry): {missing}"
    absent = [p for p in listed if not (DOCS / p).is_file()]
    assert not absent, f"mkdocs.yml's nav names pages that do not exist under docs/: {absent}"
    assert len(listed) == len(set(listed)), "a page is listed twice in the nav"


def test_the_build_is_strict_offline_and_carries_the_figure_hook(config):
    assert config["strict"] is True
    assert config["theme"]["font"] is False  # no web fonts fetched
    assert "docs/hooks.py" in config["hooks"]
    assert config["validation"]["absolute_links"] == "relative_to_docs"
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]]
    assert not {"social", "privacy", "optimize"} & set(plugins)


def test_the_readme_is_a_landing_page_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; the landing page stays under 200"
    text = "\n".join(lines)
    assert "`make demo`" in text and "`make test`" in text
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test", "docs"):
        assert re.search(rf"^{target}:", makefile, re.M), f"the Makefile has no target {target}"


def test_the_readmes_relative_links_point_to_files():
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text()):
        if "://" in target:
            continue
        assert (ROOT / target).exists(), f"README.md links to {target}, which does not exist"


def test_every_figure_a_page_shows_is_committed_under_results_and_added_by_the_hook():
    added = set(load_hooks().figure_paths(ROOT))
    shown = {m for page in DOCS.rglob("*.md") for m in FIGURE.findall(page.read_text())}
    assert shown, "no page shows a figure of results/"
    for link in sorted(shown):
        path = link.lstrip("/")
        assert (ROOT / path).is_file(), f"a page shows {link}, which is not a file of the repository"
        assert path in added, f"docs/hooks.py does not add {path} to the site"


DOCS_MKDOCS = ROOT / ".venv-docs" / "bin" / "mkdocs"  # make docs's own environment: the docs packages only


@pytest.mark.slow
@pytest.mark.skipif(not DOCS_MKDOCS.is_file(), reason="the docs environment is not made yet (make docs)")
def test_the_site_builds_strictly_and_contains_the_figures_and_an_offline_search(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [str(DOCS_MKDOCS), "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for path in load_hooks().figure_paths(ROOT):
        assert (site / path).is_file(), f"the built site lacks {path}"
    # the offline plugin: pages as .html files, the search index as a script, the vendored worker shim
    assert (site / "reference" / "attendout.html").is_file()
    assert (site / "results" / "regime.html").is_file()
    assert (site / "search" / "search_index.js").is_file()
    assert (site / "assets" / "iframe-worker" / "shim.js").is_file()
