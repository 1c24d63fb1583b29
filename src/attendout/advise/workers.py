"""``attendout advise --jobs N`` and ``--launcher slurm|ray``: the search as several Optuna workers on one study.

:func:`advise_launched` runs a study's stages where the command's launch options say:

* **regime**: in this process with ``--jobs N`` (before the workers start, so that one probe trains
  with every thread); on SLURM or Ray the search workers run it (the first trains the probe, the others
  wait for it), so that nothing trains on the machine that submits;
* **search**: ``N`` :class:`SearchWorker` s, each an ``advise`` up to its search stage on the study's one
  storage (Optuna's workers: each asks the study for its next trial, the budget is the study's, see
  :mod:`attendout.advise.search`). ``--jobs N``: N processes here (:func:`~attendout.bench.jobs.start_worker`,
  the worker process ``bench --jobs`` uses), threads divided between them and said; Ctrl-C stops every
  worker at its next step with a checkpoint, and the command prints the one command that goes on.
  ``--launcher slurm``: ``--max-parallel`` workers (1 without it) as one job array through submitit,
  each preemptible as a bench cell is (:func:`~attendout.bench.slurm.preemptible`);
  ``--launcher ray``: ``--max-parallel`` workers (1 without it) as Ray tasks. The command waits for them.
  Several workers on a cluster need a storage every node shares safely (``--storage
  postgresql://...``): an SQLite file is refused for them (:func:`check_storage`);
* **confirm**: in this process, whose :func:`~attendout.bench.runner.launching` block gives the
  confirmation's grid the command's launcher (``--jobs N`` processes, a SLURM array it waits for, Ray
  tasks). The search workers stop after the search (``until="search"``) and never confirm: N workers
  start N confirmation runs at most, not N²;
* **answer**: in this process.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import time
from dataclasses import dataclass
from typing import Any

from ..bench.jobs import Worker, divide_threads, relay, start_worker, stop_workers
from ..bench.launch import LaunchOptions, make_launcher
from ..bench.raytasks import RayLauncher, need_ray, run_task
from ..bench.runner import launching
from ..bench.slurm import SlurmLauncher, preemptible
from ..run import Stopped
from .options import STAGES, AdviseConfig
from .search import left_to_search
from .storage import open_storage, redacted
from .study import Advice, advise, search_plan


def search_workers(options: LaunchOptions) -> int:
    """How many search workers the launch options ask for: ``--jobs`` here, ``--max-parallel`` (else 1)
    on SLURM or Ray."""
    if options.launcher == "local":
        return max(1, options.jobs)
    return options.max_parallel or 1


def check_storage(config: AdviseConfig, options: LaunchOptions) -> None:
    """Refuse, before anything is written, a storage the search workers cannot share (ValueError, one
    line): an SQLite file for several workers on a cluster (SLURM; Ray at an ``--address``)."""
    workers = search_workers(options)
    url = config.storage_url
    on_a_cluster = (options.launcher == "slurm" and options.submitit_cluster == "slurm") or (
        options.launcher == "ray" and options.address is not None
    )
    if on_a_cluster and workers > 1 and url.startswith("sqlite"):
        raise ValueError(
            f"advise --launcher {options.launcher} with {workers} search workers needs a storage all nodes "
            f"share safely, and {redacted(url)} is an SQLite file (its locks do not hold on a shared file "
            "system across nodes): give --storage postgresql://USER@HOST/DB (pip install "
            "'attendout[postgres]'), or --max-parallel 1"
        )


@dataclass
class SearchWorker:
    """One search worker: ``advise`` up to its search stage, on the study's storage (picklable: a worker
    process's task, a SLURM task)."""

    config: AdviseConfig  # until="search", progress off, echo print
    index: int
    workers: int
    threads: int | None = None
    slurm: bool = False  # SIGUSR2 stops it with a checkpoint and submitit requeues it

    @property
    def prefix(self) -> str:
        return f"search worker {self.index}/{self.workers}"

    def __call__(self) -> dict[str, Any]:
        return preemptible(self._search, self.prefix) if self.slurm else self._search()

    def _search(self) -> dict[str, Any]:
        if self.threads is not None:
            import torch

            torch.set_num_threads(self.threads)
        prefix = self.prefix

        def echo(line: str) -> None:
            print(f"{prefix}: {line}", flush=True)

        advice = advise(dataclasses.replace(self.config, echo=echo))
        return {"pid": os.getpid(), "trials": {m: s.finished for m, s in advice.searches.items()}}

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's hook at preemption: requeue this very worker (its trial resumes from its folder)."""
        from ..bench.slurm import need_submitit

        return need_submitit().helpers.DelayedSubmission(self)


