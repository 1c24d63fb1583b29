"""One writer per run directory: ``RUN_DIR/.attendout.lock``, held with ``flock`` (:class:`RunLock`).

Importable from :mod:`attendout.rundir` too, which names every other file of a run directory.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import Any

__all__ = ["LOCK_FILE", "RunBusyError", "RunLock", "exclusive"]

LOCK_FILE = ".attendout.lock"
_HELD: dict[str, int] = {}  # lock files this process holds: real path -> open descriptor


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
                raise RunBusyError(
                    f"{self.folder} is in use by another run ({holder}; lock file {self.path}); wait for it "
                    "to end or choose another --output-dir"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:  # its holder removed it between our open and lock: again
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {started}\n".encode())
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
            raise RunBusyError(
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
