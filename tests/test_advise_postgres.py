"""Two ``attendout advise`` workers started at once on one PostgreSQL study (issue 49): they share the
probe, the search's trials and the confirmation's runs, nothing is trained twice, and both write the same
one answer, from the whole confirmation. Below it, without a server, the three races it found, each pinned.

It needs a PostgreSQL server where databases may be created: its URL in ATTENDOUT_TEST_POSTGRES
(``postgresql://USER@/DB?host=SOCKET_DIR``; ``.ci/run`` starts one with ``.ci/postgres.sh`` and sets it).
Without it the test is skipped; with it, it never is (a server that does not answer fails it). Each run
creates its own database and drops it afterwards, so reruns never meet an earlier study.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace

import optuna
import pytest

from attendout.advise.storage import open_storage, with_driver
from attendout.bench.store import ResultsStore

SERVER = os.environ.get("ATTENDOUT_TEST_POSTGRES", "")

needs_server = pytest.mark.skipif(
    not SERVER,
    reason="ATTENDOUT_TEST_POSTGRES is not set (the URL of a PostgreSQL server where databases may be "
    "created; .ci/run starts one with .ci/postgres.sh)",
)

#: A worker: the `attendout` command, with its heavy imports done before it says it is ready (a file) and
#: waits for the go (another file), so that the two really start at once and race for the same tables,
#: trials and runs; and with the 30 s polls of a waiting worker shortened to 0.2 s (how often it looks,
#: not what it does).
WORKER = """
import os, sys, time
import optuna, psycopg, sqlalchemy, torch, transformers
import attendout.advise
from attendout.cli import main
go = sys.argv[1]
open(f"{go}.ready-{os.getpid()}", "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
sleep = time.sleep
time.sleep = lambda seconds: sleep(min(seconds, 0.2))
sys.exit(main(sys.argv[2:]))
"""


@pytest.fixture
def database():
    """The URL of a fresh database on the server (as given: a plain postgresql:// stays plain)."""
    import psycopg
    from sqlalchemy.engine import make_url

    server = make_url(SERVER)
    name = f"attendout_test_{uuid.uuid4().hex[:12]}"
    admin = server.set(drivername="postgresql").render_as_string(hide_password=False)  # libpq's own form
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(admin, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.processes
@needs_server
def test_two_workers_started_at_once_on_one_postgresql_study_write_one_answer(tiny_run, database):
    out = tiny_run["tmp"] / "advice"
    args = [
        "advise",
        "--task", "file", "--train-file", tiny_run["train"], "--eval-file", f"dev={tiny_run['dev']}",
        "--text-columns", "text", "--label-column", "label", "--model", tiny_run["model"],
        "--batch-size", "16", "--max-length", "16", "--learning-rate", "1e-2",
        "--regime-epochs", "2", "--methods", "scores-dropout", "--trials", "4", "--search-repeats", "1",
        "--no-pruning", "--seeds", "2", "--storage", database, "--output-dir", str(out),
        "--no-progress", "--threads", "1",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    go = tiny_run["tmp"] / "go"
    logs = [(tiny_run["tmp"] / f"worker-{i}.out", tiny_run["tmp"] / f"worker-{i}.err") for i in (0, 1)]
    workers = []
    for stdout, stderr in logs:
        with stdout.open("w") as out_file, stderr.open("w") as err_file:
            command = [sys.executable, "-c", WORKER, str(go), *args]
            workers.append(subprocess.Popen(command, stdout=out_file, stderr=err_file, env=env))

    def said(i: int) -> str:
        return f"{logs[i][0].read_text()}\n{logs[i][1].read_text()}"

    try:
        deadline = time.time() + 300
        while len(list(go.parent.glob("go.ready-*"))) < 2:  # both imported everything
            assert time.time() < deadline and all(w.poll() is None for w in workers), said(0) + said(1)
            time.sleep(0.05)
        go.touch()  # both at once
        # the answer as the worker that ends first leaves it: it must already be the whole one
        while all(w.poll() is None for w in workers):
            assert time.time() < deadline, said(0) + said(1)
            time.sleep(0.05)
        ended = next(i for i, w in enumerate(workers) if w.poll() is not None)
        assert workers[ended].returncode == 0, said(ended)
        first = {name: (out / name).read_text() for name in ("advice.json", "advice.md")}
        workers[1 - ended].wait(timeout=max(1.0, deadline - time.time()))
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.wait()
    outputs = [stdout.read_text() for stdout, _ in logs]
    for i, worker in enumerate(workers):
        assert worker.returncode == 0, said(i)
    everything = "\n".join(outputs)
    pids = {w.pid for w in workers}

    # the probe and plain fine-tuning's reference run: trained once, by one worker
    assert everything.count("advise: regime: plain fine-tuning for 2 epochs") == 1, everything
    assert everything.count("search: plain fine-tuning at search seed 0") == 1, everything

    # the search: every trial complete, each number and setting once, run by one worker, and both worked
    study = optuna.load_study(study_name="scores-dropout", storage=with_driver(database))
    trials = study.get_trials(deepcopy=False)
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert {t.state.name for t in trials} == {"COMPLETE"}
    assert len({tuple(sorted(t.params.items())) for t in trials}) == 4
    assert {t.user_attrs["pid"] for t in trials} == pids  # each worker ran some of the trials
    for t in trials:
        started = re.findall(rf"^search scores-dropout: trial {t.number}: .*$", everything, flags=re.M)
        assert len(started) == 2 and not any(line.endswith("resumed") for line in started), started  # + score

    # the confirmation: none and the method at 2 seeds each, every run trained once, none discarded
    events = ResultsStore(out / "confirm").events()
    starts = [e["cell"] for e in events if e["event"] == "start"]
    done = [e["cell"] for e in events if e["event"] == "done"]
    assert len(starts) == len(set(starts)) == 4 and sorted(done) == sorted(starts), events
    assert not [e for e in events if e["event"] in ("discarded", "failed", "interrupted")], events
    assert {e["pid"] for e in events if e["event"] == "done"} <= pids

    # one answer: from the whole confirmation, the same from both workers, as the first one to end left it
    advice = json.loads((out / "advice.json").read_text())
    rows = advice["confirmation"]["rows"]
    assert [r["method"] for r in rows] == ["scores-dropout"] and rows[0]["seeds"] == 2
    assert advice["confirmation"]["seeds"] == [1, 2]
    assert first == {name: (out / name).read_text() for name in ("advice.json", "advice.md")}
    for output in outputs:
        assert f"\n{advice['sentence']}\n" in output and "wrote " in output
    if with_driver(database) != database:  # a plain postgresql:// without psycopg2: each worker says so
        assert all("opened with psycopg 3 (postgresql+psycopg://)" in output for output in outputs)


# -- the races two workers started at once ran into, pinned without a server ----------------------------


def test_a_trial_another_worker_has_just_asked_is_not_taken_over(tmp_path, monkeypatch):
    """Between ``study.ask`` and writing who runs it (host, pid, heartbeat) a trial has no owner: a look
    at the running trials by another worker in that moment failed it, and the worker that asked it then
    failed on a finished trial. Now it counts as running for ASK_GRACE seconds (then its process died)."""
    from datetime import datetime, timedelta

    from attendout.advise import search as search_mod

    storage = open_storage(f"sqlite:///{tmp_path / 'search.db'}")
    study = optuna.create_study(study_name="scores-dropout", storage=storage)
    study.ask()
    assert search_mod.reclaim_stale(study, storage, 900.0, lambda line: None) == 0
    assert search_mod._counted(study, 900.0) == 1  # running, so no other worker asks one more

    class Later(datetime):
        @classmethod
        def now(cls, tz=None):
            return datetime.now(tz) + timedelta(seconds=search_mod.ASK_GRACE + 1)

    monkeypatch.setattr(search_mod, "datetime", Later)
    assert search_mod.reclaim_stale(study, storage, 900.0, lambda line: None) == 1


def test_a_worker_that_loses_the_race_to_make_the_tables_opens_the_storage_again(tmp_path, monkeypatch):
    """Optuna makes its tables on the first open; on PostgreSQL the second of two workers started at once
    got "duplicate key value violates unique constraint pg_type_typname_nsp_index" (optuna#1092)."""
    import sqlalchemy.exc

    from attendout.advise import storage as storage_mod

    real, tries = optuna.storages.RDBStorage, []

    def racing(url, **kwargs):
        tries.append(url)
        if tries == [url] and url.startswith("sqlite"):  # the first open loses the race
            raise sqlalchemy.exc.IntegrityError("CREATE TYPE studydirection", {}, Exception("duplicate key"))
        return real(url, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", racing)
    monkeypatch.setattr(storage_mod.time, "sleep", lambda seconds: None)
    assert open_storage(f"sqlite:///{tmp_path / 'search.db'}") is not None and len(tries) == 2
    tries.clear()
    with pytest.raises(ValueError, match="--storage nonsense"):  # anything else is not retried
        open_storage("nonsense")
    assert len(tries) == 1


def test_a_worker_takes_the_probe_folder_before_it_trains_the_probe(tmp_path):
    """Two workers started at once both saw the probe's folder free and both trained it: one failed on
    its lock ("in use by another run"). The worker that is to train it now takes the lock first."""
    from attendout.advise.study import _wait_for_probe
    from attendout.core.lock import RunLock

    run = tmp_path / "advice" / "regime"
    _wait_for_probe(SimpleNamespace(echo=print), run)
    holder = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from attendout.core.lock import RunLock; print(RunLock(sys.argv[1]).holder())",
            str(run),
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f"pid {os.getpid()}" in holder  # another worker sees this one holding it, and waits
    RunLock(run).release()


def test_a_storage_error_never_shows_the_password_of_the_url():
    from attendout.advise.storage import open_storage

    for url in (
        "postgresql+nodriver://ada:s3cret@localhost/study",
        "mysql+nodriver://ada:s3cret@db:3306/study",
    ):
        with pytest.raises(ValueError) as error:
            open_storage(url)
        assert "s3cret" not in str(error.value) and "ada:***@" in str(error.value)
