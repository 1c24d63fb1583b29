"""``attendout advise``: its flags, made into an :class:`~attendout.advise.options.AdviseConfig` for
:func:`attendout.advise.advise`."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..advise import SEARCH_SPACES, AdviseConfig
from ..advise.options import search_seeds
from .flags import (
    add_dataclass_options,
    add_file_options,
    add_launch_options,
    add_report_to,
    add_threads,
    dataclass_from_args,
    set_threads,
    task_defaults_unset,
    train_config,
)

#: TrainConfig fields advise sets itself (per stage), so they are not options of the command
_SET_BY_ADVISE = {
    "method",
    "method_options",
    "eval_files",
    "text_columns",
    "output_dir",
    "seed",
    "epochs",
    "max_steps",
    "resume",
    "overwrite",
    "save_model",
    "evaluate",
    "checkpoint_steps",
    "eval_steps",
    "early_stopping_patience",
    "model_selection",
    "progress",
}


def _add_method_option(group: argparse._ArgumentGroup) -> None:
    """``--method-option METHOD.OPTION=VALUE``: AdviseConfig's ``fixed_options``, one at a time."""
    group.add_argument(
        "--method-option",
        action="append",
        default=[],
        metavar="METHOD.OPTION=VALUE",
        help="hold an option of a method fixed while its strength is searched, e.g. addrop.attribution=rd "
        "(repeatable)",
    )


def _add_confirm_seeds(group: argparse._ArgumentGroup) -> None:
    """``--confirm-seeds LIST``: AdviseConfig's ``seeds`` named one by one, instead of ``--seeds``' count."""
    group.add_argument(
        "--confirm-seeds", default=None, metavar="LIST", help="the confirmation's seeds, comma-separated"
    )


#: The study's flags by group, in the order ``--help`` lists them: a name is the flag of that
#: AdviseConfig field (its help, metavar and choices are the field's metadata); a function adds the flags
#: that are no field's own.
_STUDY_FLAGS: tuple[tuple[str, tuple[str | Callable[[argparse._ArgumentGroup], None], ...]], ...] = (
    ("the study", ("output_dir", "methods", _add_method_option, "until")),
    ("stage 1: regime", ("regime_epochs", "regime_run", "epochs", "probe")),
    (
        "stage 2: search",
        ("trials", "hours", "sampler", "pruning", "storage", "search_seed", "search_repeats", "objective"),
    ),
    (
        "stage 3: confirm",
        ("seeds", "detect", "confirm_hours", "max_seeds", _add_confirm_seeds, "reuse_runs", "alpha"),
    ),
    ("running", (add_threads, "progress", "stale_after")),
)

_DESCRIPTION = (
    "Which attention regulariser, at what strength, for your model and data. Four stages, each "
    "resumed by rerunning the same command: (1) regime: plain fine-tuning for --regime-epochs on the "
    "validation split carved from train; the budget is read off its curves; (2) search: each method's "
    "strength searched with Optuna on that validation split only, each trial scored as its paired "
    "difference to plain fine-tuning over --search-repeats seeds, with per-epoch pruning; (3) confirm: "
    "each method's best setting against plain fine-tuning on fresh seeds (never the search's), scored "
    "on your evaluation split: paired t-tests with Holm, bootstrap intervals, the detectable "
    "difference, the cost; (4) answer: advice.md (one sentence first: a recommendation, or why none is "
    "possible: plain fine-tuning at its chance floor, a design that cannot detect --detect; an answer at "
    "a budget where plain fine-tuning still learns says so first), advice.png, and advice.toml, which `attendout finetune --config` and "
    "attendout.load_config take as it is."
)