#: seconds between a local worker's looks at the trials the others still run, once it has none left
#: (a look at the study is cheap here; on a cluster the study's own default stands)
LOCAL_POLL = 1.0


def _tasks(config: AdviseConfig, count: int, threads: int | None, slurm: bool) -> list[SearchWorker]:
    worker_config = dataclasses.replace(config, until="search", progress=False, echo=print)
    if not slurm:
        worker_config.poll = min(config.poll, LOCAL_POLL)
    return [SearchWorker(worker_config, i, count, threads, slurm) for i in range(1, count + 1)]


def _search_here(config: AdviseConfig, count: int, threads_given: int | None) -> None:
    """``count`` worker processes on this machine; Ctrl-C stops them all with a checkpoint."""
    threads = divide_threads(count, threads_given)
    config.echo(
        f"advise: search: {count} workers on one study ({redacted(config.storage_url)}), each a process with "
        f"{threads} torch thread(s) ({os.cpu_count()} CPUs here)"
    )
    lines: queue.Queue = queue.Queue()
    running: list[Worker] = []
    failed: list[str] = []
    try:
        for task in _tasks(config, count, threads, slurm=False):
            running.append(start_worker(task, task.index, task.prefix, threads, lines))
        while running:
            relay(lines, config.echo, 0.2)
            for worker in [w for w in running if w.process.poll() is not None]:
                worker.reader.join()
                relay(lines, config.echo, 0)
                running.remove(worker)
                if worker.result is None:
                    failed.append(f"{worker.prefix} (status {worker.process.returncode})")
                config.echo(
                    f"advise: search: {worker.prefix} ended"
                    + ("" if worker.result is not None else f" with status {worker.process.returncode}")
                    + f" after {time.time() - worker.started:.0f} s; {len(running)} still searching"
                )
    except KeyboardInterrupt as error:
        stop_workers(running, Stopped.of(error), lines, config.echo, what="search worker(s)")
        raise
    _after_failed(config, failed)


def _search_on_slurm(config: AdviseConfig, count: int, launcher: SlurmLauncher) -> None:
    """``count`` workers as one job array (through submitit); waits for them."""
    folder = config.out / "submitit"
    executor = launcher.executor(folder, "attendout-advise-search")
    tasks = _tasks(config, count, launcher.cpus_per_run, slurm=True)
    with executor.batch():
        jobs = [executor.submit(task) for task in tasks]
    ids = [str(j.job_id) for j in jobs]
    submitted = (
        f"job {ids[0].split('_')[0]}" if launcher.cluster == "slurm" else f"local jobs {', '.join(ids)}"
    )
    config.echo(
        f"advise: search: {count} worker(s) submitted as {submitted} on one study ({redacted(config.storage_url)}), {launcher.cpus_per_run} CPUs each; logs in "
        f"{folder}; waiting for them (Ctrl-C leaves them running: scancel stops them with a checkpoint)"
    )
    failed = []
    for task, job in zip(tasks, jobs, strict=True):
        try:
            job.result()
        except Exception as error:  # noqa: BLE001 (submitit's FailedJobState and kin; the log says more)
            failed.append(f"{task.prefix} (job {job.job_id}: {_last_line(error)})")
        config.echo(f"advise: search: {task.prefix} (job {job.job_id}) ended")
    _after_failed(config, failed)


