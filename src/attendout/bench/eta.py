"""How long a grid's unfinished cells will take, from the cells already finished.

A cell is expected to take the mean wall time of the finished cells of its task and method (a resumed
cell's time counted whole: its cell.json adds the time before the resume). Methods differ in cost
(AttendOut about twice plain fine-tuning), so the task's mean over every method stands in only where no
cell of the method has finished; with neither, the time is unknown. A cell that resumes from a checkpoint
has only its remaining steps to run.

The dry run (:func:`attendout.bench.plan.format_listing`) sums the cells' times, as one job would spend
them; ``--jobs N`` (:class:`attendout.bench.jobs.LocalJobs`) hands them to N runs at once, in the order
they are started (:func:`finish_time`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from .spec import Cell
from .store import ResultsStore


@dataclass(frozen=True)
class CellTimes:
    """The mean wall time (s) of the finished cells, per task and method, and per task."""

    by_method: dict[tuple[str, str], float]
    by_task: dict[str, float]

    @classmethod
    def of(cls, cells: Iterable[Cell], store: ResultsStore) -> CellTimes:
        method_times: dict[tuple[str, str], list[float]] = {}
        task_times: dict[str, list[float]] = {}
        for cell in cells:
            record = store.record(cell)
            wall = None if record is None else record.get("wall_time_s")
            if isinstance(wall, (int, float)) and not isinstance(wall, bool):
                method_times.setdefault((cell.task.id, cell.method.id), []).append(float(wall))
                task_times.setdefault(cell.task.id, []).append(float(wall))
        return cls(
            {key: sum(v) / len(v) for key, v in method_times.items()},
            {key: sum(v) / len(v) for key, v in task_times.items()},
        )

    def whole(self, cell: Cell) -> float | None:
        """The expected wall time of the whole cell, or None where nothing of its task has finished."""
        return self.by_method.get((cell.task.id, cell.method.id), self.by_task.get(cell.task.id))

    def left(self, cell: Cell, step: int | None = None, steps: int | None = None) -> float | None:
        """The expected time to finish ``cell`` from its checkpoint at ``step`` of ``steps`` (None: from
        the start, or where a count is unknown: a language-model task's steps depend on its packing)."""
        whole = self.whole(cell)
        if whole is None or not step or not steps:
            return whole
        return whole * max(0.0, 1.0 - step / steps)


def finish_time(running: list[float | None], todo: list[float | None], jobs: int) -> float | None:
    """When the last cell ends, from now (None where a cell's time is unknown): the running cells' times
    left occupy their runs, and each cell to do starts, in order, on the run that frees first (``jobs``
    runs at once)."""
    if None in running or None in todo:
        return None
    slots = [*running, *[0.0] * max(0, jobs - len(running))]
    heapq.heapify(slots)
    for seconds in todo:
        heapq.heappush(slots, heapq.heappop(slots) + seconds)
    return max(slots, default=0.0)


def duration(seconds: float) -> str:
    """``"12.5 min"`` under two hours, ``"3.4 h"`` from there."""
    return f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"
