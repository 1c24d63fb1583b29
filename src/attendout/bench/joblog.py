"""The job log of a results root (``ROOT/.bench/``): what every job of the grid did, one event a line
(``events.jsonl``: start, done, failed, takeover, ...), and each cell's last failure
(``failed/KEY.json``; cleared when the cell is done, retried on the next run)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ..core.folder import write_json_atomic
from .spec import Cell


class JobLog:
    """``ROOT/.bench/`` of one results root (``bench_root``), written by this process (``host``, ``pid``):
    what :class:`~attendout.bench.store.ResultsStore` writes of its jobs."""

    bench_root: Path
    host: str
    pid: int

    def event(self, kind: str, cell: Cell | None = None, **fields: Any) -> None:
        """Append one line to .bench/events.jsonl (single O_APPEND write: lines never interleave)."""
        record = {"time": round(time.time(), 3), "event": kind, "host": self.host, "pid": self.pid}
        if cell is not None:
            record["cell"] = cell.key
        record.update(fields)
        line = (json.dumps(record, default=str) + "\n").encode()
        self.bench_root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.bench_root / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def events(self) -> list[dict[str, Any]]:
        """Every event of the log, oldest first."""
        path = self.bench_root / "events.jsonl"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def _failure_path(self, cell: Cell) -> Path:
        return self.bench_root / "failed" / f"{cell.flat_key}.json"

    def failure(self, cell: Cell) -> dict[str, Any] | None:
        """The last failure of ``cell`` (its error, time, host, pid), or None."""
        try:
            return json.loads(self._failure_path(cell).read_text())
        except (OSError, json.JSONDecodeError):
            return None

    def record_failure(self, cell: Cell, error: str) -> None:
        write_json_atomic(
            self._failure_path(cell),
            {"cell": cell.key, "error": error, "time": time.time(), "host": self.host, "pid": self.pid},
        )

    def clear_failure(self, cell: Cell) -> None:
        self._failure_path(cell).unlink(missing_ok=True)
