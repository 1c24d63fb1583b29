"""The flags several commands share, and where their values become configs.

One ``--flag`` per field of a config dataclass (:func:`add_dataclass_options`), the file options
(``--eval-file SPLIT=PATH``, ``--text-columns``), ``--threads``, and :func:`train_config`: the one place
where the recipe flags of ``attendout finetune`` and ``attendout advise`` become a
:class:`~attendout.config.TrainConfig` (the options some tasks give their own defaults included). Also
what every command that loads models does first: :func:`quiet_transformers`.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

#: Options some tasks give their own defaults (attendout.tasks.defaults.TASK_DEFAULTS).
TASK_DEFAULT_OPTIONS = ("batch_size", "learning_rate", "max_length")


def quiet_transformers() -> None:
    """Keep transformers' load reports (a new task head is always "missing"; they would repeat for every
    bench cell) and its progress bars off the console; ``ATTENDOUT_VERBOSE=1`` leaves them on."""
    if os.environ.get("ATTENDOUT_VERBOSE"):
        return
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover - transformers is a dependency
        return
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def _option(name: str) -> str:
    return "--" + name.replace("_", "-")


def _base_type(annotation: Any) -> Any:
    """int | None -> int; list[int] | None -> list."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _base_type(args[0]) if len(args) == 1 else str
    return origin or annotation


def _with_default(help_text: str, default: Any) -> str:
    """``help_text (default: X)``, unless the help already says its default (it is shown once)."""
    if "default" in help_text.lower():
        return help_text
    return f"{help_text} (default: {default})".strip()


def add_dataclass_options(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    cls: type,
    skip: set[str] = frozenset(),
    prefix: str = "",
    only: Sequence[str] | None = None,
    choices: Mapping[str, Sequence[str]] = types.MappingProxyType({}),
) -> None:
    """One ``--flag`` per dataclass field (``only``: these fields, in this order), typed from its
    annotation, help from its metadata; the metavar is the field's name (``--p P``, not the prefixed
    destination ``METHOD__P``). Other metadata a field may have: ``metavar``, ``choices`` (then no
    metavar unless given; ``choices`` here gives them by field name where another module defines
    them), ``flag_default`` (the flag's default where the field's is not what a user types, e.g. a
    tuple given as comma-separated text) and ``hide_default`` (no "(default: X)" in the help)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in fields if only is None else only:
        if name in skip:
            continue
        f = fields[name]
        kind = _base_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else None
        default = f.metadata.get("flag_default", default)
        help_text = f.metadata.get("help", "").replace("%", "%%")  # argparse formats help with %
        dest = prefix + f.name
        if kind is bool:
            parser.add_argument(
                _option(f.name),
                dest=dest,
                action=argparse.BooleanOptionalAction,
                default=default,
                help=help_text,
            )
        else:  # strings and lists are given as text; the config's checks parse them
            offered = choices.get(f.name, f.metadata.get("choices"))
            parser.add_argument(
                _option(f.name),
                dest=dest,
                type=kind if kind in (int, float) else str,
                default=default,
                choices=offered,
                metavar=f.metadata.get("metavar", None if offered else f.name.upper()),
                help=help_text if f.metadata.get("hide_default") else _with_default(help_text, default),
            )


def dataclass_from_args(cls: type, values: dict[str, Any], prefix: str = "", **given: Any) -> Any:
    """An instance of the dataclass ``cls`` from parsed flags: each field takes ``given``'s value, else
    the flag of its name (``values``: ``vars(args)``; destinations with ``prefix``), else its default."""
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    taken = {name: values[prefix + name] for name in names if prefix + name in values}
    return cls(**{**taken, **given})


def add_file_options(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--eval-file SPLIT=PATH`` (repeatable) and ``--text-columns``: the TrainConfig fields a flag gives as text."""
    parser.add_argument(
        "--eval-file",
        action="append",
        default=None,
        metavar="SPLIT=PATH",
        help="an evaluation file (repeatable)",
    )
    parser.add_argument(
        "--text-columns", default=None, help="one or two text columns of the files, comma-separated"
    )


def parse_eval_files(values: list[str] | None) -> dict[str, str] | None:
    """``--eval-file SPLIT=PATH`` values as {split: path}; a split named twice, or named ``train`` or
    ``validation`` (the run's own splits: :func:`attendout.tasks.loading.check_eval_split_names`), is refused."""
    # here: the CLI's --help stays free of the data readers
    from ..tasks.loading import check_eval_split_names

    if not values:
        return None
    out = {}
    for value in values:
        split, sep, path = value.partition("=")
        if not sep or not split or not path:
            raise ValueError(f"--eval-file must look like SPLIT=PATH, got {value!r}")
        if split in out:
            raise ValueError(
                f"--eval-file names split {split!r} twice ({out[split]} and {path}); give each split once"
            )
        out[split] = path
    check_eval_split_names(out, "--eval-file")
    return out


