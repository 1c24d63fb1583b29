"""Scripts run in a Python that has imported torch and transformers but never attendout.

A test that a saved checkpoint or tokenizer works in plain ``transformers``, of what attendout's first
(lazy) import gives, or of ``python -m attendout.cli`` as a user's own process runs it, runs a script in a
process that has not imported attendout. A fresh interpreter for each such script spends about 5 s of CPU
importing torch and transformers. Here one clean process per test worker, started on first use, imports
them once; each script then runs in a child forked from it, with its own ``sys.argv``, environment,
working folder and output files, so no script sees what another imported. The clean process imports
nothing of attendout, and each script checks that it has not either (``"attendout" not in sys.modules``).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile

_ROOM = r"""
import json, os, sys, traceback
import torch, transformers
from transformers import PreTrainedModel, PreTrainedTokenizerBase  # their modules: the heavy part, once
assert not any(name.split(".")[0] == "attendout" for name in sys.modules)
replies = os.dup(1)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(replies)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
                os.dup2(os.open(path, os.O_WRONLY | os.O_TRUNC), fd)
            os.environ.clear()
            os.environ.update(job["env"])
            if job["cwd"] is not None:
                os.chdir(job["cwd"])
            sys.argv = ["-c", *job["argv"]]
            exec(compile(job["script"], "<string>", "exec"), {"__name__": "__main__"})
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    os.write(replies, (json.dumps(pid) + "\n").encode())
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    os.write(replies, (json.dumps(code) + "\n").encode())
"""

_room: subprocess.Popen | None = None
_room_log = None


def _started() -> subprocess.Popen:
    """The clean process of this test worker, started on first use (and again if one has died)."""
    global _room, _room_log
    if _room is None or _room.poll() is not None:
        _room_log = tempfile.TemporaryFile()
        _room = subprocess.Popen(
            [sys.executable, "-c", _ROOM],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=_room_log,
            text=True,
        )
    return _room


def _reply(room: subprocess.Popen) -> int:
    """The clean process's next line: a child's pid, then its exit status (minus N: killed by signal N)."""
    line = room.stdout.readline()
    if not line:  # the clean process itself died: say why
        room.wait()
        _room_log.seek(0)
        raise RuntimeError(f"the plain transformers process died:\n{_room_log.read().decode()[-3000:]}")
    return json.loads(line)


@atexit.register
def _close() -> None:
    if _room is not None and _room.poll() is None:
        _room.stdin.close()
        try:
            _room.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _room.kill()


def run(script: str, *args: str, cwd=None, timeout: float = 300, check: bool = False):
    """``subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=cwd,
    timeout=timeout, check=check)``, run in a child of the clean process: a
    :class:`subprocess.CompletedProcess`."""
    command = [sys.executable, "-c", script, *args]
    room = _started()
    with tempfile.NamedTemporaryFile() as out, tempfile.NamedTemporaryFile() as err:
        job = {
            "script": script,
            "argv": list(args),
            "env": dict(os.environ),
            "cwd": None if cwd is None else str(cwd),
            "stdout": out.name,
            "stderr": err.name,
        }
        room.stdin.write(json.dumps(job) + "\n")
        room.stdin.flush()
        child = _reply(room)
        if not select.select([room.stdout], [], [], timeout)[0]:
            os.kill(child, signal.SIGKILL)
            _reply(room)  # the killed child's status
            raise subprocess.TimeoutExpired(command, timeout)
        done = subprocess.CompletedProcess(
            command,
            _reply(room),
            out.read().decode("utf-8", "replace"),
            err.read().decode("utf-8", "replace"),
        )
    if check:
        done.check_returncode()
    return done


def attendout(*args: str, path=None, timeout: float = 300):
    """``python -m attendout.cli ARGS`` (``path``: a folder put first on ``sys.path``, as ``PYTHONPATH`` would
    in a fresh interpreter) in a child of the clean process: a :class:`subprocess.CompletedProcess`."""
    first = "" if path is None else f"sys.path.insert(0, {str(path)!r}); "
    script = (
        f"import runpy, sys; {first}runpy.run_module('attendout.cli', run_name='__main__', alter_sys=True)"
    )
    return run(script, *args, timeout=timeout)
