"""``attendout bench GRID --launcher ray``: the grid's cells as Ray tasks (``pip install 'attendout[ray]'``).

:class:`RayLauncher` connects to a Ray cluster (``--address``: ``auto``, ``HOST:PORT`` or
``ray://HOST:10001``; none starts a Ray instance on this machine) and runs each cell that is neither
finished nor claimed as one Ray task asking for ``num_cpus`` and ``num_gpus``; Ray places the tasks and
runs as many at once as the cluster's resources allow. Each task runs the cell function every launcher
runs (:class:`~attendout.bench.celltask.CellTask`) on the results root, which every node must see
at the same path (a shared file system), as it must see the data and the model.

Faults: a task whose worker or node dies is retried by Ray (``max_retries``), and the retry resumes
the cell from its last checkpoint (the dead task's claim is taken over: on the same host at once, from
another host after ``--stale-after`` seconds without its heartbeat). A cell that fails inside training
(a NaN loss) is recorded as failed, as in a serial ``bench``. Ctrl-C cancels the tasks still running:
each leaves its last checkpoint, and rerunning the command resumes them. The command waits for the
tasks: it is the driver of its Ray job.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .celltask import CellTask
from .runner import BenchJob, MissingExtraError
from .spec import Cell


def need_ray() -> Any:
    """The ray module, or a :class:`~attendout.bench.runner.MissingExtraError` (an ImportError) that says
    how to install it."""
    try:
        import ray
    except ImportError:
        raise MissingExtraError(
            "--launcher ray needs Ray: pip install 'attendout[ray]' (or pip install ray)"
        ) from None
    return ray


def run_task(task: Callable[[], Any]) -> Any:
    """The Ray task: one cell (a :class:`~attendout.bench.celltask.CellTask`), or one of advise's search
    workers: whatever task it is given, called."""
    return task()


@dataclass
class RayLauncher:
    """Run cells as Ray tasks (see the module docstring)."""

    address: str | None = None
    cpus_per_run: int = 1
    gpus_per_run: float = 0
    max_retries: int = 3
    local_cpus: int | None = None  # the CPUs of a Ray instance started here (None: Ray's count)

    def run(self, job: BenchJob, cells: list[Cell]) -> None:
        ray = need_ray()
        total = len(cells)
        todo = [
            (position, cell)
            for position, cell in enumerate(cells, 1)
            if not job.skipped(cell, BenchJob.prefix(cell, position, total))
        ]
        if not todo:
            return
        started_here = not ray.is_initialized()
        if started_here:
            options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
            if self.address is None and self.local_cpus is not None:
                options["num_cpus"] = self.local_cpus
            ray.init(address=self.address, **options)
        try:
            self._run(ray, job, todo, total)
        finally:
            if started_here:
                ray.shutdown()

    def _run(self, ray: Any, job: BenchJob, todo: list[tuple[int, Cell]], total: int) -> None:
        remote = ray.remote(
            num_cpus=self.cpus_per_run, num_gpus=self.gpus_per_run, max_retries=self.max_retries
        )(run_task)
        where = self.address or "a Ray instance started here"
        job.echo(
            f"ray: {len(todo)} cell(s) as tasks on {where}, each {self.cpus_per_run} CPU(s) "
            f"(as many torch threads) and {self.gpus_per_run:g} GPU(s); cluster: {ray.cluster_resources()}"
        )
        refs = {}
        for position, cell in todo:
            task = CellTask.of(
                job, cell.key, BenchJob.prefix(cell, position, total), threads=self.cpus_per_run
            )
            refs[remote.remote(task)] = cell
        pending = list(refs)
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1, timeout=5.0)
                for ref in ready:
                    cell = refs[ref]
                    try:
                        outcome = ray.get(ref)
                    except (
                        Exception
                    ) as error:  # the task crashed past its retries, or raised outside the cell
                        message = f"{type(error).__name__}: {str(error).strip().splitlines()[-1][:500]}"
                        job.store.event("failed", cell, error=message, launcher="ray")
                        job.summary.failed.append(cell.key)
                        job.echo(f"{cell.key}: FAILED in its Ray task: {message}")
                        continue
                    job.summary.add(outcome)
                    done = len(todo) - len(pending)
                    job.echo(f"grid (ray): {done} of {len(todo)} task(s) ended, {len(pending)} left")
        except KeyboardInterrupt:
            job.echo(f"ray: stopping: cancelling {len(pending)} task(s); each keeps its last checkpoint")
            for ref in pending:
                ray.cancel(ref)
            raise
