"""Ctrl-C and SIGTERM: a run stops at its next whole step with a checkpoint, and says how to go on.

The first SIGINT or SIGTERM (Ctrl-C; a scheduler's preemption: SLURM, Kubernetes) is a request. Inside
a training loop (:func:`deferred`), the loop finishes the step it is in (with the validation and the
checkpoint that step was due), writes a checkpoint if the last one is older, and raises
:class:`Stopped`, which names the checkpoint. Outside a loop (loading data, between the cells of a
grid or the trials of a search) :class:`Stopped` is raised where the process is. A second signal
raises :class:`Stopped` at once, wherever the process is: every file attendout writes is swapped in
whole, so the last complete checkpoint is left as it was.

A signal can land where Python drops the exception it raises (a garbage-collection callback prints it
and goes on), so each is also remembered: :func:`check` raises it again at the next safe point; within
:func:`handling` such a dropped stop prints nothing (no traceback for a stop that is not lost).

The command line installs these handlers for the command's duration (:func:`handling`) and turns
:class:`Stopped` into one line and exit status 128 + the signal's number (130 for SIGINT, 143 for
SIGTERM). From Python, :func:`deferred` installs them only for the loop's duration, and only where the
signal has its default handler (a handler of the caller's own is left alone), then restores them.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)

_requested: list[int] = []
_defer_depth = 0
_installed = False  # by handling(): for a whole command


class Stopped(KeyboardInterrupt):
    """The process was asked to stop by ``signum`` (SIGINT or SIGTERM).

    Raised by a training loop after its checkpoint is written: ``checkpoint`` is that folder and
    ``step`` its step (both None where none was written, e.g. a stop while the data loaded).
    ``exit_code`` is the status a shell expects of a process stopped by the signal (130, 143).
    """

    def __init__(
        self,
        signum: int,
        checkpoint: str | Path | None = None,
        step: int | None = None,
        total: int | None = None,
        during: str | None = None,
    ) -> None:
        self.signum = int(signum)
        self.checkpoint = None if checkpoint is None else Path(checkpoint)
        self.step = step
        self.total = total
        self.during = during  # the evaluation it stopped (:class:`EvaluationStopped`)
        super().__init__(self.describe())

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    def describe(self) -> str:
        """One clause: the signal, and the checkpoint it left (if any)."""
        text = f"stopped by {self.name}"
        if self.step is not None:
            text += f" at step {self.step}" + (f" of {self.total}" if self.total else "")
        if self.checkpoint is not None:
            text += f"; the checkpoint in {self.checkpoint} is complete"
        if self.during and self.checkpoint is not None:
            text += f" (stopped during {self.during}, which the resumed run does again from its start)"
        return text

    @classmethod
    def of(cls, error: BaseException) -> Stopped:
        """``error`` (a KeyboardInterrupt) as a :class:`Stopped`: a plain one is a SIGINT."""
        return error if isinstance(error, Stopped) else cls(signal.SIGINT)


class EvaluationStopped(Stopped):
    """A stop requested during an evaluation of the fine-tuning loop (a validation, or the final
    evaluation of the evaluation splits; a generation task's decodes for a long time), raised before its
    next batch. The loop (:mod:`attendout.run.loop`) writes a checkpoint of the state before that
    evaluation began and raises it again naming the checkpoint and ``during``: a resumed run runs that
    evaluation again from its start (a validation before the step's training goes on, the final
    evaluation on every split; nothing of the part done is kept), and so reaches the uninterrupted
    run's numbers."""


def _handle(signum: int, frame: Any) -> None:
    first = not _requested
    _requested.append(signum)
    if first and _defer_depth > 0:
        name = signal.Signals(signum).name
        again = "Ctrl-C" if signum == signal.SIGINT else "the signal"
        try:  # the request is recorded; its line is not worth a run (a stream the signal cut mid-write)
            print(
                f"\nattendout: {name}: stopping after this step or evaluation batch, with a checkpoint "
                f"({again} again stops at once)",
                file=sys.stderr,
                flush=True,
            )
        except (OSError, RuntimeError, ValueError):
            pass
        return
    raise Stopped(signum)


@contextlib.contextmanager
def handling(extra: tuple[int, ...] = ()) -> Iterator[None]:
    """Within this block (a command), SIGINT and SIGTERM (and the ``extra`` signals: a SLURM task's
    SIGUSR2, :mod:`attendout.bench.slurm`) are requests to stop; the handlers before it are
    restored after it."""
    global _installed
    signals = SIGNALS + tuple(extra)
    previous = {signum: signal.getsignal(signum) for signum in signals}
    _requested.clear()
    for signum in signals:
        signal.signal(signum, _handle)
    _installed = True
    unraisable = sys.unraisablehook
    sys.unraisablehook = functools.partial(_quiet_stop, unraisable)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        sys.unraisablehook = unraisable
        _installed = False
        _requested.clear()


def _quiet_stop(hook: Any, unraisable: Any) -> None:
    """A stop raised where Python cannot raise it (a garbage-collection callback) is remembered and raised
    again at the next safe point (:func:`check`): no traceback for it; anything else to ``hook``."""
    if not isinstance(unraisable.exc_value, Stopped):
        hook(unraisable)


def request_once(signum: int) -> None:
    """A stop asked for as a first ``signum`` would, unless one was already requested (then nothing): for a
    signal that may come several times for one cause (a worker's parent-death signal)."""
    if not _requested:
        _handle(signum, None)


def requested() -> int | None:
    """The signal a stop was requested by, or None."""
    return _requested[0] if _requested else None


def agreed(distributed: Any) -> int | None:
    """The stop requested in this process or, in a group of several (a
    :class:`~attendout.contract.Distributed`), in any of them: all must stop at the same step, or the
    others wait forever in their next collective. One collective call per use."""
    signum = requested()
    if distributed.world_size > 1 and not distributed.all_true(signum is None):
        return signum or int(signal.SIGTERM)  # another process's (torchrun sends each worker SIGTERM)
    return signum


def check() -> None:
    """Raise :class:`Stopped` if a stop was requested, except inside a loop (which stops at its step)."""
    if _requested and _defer_depth == 0:
        raise Stopped(_requested[0])


def _default(signum: int, handler: Any) -> bool:
    return handler is (signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within this block a first signal is a request that the loop reads with :func:`requested`.

    Where the command line has not installed the handlers, they are installed for the block (in the
    main thread, for a signal whose handler is Python's default) and the previous ones restored after.
    """
    global _defer_depth
    previous: dict[int, Any] = {}
    if not _installed and threading.current_thread() is threading.main_thread():
        if _defer_depth == 0:
            _requested.clear()
        for signum in SIGNALS:
            handler = signal.getsignal(signum)
            if _default(signum, handler):
                previous[signum] = handler
                signal.signal(signum, _handle)
    _defer_depth += 1
    try:
        yield
    finally:
        _defer_depth -= 1
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if previous and _defer_depth == 0:
            _requested.clear()  # from Python, a stop ends with the loop that was stopped
