"""Ctrl-C and SIGTERM during ``advise``: remembered, and raised again at the next safe point.

A signal raises :class:`Stopped` where the process is. Python drops an exception raised inside a garbage
collection callback (a database connection's finaliser, say) with a printed warning, so the signal is
also remembered, and :func:`check` (called at every log record of a run and before each trial or run)
raises it again until the process stops.
"""

from __future__ import annotations

import signal
from typing import Any

__all__ = ["Stopped", "check", "install"]

_requested: list[int] = []


class Stopped(KeyboardInterrupt):
    """The process was asked to stop by ``signum`` (SIGINT or SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


def _request(signum: int, frame: Any) -> None:
    _requested.append(signum)
    raise Stopped(signum)


def install() -> None:
    """Handle SIGINT and SIGTERM as requests to stop (the command line's; the Python API leaves them)."""
    _requested.clear()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, _request)


def check() -> None:
    """Raise :class:`Stopped` if a stop was requested (and perhaps swallowed where it first landed)."""
    if _requested:
        raise Stopped(_requested[0])
