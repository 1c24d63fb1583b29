"""Child processes forked from the test process instead of started as fresh interpreters.

A test of what a process does when it is signalled, killed or resumed needs a process of its own, but
not a fresh Python: starting one spends about 4 s of CPU importing torch and transformers before it
trains a step, and the suite starts dozens. A forked child has them imported already. It runs the same
entry point a fresh one would (``python SCRIPT ARGS`` or ``python -m MODULE ARGS``) with its own
``sys.argv``, environment, working folder, standard streams and default signal handlers, so it stops,
dies and exits as that command does; its exit status is the command's (minus N when killed by signal N,
as :mod:`subprocess` reports it).

What a fork of the test process cannot show runs in a child of a process that never imported attendout
(tests/plain.py): plain ``transformers`` loading a checkpoint, attendout's first import, ``python -m
attendout.cli`` as a user runs it, the modules ``ATTENDOUT_METHODS`` names. A fresh interpreter is left for
what must not have torch or transformers imported (the start-up import checks), and for the workers the
product starts itself.
"""

from __future__ import annotations

import io
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path


def _child(target: list[str], env: dict | None, cwd, stdout_fd: int, stderr_fd: int) -> None:
    """In the forked child: become ``python *target`` and never return."""
    code = 1
    try:
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        os.close(0)
        os.open(os.devnull, os.O_RDONLY)  # fd 0: nothing to read, as under capture_output
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the child's own stream, for its life)
        sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), write_through=True)  # noqa: SIM115
        sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), write_through=True)  # noqa: SIM115
        _fresh_logging_and_warnings()
        for signum in (signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2, signal.SIGALRM):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        if target[0] == "-m":
            sys.argv = [target[1], *target[2:]]
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(target)
            runpy.run_path(target[0], run_name="__main__")
        code = 0
    except SystemExit as stop:
        if stop.code is None:
            code = 0
        elif isinstance(stop.code, int):
            code = stop.code
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        traceback.print_exc()
        code = 128 + signal.SIGINT  # what an unhandled Ctrl-C makes of a fresh interpreter
    except BaseException:  # noqa: BLE001 (reported as a fresh interpreter would, then exit 1)
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001, S110 (a closed stream: nothing left to flush)
                pass
        os._exit(code)


def _fresh_logging_and_warnings() -> None:
    """Logging and warnings as a fresh interpreter has them, not as pytest left them in this process: no
    root handlers (pytest's capture handlers would swallow what ``logging.basicConfig`` then never sets
    up), every stream handler a library made at import writing to the new stderr, and the default
    warning filters printing to stderr (not pytest's recording ones)."""
    import logging
    import warnings

    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    for logger in logging.Logger.manager.loggerDict.values():
        for handler in getattr(logger, "handlers", ()):
            if type(handler) is logging.StreamHandler:
                handler.stream = (
                    sys.stderr
                )  # not setStream: it flushes the old one, which a test may have closed
    warnings.resetwarnings()
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
    warnings.showwarning = warnings._showwarning_orig
    warnings._showwarnmsg_impl = lambda message: sys.stderr.write(warnings._formatwarnmsg(message))


def _fork(target: list[str], env: dict | None, cwd, stdout_fd: int, stderr_fd: int, close=()) -> int:
    """Fork a child that becomes ``python *target`` with these streams (closing ``close`` in it); its pid."""
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        for fd in close:
            os.close(fd)
        _child(target, env, cwd, stdout_fd, stderr_fd)
    return pid


def _reaped(pid: int) -> int | None:
    """The child's exit status once it has ended (minus N: killed by signal N), else None."""
    done, raw = os.waitpid(pid, os.WNOHANG)
    if not done:
        return None
    return -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def _wait(pid: int, timeout: float | None) -> int:
    deadline = None if timeout is None else time.monotonic() + timeout
    while (code := _reaped(pid)) is None:
        if deadline is not None and time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(["forked", str(pid)], timeout)
        time.sleep(0.02)
    return code


class Popen:
    """``subprocess.Popen(target, stdout=PIPE, stderr=PIPE, text=True, env=env)`` for a forked child of
    ``python *target``: ``stdout`` and ``stderr`` are text streams to read, ``send_signal``,
    ``poll``, ``wait`` and ``communicate`` behave as :class:`subprocess.Popen`'s."""

    def __init__(self, target: list[str], env: dict | None = None, cwd=None) -> None:
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        self.pid, self.returncode = _fork(target, env, cwd, out_write, err_write, (out_read, err_read)), None
        os.close(out_write)
        os.close(err_write)
        self.stdout = open(out_read, encoding="utf-8", errors="replace")  # noqa: SIM115
        self.stderr = open(err_read, encoding="utf-8", errors="replace")  # noqa: SIM115

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = _reaped(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = _wait(self.pid, timeout)
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """The rest of stdout and stderr once the child has exited (read on two threads: a child that
        fills one pipe while the other is read would never exit)."""
        import threading

        texts = {}

        def drain(name, stream):
            texts[name] = stream.read()
            stream.close()

        readers = [
            threading.Thread(target=drain, args=(n, s), daemon=True)
            for n, s in (("out", self.stdout), ("err", self.stderr))
        ]
        for reader in readers:
            reader.start()
        try:
            self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self.wait()
            raise
        for reader in readers:
            reader.join()
        return texts["out"], texts["err"]


def run(target: list[str], env: dict | None = None, cwd=None, timeout: float = 300):
    """``subprocess.run([sys.executable, *target], capture_output=True, text=True, env=env, cwd=cwd,
    timeout=timeout)`` for a forked child: a :class:`subprocess.CompletedProcess`."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = _fork(target, env, cwd, out.fileno(), err.fileno())
        try:
            code = _wait(pid, timeout)
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            _wait(pid, None)
            raise
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode("utf-8", errors="replace"))
    return subprocess.CompletedProcess([sys.executable, *map(str, target)], code, *texts)


def script(path: Path | str, *args) -> list[str]:
    """The target of ``python PATH ARGS``."""
    return [str(path), *map(str, args)]
