"""attendout bench beyond one process: --jobs N here, SLURM through submitit's local executor, Ray.

Every launcher runs the same cell function on the same results root: these tests run real worker
processes on a tiny grid (tests/test_bench.py's), kill and stop them, and read the stores back.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import forked
from attendout.cli import main
from conftest import hold_the_first_two_runs
from test_bench import assert_complete_cell, bench_process, events, finished_cells, write_experiment

GRID = [  # seed-major: the order the grid runs its cells
    "tiny-bert/toy/none/seed-1",
    "tiny-bert/toy/scores-dropout/seed-1",
    "tiny-bert/toy/none/seed-2",
    "tiny-bert/toy/scores-dropout/seed-2",
]


def wait_for(condition, timeout: float, what: str, log: Path | None = None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.02)
    tail = log.read_text()[-3000:] if log is not None and log.exists() else ""
    raise AssertionError(f"timed out waiting for {what}\n{tail}")


def spans(root: Path) -> dict[str, tuple[float, float, int]]:
    """cell -> (start, done, pid) of the run that published it."""
    starts = {}
    for e in events(root, "start"):
        starts[(e["cell"], e["pid"])] = e["time"]
    return {e["cell"]: (starts[(e["cell"], e["pid"])], e["time"], e["pid"]) for e in events(root, "done")}


def overlapping(root: Path) -> list[tuple[str, str]]:
    """Pairs of published cells whose runs overlapped in time in different processes."""
    found = spans(root)
    return [
        (a, b)
        for a in found
        for b in found
        if a < b and found[a][2] != found[b][2] and found[a][0] < found[b][1] and found[b][0] < found[a][1]
    ]


def table_of(path: Path, root: Path, capsys) -> str:
    capsys.readouterr()
    assert main(["table", str(path), "--results", str(root)]) == 0
    text = capsys.readouterr().out.replace(str(root), "ROOT")
    return re.sub(
        r"cells \d+\.\d+ h", "cells T h", text
    )  # the training time: the machine's load, not the grid


# --------------------------------------------------------------------------------------------------
# --jobs N on one machine


def test_flags_of_bench_and_advise_name_jobs_and_launchers(capsys):
    for command in ("bench", "advise"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert "--jobs N" in text and "--launcher {local,slurm,ray}" in text, command


def test_launcher_options_that_do_not_fit_are_refused_not_ignored(tiny_run, capsys):
    path = write_experiment(tiny_run)
    root = tiny_run["tmp"] / "results"
    cases = {
        ("--jobs", "2", "--launcher", "slurm"): "--jobs 2 is for --launcher local",
        ("--partition", "gpu"): "--partition: options of --launcher slurm or ray, not of local",
        ("--launcher", "ray", "--max-parallel", "3"): "--max-parallel is an option of --launcher slurm",
        ("--jobs", "0"): "--jobs must be at least 1, got 0",
        ("--launcher", "slurm", "--gpus-per-run", "0.5"): "must be a whole number on SLURM",
    }
    for flags, expected in cases.items():
        assert main(["bench", str(path), "--results", str(root), *flags]) == 2
        assert expected in capsys.readouterr().err, flags
    assert not root.exists()  # nothing ran serially instead


def test_jobs_2_overlaps_two_cells_and_a_killed_parent_is_finished_by_a_rerun_without_retraining(
    tiny_run, monkeypatch
):
    steps = (
        100  # long enough that the two workers, started together, train at the same time on a busy machine
    )
    path = write_experiment(tiny_run, seeds=(1, 2), max_steps=steps)
    root = tiny_run["tmp"] / "results"
    log = tiny_run["tmp"] / "parent.log"
    hold_the_first_two_runs(tiny_run["tmp"] / "hook", monkeypatch, checkpointed=True)
    started = time.time()
    parent = bench_process(path, root, "--jobs", "2", log=log)

    def two_checkpointed_cells():
        folders = [p.parents[1] for p in root.glob(".work/*/checkpoint/state.json")]
        return folders if len(folders) == 2 else None

    killed = wait_for(two_checkpointed_cells, 240, "two cells training at once with a checkpoint each", log)
    os.kill(parent.pid, signal.SIGKILL)
    parent.join()
    # The workers die with their parent (SIGTERM: a stop at their next step, with a checkpoint, claim released).
    wait_for(lambda: not list(root.glob(".claims/*.json")), 120, "the orphaned workers to stop", log)
    first = log.read_text()
    assert re.search(r"jobs: 2 run\(s\) at once, \d+ torch thread\(s\) each", first), first
    interrupted = {e["cell"] for e in events(root, "interrupted")}
    # a worker's write to the dead pipe fails nothing
    failed = [f"{e['cell']}: {e['error']}\n{e.get('traceback', '')}" for e in events(root, "failed")]
    assert not failed, "\n".join(failed)
    assert len(interrupted) == 2 and all(e["resumable"] for e in events(root, "interrupted"))
    assert {"/".join(f.name.split("--")[:4]) for f in killed} == interrupted

    assert main(["bench", str(path), "--results", str(root), "--jobs", "2", "--threads", "1"]) == 0
    elapsed = time.time() - started
    assert finished_cells(root) == sorted(GRID)
    for key in GRID:
        assert_complete_cell(root / key, steps)
    done = [e["cell"] for e in events(root, "done")]
    assert sorted(done) == sorted(GRID)  # each cell published exactly once
    resumed = {e["cell"]: e["resumed_at"] for e in events(root, "start") if e.get("resumed_at")}
    assert set(resumed) == interrupted and all(4 <= step < steps for step in resumed.values())
    fresh_starts = [e["cell"] for e in events(root, "start") if not e.get("resumed_at")]
    assert sorted(fresh_starts) == sorted(GRID)  # no cell started from scratch twice
    assert overlapping(root), spans(root)  # the rerun's two workers ran two cells at the same time
    assert not list(root.glob(".work/*")) and not list(root.glob(".claims/*"))
    print(f"--jobs 2, a killed parent and its rerun: {elapsed:.0f} s; overlaps: {overlapping(root)}")


def test_a_worker_whose_parent_pipe_is_gone_writes_on_without_raising(tmp_path):
    # The worker's lines go through a pipe to its parent; once the parent is dead, the next write (the
    # "stopping after this step" line of its SIGTERM, a progress line) must not raise mid-step.
    survived = tmp_path / "survived"
    child = f"""