def add_threads(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--threads N``: torch's CPU threads for this process (every command that trains or predicts)."""
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")


def add_report_to(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--report-to``: the trackers the runs report to, named as transformers' ``report_to``."""
    said = "report the runs to tensorboard, mlflow, wandb, trackio, all (those installed) or none (default), or a comma list; each an extra (pip install 'attendout[mlflow]'); MLflow: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here"
    parser.add_argument("--report-to", default="none", metavar="TRACKERS", help=said)


def set_threads(threads: int | None) -> None:
    """torch.set_num_threads(threads), unless None; below 1 is an error naming ``--threads``."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads must be at least 1, got {threads}")
        import torch

        torch.set_num_threads(threads)


def experiment_parser(prog: str, description: str, results: str) -> argparse.ArgumentParser:
    """The parser of a command on an experiment grid (``bench``, ``table``): the experiment, where its name
    is looked up, and ``--results``, the grid's results root (``results``: its default, in words)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("experiment", help="an experiment file, or the name of one in --experiments-dir")
    parser.add_argument("--results", default=None, help=f"results root (default: {results})")
    parser.add_argument(
        "--experiments-dir", default="experiments", help="where experiment names are looked up"
    )
    return parser


def load_grid(args: argparse.Namespace, budget: Any = None) -> tuple[Any, Path]:
    """(the experiment of ``experiment_parser``'s ``args``, its results root: ``--results``, else the
    default one of the experiment and the :class:`~attendout.bench.spec.Budget` ``budget``)."""
    from ..bench import default_results_root, load_experiment

    experiment = load_experiment(args.experiment, args.experiments_dir)
    return experiment, Path(args.results) if args.results else default_results_root(experiment, budget)


def add_launch_options(parser: argparse.ArgumentParser, description: str | None = None) -> None:
    """``--jobs``, ``--launcher`` and each launcher's options, in a group of their own (parsed by
    :class:`attendout.bench.launch.LaunchOptions`); ``description`` says what they apply to."""
    group = parser.add_argument_group(
        "where the runs run (docs/guides/scale.md; every launcher runs the same cells on the same results folder)",
        description,
    )
    group.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="local: N runs at once on this machine, each a process with --threads torch threads (default: "
        "the CPUs divided by N); on a GPU they share it, and a run out of GPU memory is retried when another "
        "ends (default: 1, one process)",
    )
    group.add_argument(
        "--launcher",
        choices=("local", "slurm", "ray"),
        default="local",
        help="local: this machine (--jobs); slurm: one SLURM job array through submitit, submitted and left "
        "to run (pip install 'attendout[slurm]'); ray: Ray tasks on --address (pip install 'attendout[ray]')",
    )
    group.add_argument("--partition", default=None, help="slurm: the partition")
    group.add_argument(
        "--gpus-per-run", type=float, default=0, metavar="N", help="slurm, ray: GPUs of each run (default: 0)"
    )
    group.add_argument(
        "--cpus-per-run",
        type=int,
        default=None,
        metavar="N",
        help="slurm, ray: CPUs of each run, and its torch threads (default: 4 on SLURM, 1 on Ray)",
    )
    group.add_argument(
        "--max-parallel",
        type=int,
        default=None,
        metavar="N",
        help="slurm: at most N tasks of the array at once",
    )
    group.add_argument(
        "--time-limit",
        type=int,
        default=24 * 60,
        metavar="MINUTES",
        help="slurm: each task's time limit; a task that reaches it is requeued from its checkpoint (default: 1440)",
    )
    group.add_argument("--mem-gb", type=int, default=None, help="slurm: memory of each task, in GB")
    group.add_argument(
        "--address",
        default=None,
        help="ray: the cluster (auto, HOST:PORT or ray://HOST:10001; default: a Ray instance started here)",
    )
    group.add_argument(
        "--submitit-cluster",
        choices=("slurm", "local"),
        default="slurm",
        help="slurm: local runs the array through submitit's local executor on this machine (the same "
        "pickling and job path, no scheduler: to try a submission without SLURM)",
    )


#: Stands for "not given on the command line" in the options some tasks give their own defaults.
_UNSET = object()


def task_defaults_unset(parser: argparse.ArgumentParser) -> None:
    """Mark the options with task defaults (:data:`TASK_DEFAULT_OPTIONS`) as not given, so that
    :func:`train_config` can tell "left out" (the task's default applies) from "given"."""
    parser.set_defaults(**{name: _UNSET for name in TASK_DEFAULT_OPTIONS})


def train_config(values: dict[str, Any], *, leave_out: set[str] = frozenset(), **given: Any) -> Any:
    """The :class:`~attendout.config.TrainConfig` of parsed flags ``values``: each TrainConfig field from
    the flag of its name, except those in ``leave_out`` (the command sets them) and those in ``given``;
    ``--eval-file`` (else a config file's ``eval_files``) and ``--text-columns`` parsed; options left out
    (:func:`task_defaults_unset`) take the task's default, else TrainConfig's
    (:meth:`~attendout.config.TrainConfig.for_task`)."""
    from ..config import TrainConfig

    columns = values.get("text_columns")
    given = {
        "eval_files": parse_eval_files(values.get("eval_file")) or values.get("eval_files"),
        "text_columns": columns.split(",") if isinstance(columns, str) else columns,
        **given,
    }
    names = {f.name for f in dataclasses.fields(TrainConfig)} - set(leave_out)
    taken = {name: value for name, value in values.items() if name in names and value is not _UNSET}
    return TrainConfig.for_task(**{**taken, **given})
