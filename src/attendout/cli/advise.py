"""``attendout advise``: its flags, made into an :class:`~attendout.advise.study.AdviseConfig` for
:func:`attendout.advise.advise`."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from ..advise.objective import OBJECTIVES, search_seeds
from ..advise.spaces import DEFAULT_METHODS, SEARCH_SPACES
from ..advise.study import STAGES, AdviseConfig
from .flags import (
    add_dataclass_options,
    add_file_options,
    add_launch_options,
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


def advise_parser() -> argparse.ArgumentParser:
    from ..config import TrainConfig

    parser = argparse.ArgumentParser(
        prog="attendout advise",
        description=(
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
        ),
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
    study = parser.add_argument_group("the study")
    study.add_argument("--output-dir", default="advice", help="the study's folder (default: advice)")
    study.add_argument(
        "--methods",
        default=",".join(DEFAULT_METHODS),
        help=f"methods to compare with plain fine-tuning, comma-separated (default: {','.join(DEFAULT_METHODS)})",
    )
    study.add_argument(
        "--method-option",
        action="append",
        default=[],
        metavar="METHOD.OPTION=VALUE",
        help="hold an option of a method fixed while its strength is searched, e.g. addrop.attribution=rd "
        "(repeatable)",
    )
    study.add_argument(
        "--until", choices=STAGES, default="answer", help="stop after this stage (default: answer)"
    )
    regime = parser.add_argument_group("stage 1: regime")
    regime.add_argument(
        "--regime-epochs",
        type=int,
        default=12,
        help="epochs of the plain run the budget is read from (default: 12)",
    )
    regime.add_argument(
        "--regime-run",
        default=None,
        metavar="RUN_DIR",
        help="read plain fine-tuning's curves from this finished run (one validation per epoch) instead of training one",
    )
    regime.add_argument(
        "--epochs",
        type=int,
        default=None,
        help="the budget of every run, instead of the one read off the curves (the probe is then skipped "
        "unless --probe asks for it)",
    )
    regime.add_argument(
        "--probe",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="train (or read) plain fine-tuning's long run first (default: only without --epochs); with "
        "--epochs it is read to tell whether that budget undertrains",
    )
    search = parser.add_argument_group("stage 2: search")
    search.add_argument("--trials", type=int, default=8, help="trials per method (default: 8)")
    search.add_argument(
        "--hours",
        type=float,
        default=None,
        help="stop starting trials once the finished ones took this long, over every invocation (default: no limit)",
    )
    search.add_argument(
        "--sampler", choices=("tpe", "grid"), default="tpe", help="Optuna's TPE, or each method's small grid"
    )
    search.add_argument(
        "--pruning",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="stop trials below the median early",
    )
    search.add_argument(
        "--storage",
        default=None,
        help="Optuna storage URL shared by processes or machines (default: sqlite:///OUTPUT_DIR/search.db); "
        "postgresql://... needs psycopg ('pip install attendout[postgres]') or psycopg2",
    )
    search.add_argument("--search-seed", type=int, default=0, help="the first search seed (default: 0)")
    search.add_argument(
        "--search-repeats",
        type=int,
        default=2,
        metavar="K",
        help="seeds per trial: --search-seed, +1000, ... (default: 2; the spread of a trial's seeds is the "
        "objective's measured noise)",
    )
    search.add_argument(
        "--objective",
        choices=tuple(OBJECTIVES),
        default="delta",
        help="a trial's score: delta (its best validation metric minus plain fine-tuning's at the same seed; "
        "default), delta-loss (the same for the lowest validation loss), score (the validation metric "
        "itself, v0.4's)",
    )
    confirm = parser.add_argument_group("stage 3: confirm")
    confirm.add_argument(
        "--seeds",
        default="5",
        metavar="N|auto",
        help="fresh seeds of the confirmation: 1..N, skipping the search seeds (default: 5); auto: as many as "
        "detect a gain of --detect with 80%% power at the 90%% upper bound of the noise a pilot of 5 fresh "
        "seeds measures on the evaluation split (the pilot's runs are the first seeds), at most --max-seeds "
        "and within --confirm-hours",
    )
    confirm.add_argument(
        "--detect",
        type=float,
        default=None,
        metavar="GAIN",
        help="the smallest gain you care about: in the metric's units for scores (default 2 points: 0.02 of "
        "accuracy or MCC, 2 BLEU), a share for perplexity and the loss (default 0.02: a 2%% fall); the answer "
        "says when the design could not detect it",
    )
    confirm.add_argument(
        "--confirm-hours",
        type=float,
        default=None,
        help="with --seeds auto: at most this much confirmation training (from the search's time per run)",
    )
    confirm.add_argument(
        "--max-seeds", type=int, default=20, help="with --seeds auto: at most this many (default: 20)"
    )
    confirm.add_argument(
        "--confirm-seeds", default=None, metavar="LIST", help="the confirmation's seeds, comma-separated"
    )
    confirm.add_argument(
        "--reuse-runs",
        default=None,
        metavar="RESULTS_ROOT",
        help="copy in finished runs (e.g. of an earlier `attendout bench` grid) whose configuration, seed "
        "included, is exactly a confirmation cell's, instead of training them again",
    )
    confirm.add_argument("--alpha", type=float, default=0.05, help="significance level (default: 0.05)")
    run = parser.add_argument_group("running")
    add_threads(run)
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="progress bars with ETA (stderr)",
    )
    run.add_argument(
        "--stale-after",
        type=float,
        default=900.0,
        metavar="SECONDS",
        help="a trial or run of another host without a heartbeat for this long is taken over (default: 900)",
    )
    add_launch_options(
        parser,
        "advise: the search runs as several Optuna workers on one study: --jobs N processes here, or "
        "--max-parallel N SLURM tasks (one job array) or Ray tasks (1 without it; an SQLite study is refused "
        "for several on a cluster: --storage postgresql://...); the confirmation's runs then go through the "
        "same launcher, and the answer is written here.",
    )
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


def config_from_args(argv: list[str]) -> AdviseConfig:
    """The :class:`AdviseConfig` of a command line (errors: ValueError naming the flag)."""
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
    given = {"recipe": recipe, "methods": methods, "fixed_options": fixed, "seeds": seeds}
    return dataclass_from_args(
        AdviseConfig,  # every other field from the flag of its name
        {**vars(args), **given, "echo": lambda line: print(line, flush=True)},
        command="attendout advise " + shlex.join(argv),
    )


def main(argv: list[str]) -> int:
    """``attendout advise``: 0 when the stages ran; a stop (Ctrl-C, SIGTERM) is :func:`attendout.cli.main`'s."""
    import optuna

    from ..advise.workers import advise_launched
    from ..bench.launch import LaunchOptions

    config = config_from_args(argv)
    # --jobs, --launcher: where the search's workers and the confirmation's grid run (a SLURM array is
    # waited for, since the answer reads the whole confirmation); options that cannot act are refused first
    options = LaunchOptions.of_args(advise_parser().parse_args(argv))
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    advise_launched(config, options)
    return 0
