"""attendout advise beyond one process: --jobs N search workers here, SLURM through submitit's local executor.

The search runs as several Optuna workers on one study (each an ``advise --until search`` in a process
of its own); the confirmation then runs through the command's launcher and the answer in the command's
process. These tests run real worker processes on a tiny study (tests/test_advise.py's) and read the
study's storage back.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import optuna
import pytest

import forked
from attendout.cli import main
from conftest import hold_the_first_two_runs, runs_held

METHOD = "scores-dropout"


def advise_args(tiny_run, out: Path, *extra: str) -> list[str]:
    """A tiny study: the budget given (no probe), 2 trials of one method at one search seed, scored on
    their own (no plain reference run), 2 fresh seeds to confirm."""
    return [
        "advise",
        "--task", "file", "--train-file", tiny_run["train"], "--eval-file", f"dev={tiny_run['dev']}",
        "--text-columns", "text", "--label-column", "label", "--model", tiny_run["model"],
        "--batch-size", "16", "--max-length", "16", "--learning-rate", "1e-2",
        "--epochs", "2", "--methods", METHOD, "--trials", "2", "--search-repeats", "1",
        "--objective", "score", "--seeds", "2", "--no-progress", "--output-dir", str(out),
        *extra,
    ]  # fmt: skip


def trials(out: Path) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=METHOD, storage=f"sqlite:///{out / 'search.db'}").trials


def overlapping(found: list[optuna.trial.FrozenTrial]) -> list[tuple[int, int]]:
    """Pairs of trials that ran at the same time in different processes."""
    return [
        (a.number, b.number)
        for a in found
        for b in found
        if a.number < b.number
        and a.user_attrs["pid"] != b.user_attrs["pid"]
        and a.datetime_start < b.datetime_complete
        and b.datetime_start < a.datetime_complete
    ]


def search_runs(out: Path) -> dict[str, bool]:
    """Each search run folder that finished -> whether it was resumed (a second training of it)."""
    return {
        str(path.parent.relative_to(out)): "resumed" in json.loads(path.read_text())
        for path in sorted((out / "search").rglob("results.json"))
    }


@pytest.mark.processes
def test_advise_jobs_2_runs_two_search_trials_at_once_each_once(tiny_run, capsys, monkeypatch):
    out = tiny_run["tmp"] / "jobs"
    hold_the_first_two_runs(
        tiny_run["tmp"] / "hook", monkeypatch
    )  # started together, however busy the machine
    assert main(advise_args(tiny_run, out, "--jobs", "2", "--until", "search")) == 0
    text = capsys.readouterr().out
    assert "advise: search: 2 workers on one study" in text
    assert "each a process with 1 torch thread(s) (2 CPUs here)" in text or os.cpu_count() != 2
    found = trials(out)
    assert sorted(t.state.name for t in found) == ["COMPLETE", "COMPLETE"]  # the study's budget, once
    assert overlapping(found) == [(0, 1)], [(t.datetime_start, t.datetime_complete) for t in found]
    assert os.getpid() not in {t.user_attrs["pid"] for t in found}  # the workers ran them, not this process
    assert search_runs(out) == {
        f"search/{METHOD}/trial-000/seed-0": False,
        f"search/{METHOD}/trial-001/seed-0": False,
    }
    assert "jobs: " not in text and not (out / "confirm").exists()  # --until search: no worker confirms


@pytest.mark.slow
def test_advise_jobs_2_confirms_once_and_searches_as_a_serial_study(tiny_run, capsys):
    """The whole study: two search workers, then one confirmation through --jobs 2 (not one per worker),
    then the answer. On the grid sampler the trials are the serial study's (TPE's are not: a parallel
    worker samples while the other's trial runs)."""
    out = tiny_run["tmp"] / "jobs"
    assert main(advise_args(tiny_run, out, "--jobs", "2", "--sampler", "grid")) == 0
    text = capsys.readouterr().out
    assert text.count("jobs: 2 run(s) at once") == 1  # 2 arms x 2 seeds through --jobs 2, once
    assert len(list((out / "confirm").rglob("results.json"))) == 4
    assert (out / "advice.md").is_file() and (out / "advice.toml").is_file()
    serial = tiny_run["tmp"] / "serial"
    assert main(advise_args(tiny_run, serial, "--until", "search", "--sampler", "grid")) == 0

    def found(study):
        done = [t for t in trials(study) if t.state.name == "COMPLETE"]  # (a trial given back is not one)
        return sorted((json.dumps(t.params, sort_keys=True), t.value) for t in done)

    parallel, alone = found(out), found(serial)
    assert [p for p, _ in parallel] == [p for p, _ in alone]
    assert [v for _, v in parallel] == pytest.approx([v for _, v in alone], abs=1e-6)