import sys
from attendout.bench.worker import ToParent
sys.stdout, sys.stderr = ToParent(sys.stdout), ToParent(sys.stderr)
print("first", flush=True)
sys.stdin.read()  # the parent closes its end of the pipe, then this one
for i in range(1000):
    print("a line nobody reads", i)
    print("and one on stderr", i, file=sys.stderr)
open({str(survived)!r}, "w").write("yes")
"""
    process = subprocess.Popen(
        [sys.executable, "-c", child],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stdout.readline() == b"first\n"
    process.stdout.close()
    process.stdin.close()
    assert process.wait(timeout=60) == 0
    assert survived.read_text() == "yes"


def test_a_signal_handler_that_finds_the_pipe_gone_mid_write_fails_nothing():
    # The parent dies while the worker is writing a line; its SIGTERM handler (a line of its own, run
    # inside that write) finds the pipe broken first. The write it interrupted must end quietly too.
    from attendout.bench.worker import ToParent

    read_end, write_end = os.pipe()

    class Broken(io.TextIOBase):  # a pipe whose reader is gone once the handler's line is written
        writes = 0

        def write(self, text):
            Broken.writes += 1
            if Broken.writes == 1:
                child.write("a signal handler's line\n")  # the handler runs inside this write
            return len(text)

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            return write_end

    child = ToParent(Broken())
    try:
        assert child.write("a progress line\n") == len("a progress line\n")
        assert child.stream is None and Broken.writes == 2
        child.write("more\n")
        child.flush()
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_a_parent_death_signal_sent_once_per_dying_thread_is_one_stop_request(tmp_path):
    # A parent with reader threads sends its worker the parent-death signal once per exiting thread; only
    # the first may count, as a first SIGTERM (stop at the next step): a second would stop at once, in
    # the middle of the checkpoint the first asked for.
    child = tmp_path / "child.py"
    child.write_text(
        """
import os, signal
from attendout.bench import worker
from attendout.run import interrupt
with interrupt.handling(), interrupt.deferred():
    worker._die_with_parent()
    for _ in range(3):
        os.kill(os.getpid(), signal.SIGHUP)
    print("requested", interrupt.requested(), len(interrupt._requested))
