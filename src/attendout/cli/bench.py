"""``attendout bench``: its flags, and the grid run through :mod:`attendout.bench`
(:func:`~attendout.bench.plan.prepare_cells`, :func:`~attendout.bench.runner.run_cells`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .flags import (
    add_launch_options,
    add_report_to,
    add_threads,
    dataclass_from_args,
    experiment_parser,
    load_grid,
    set_threads,
)


def build_parser() -> argparse.ArgumentParser:
    parser = experiment_parser(
        "attendout bench",
        "Run a grid of tasks x methods x seeds from an experiment file: one run folder per cell under a "
        "results root. Resumable: finished cells are skipped, and a killed cell resumes from the checkpoint "
        "of its last validation (every eval_steps, or checkpoint_steps; a cell with neither restarts) "
        "to the numbers an uninterrupted run gives. Shareable: several jobs may run on one results root "
        "at once (claims), or split it with --shard. Scalable: --jobs N runs N cells at once here; "
        "--launcher slurm submits them as a job array, --launcher ray as Ray tasks.",
        "results/NAME, suffixed by budget overrides",
    )
    parser.add_argument("--dry-run", action="store_true", help="list and check every cell; train nothing")
    _add_selection(parser)
    parser.add_argument(
        "--data-dir",
        default=None,
        help="local data folder for every cell (default: the file's, else $ATTENDOUT_DATA)",
    )
    _add_budget_overrides(parser)
    _add_cell_running(parser)
    _add_results_handling(parser)
    add_launch_options(parser)
    add_report_to(parser)
    return parser


def _add_selection(parser: argparse.ArgumentParser) -> None:
    """Which of the grid's cells this job runs: a shard, some tasks, methods or seeds."""
    parser.add_argument(
        "--shard", default=None, metavar="K/N", help="run only cells K, K+N, K+2N, ... (1 <= K <= N)"
    )
    parser.add_argument(
        "--tasks", default=None, metavar="IDS", help="run only these task ids (comma-separated)"
    )
    parser.add_argument(
        "--methods", default=None, metavar="IDS", help="run only these method ids (comma-separated)"
    )
    parser.add_argument(
        "--seeds", default=None, metavar="SEEDS", help="run only these seeds (comma-separated)"
    )


def _add_budget_overrides(parser: argparse.ArgumentParser) -> None:
    """The experiment's training budget, replaced in every cell (and the results root's name suffixed)."""
    budget = parser.add_argument_group("budget overrides (replace the experiment's value in every cell)")
    budget.add_argument("--max-train-samples", type=int, default=None, help="subsample every training set")
    budget.add_argument(
        "--max-eval-samples", type=int, default=None, help="subsample validation and evaluation splits"
    )
    budget.add_argument("--epochs", type=float, default=None, help="training epochs")
    budget.add_argument("--max-steps", type=int, default=None, help="training steps (overrides epochs)")


def _add_cell_running(parser: argparse.ArgumentParser) -> None:
    """How each cell runs here, none of it part of a cell's identity: weights kept, device, memory, threads."""
    parser.add_argument(
        "--save-model", action="store_true", help="keep each cell's best model (default: no weights)"
    )
    parser.add_argument(
        "--device", default=None, help="auto, cpu, cuda, cuda:N or mps (default: the file's, else auto)"
    )
    parser.add_argument(
        "--micro-batch-size",
        type=int,
        default=None,
        metavar="N",
        help="accumulate each training batch over micro-batches of at most N examples to fit the "
        "device's memory (same updates; not part of a cell's identity, like --device)",
    )
    add_threads(parser)


def _add_results_handling(parser: argparse.ArgumentParser) -> None:
    """What this job does with the results root's other cells: stale ones, other jobs' claims, runs to reuse."""
    parser.add_argument(
        "--rerun-stale", action="store_true", help="retrain finished cells whose configuration has changed"
    )
    parser.add_argument(
        "--stale-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="a claim from another host without heartbeat for this long is taken over (default: 900)",
    )
    parser.add_argument(
        "--no-data-check", action="store_true", help="do not load local data in the pre-flight check"
    )
    parser.add_argument(
        "--reuse-runs",
        action="append",
        default=[],
        metavar="RESULTS_ROOT",
        help="before training, copy in the finished runs under this folder (e.g. another grid's results) whose "
        "configuration, seed included, is exactly a missing cell's (repeatable)",
    )


def main(argv: list[str]) -> int:
    """``attendout bench``: returns 0 if every cell of the shard ran or was done, 1 if any failed, 2 if invalid."""
    from ..bench import (
        Budget,
        ExperimentError,
        ResultsStore,
        format_listing,
        parse_shard,
        prepare_cells,
        run_cells,
    )
    from ..bench.claims import STALE_AFTER_S
    from ..bench.launch import LaunchOptions, make_launcher
    from ..bench.plan import parse_selection
    from ..bench.runner import reuse_runs

    args = build_parser().parse_args(argv)
    budget = dataclass_from_args(Budget, vars(args))  # the budget overrides, each the flag of its name
    experiment, root = load_grid(args, budget)
    launcher = make_launcher(LaunchOptions.of_args(args))
    if launcher is None:  # with a launcher, --threads is each run's
        set_threads(args.threads)
    if args.stale_after is not None and args.stale_after <= 0:
        raise ExperimentError(f"--stale-after must be positive, got {args.stale_after}")
    shard = parse_shard(args.shard)
    selection = parse_selection(experiment, args.tasks, args.methods, args.seeds)
    store = ResultsStore(root, stale_after=args.stale_after or STALE_AFTER_S)
    plan = prepare_cells(
        experiment,
        budget,
        shard=shard,
        selection=selection,
        data_dir=args.data_dir,
        save_model=True if args.save_model else None,
        device=args.device,
        micro_batch_size=args.micro_batch_size,
        check_data=not args.no_data_check,
    )
    if args.dry_run or plan.invalid:
        listing, counts = format_listing(plan, store)
        print(listing)
        if plan.invalid:
            print(
                f"attendout: error: {len(plan.invalid)} invalid cell(s); fix the experiment file",
                file=sys.stderr,
            )
            return 2
        return 0
    print(
        f"experiment {experiment.name}: {experiment.shape()}; shard {shard[0]}/{shard[1]}; results in {root}"
    )
    if args.reuse_runs:
        store.prepare(experiment, budget)
        for source in args.reuse_runs:
            if not Path(source).is_dir():
                raise ExperimentError(f"--reuse-runs {source}: no such folder")
            for key in reuse_runs([c for c in plan.shard_cells if c.config is not None], store, Path(source)):
                print(f"{key}: reused the finished run of the same configuration in {source}")
    from ..track import Tracking

    # one experiment named after the grid; TensorBoard's events under RESULTS/tensorboard/CELL
    tracking = Tracking.of(args.report_to, experiment.name, Path(root) / "tensorboard")
    summary = run_cells(plan, store, rerun_stale=args.rerun_stale, launcher=launcher, tracking=tracking)
    print(f"bench {experiment.name} shard {shard[0]}/{shard[1]}: {summary.line()}")
    return 1 if summary.failed else 0
