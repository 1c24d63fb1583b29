"""tests/forked.py, the children the signal and kill tests fork instead of starting fresh interpreters."""

from __future__ import annotations

import io
import logging

import forked


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
