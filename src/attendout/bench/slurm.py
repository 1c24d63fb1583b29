"""``attendout bench GRID --launcher slurm``: the grid's unfinished cells as one SLURM job array, through
submitit (``pip install 'attendout[slurm]'``).

:class:`SlurmLauncher` submits one task per cell that is neither finished, nor claimed by a live
process, nor waiting in the queue from an earlier submission; it prints the array's job id and
returns (``wait=True``, as ``advise`` uses it, waits for the array instead). Each task is a
:class:`SlurmCell`: the cell function every launcher runs (:class:`~attendout.bench.celltask.CellTask`),
on the shared results root, so claims keep two tasks (or a laptop and the cluster) from training
one cell, and ``attendout table`` reads the root whatever ran it.

Preemption and time limits: SLURM signals the task with SIGUSR2 before it stops it (submitit asks for
``--signal=USR2@90``). The task takes SIGUSR2 as a request to stop (:mod:`attendout.run.interrupt`): the
training loop finishes its step, writes a checkpoint and releases the claim; then submitit's own
handler checkpoints the task (:meth:`SlurmCell.checkpoint`: the same task again) and requeues it.
The requeued task adopts the checkpoint and resumes there. A task stopped by SIGTERM (``scancel``)
keeps its checkpoint too, for the next submission.

``cluster="local"`` uses submitit's local executor: the same pickling and job path, without a
scheduler (how the tests run it; the array's parallelism is then not limited).
"""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..core.folder import write_json_atomic
from ..core.lock import pid_alive
from ..run import Stopped, handling
from .celltask import CellTask
from .runner import BenchJob, LauncherUnavailableError, MissingExtraError
from .spec import Cell

T = TypeVar("T")

#: SLURM states of a job that will still run (or runs): its cell is not submitted again
ACTIVE_STATES = frozenset(
    {"PENDING", "RUNNING", "REQUEUED", "CONFIGURING", "COMPLETING", "SUSPENDED", "RESIZING", "REQUEUE_HOLD"}
)


def need_submitit() -> Any:
    """The submitit module, or a :class:`~attendout.bench.runner.MissingExtraError` (an ImportError) that
    says how to install it."""
    try:
        import submitit
    except ImportError:
        raise MissingExtraError(
            "--launcher slurm needs submitit: pip install 'attendout[slurm]' (or pip install submitit)"
        ) from None
    return submitit


def need_slurm(submitit: Any) -> None:
    """Refuse, before anything is written, a submission to SLURM from a machine without it: submitit
    submits through ``srun`` (its own test, submitit's ``SlurmExecutor.affinity``), and fails late without it."""
    if submitit.SlurmExecutor.affinity() <= 0:
        raise LauncherUnavailableError(
            "--launcher slurm needs SLURM, and its srun is not on this machine's PATH: run it on a SLURM "
            "login node, or give --submitit-cluster local to try the submission here without a scheduler "
            "(docs/guides/scale.md)"
        )


def preemptible(run: Callable[[], T], prefix: str) -> T:
    """``run()`` in a SLURM task: Ctrl-C, SIGTERM and SIGUSR2 stop it at its next step with a checkpoint
    (:mod:`attendout.run.interrupt`); after SIGUSR2, submitit's own handler then requeues the task (its
    ``checkpoint`` method says what the requeued task runs)."""
    previous = signal.getsignal(signal.SIGUSR2)  # submitit's: checkpoint and requeue
    try:
        with handling(extra=(signal.SIGUSR2,)):
            return run()
    except KeyboardInterrupt as error:
        stop = Stopped.of(error)
        print(f"{prefix}: {stop.describe()}", flush=True)
        if stop.signum == signal.SIGUSR2 and callable(previous):
            previous(signal.SIGUSR2, None)  # requeues and exits; returns only where it cannot
        raise


@dataclass
class SlurmCell(CellTask):
    """A cell as a SLURM task: SIGUSR2 stops it with a checkpoint, then submitit requeues it."""

    def __call__(self) -> dict[str, list[str]]:
        return preemptible(super().__call__, self.prefix)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """submitit's hook at preemption: requeue this very task (it resumes from the cell's checkpoint)."""
        return need_submitit().helpers.DelayedSubmission(self)


