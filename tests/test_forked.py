"""tests/forked.py, the children the signal and kill tests fork instead of starting fresh interpreters, and
tests/plain.py, the clean process whose children run the plain-transformers checks."""

from __future__ import annotations

import io
import logging
import subprocess

import pytest

import forked
import plain


def test_a_child_starts_after_a_library_logged_to_a_stream_a_test_has_closed(tmp_path):
    # A library's stream handler made during an earlier test writes to that test's captured stderr,
    # closed since: the child points it at its own stderr without flushing the closed one (which raised
    # "I/O operation on closed file" in every forked child, depending on which tests ran before).
    stream = io.TextIOWrapper(io.BytesIO())  # as pytest's capture streams
    handler = logging.StreamHandler(stream)
    logging.getLogger("a-library").addHandler(handler)
    stream.close()
    script = tmp_path / "child.py"
    script.write_text(
        "import logging\nlogging.getLogger('a-library').warning('to the child stderr')\nprint('ok')"
    )
    try:
        done = forked.run(forked.script(script))
    finally:
        logging.getLogger("a-library").removeHandler(handler)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "ok\n" and "to the child stderr" in done.stderr


def test_a_plain_script_sees_its_arguments_folder_and_environment_and_no_attendout(tmp_path, monkeypatch):
    monkeypatch.setenv("A_SETTING", "set after the clean process started")
    script = (
        "import os, sys\n"
        "print(sys.argv[1:], os.getcwd(), os.environ['A_SETTING'])\n"
        "print('attendout' in sys.modules, 'torch' in sys.modules, file=sys.stderr)\n"
    )
    done = plain.run(script, "a", "b c", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"['a', 'b c'] {tmp_path} set after the clean process started\n"
    assert done.stderr == "False True\n"
    # a script's imports end with it: the next one starts from the clean process again
    plain.run("import json, sys; sys.modules['attendout'] = json", check=True)
    assert plain.run("import sys; print('attendout' in sys.modules)").stdout == "False\n"


def test_a_plain_script_that_fails_says_so_as_a_process_would():
    done = plain.run("import sys; print('before'); raise ValueError('no such model')")
    assert done.returncode == 1 and done.stdout == "before\n"
    assert "ValueError: no such model" in done.stderr
    assert plain.run("raise SystemExit(3)").returncode == 3
    with pytest.raises(subprocess.CalledProcessError):
        plain.run("raise SystemExit(2)", check=True)
    with pytest.raises(subprocess.TimeoutExpired):
        plain.run("import time; time.sleep(60)", timeout=1)
    assert plain.run("print('after a timeout')").stdout == "after a timeout\n"  # the clean process goes on