def advise_parser() -> argparse.ArgumentParser:
    from ..config import TrainConfig

    parser = argparse.ArgumentParser(
        prog="attendout advise",
        description=_DESCRIPTION,
        epilog=(
            "searched options and ranges: "
            + "; ".join(
                f"{m}: {', '.join(f'{k} {r.describe()}' for k, r in s.items())}"
                for m, s in SEARCH_SPACES.items()
            )
            + ". Ctrl-C stops cleanly; rerun the same command to go on."
        ),
    )
    recipe = parser.add_argument_group("the recipe (as for attendout finetune; the same for every run)")
    add_dataclass_options(recipe, TrainConfig, skip=_SET_BY_ADVISE)
    add_file_options(recipe)
    for title, flags in _STUDY_FLAGS:
        group = parser.add_argument_group(title)
        for flag in flags:
            if callable(flag):
                flag(group)
            else:
                add_dataclass_options(group, AdviseConfig, only=(flag,))
    add_launch_options(
        parser,
        "advise: the search runs as several Optuna workers on one study: --jobs N processes here, or "
        "--max-parallel N SLURM tasks (one job array) or Ray tasks (1 without it; an SQLite study is refused "
        "for several on a cluster: --storage postgresql://...); the confirmation's runs then go through the "
        "same launcher, and the answer is written here.",
    )
    add_report_to(parser)
    return parser


def _parse_option(text: str) -> tuple[str, str, Any]:
    import tomllib

    key, sep, value = text.partition("=")
    method, dot, option = key.partition(".")
    if not sep or not dot or not method or not option:
        raise ValueError(f"--method-option must look like METHOD.OPTION=VALUE, got {text!r}")
    try:
        parsed = tomllib.loads(f"v = {value}")["v"]  # numbers, booleans, quoted strings, lists
    except tomllib.TOMLDecodeError:
        parsed = value  # a bare word: a string
    return method, option, parsed


def config_from_args(argv: list[str]) -> tuple[AdviseConfig, Any]:
    """The :class:`AdviseConfig` of a command line, and its
    :class:`~attendout.bench.launch.LaunchOptions`: where the search's workers and the confirmation's
    grid run (errors: ValueError naming the flag)."""
    from ..bench.launch import LaunchOptions

    parser = advise_parser()
    task_defaults_unset(parser)
    args = parser.parse_args(argv)
    recipe = train_config(vars(args), leave_out=_SET_BY_ADVISE, progress=args.progress)
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    fixed: dict[str, dict[str, Any]] = {}
    for text in args.method_option:
        method, option, value = _parse_option(text)
        fixed.setdefault(method, {})[option] = value
    if args.confirm_seeds is not None:
        try:
            seeds = [int(s) for s in args.confirm_seeds.split(",") if s.strip()]
        except ValueError:
            raise ValueError(
                f"--confirm-seeds must be comma-separated integers, got {args.confirm_seeds!r}"
            ) from None
    elif args.seeds.strip() == "auto":
        seeds = "auto"
    else:
        try:
            count = int(args.seeds)
        except ValueError:
            raise ValueError(f"--seeds must be a number of seeds or auto, got {args.seeds!r}") from None
        if count < 2:
            raise ValueError(f"--seeds must be at least 2 (a paired test needs them), got {count}")
        taken = set(search_seeds(args.search_seed, args.search_repeats))
        seeds = [s for s in range(1, count + len(taken) + 1) if s not in taken][:count]
    set_threads(args.threads)
    from ..track import Tracking

    given = {"recipe": recipe, "methods": methods, "fixed_options": fixed, "seeds": seeds}
    # one experiment: regime, trials, confirmation, the answer as a note
    out = Path(args.output_dir).resolve()
    given["tracking"] = Tracking.of(args.report_to, f"advise-{out.name}", out / "tensorboard")
    config = dataclass_from_args(
        AdviseConfig,  # every other field from the flag of its name
        {**vars(args), **given, "echo": lambda line: print(line, flush=True)},
        command="attendout advise " + shlex.join(argv),
    )
    return config, LaunchOptions.of_args(args)


def main(argv: list[str]) -> int:
    """``attendout advise``: 0 when the stages ran; a stop (Ctrl-C, SIGTERM) is :func:`attendout.cli.main`'s."""
    import optuna

    from ..advise.workers import SearchUnfinishedError, advise_launched

    # --jobs, --launcher: where the search's workers and the confirmation's grid run (a SLURM array is
    # waited for, since the answer reads the whole confirmation); options that cannot act are refused first
    config, options = config_from_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        advise_launched(config, options)
    except SearchUnfinishedError as error:  # a worker's own lines said why, above: one line here
        print(f"attendout: error: {error}", file=sys.stderr)
        return 1
    return 0
