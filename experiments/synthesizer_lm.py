"""Retired: the Synthesizer language-modelling table is now an experiment grid of the product.

This script used to train every Synthesizer variant in its own PyTorch loop (3 seeds, a word-level
vocabulary); its table and figure are kept in ``results/synthesizer-lm/`` as they were. The table is
now made by ``attendout bench`` from ``experiments/synthesizer-lm.toml`` (every variant, 5 seeds, task
``movie-reviews-lm``, a GPT-2 from scratch with a BPE tokenizer) and read by ``attendout table``. This
file only runs those two commands:

    python experiments/synthesizer_lm.py --data-dir ../shared/data/nltk_data [any other bench option]

is the same as

    attendout bench synthesizer-lm --data-dir ../shared/data/nltk_data
    attendout table synthesizer-lm --out results/synthesizer-lm-bench/report
"""

from __future__ import annotations

import sys

from attendout.cli import main as attendout

EXPERIMENT = "synthesizer-lm"
REPORT = "results/synthesizer-lm-bench/report"


def main(argv: list[str]) -> int:
    code = attendout(["bench", EXPERIMENT, *argv])
    if code != 0:
        return code
    results = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--results"]
    table = ["table", EXPERIMENT, "--out", REPORT, *(["--results", results[-1]] if results else [])]
    return attendout(table)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
