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
import logging
import os
from dataclasses import dataclass
from typing import Any

from .jobs import LocalJobs
from .raytasks import RayLauncher, need_ray
from .runner import Launcher
from .slurm import SlurmLauncher, need_slurm, need_submitit

logger = logging.getLogger(__name__)

#: The counts among the launch options (each the option of its flag), with their least value.
_LEAST = {"threads": 1, "cpus_per_run": 1, "gpus_per_run": 0, "max_parallel": 1, "time_limit": 1, "mem_gb": 1}


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the system tells it), else the machine's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


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

    def __post_init__(self) -> None:
        """Counts below their least value are refused (ValueError naming the flag), whatever the launcher,
        before any default replaces them (``--cpus-per-run 0`` is not "the default")."""
        for name, least in _LEAST.items():
            value = getattr(self, name)
            if value is not None and value < least:
                raise ValueError(f"--{name.replace('_', '-')} must be at least {least}, got {value:g}")

    @classmethod
    def of_args(cls, args: argparse.Namespace, **given: Any) -> LaunchOptions:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in vars(args).items() if k in names and k not in given}, **given)


def make_launcher(options: LaunchOptions) -> Launcher | None:
    """The launcher of ``options`` (None: the serial loop); ValueError for options that do not fit it,
    :class:`~attendout.bench.runner.MissingExtraError` (an ImportError) naming the extra to install,
    :class:`~attendout.bench.runner.LauncherUnavailableError` where SLURM is not here; all before anything
    is written."""
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
        _warn_oversubscribed(options.jobs, options.threads)
        return LocalJobs(options.jobs, options.threads) if options.jobs > 1 else None
    if options.jobs != 1:
        raise ValueError(
            f"--jobs {options.jobs} is for --launcher local; with {options.launcher}, the cluster runs the "
            "cells at once (--max-parallel for SLURM; Ray's resources)"
        )
    if options.launcher == "slurm":
        if options.address is not None:
            raise ValueError("--address is an option of --launcher ray, not of slurm")
        submitit = need_submitit()
        if options.gpus_per_run != int(options.gpus_per_run):
            raise ValueError(f"--gpus-per-run must be a whole number on SLURM, got {options.gpus_per_run:g}")
        slurm = SlurmLauncher(
            partition=options.partition,
            gpus_per_run=int(options.gpus_per_run),
            cpus_per_run=4 if options.cpus_per_run is None else options.cpus_per_run,
            max_parallel=options.max_parallel,
            time_min=options.time_limit,
            mem_gb=options.mem_gb,
            cluster=options.submitit_cluster,
            wait=options.wait,
        )
        if slurm.cluster == "slurm":  # the options first, then whether this machine can submit at all
            need_slurm(submitit)
        return slurm
    for flag in ("--partition", "--max-parallel"):
        if cluster_only[flag]:
            raise ValueError(f"{flag} is an option of --launcher slurm, not of ray")
    need_ray()
    return RayLauncher(
        address=options.address,
        cpus_per_run=1 if options.cpus_per_run is None else options.cpus_per_run,
        gpus_per_run=options.gpus_per_run,
    )


def _warn_oversubscribed(jobs: int, threads: int | None) -> None:
    """One warning when ``jobs`` runs of ``threads`` torch threads each ask for more CPUs than there are."""
    cpus = available_cpus()
    if jobs > 1 and threads is not None and jobs * threads > cpus:
        logger.warning(
            "--jobs %d x --threads %d = %d torch threads share %d CPU(s) here, so the runs slow each other "
            "down; give fewer --threads (or leave it out: the CPUs divided by --jobs)",
            jobs, threads, jobs * threads, cpus,
        )  # fmt: skip
