"""``attendout bench --jobs N``: N cells at once on this machine, each in a process of its own.

:class:`LocalJobs` is a launcher (:class:`~attendout.bench.runner.Launcher`): it starts a worker
process (:mod:`attendout.bench.worker`) per cell, at most ``jobs`` at a time, and each worker runs
the cell function every launcher runs (:class:`~attendout.bench.celltask.CellTask`), on the
same results root and claims as a serial ``bench``. So:

* threads are divided: each run gets ``threads`` torch threads (default: the machine's CPUs divided by
  ``jobs``, at least one), said in the first line;
* on a GPU the runs share the device; a run that fails for lack of GPU memory is not recorded as a
  failure: it goes back to the queue and starts again (from its checkpoint, if it wrote one) once
  another run has ended and freed its memory. Only a run out of memory with no other run beside it
  fails;
* after each cell, one line for the whole grid: cells done / running / left and when the last one
  ends, from the finished cells' times per task and method (:mod:`attendout.bench.eta`): a running cell
  has its expected time less what it has run (from its checkpoint, where it resumed), and the cells to
  do start, in order, as runs end;
* Ctrl-C (or SIGTERM) in the parent is passed to every worker (they run in sessions of their own, so
  the terminal's signal reaches only the parent, once): each stops at its next whole step with a
  checkpoint and releases its claim; the parent then raises
  :class:`~attendout.run.interrupt.Stopped`, and the command prints the one command that goes on. A second
  Ctrl-C is passed on too (the workers stop at once; their last complete checkpoints stay). A parent
  killed outright takes its workers with it (see :mod:`attendout.bench.worker`).
"""

from __future__ import annotations

import json
import os
import pickle
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from ..run import Stopped
from .celltask import CellTask
from .eta import CellTimes, duration, finish_time
from .runner import BenchJob
from .spec import Cell
from .worker import PARENT_VARIABLE, RESULT_MARKER


