"""One cell of a grid as a picklable task: what every launcher runs in a process of its own.

A :class:`CellTask` carries the grid's plan, the results root and the cell's key; calling it in any
process (a local worker of ``--jobs``, a SLURM task through submitit, a Ray task) builds a
:class:`~attendout.bench.runner.BenchJob` of the same plan on the same
:class:`~attendout.bench.store.ResultsStore` and runs :meth:`~attendout.bench.runner.BenchJob.run_cell`:
the claim, the training (resumed from the cell's checkpoint when a killed process left one), the
atomic publication. What a launcher adds is only where the process runs. The task returns the job's
summary as a dict of lists (:meth:`~attendout.bench.runner.RunSummary.add` reads it).
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..track import Tracking
from .claims import HEARTBEAT_S, STALE_AFTER_S
from .plan import GridPlan
from .runner import BenchJob
from .spec import ExperimentError
from .store import ResultsStore


@dataclass
class CellTask:
    """Run the cell ``key`` of ``plan`` into the results root ``root`` (see the module docstring)."""

    plan: GridPlan
    root: str
    key: str
    prefix: str = ""
    threads: int | None = None  # torch CPU threads of this run (None: torch's default)
    stale_after: float = STALE_AFTER_S
    heartbeat: float = HEARTBEAT_S
    rerun_stale: bool = False
    retry_out_of_memory: bool = False
    tracking: Tracking | None = None  # --report-to: where the cell reports (the same for every worker)

    @classmethod
    def of(cls, job: BenchJob, key: str, prefix: str = "", **options: Any) -> CellTask:
        """The task of cell ``key`` of ``job``'s plan, store and options."""
        return cls(
            plan=job.plan,
            root=str(Path(job.store.root).resolve()),
            key=key,
            prefix=prefix or key,
            stale_after=job.store.stale_after,
            heartbeat=job.heartbeat,
            rerun_stale=job.rerun_stale,
            tracking=job.tracking,
            **options,
        )

    def __call__(self) -> dict[str, list[str]]:
        if self.threads is not None:
            import torch

            torch.set_num_threads(self.threads)
        cells = [c for c in self.plan.cells if c.key == self.key and c.config is not None]
        if not cells:
            raise ExperimentError(f"cell {self.key} is not a runnable cell of {self.plan.experiment.path}")
        job = BenchJob(
            plan=self.plan,
            store=ResultsStore(self.root, stale_after=self.stale_after),
            rerun_stale=self.rerun_stale,
            heartbeat=self.heartbeat,
            retry_out_of_memory=self.retry_out_of_memory,
            tracking=self.tracking,
        )
        summary = job.run_cell(cells[0], self.prefix or self.key)
        sys.stdout.flush()
        return dataclasses.asdict(summary)
