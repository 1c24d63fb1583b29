"""Command line: ``attendout advise | finetune | methods | tasks | models | inspect | plot | predict | bench | table``.

``attendout --help`` lists them with one line each (:data:`COMMANDS`). Each command is a module of this
package whose ``main(argv)`` parses its flags and calls an engine that knows nothing of argparse
(:func:`attendout.run.loop.finetune`, :func:`attendout.advise.advise`, :func:`attendout.bench.run_cells`,
...); the flags several commands share, and where the recipe flags become a TrainConfig, are
:mod:`attendout.cli.flags`.

Method options come from the method's config dataclass: ``attendout finetune --method scheduled
--help`` lists them. Methods of your own join every command through ``ATTENDOUT_METHODS``, the
comma-separated modules that register them (:func:`import_user_methods`). Errors in user input print one line (``attendout: error: ...``) and exit 2.
"""

from __future__ import annotations

import importlib
import logging
import os
import shlex
import sys
from typing import Any

from .flags import quiet_transformers

# Heavy modules (torch, transformers, the method registry, the engines) are imported inside the
# commands, so that `attendout --help` starts at once (benchmarks/bench_startup.py measures it).

EXIT_USAGE = 2


#: name -> the command's line in ``attendout --help``; the command is this package's module of that name,
#: whose ``main(argv)`` runs it
COMMANDS = {
    "advise": "which regulariser, at what strength, for your model and data: searched, then confirmed on fresh seeds",
    "finetune": "fine-tune a pretrained encoder on a task with one attention method",
    "methods": "list the attention methods and their options",
    "tasks": "list the built-in tasks and where their data comes from",
    "models": "list the offline pretrained models, or set them up (`attendout models setup`)",
    "inspect": "draw a layer's attention, AD-DROP attribution and dropped positions as PNG",
    "plot": "draw convergence curves of finished runs, and AttendOut's dropout patterns, as PNG",
    "predict": "label a file, or score a split of the run's data, with a fine-tuned model",
    "bench": "run (or resume, or --dry-run) a grid of tasks x methods x seeds from an experiment file",
    "table": "aggregate a grid: mean ± std, paired tests against the baseline, Markdown, CSV, PNG",
}


#: The environment variable naming the modules (comma-separated) that register methods of your own.
USER_METHODS_VARIABLE = "ATTENDOUT_METHODS"


def import_user_methods() -> list[str]:
    """Import the modules ``$ATTENDOUT_METHODS`` names (``keyed_dropout,mylab.methods``), whose
    :func:`~attendout.register_method` calls make their methods known to every command; torchrun's
    processes inherit the variable. A module that cannot be imported is a ValueError naming it."""
    names = [n.strip() for n in os.environ.get(USER_METHODS_VARIABLE, "").split(",") if n.strip()]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise ValueError(
                f"{USER_METHODS_VARIABLE} names module {name!r}, which cannot be imported ({error}); "
                "give modules importable from here (on PYTHONPATH), comma-separated"
            ) from None
    return names


def _usage() -> str:
    lines = ["usage: attendout COMMAND [options]   (attendout COMMAND --help for details)", "", "commands:"]
    lines += [f"  {name:10s} {summary}" for name, summary in COMMANDS.items()]
    return "\n".join(lines)


def _go_on(command: str, argv: list[str], stop: Any) -> str:
    """What to run after ``stop`` (an :class:`attendout.run.interrupt.Stopped`) to go on from where it was."""
    again = ["attendout", command, *argv]
    if command == "finetune":
        from .finetune import go_on

        said = go_on(argv, resumable=stop.checkpoint is not None)
        return f" {said[0].upper()}{said[1:]}"
    kept = {
        "bench": "Finished cells are kept, and a stopped cell goes on from its checkpoint.",
        "advise": "Finished trials and runs are kept, and a stopped run goes on from its checkpoint.",
    }
    if command in kept:
        return f" {kept[command]} To go on: {shlex.join(again)}"
    return ""


#: The errors that mean bad user input (one line, exit 2), as (module, class): looked up only in modules
#: already imported, since an error can only come from a module that was imported.
_USAGE_ERRORS = (
    ("attendout.tasks.base", "DataError"),
    ("attendout.attention.families", "UnsupportedModelError"),
    ("attendout.models.loading", "ModelNotFoundError"),
    ("attendout.run.runfolder", "RunExistsError"),
    ("attendout.core.lock", "RunBusyError"),
    ("attendout.bench.runner", "LauncherUnavailableError"),  # no SLURM here, Ray not installed: the way out
)

#: Commands that load no model: they skip quieting transformers (importing it costs most of a second).
_LIGHT_COMMANDS = frozenset({"methods", "tasks"})


def _loaded(*names: tuple[str, str]) -> tuple[type[BaseException], ...]:
    """The exception classes ``(module, class)`` of the modules imported so far."""
    return tuple(getattr(sys.modules[m], c) for m, c in names if m in sys.modules)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="attendout: %(levelname)s: %(message)s")
    if argv and argv[0] == "--version":
        from ..version import __version__

        print(f"attendout {__version__}")
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else EXIT_USAGE
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(
            f"attendout: error: unknown command {command!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr
        )
        return EXIT_USAGE
    if command not in _LIGHT_COMMANDS:
        quiet_transformers()
    from ..run import Stopped, handling

    try:
        import_user_methods()
        with handling():  # Ctrl-C, SIGTERM: a run stops at its next whole step with a checkpoint
            return importlib.import_module(f"{__name__}.{command}").main(rest)
    except KeyboardInterrupt as error:
        stop = Stopped.of(error)
        print(f"\nattendout {command}: {stop.describe()}.{_go_on(command, rest, stop)}", file=sys.stderr)
        return stop.exit_code
    except Exception as error:
        if isinstance(error, (*_loaded(*_USAGE_ERRORS), ValueError)):
            print(f"attendout: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(error, _loaded(("attendout.core.optim", "TrainingError"))):
            print(f"attendout: training failed: {error}", file=sys.stderr)
            return 1
        # a file that cannot be read or written: a full disk, a path through a file
        if isinstance(error, OSError):
            from ..core.folder import describe_os_error

            print(f"attendout: error: {describe_os_error(error)}", file=sys.stderr)
            return 1
        raise