def divide_threads(jobs: int, threads: int | None = None, cpus: int | None = None) -> int:
    """Torch threads per run: ``threads`` if given, else the CPUs divided among ``jobs`` runs (at least 1)."""
    if threads is not None:
        return threads
    return max(1, (cpus or os.cpu_count() or 1) // jobs)


@dataclass
class Worker:
    """A worker process (:mod:`attendout.bench.worker`) running ``item`` (a cell; for ``advise``,
    a search worker), its reader thread and the result it printed (None until it does)."""

    item: Any
    prefix: str
    process: subprocess.Popen
    started: float
    reader: threading.Thread
    result: dict[str, Any] | None = None


def start_worker(task: Any, item: Any, prefix: str, threads: int, lines: queue.Queue) -> Worker:
    """Start ``python -m attendout.bench.worker`` on the picklable ``task`` (a callable with a
    ``prefix``) with ``threads`` threads, in a session of its own (Ctrl-C reaches the parent alone, which
    passes it on once); its lines go to ``lines``, its result to :attr:`Worker.result`."""
    env = dict(os.environ)
    env.update({PARENT_VARIABLE: str(os.getpid()), "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"})
    process = subprocess.Popen(
        [sys.executable, "-m", "attendout.bench.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(pickle.dumps(task))
    process.stdin.close()
    worker = Worker(item, prefix, process, time.time(), threading.Thread())
    worker.reader = threading.Thread(target=_read, args=(worker, process.stdout, lines), daemon=True)
    worker.reader.start()
    return worker


def _read(worker: Worker, stream: IO[bytes], lines: queue.Queue) -> None:
    for raw in stream:
        line = raw.decode(errors="replace").rstrip("\n")
        if line.startswith(RESULT_MARKER):
            worker.result = json.loads(line[len(RESULT_MARKER) :])
        else:
            lines.put(line)
    stream.close()


def relay(lines: queue.Queue, echo: Callable[[str], None], wait: float) -> None:
    """Print the workers' lines as they come (waiting at most ``wait`` seconds for the first)."""
    try:
        echo(lines.get(timeout=wait) if wait > 0 else lines.get_nowait())
        while True:
            echo(lines.get_nowait())
    except queue.Empty:
        pass


def stop_workers(
    running: list[Worker],
    stop: Stopped,
    lines: queue.Queue,
    echo: Callable[[str], None],
    what: str = "run(s)",
) -> None:
    """Pass the stop to every worker and wait for them, printing their lines; a further signal is passed
    on too (the workers then stop at once)."""
    if running:
        echo(f"jobs: {stop.name}: stopping {len(running)} {what} at their next step, with a checkpoint")
    for worker in running:
        _send(worker.process, stop.signum)
    while any(w.process.poll() is None for w in running):
        try:
            relay(lines, echo, 0.2)
        except KeyboardInterrupt as again:  # a second Ctrl-C: now
            for worker in running:
                _send(worker.process, Stopped.of(again).signum)
    for worker in running:
        worker.reader.join(timeout=5)
    relay(lines, echo, 0)


@dataclass
class LocalJobs:
    """Run cells in ``jobs`` worker processes at once (see the module docstring)."""

    jobs: int
    threads: int | None = None  # per run; None: divide_threads
    poll: float = 0.2
    _lines: queue.Queue = field(default_factory=queue.Queue, repr=False)

    def run(self, job: BenchJob, cells: list[Cell]) -> None:
        threads = divide_threads(self.jobs, self.threads)
        total = len(cells)
        positions = {c.key: i for i, c in enumerate(cells, 1)}
        todo = [c for c in cells if job.store.status(c)[0] != "done"]
        job.summary.skipped_done.extend(c.key for c in cells if c not in todo)
        job.echo(
            f"jobs: {min(self.jobs, len(todo))} run(s) at once, {threads} torch thread(s) each "
            f"({os.cpu_count()} CPUs here); {len(todo)} of {total} cells to run"
        )
        running: list[Worker] = []
        resumed_at: dict[str, int | None] = {}  # cell -> the checkpoint's step it started from
        waiting_for_memory: dict[str, int] = {}  # cell -> runs ended when it ran out of memory
        ended = 0
        try:
            while todo or running:
                ready = [c for c in todo if waiting_for_memory.get(c.key, -1) < ended]
                while ready and len(running) < self.jobs:
                    cell = ready.pop(0)
                    todo.remove(cell)
                    resumed_at[cell.key] = job.store.resumable(cell)[1]
                    prefix = BenchJob.prefix(cell, positions[cell.key], total)
                    running.append(self._start(job, cell, prefix, threads))
                self._relay(job, running)
                for worker in [w for w in running if w.process.poll() is not None]:
                    worker.reader.join()
                    self._relay(job, running)
                    running.remove(worker)
                    ended += 1
                    outcome = worker.result
                    if outcome is None:
                        message = f"its process ended with status {worker.process.returncode} and no result"
                        job.store.event("failed", worker.item, error=message)
                        job.summary.failed.append(worker.item.key)
                        job.echo(f"{worker.prefix}: FAILED: {message}")
                    elif outcome.get("out_of_memory"):
                        if running:  # others hold memory: wait for one of them to end, then retry
                            waiting_for_memory[worker.item.key] = ended
                            todo.insert(0, worker.item)
                        else:
                            message = "out of GPU memory with no other run beside it"
                            job.store.record_failure(worker.item, message)
                            job.summary.failed.append(worker.item.key)
                            job.echo(f"{worker.prefix}: FAILED: {message}")
                        outcome = {k: v for k, v in outcome.items() if k != "out_of_memory"}
                    if outcome is not None:
                        job.summary.add(outcome)
                    job.echo(self._progress(job, cells, running, todo, resumed_at))
        except KeyboardInterrupt as error:
            stop_workers(running, Stopped.of(error), self._lines, job.echo)
            raise

    # workers ----------------------------------------------------------------------------------
    def _start(self, job: BenchJob, cell: Cell, prefix: str, threads: int) -> Worker:
        task = CellTask.of(job, cell.key, prefix, threads=threads, retry_out_of_memory=True)
        return start_worker(task, cell, prefix, threads, self._lines)

    def _relay(self, job: BenchJob, running: list[Worker]) -> None:
        relay(self._lines, job.echo, self.poll if running else 0)

    def _progress(
        self,
        job: BenchJob,
        cells: list[Cell],
        running: list[Worker],
        todo: list[Cell],
        resumed_at: dict[str, int | None],
    ) -> str:
        done = {c.key for c in cells if job.store.status(c)[0] == "done"}
        active = [w for w in running if w.item.key not in done]  # a published cell's worker is ending
        failed = len(job.summary.failed)
        line = f"grid: {len(done)} done, {len(active)} running, {len(todo)} left"
        if failed:
            line += f", {failed} failed"
        times = CellTimes.of(cells, job.store)
        steps = job.plan.steps
        now = time.time()
        running_left: list[float | None] = []
        for worker in active:
            left = times.left(worker.item, resumed_at.get(worker.item.key), steps.get(worker.item.key))
            running_left.append(None if left is None else max(0.0, left - (now - worker.started)))
        todo_left = [times.left(c, job.store.resumable(c)[1], steps.get(c.key)) for c in todo]
        end = finish_time(running_left, todo_left, self.jobs)
        if (todo or active) and end is not None:
            line += f"; the last ends in about {duration(end)} ({self.jobs} at once)"
        return line


def _send(process: subprocess.Popen, signum: int) -> None:
    if process.poll() is None:
        try:
            os.kill(process.pid, signum)
        except ProcessLookupError:
            pass
