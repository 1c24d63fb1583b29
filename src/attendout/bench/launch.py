"""Where a grid's cells run: ``--jobs N`` and ``--launcher {local,slurm,ray}``, one way in.

:func:`make_launcher` turns the command-line choice (:func:`attendout.cli.flags.add_launch_options`) into a launcher for
:func:`~attendout.bench.runner.run_cells`:

* ``local`` with ``--jobs 1`` (the default): None, the serial loop of one process;
* ``local`` with ``--jobs N``: :class:`~attendout.bench.jobs.LocalJobs`, N worker processes here;
* ``slurm``: :class:`~attendout.bench.slurm.SlurmLauncher`, one job array through submitit;
* ``ray``: :class:`~attendout.bench.raytasks.RayLauncher`, Ray tasks.

Every launcher runs the same cell function (:class:`~attendout.bench.celltask.CellTask`, which
calls :meth:`~attendout.bench.runner.BenchJob.run_cell`) on the same results root and claims, so
a grid begun by one may be finished by another, and ``attendout table`` reads it whatever ran it. A
launcher that cannot act (its package missing, an option it cannot honour) raises an error naming the
fix; none falls back to running the cells serially.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from .jobs import LocalJobs
from .raytasks import RayLauncher, need_ray
from .runner import Launcher
from .slurm import SlurmLauncher, need_submitit

__all__ = ["LaunchOptions", "make_launcher"]


@dataclass
class LaunchOptions:
    """The flags of :func:`attendout.cli.flags.add_launch_options`, parsed."""

    launcher: str = "local"
    jobs: int = 1
    threads: int | None = None
    partition: str | None = None
    gpus_per_run: float = 0
    cpus_per_run: int | None = None
    max_parallel: int | None = None
    time_limit: int = 24 * 60
    mem_gb: int | None = None
    address: str | None = None
    submitit_cluster: str = "slurm"
    wait: bool = False  # slurm: wait for the array (advise); bench submits and returns

    @classmethod
    def of_args(cls, args: argparse.Namespace, **given: Any) -> LaunchOptions:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in vars(args).items() if k in names and k not in given}, **given)


def make_launcher(options: LaunchOptions) -> Launcher | None:
    """The launcher of ``options`` (None: the serial loop); ValueError for options that do not fit it,
    ImportError naming the extra to install."""
    local_only = {"jobs": options.jobs != 1}
    cluster_only = {
        "--partition": options.partition is not None,
        "--max-parallel": options.max_parallel is not None,
        "--address": options.address is not None,
        "--gpus-per-run": bool(options.gpus_per_run),
        "--cpus-per-run": options.cpus_per_run is not None,
    }
    if options.launcher == "local":
        given = [flag for flag, set_ in cluster_only.items() if set_]
        if given:
            raise ValueError(f"{', '.join(given)}: options of --launcher slurm or ray, not of local")
        if options.jobs < 1:
            raise ValueError(f"--jobs must be at least 1, got {options.jobs}")
        return LocalJobs(options.jobs, options.threads) if options.jobs > 1 else None
    if local_only["jobs"]:
        raise ValueError(
            f"--jobs {options.jobs} is for --launcher local; with {options.launcher}, the cluster runs the "
            "cells at once (--max-parallel for SLURM; Ray's resources)"
        )
    if options.launcher == "slurm":
        if options.address is not None:
            raise ValueError("--address is an option of --launcher ray, not of slurm")
        need_submitit()
        if options.gpus_per_run != int(options.gpus_per_run):
            raise ValueError(f"--gpus-per-run must be a whole number on SLURM, got {options.gpus_per_run:g}")
        return SlurmLauncher(
            partition=options.partition,
            gpus_per_run=int(options.gpus_per_run),
            cpus_per_run=options.cpus_per_run or 4,
            max_parallel=options.max_parallel,
            time_min=options.time_limit,
            mem_gb=options.mem_gb,
            cluster=options.submitit_cluster,
            wait=options.wait,
        )
    for flag in ("--partition", "--max-parallel"):
        if cluster_only[flag]:
            raise ValueError(f"{flag} is an option of --launcher slurm, not of ray")
    need_ray()
    return RayLauncher(
        address=options.address, cpus_per_run=options.cpus_per_run or 1, gpus_per_run=options.gpus_per_run
    )