@pytest.mark.processes
def test_ctrl_c_stops_every_search_worker_and_prints_one_command_that_goes_on(tiny_run, monkeypatch):
    out = tiny_run["tmp"] / "stopped"
    hold = tiny_run["tmp"] / "hook"
    hold_the_first_two_runs(hold, monkeypatch)  # neither trial can finish before both are training
    args = ["-m", "attendout.cli", *advise_args(tiny_run, out, "--jobs", "2", "--until", "search")]
    args[args.index("--epochs") + 1] = "6"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    job = forked.Popen(args, env=env)
    seen = set()
    for line in job.stdout:
        for index in (1, 2):
            if line.startswith(f"search worker {index}/2: search {METHOD}: trial"):
                seen.add(index)
        if seen == {1, 2}:
            deadline = time.time() + 120
            while not runs_held(hold) and time.time() < deadline:
                time.sleep(0.05)
            assert runs_held(hold), "the two trials never trained at the same time"
            job.send_signal(signal.SIGINT)
            break
    rest, err = job.communicate(timeout=180)
    assert job.returncode == 130, err
    assert "stopping 2 search worker(s) at their next step" in rest
    assert err.count("To go on: attendout advise") == 1 and "Traceback" not in err + rest
    states = [t.state.name for t in trials(out)]
    assert (
        "RUNNING" not in states and "COMPLETE" not in states
    )  # every worker stopped its trial, queued again
    done = forked.run(args, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    complete = [t for t in trials(out) if t.state.name == "COMPLETE"]
    assert len(complete) == 2
    for t in complete:  # each stopped trial went on from its folder
        assert "resume_dir" in t.user_attrs


@pytest.mark.slow
def test_advise_through_submitits_local_executor_completes_a_study(tiny_run, capsys):
    pytest.importorskip("submitit")
    out = tiny_run["tmp"] / "slurm"
    args = [
        "--launcher",
        "slurm",
        "--submitit-cluster",
        "local",
        "--max-parallel",
        "2",
        "--cpus-per-run",
        "1",
    ]
    assert main(advise_args(tiny_run, out, *args)) == 0
    text = capsys.readouterr().out
    assert "advise: search: 2 worker(s) submitted as local jobs" in text
    found = trials(out)
    assert sorted(t.state.name for t in found) == ["COMPLETE", "COMPLETE"]
    assert len({t.user_attrs["pid"] for t in found} - {os.getpid()}) >= 1
    assert len(list((out / "confirm").rglob("results.json"))) == 4  # the confirmation's cells, submitted
    assert (out / "advice.md").is_file()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            ("--launcher", "slurm", "--max-parallel", "4"),
            r"4 search workers needs a storage all nodes share safely, and sqlite:///.* is an SQLite file "
            r".*--storage postgresql://",
        ),
        (
            ("--launcher", "ray", "--address", "auto", "--max-parallel", "2"),
            r"advise --launcher ray with 2 search workers needs .*--storage postgresql://",
        ),
        (("--jobs", "0"), "--jobs must be at least 1"),
    ],
)
def test_a_search_the_launcher_cannot_run_is_refused_and_writes_nothing(tiny_run, capsys, extra, message):
    pytest.importorskip("submitit")
    out = tiny_run["tmp"] / "refused"
    assert main(advise_args(tiny_run, out, *extra)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    import re

    assert re.search(message, err), err
    assert not out.exists()


@pytest.mark.ray
def test_advise_through_a_local_ray_instance_completes_a_study(tiny_run, capsys):
    pytest.importorskip("ray")
    out = tiny_run["tmp"] / "ray"
    assert (
        main(advise_args(tiny_run, out, "--launcher", "ray", "--max-parallel", "2", "--cpus-per-run", "1"))
        == 0
    )
    text = capsys.readouterr().out
    assert "advise: search: 2 worker(s) as Ray tasks on a Ray instance started here" in text
    found = trials(out)
    assert sorted(t.state.name for t in found if not t.user_attrs.get("interrupted")) == [
        "COMPLETE",
        "COMPLETE",
    ]
    assert os.getpid() not in {t.user_attrs["pid"] for t in found}
    assert len(list((out / "confirm").rglob("results.json"))) == 4  # the confirmation's cells as Ray tasks
    assert (out / "advice.md").is_file()


@pytest.mark.parametrize("finished", [True, False])
def test_a_search_worker_killed_says_what_the_studys_storage_says(tiny_run, capsys, monkeypatch, finished):
    """Issue 69, class 5: a search worker SIGKILLed (no report) after the other had run the study's last
    trial is no failure: the storage says the search is finished, and the command goes on. Killed before
    it, the command's one line says what is left; no traceback either way. (The workers are stand-ins:
    worker 1 runs its search here, or dies too; worker 2 is a process killed by SIGKILL.)"""
    import subprocess
    import threading

    import torch

    from attendout.advise import workers
    from attendout.bench.jobs import Worker

    def start(task, item, prefix, threads, lines):
        result = task() if task.index == 1 and finished else None
        process = subprocess.Popen(["sh", "-c", "true" if result else "kill -9 $$"])
        process.wait()
        reader = threading.Thread(target=lambda: None)
        reader.start()
        return Worker(item, prefix, process, time.time(), reader, result)

    monkeypatch.setattr(workers, "start_worker", start)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # (worker 1 runs in this process)
    out = tiny_run["tmp"] / "killed"
    code = main(advise_args(tiny_run, out, "--jobs", "2", "--until", "search"))
    text, err = capsys.readouterr()
    assert "Traceback" not in text + err
    killed = "search worker 2/2 (status -9) ended without a report"
    if finished:
        assert code == 0, err
        assert f"{killed}, after the study's search was finished (its storage says so); going on" in text
        assert sorted(t.state.name for t in trials(out)) == ["COMPLETE", "COMPLETE"]
    else:
        assert code == 1
        assert err.strip().splitlines() == [
            "attendout: error: advise: search: search worker 1/2 (status -9), search worker 2/2 (status -9) "
            "ended without a report (its lines above say why) before the study's search was finished "
            f"({METHOD}: 0 of 2 trials); finished trials are kept: rerun the same command to go on"
        ]
