"""What the loop tells whoever watches a run: every log.jsonl record, and the run's start and end.

``finetune(config, on_log)`` takes a plain callable (it gets every record) or a :class:`Listener`, which
also hears when the run folder is taken (:meth:`Listener.start`) and how the run ended
(:meth:`Listener.end`): the trackers of ``--report-to`` (:mod:`attendout.track`) are listeners.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


class Listener:
    """A watcher of one run (main process only). The loop calls :meth:`start`, then the listener itself
    with each record written to log.jsonl, then :meth:`end`. Here, only the records go on, to ``on_log``."""

    def __init__(self, on_log: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.on_log = on_log

    def start(self, run_dir: Path, resumed_at: int | None) -> None:
        """The run folder ``run_dir`` is taken and its config.json written; ``resumed_at``: the step of
        the checkpoint the run goes on from (its log.jsonl keeps the lines up to it), None afresh."""

    def __call__(self, record: dict[str, Any]) -> None:
        """A record just written to log.jsonl."""
        if self.on_log is not None:
            self.on_log(record)

    def end(self, status: str, results: dict[str, Any] | None = None) -> None:
        """The run ended: ``"finished"`` (``results``: results.json's), ``"stopped"`` (Ctrl-C or SIGTERM,
        resumable) or ``"failed"``."""


def as_listener(on_log: Callable[[dict[str, Any]], None] | None) -> Listener:
    """``on_log`` as a :class:`Listener` (None: one that does nothing)."""
    return on_log if isinstance(on_log, Listener) else Listener(on_log)
