"""Who owns a piece of work, and whether that owner is still alive: one mechanism for runs, grid cells
and advise trials.

* :class:`Owner`: a process (host, pid, start time) and :meth:`Owner.alive`, the one liveness rule: on
  this host its process still runs (the same process: its start time, where known); from another host,
  its heartbeat is younger than a limit. A grid cell's claim file (:mod:`attendout.bench.store`,
  the file's mtime is the heartbeat) and an advise trial (its user attributes) record an owner and are
  taken over when it is not alive.
* :class:`RunLock`: one writer per run directory, ``RUN_DIR/.attendout.lock`` held with ``flock``, which
  the kernel drops when its owner dies (the file names the owner, for messages).
* :func:`exclusive`: a ``flock`` around a piece of work others would repeat.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCK_FILE = ".attendout.lock"
_HELD: dict[str, int] = {}  # lock files this process holds: real path -> open descriptor


def this_host() -> str:
    return socket.gethostname()


def process_start_time(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux /proc; None elsewhere or if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22 (starttime) counts from after the command name, which is in parentheses.
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(frozen=True)
class Owner:
    """The process doing a piece of work: its host, pid and start time (None where unknown)."""

    host: str
    pid: int
    pid_start: str | None = None

    @classmethod
    def this_process(cls) -> Owner:
        return cls(this_host(), os.getpid(), process_start_time(os.getpid()))

    def alive(self, heartbeat: float | None, stale_after: float) -> bool:
        """Whether the owner still does its work. On this host: its pid runs, and is the same process
        (a pid reused by another process has another start time). From another host, where its process
        cannot be seen: its last ``heartbeat`` (a time.time()) is younger than ``stale_after`` seconds."""
        if self.host == this_host():
            if not pid_alive(self.pid):
                return False
            return self.pid_start is None or process_start_time(self.pid) in (None, self.pid_start)
        return heartbeat is not None and time.time() - heartbeat < stale_after

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"


class RunBusyError(FileExistsError):
    """Another run (a live process) is writing the same run directory."""


class RunLock:
    """An exclusive lock on a run directory: ``RUN_DIR/.attendout.lock``, held with ``flock``.

    The file names the holder (pid, host, start time). The kernel drops a ``flock`` when its process
    dies, so the lock of a killed run is stale at once and the next run takes it over; a lock held by
    a live process is a :class:`RunBusyError`. Within one process the lock is shared (a second
    ``Trainer`` on the same folder takes over from one that was never run). :meth:`release` removes
    the file. Without ``fcntl`` (Windows) there is no lock.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.path)
        if key in _HELD:
            return
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.read(fd, 200).decode(errors="replace").strip() or "a process"
                os.close(fd)
                raise self._busy(holder) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:  # its holder removed it between our open and lock: again
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        os.write(fd, f"{Owner.this_process().describe()} since {started}\n".encode())
        _HELD[key] = fd

    def holder(self) -> str | None:
        """Who holds the lock now (the lock file's line), or None if no live process does (or this one)."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return None
        if not self.path.is_file() or os.path.realpath(self.path) in _HELD:
            return None
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return os.read(fd, 200).decode(errors="replace").strip() or "a process"
        finally:
            os.close(fd)  # a shared lock taken here is dropped with the descriptor
        return None

    def check_free(self) -> None:
        """:class:`RunBusyError` naming the holder if a live process holds the folder's lock."""
        holder = self.holder()
        if holder is not None:
            raise self._busy(holder)

    def _busy(self, holder: str) -> RunBusyError:
        """The refusal of a folder whose lock ``holder`` (the lock file's line) holds."""
        return RunBusyError(
            f"{self.folder} is in use by another run ({holder}; lock file {self.path}); wait for it "
            "to end or choose another --output-dir"
        )

    def release(self) -> None:
        fd = _HELD.pop(os.path.realpath(self.path), None)
        if fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(fd)  # closing drops the flock


@contextlib.contextmanager
def exclusive(path: Path, wait: bool = True) -> Any:
    """An exclusive ``flock`` on the file ``path`` while one process does a piece of work others would
    repeat (advise's plain reference runs); yields whether it was taken (always with ``wait``; else False
    when another process holds it). Without ``fcntl`` it always yields True."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            import fcntl
        except ImportError:  # not POSIX: one process at a time is the user's to keep
            yield True
            return
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