def _search_on_ray(config: AdviseConfig, count: int, launcher: RayLauncher) -> None:
    """``count`` workers as Ray tasks (on ``--address``, or a Ray instance started here); waits for them."""
    ray = need_ray()
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(address=launcher.address, include_dashboard=False, log_to_driver=True)
    tasks = _tasks(config, count, launcher.cpus_per_run, slurm=False)
    refs: list[Any] = []
    failed: list[str] = []
    try:
        remote = ray.remote(
            num_cpus=launcher.cpus_per_run, num_gpus=launcher.gpus_per_run, max_retries=launcher.max_retries
        )(run_task)
        refs = [remote.remote(task) for task in tasks]
        where = launcher.address or "a Ray instance started here"
        config.echo(
            f"advise: search: {count} worker(s) as Ray tasks on {where}, on one study "
            f"({redacted(config.storage_url)}), {launcher.cpus_per_run} CPU(s) each"
        )
        for task, ref in zip(tasks, refs, strict=True):
            try:
                ray.get(ref)
            except Exception as error:  # noqa: BLE001 (past its retries, or raised outside a trial)
                failed.append(f"{task.prefix} ({type(error).__name__}: {_last_line(error)})")
            config.echo(f"advise: search: {task.prefix} (a Ray task) ended")
    except KeyboardInterrupt:
        config.echo(
            f"advise: search: stopping: cancelling {len(refs)} Ray task(s); each trial keeps its folder"
        )
        for ref in refs:
            ray.cancel(ref)
        raise
    finally:
        if started_here:
            ray.shutdown()
    _after_failed(config, failed)


def _last_line(error: Exception) -> str:
    """The last line of a worker's error (a remote traceback's: what was raised), at most 300 characters."""
    return (str(error).strip().splitlines() or [type(error).__name__])[-1][:300]


class SearchUnfinishedError(RuntimeError):
    """Search workers ended without their report (a kill, a lost node, an error) before the study's
    search was finished: the command says so in one line (exit 1)."""


def _after_failed(config: AdviseConfig, failed: list[str]) -> None:
    """Workers that ended without their report (``failed``) may have ended after the study's search was
    done (killed once the other workers had run its last trials): the study's storage says whether it is,
    not the lost reports. Done: the command goes on; not done: :class:`SearchUnfinishedError`, saying
    what is left."""
    if not failed:
        return
    plan = search_plan(config)
    left = left_to_search(plan) if plan is not None else ["the regime stage (no regime.json yet)"]
    ended = f"advise: search: {', '.join(failed)} ended without a report"
    if not left:  # the confirmation starts on the whole search, as with every worker's report
        config.echo(f"{ended}, after the study's search was finished (its storage says so); going on")
        return
    raise SearchUnfinishedError(
        f"{ended} (its lines above say why) before the study's search was finished ({'; '.join(left)}); "
        "finished trials are kept: rerun the same command to go on"
    )


def advise_launched(config: AdviseConfig, options: LaunchOptions) -> Advice:
    """Run (or resume) the study's stages where ``options`` say (see the module docstring)."""
    check_storage(config, options)
    count = search_workers(options)
    # options checked before anything runs (--max-parallel is the search's worker count on Ray, not the grid's)
    grid = dataclasses.replace(options, max_parallel=None) if options.launcher == "ray" else options
    launcher = make_launcher(dataclasses.replace(grid, wait=True))
    searches = STAGES.index(config.until) >= STAGES.index("search")
    if searches:  # once, here: a server nobody answers is one line, not a traceback from every worker
        open_storage(config.storage_url)
    if searches and isinstance(launcher, SlurmLauncher):
        _search_on_slurm(config, count, launcher)
    elif searches and isinstance(launcher, RayLauncher):
        _search_on_ray(config, count, launcher)
    elif searches and count > 1:
        advise(dataclasses.replace(config, until="regime"))  # one probe, every thread (if it probes)
        _search_here(config, count, options.threads)
    with launching(launcher):  # the confirmation's grid (the search is done: this process reads it)
        return advise(config)
