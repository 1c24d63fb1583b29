"""The process of one cell of ``attendout bench --jobs N``: ``python -m attendout.bench.worker``.

It reads a pickled :class:`~attendout.bench.celltask.CellTask` from standard input, runs it with
Ctrl-C and SIGTERM handled as in any command (a stop finishes the step it is in and leaves a
checkpoint: :mod:`attendout.run.interrupt`), and ends with one line ``RESULT_MARKER {summary as JSON}``
on standard output, which the parent reads (:mod:`attendout.bench.jobs`). Its other lines (the
cell's progress) the parent prints as they come.

On Linux the worker asks the kernel for a signal when its parent dies (``PR_SET_PDEATHSIG``), which it
takes as a SIGTERM: a parent killed outright (SIGKILL, a closed terminal) leaves no worker training on;
each stops at its next step with a checkpoint and releases its claim, and rerunning the command resumes
it. Its output goes to the
parent through a pipe that dies with the parent: from then on the worker's lines go nowhere
(:class:`ToParent`), so that a write cannot raise in the middle of a step and fail a cell that should stop
with its checkpoint.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import signal
import sys

from ..run import Stopped, handling
from ..run.interrupt import request_once

RESULT_MARKER = "@attendout-cell-result"
PARENT_VARIABLE = "ATTENDOUT_JOBS_PARENT"  # the parent's pid: a worker whose parent is gone stops


class ToParent(io.TextIOBase):
    """A text stream to the parent's pipe that, once the parent is gone (a broken pipe), drops what is
    written instead of raising: the stop that follows the parent's death needs no reader."""

    def __init__(self, stream: io.TextIOBase) -> None:
        self.stream: io.TextIOBase | None = stream
        self.descriptor = stream.fileno()  # after the parent is gone, /dev/null

    def write(self, text: str) -> int:
        stream = self.stream  # a signal handler's line may find the pipe gone (and end it) between two calls
        if stream is not None:
            try:
                stream.write(text)
                if "\n" in text:
                    stream.flush()
            except (BrokenPipeError, ConnectionResetError):
                self._gone()
        return len(text)

    def flush(self) -> None:
        stream = self.stream
        if stream is not None:
            try:
                stream.flush()
            except (BrokenPipeError, ConnectionResetError):
                self._gone()

    def _gone(self) -> None:
        if self.stream is None:
            return
        self.stream = None
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, self.descriptor)  # what is still buffered for the pipe is flushed there at exit
        os.close(null)

    def fileno(self) -> int:
        return self.descriptor

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"


def _die_with_parent() -> None:
    """Stop as on SIGTERM when the parent dies (Linux); if the parent is already gone, stop now.

    The kernel's parent-death signal comes once for each thread of the parent that exits (a worker
    belongs to the thread that started it, and is handed to the next as each dies), so a parent with
    reader threads sends several. It is SIGHUP, of which only the first counts: a request to stop at the
    next step, as a first SIGTERM is; a second SIGTERM would stop at once, in the middle of the checkpoint
    that the first asked for."""
    if sys.platform.startswith("linux"):
        import ctypes

        signal.signal(signal.SIGHUP, lambda signum, frame: request_once(signal.SIGTERM))
        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGHUP))  # PR_SET_PDEATHSIG
        except OSError:  # no libc of that name: the parent's own stop still reaches us
            pass
    parent = os.environ.get(PARENT_VARIABLE)
    if parent and parent.isdigit() and os.getppid() != int(parent):
        raise Stopped(signal.SIGTERM)


def main() -> int:
    """Run the task on standard input; 0 when it ran (the summary says how), 128+N after a stop."""
    task = pickle.loads(sys.stdin.buffer.read())
    sys.stdout, sys.stderr = ToParent(sys.stdout), ToParent(sys.stderr)
    os.environ.update(HF_HUB_DISABLE_PROGRESS_BARS="1")
    try:
        with handling():
            _die_with_parent()
            summary = task()
    except KeyboardInterrupt as error:
        stop = Stopped.of(error)
        print(f"{task.prefix}: {stop.describe()}", flush=True)
        return stop.exit_code
    print(f"{RESULT_MARKER} {json.dumps(summary)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