"""
    )
    done = forked.run(forked.script(child))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"requested {int(signal.SIGTERM)} 1"
    assert done.stderr.count("SIGTERM: stopping after this step") == 1


@pytest.mark.processes
def test_ctrl_c_stops_every_worker_with_a_checkpoint_and_prints_one_resume_command(tiny_run, monkeypatch):
    path = write_experiment(tiny_run, seeds=(1,), max_steps=100)
    root = tiny_run["tmp"] / "results"
    log = tiny_run["tmp"] / "parent.log"
    hold_the_first_two_runs(tiny_run["tmp"] / "hook", monkeypatch, checkpointed=True)
    parent = bench_process(path, root, "--jobs", "2", log=log)
    wait_for(lambda: len(list(root.glob(".work/*/checkpoint/state.json"))) == 2, 240, "two checkpoints", log)
    os.kill(parent.pid, signal.SIGINT)
    parent.join(timeout=120)
    assert parent.exitcode == 130
    text = log.read_text()
    assert "jobs: SIGINT: stopping 2 run(s) at their next step, with a checkpoint" in text
    assert len(re.findall(r": stopped by SIGINT at step \d+ of 100; the checkpoint ", text)) == 2, text
    assert text.count("To go on: attendout bench") == 1
    assert (
        text.strip()
        .splitlines()[-1]
        .endswith(f"To go on: attendout bench {path} --results {root} --jobs 2 --threads 1")
    )
    assert "Traceback" not in text
    assert not list(root.glob(".claims/*.json")) and len(list(root.glob(".work/*"))) == 2
    assert main(["bench", str(path), "--results", str(root), "--jobs", "2", "--threads", "1"]) == 0
    assert len([e for e in events(root, "start") if e.get("resumed_at")]) == 2


def _oom_once(folder: Path) -> Path:
    """A sitecustomize that makes the first run of scores-dropout/seed-1 run out of GPU memory."""
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        f"""
import os
from pathlib import Path
import torch
import attendout.run.loop as train

_real = train.finetune
MARK = Path({str(folder / "ran-out")!r})

def finetune(config, on_log=None):
    if config.method == "scores-dropout" and config.seed == 1 and not MARK.exists():
        MARK.write_text(str(os.getpid()))
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return _real(config, on_log)