@dataclass
class SlurmLauncher:
    """Submit cells as one job array (see the module docstring)."""

    partition: str | None = None
    gpus_per_run: int = 0
    cpus_per_run: int = 4
    max_parallel: int | None = None
    time_min: int = 24 * 60
    mem_gb: int | None = None
    cluster: str = "slurm"  # or "local": submitit's local executor
    wait: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # more of submitit's slurm_* parameters

    def executor(self, folder: Path, name: str) -> Any:
        submitit = need_submitit()
        executor = submitit.AutoExecutor(folder=folder, cluster=self.cluster)
        parameters: dict[str, Any] = {
            "name": name,
            "timeout_min": self.time_min,
            "nodes": 1,
            "tasks_per_node": 1,
            "cpus_per_task": self.cpus_per_run,
            "gpus_per_node": self.gpus_per_run,
        }
        if self.mem_gb is not None:
            parameters["mem_gb"] = self.mem_gb
        if self.cluster == "slurm":
            if self.partition:
                parameters["slurm_partition"] = self.partition
            if self.max_parallel:
                parameters["slurm_array_parallelism"] = self.max_parallel
            parameters.update(self.extra)
        executor.update_parameters(**parameters)
        return executor

    def run(self, job: BenchJob, cells: list[Cell]) -> None:
        store = job.store
        folder = store.bench_root / "submitit"
        total = len(cells)
        todo = [
            cell
            for position, cell in enumerate(cells, 1)
            if not job.skipped(
                cell, BenchJob.prefix(cell, position, total), self._queued(store.bench_root, cell)
            )
        ]
        if not todo:
            job.echo("slurm: nothing to submit")
            return
        positions = {c.key: i for i, c in enumerate(cells, 1)}
        executor = self.executor(folder, f"attendout-{job.plan.experiment.name}")
        tasks = [
            SlurmCell.of(job, c.key, BenchJob.prefix(c, positions[c.key], total), threads=self.cpus_per_run)
            for c in todo
        ]
        with executor.batch():
            submitted = [executor.submit(task) for task in tasks]
        ids = [str(s.job_id) for s in submitted]
        for cell, job_id in zip(todo, ids, strict=True):
            write_json_atomic(
                self._record_path(store.bench_root, cell),
                {"cell": cell.key, "job_id": job_id, "cluster": self.cluster, "time": time.time()},
            )
            store.event("submitted", cell, job_id=job_id, launcher=f"submitit-{self.cluster}")
        job.summary.submitted.extend(c.key for c in todo)
        array = ids[0].split("_")[0] if self.cluster == "slurm" else ", ".join(ids)
        job.echo(
            f"slurm: submitted {len(todo)} cell(s) as job {array}"
            + (f" on partition {self.partition}" if self.partition else "")
            + f" ({self.gpus_per_run} GPU(s), {self.cpus_per_run} CPUs a task"
            + (f", at most {self.max_parallel} at once" if self.max_parallel else "")
            + f"); logs in {folder}"
        )
        if self.wait:
            for cell, task in zip(todo, submitted, strict=True):
                try:
                    job.summary.add(task.result())
                except Exception as error:  # the task failed outside the cell (a crash, an unpickling)
                    store.event("failed", cell, error=str(error)[-2000:])
                    job.summary.failed.append(cell.key)
                    job.echo(f"{cell.key}: FAILED in its SLURM task: {str(error).strip().splitlines()[-1]}")

    @staticmethod
    def _record_path(bench_root: Path, cell: Cell) -> Path:
        return bench_root / "submitted" / f"{cell.flat_key}.json"

    def _queued(self, bench_root: Path, cell: Cell) -> str:
        """Why ``cell`` is still waiting in the queue from an earlier submission, or '' if it is not."""
        try:
            record = json.loads(self._record_path(bench_root, cell).read_text())
        except (OSError, ValueError):
            return ""
        job_id, cluster = str(record.get("job_id", "")), record.get("cluster")
        if cluster == "local":  # the job id is the pid of submitit's controller on this host
            alive = job_id.isdigit() and pid_alive(int(job_id))
            return f"submitted as local job {job_id}, still running" if alive else ""
        state = "UNKNOWN"
        with contextlib.suppress(Exception):  # sacct missing or failing: the state is unknown
            state = need_submitit().SlurmJob(bench_root / "submitit", job_id).state
        return f"submitted as SLURM job {job_id}, {state}" if state.split()[0] in ACTIVE_STATES else ""
