"""Start-up cost of the command line: CPU seconds (user + system) of a fresh Python process that runs

    python -c "import attendout"
    python -m attendout.cli --help
    python -m attendout.cli methods
    python -m attendout.cli tasks

(the three commands run as ``python -m attendout.cli`` runs them, through ``runpy``) each ``--repeats``
times (interleaved), measured with ``resource.getrusage(RUSAGE_CHILDREN)`` around the
child, so a busy machine's wall time does not count. The goal is under 1 s of CPU for the three commands.
It also lists the heavy packages each command imports (torch, transformers, matplotlib, optuna), from
``sys.modules`` at the child's exit.

Usage (from the repository root):

    python benchmarks/bench_startup.py                # 5 repeats
    python benchmarks/bench_startup.py --repeats 3 --python .venv/bin/python

Prints a Markdown table: median, min and max CPU seconds per command, and the heavy packages it loaded.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys

HEAVY = ("torch", "transformers", "matplotlib", "optuna", "datasets", "scipy", "sklearn")

#: label -> the child's Python code (it prints the heavy modules it imported, on its last line)
_REPORT = "import sys; print('HEAVY:' + ','.join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)"


def _child(code: str) -> str:
    report = _REPORT.format(heavy=HEAVY)
    return f"import atexit, sys\natexit.register(lambda: exec({report!r}))\n{code}"


COMMANDS = {
    "import attendout": "import attendout",
    "attendout --help": "import sys; sys.argv = ['attendout', '--help']; "
    "import runpy; runpy.run_module('attendout.cli', run_name='__main__')",
    "attendout methods": "import sys; sys.argv = ['attendout', 'methods']; "
    "import runpy; runpy.run_module('attendout.cli', run_name='__main__')",
    "attendout tasks": "import sys; sys.argv = ['attendout', 'tasks']; "
    "import runpy; runpy.run_module('attendout.cli', run_name='__main__')",
}


def cpu_seconds(python: str, code: str) -> tuple[float, str]:
    """CPU time (user + system) of one child running ``code``, and the heavy modules it imported."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [python, "-c", _child(code)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"child failed ({done.returncode}): {code}\n{done.stderr[-2000:]}")
    heavy = [line[len("HEAVY:") :] for line in done.stderr.splitlines() if line.startswith("HEAVY:")]
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return used, (heavy[-1] if heavy else "?") or "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="runs of each command (default: 5)")
    parser.add_argument("--python", default=sys.executable, help="the interpreter to measure")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    times: dict[str, list[float]] = {label: [] for label in COMMANDS}
    loaded: dict[str, str] = {}
    cpu_seconds(args.python, "import attendout")  # warm the file cache and the .pyc files first
    for _ in range(args.repeats):
        for label, code in COMMANDS.items():
            used, heavy = cpu_seconds(args.python, code)
            times[label].append(used)
            loaded[label] = heavy
    print(f"CPU seconds (user + system) of a fresh process, {args.repeats} runs each\n")
    print("| command | median | min | max | heavy packages imported |")
    print("| --- | ---: | ---: | ---: | --- |")
    for label, values in times.items():
        print(
            f"| `{label}` | {statistics.median(values):.2f} | {min(values):.2f} | {max(values):.2f} "
            f"| {loaded[label].replace(',', ', ')} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
