"""One-time rewrite (issue 69, class 8): the published files under ``results/`` named absolute paths of the
machines that made them. Rewritten to paths a reader can use, leaving every number untouched:

* data folders relative to the data root (``--data-dir`` / ``$ATTENDOUT_DATA``): ``/work/shared/data/glue/CoLA``
  and the GPU machine's copy ``/work/main/.gpu/data/glue/CoLA`` both become ``glue/CoLA`` (the root itself ``.``);
* run and work folders under the repository's ``results/`` relative to the repository (``results/...``);
* scratch run folders of other machines (``/tmp/NAME/runs/...``) by their path below the scratch folder.

``data_dir``, ``output_dir`` and the other fields it touches are not part of a cell's fingerprint
(``attendout.config.NEUTRAL_OPTIONS``), so ``bench --dry-run`` reads every cell as before.
Usage: ``python experiments/relative_paths.py [ROOT ...]`` (default ``results``); prints the files changed.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

RULES = [
    (re.compile(r"(?:/work/shared|/work/main/\.gpu)/data/"), ""),
    (re.compile(r"(?:/work/shared|/work/main/\.gpu)/data\b"), "."),
    (re.compile(r"/work/main/results/"), "results/"),
    (re.compile(r"/tmp/[A-Za-z0-9_.+-]+/"), ""),
]
SUFFIXES = {".json", ".jsonl", ".md", ".csv", ".txt"}


def rewrite(text: str) -> str:
    for pattern, replacement in RULES:
        text = pattern.sub(replacement, text)
    return text


def main(roots: list[str]) -> int:
    for root in roots or ["results"]:
        for path in sorted(Path(root).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or ".work" in path.parts:
                continue
            text = path.read_text(encoding="utf-8")
            new = rewrite(text)
            if new != text:
                path.write_text(new, encoding="utf-8")
                print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
