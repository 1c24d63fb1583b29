"""Claims of a results root's running cells (``ROOT/.claims/KEY.json``): what a claim file says
(:class:`ClaimInfo`), the claim this process holds and its heartbeat (:class:`Claim`), and the file
primitives that make a claim exclusive and let a stale one be moved aside safely.

Who may claim a cell, and when a claim is stale, is :class:`attendout.bench.store.ResultsStore`'s
(:meth:`~attendout.bench.store.ResultsStore.try_claim`); the guarantees are in :mod:`attendout.bench.store`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HEARTBEAT_S = 30.0  # the claim's mtime is refreshed this often while its cell trains
STALE_AFTER_S = 900.0  # a claim from another host is stale after this long without a heartbeat
_UNREADABLE_GRACE_S = 60.0  # an unreadable claim younger than this is assumed to be being written


@dataclass(frozen=True)
class ClaimInfo:
    """The content of a claim file."""

    cell: str
    host: str
    pid: int
    token: str
    pid_start: str | None
    started: float
    work_dir: str

    def owner(self) -> str:
        return f"pid {self.pid} on {self.host}"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClaimInfo:
        return cls(
            cell=str(data["cell"]),
            host=str(data["host"]),
            pid=int(data["pid"]),
            token=str(data["token"]),
            pid_start=data.get("pid_start"),
            started=float(data["started"]),
            work_dir=str(data["work_dir"]),
        )


@dataclass
class Claim:
    """A claim this process holds on a cell; refresh it with :meth:`start_heartbeat` while training."""

    path: Path
    info: ClaimInfo
    work_dir: Path
    _stop: threading.Event | None = None
    _thread: threading.Thread | None = None

    def start_heartbeat(self, interval: float = HEARTBEAT_S) -> None:
        """Touch the claim every ``interval`` seconds from a daemon thread until :meth:`release`."""
        self._stop = threading.Event()

        def beat(stop: threading.Event) -> None:
            while not stop.wait(interval):
                with contextlib.suppress(OSError):
                    os.utime(self.path)

        self._thread = threading.Thread(target=beat, args=(self._stop,), daemon=True, name="claim-heartbeat")
        self._thread.start()

    def release(self) -> None:
        """Stop the heartbeat and remove the claim file if it is still ours."""
        if self._stop is not None:
            self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        current = read_claim(self.path)
        if current is not None and current.token == self.info.token:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()


def take_over(path: Path, stale: ClaimInfo, token: str) -> bool:
    """Move the stale claim ``stale`` at ``path`` aside (False if it is gone); if what moved is not the claim
    judged stale, put it back and return False."""
    aside = path.with_name(f"{path.name}.stale-{token}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    moved = read_claim(aside)
    if moved is not None and moved.token != stale.token:  # a fresh claim appeared meanwhile
        with contextlib.suppress(FileExistsError):
            os.link(aside, path)
        aside.unlink(missing_ok=True)
        return False
    aside.unlink(missing_ok=True)
    return True


def create_exclusive(path: Path, content: str) -> bool:
    """Create ``path`` with ``content`` unless it exists; readers never see a partial file.

    The content goes to a temporary file that is hard-linked to ``path`` (``link`` fails if the name
    exists, atomically, also on NFS). File systems without hard links fall back to ``O_EXCL``.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(content)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError:  # no hard links here
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(content)
        return True
    finally:
        tmp.unlink(missing_ok=True)


def read_claim(path: Path) -> ClaimInfo | None:
    """The claim file at ``path``, or None if it is gone or unreadable."""
    try:
        return ClaimInfo.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def unreadable_and_old(path: Path) -> bool:
    """Whether the (unreadable) claim file at ``path`` is too old to be one being written."""
    try:
        return time.time() - path.stat().st_mtime > _UNREADABLE_GRACE_S
    except FileNotFoundError:
        return False


def remove_aside(path: Path, token: str) -> None:
    """Remove ``path`` by renaming it aside first: one job removes it, however many try."""
    aside = path.with_name(f"{path.name}.broken-{token}")
    with contextlib.suppress(FileNotFoundError):
        os.rename(path, aside)
        aside.unlink(missing_ok=True)