train.finetune = finetune
"""
    )
    return folder


@pytest.mark.slow
def test_a_run_out_of_gpu_memory_is_retried_once_another_run_ends(tiny_run, monkeypatch, capsys):
    path = write_experiment(tiny_run, seeds=(1, 2), max_steps=8)
    root = tiny_run["tmp"] / "results"
    hook = _oom_once(tiny_run["tmp"] / "hook")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(hook), *sys.path]))
    assert main(["bench", str(path), "--results", str(root), "--jobs", "2", "--threads", "1"]) == 0
    out = capsys.readouterr().out
    assert "scores-dropout/seed-1: out of GPU memory; it runs again when another run frees some" in out
    assert finished_cells(root) == sorted(GRID) and out.strip().splitlines()[-1].endswith(" 0 failed")
    (oom,) = events(root, "out-of-memory")
    retried = [e for e in events(root, "start") if e["cell"] == oom["cell"]]
    assert len(retried) == 2 and oom["cell"] == GRID[1]
    first_done = min(e["time"] for e in events(root, "done"))
    assert retried[1]["time"] >= first_done  # it waited for another run to end
    assert not list((root / ".bench" / "failed").glob("*.json"))  # not recorded as a failure


# --------------------------------------------------------------------------------------------------
# SLURM through submitit (its local executor: the same pickling and job path, no scheduler), and Ray

needs_submitit = pytest.mark.skipif(
    importlib.util.find_spec("submitit") is None, reason="the slurm extra: pip install 'attendout[slurm]'"
)
needs_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="pip install 'attendout[ray]'")


def submit_local(path: Path, root: Path, *extra: str) -> int:
    return main(
        ["bench", str(path), "--results", str(root), "--launcher", "slurm", "--submitit-cluster", "local"]
        + ["--cpus-per-run", "1", "--time-limit", "20", *extra]
    )


def serial_table(path: Path, tmp: Path, capsys) -> str:
    """The table of the grid run here, serially, in this process."""
    root = tmp / "serial"
    assert main(["bench", str(path), "--results", str(root)]) == 0
    table = table_of(path, root, capsys)
    assert "none" in table and "scores-dropout" in table and re.search(r"\d\.\d{2}", table), table
    return table


@pytest.mark.processes
@needs_submitit
def test_a_grid_submitted_through_submitit_reads_as_the_serial_one_and_a_rerun_submits_nothing(
    tiny_run, one_thread, capsys
):
    path = write_experiment(tiny_run, seeds=(1,), max_steps=8)
    slurm = tiny_run["tmp"] / "slurm"
    cells = GRID[:2]
    assert submit_local(path, slurm) == 0  # submits and returns
    out = capsys.readouterr().out
    assert re.search(r"slurm: submitted 2 cell\(s\) as job \d+, \d+ \(0 GPU\(s\), 1 CPUs a task\)", out), out
    assert "bench tiny shard 1/1: 2 submitted, 0 trained" in out
    serial = serial_table(path, tiny_run["tmp"], capsys)  # meanwhile, the same grid here
    wait_for(lambda: finished_cells(slurm) == cells, 300, "the local executor's tasks to finish")
    wait_for(lambda: not list(slurm.glob(".claims/*.json")), 60, "the tasks to release their claims")
    assert submit_local(path, slurm) == 0  # a rerun submits nothing: every cell is done
    out = capsys.readouterr().out
    assert (
        "slurm: nothing to submit" in out
        and "submitted" not in out.splitlines()[-1]
        and "2 already done" in out
    )
    assert {e["cell"] for e in events(slurm, "submitted")} == set(cells) and len(events(slurm, "done")) == 2
    assert {e["pid"] for e in events(slurm, "done")}.isdisjoint({os.getpid()})  # trained in the tasks
    assert table_of(path, slurm, capsys) == serial
    for key in cells:
        assert_complete_cell(slurm / key, 8)


@needs_ray
@pytest.mark.ray
def test_a_grid_through_a_local_ray_instance_runs_two_cells_at_once_and_reads_as_the_serial_one(
    tiny_run, one_thread, capsys
):
    path = write_experiment(tiny_run, seeds=(1,), max_steps=8)
    ray = tiny_run["tmp"] / "ray"
    cells = GRID[:2]
    assert main(["bench", str(path), "--results", str(ray), "--launcher", "ray", "--cpus-per-run", "1"]) == 0
    out = capsys.readouterr().out
    assert "ray: 2 cell(s) as tasks on a Ray instance started here, each 1 CPU(s)" in out, out
    assert finished_cells(ray) == cells
    assert len({e["pid"] for e in events(ray, "done")}) == 2 and overlapping(ray), spans(ray)  # two at once
    assert table_of(path, ray, capsys) == serial_table(path, tiny_run["tmp"], capsys)
    for key in cells:
        assert_complete_cell(ray / key, 8)


@pytest.mark.processes
@needs_submitit
def test_a_slurm_task_preempted_by_sigusr2_is_requeued_and_resumes_from_its_checkpoint(tiny_run, capsys):
    steps = 100
    path = write_experiment(tiny_run, seeds=(1,), max_steps=steps)
    root = tiny_run["tmp"] / "results"
    assert submit_local(path, root, "--methods", "none") == 0
    claim = wait_for(lambda: next(iter(root.glob(".claims/*.json")), None), 240, "the task's claim")
    wait_for(lambda: list(root.glob(".work/*/checkpoint/state.json")), 240, "the task's first checkpoint")
    task_pid = json.loads(claim.read_text())["pid"]
    os.kill(task_pid, signal.SIGUSR2)  # what SLURM sends before preempting or at the time limit
    wait_for(lambda: finished_cells(root) == [GRID[0]], 300, "the requeued task to finish the cell")
    (stopped,) = events(root, "interrupted")
    assert stopped["pid"] == task_pid and stopped["resumable"]
    first, second = events(root, "start")
    assert first["pid"] == task_pid and not first.get("resumed_at")
    assert (
        second["pid"] != task_pid and 4 <= second["resumed_at"] < steps
    )  # a new process, from the checkpoint
    (done,) = events(root, "done")
    assert done["pid"] == second["pid"]
    assert_complete_cell(root / GRID[0], steps)
    logs = "".join(p.read_text() for p in (root / ".bench" / "submitit").glob("*_log.*"))
    assert "stopped by SIGUSR2 at step" in logs and "Requeued job" in logs


@pytest.mark.processes
def test_advise_confirmation_runs_through_the_launcher_its_command_sets(tiny_run):
    """``attendout advise --jobs 2`` runs its confirmation grid inside ``launching(...)``: run_cells takes it."""
    from attendout.advise.confirm import run_confirmation
    from attendout.bench import load_experiment
    from attendout.bench.jobs import LocalJobs
    from attendout.bench.runner import launching

    experiment = load_experiment(write_experiment(tiny_run, seeds=(1,), max_steps=8))
    root = tiny_run["tmp"] / "confirm"
    lines: list[str] = []
    with launching(LocalJobs(2, threads=1)):
        run_confirmation(experiment, root, progress=False, echo=lines.append)
    assert finished_cells(root) == GRID[:2]
    assert any(line.startswith("jobs: 2 run(s) at once, 1 torch thread(s) each") for line in lines), lines
    pids = {e["pid"] for e in events(root, "done")}
    assert len(pids) == 2 and os.getpid() not in pids  # each cell in a worker process of its own
