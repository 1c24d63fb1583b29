"""Bad input, batch 5 (issue 69): launchers without their engine, counts that are not counts, and small
messages of ``models setup`` and ``bench --jobs``. Each refusal is one line on stderr, exit 2, and nothing
written before it (no experiment.json, no results folder, no study folder, no models folder)."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil

import pytest

from attendout.cli import main
from test_advise_launchers import advise_args
from test_bench import write_experiment

NO_SRUN = shutil.which("srun") is None
NO_RAY = importlib.util.find_spec("ray") is None


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("attendout: error: "), err
    return lines[0]


def bench_refused(tiny_run, capsys, *flags: str) -> str:
    path = write_experiment(tiny_run)
    root = tiny_run["tmp"] / "results"
    assert main(["bench", str(path), "--results", str(root), *flags]) == 2
    line = one_line(capsys)
    assert not root.exists(), sorted(root.rglob("*"))  # no experiment.json, nothing at all
    return line


def advise_refused(tiny_run, capsys, *flags: str) -> str:
    out = tiny_run["tmp"] / "study"
    assert main(advise_args(tiny_run, out, *flags)) == 2
    line = one_line(capsys)
    assert not out.exists(), sorted(out.rglob("*"))
    return line


# --------------------------------------------------------------------------------------------------
# 1. launchers without their engine


@pytest.mark.skipif(not NO_SRUN, reason="SLURM's srun is on this machine")
def test_bench_on_slurm_without_slurm_is_one_line_before_anything_is_written(tiny_run, capsys):
    pytest.importorskip("submitit")
    line = bench_refused(tiny_run, capsys, "--launcher", "slurm")
    assert "srun" in line and "--submitit-cluster local" in line, line


@pytest.mark.skipif(not NO_SRUN, reason="SLURM's srun is on this machine")
def test_advise_on_slurm_without_slurm_is_one_line_before_anything_is_written(tiny_run, capsys):
    pytest.importorskip("submitit")
    line = advise_refused(tiny_run, capsys, "--launcher", "slurm")
    assert "srun" in line and "--submitit-cluster local" in line, line


def test_advise_jobs_2_on_a_storage_nobody_answers_is_one_line_before_any_worker_starts(tiny_run, capsys):
    """Issue 69, class 5: each worker printed a traceback, then the parent; serial advise said one line."""
    pytest.importorskip("psycopg")
    line = advise_refused(
        tiny_run, capsys, "--jobs", "2", "--storage", "postgresql://nobody@127.0.0.1:1/study"
    )
    assert line.startswith("attendout: error: --storage postgresql://nobody@127.0.0.1:1/study"), line
    assert "search worker" not in line


@pytest.mark.skipif(not NO_RAY, reason="Ray is installed")
@pytest.mark.parametrize("command", ["bench", "advise"])
def test_ray_launcher_without_ray_is_one_line_naming_the_extra(tiny_run, capsys, command):
    refused = bench_refused if command == "bench" else advise_refused
    line = refused(tiny_run, capsys, "--launcher", "ray")
    assert "--launcher ray needs Ray: pip install 'attendout[ray]'" in line, line


# --------------------------------------------------------------------------------------------------
# 2. counts that are not counts


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--launcher", "slurm", "--cpus-per-run", "0"), "--cpus-per-run must be at least 1, got 0"),
        (("--launcher", "ray", "--cpus-per-run", "0"), "--cpus-per-run must be at least 1, got 0"),
        (("--launcher", "ray", "--gpus-per-run", "-1"), "--gpus-per-run must be at least 0, got -1"),
        (("--launcher", "slurm", "--max-parallel", "0"), "--max-parallel must be at least 1, got 0"),
        (("--launcher", "slurm", "--time-limit", "0"), "--time-limit must be at least 1, got 0"),
        (("--launcher", "slurm", "--mem-gb", "0"), "--mem-gb must be at least 1, got 0"),
        (("--jobs", "0"), "--jobs must be at least 1, got 0"),
        (("--jobs", "-1"), "--jobs must be at least 1, got -1"),
    ],
)
def test_bench_counts_below_one_are_refused_before_anything_is_written(tiny_run, capsys, flags, message):
    # --dry-run: a count that slipped through would list the grid and return 0
    line = bench_refused(tiny_run, capsys, "--submitit-cluster", "local", "--dry-run", *flags)
    assert message in line, line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--launcher", "ray", "--max-parallel", "0"), "--max-parallel must be at least 1, got 0"),
        (("--launcher", "ray", "--cpus-per-run", "0"), "--cpus-per-run must be at least 1, got 0"),
        (("--launcher", "slurm", "--cpus-per-run", "0"), "--cpus-per-run must be at least 1, got 0"),
        (("--launcher", "slurm", "--max-parallel", "0"), "--max-parallel must be at least 1, got 0"),
    ],
)
def test_advise_counts_below_one_are_refused_before_anything_is_written(tiny_run, capsys, flags, message):
    line = advise_refused(tiny_run, capsys, "--submitit-cluster", "local", *flags)
    assert message in line, line


def test_jobs_that_is_not_a_number_is_refused_by_the_parser_before_anything_is_written(tiny_run, capsys):
    path = write_experiment(tiny_run)
    root = tiny_run["tmp"] / "results"
    with pytest.raises(SystemExit) as stopped:
        main(["bench", str(path), "--results", str(root), "--jobs", "two"])
    assert stopped.value.code == 2
    assert "--jobs: invalid int value: 'two'" in capsys.readouterr().err
    assert not root.exists()


# --------------------------------------------------------------------------------------------------
# 3. small messages


def test_models_setup_wheels_that_is_a_file_says_it_must_be_a_folder(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("ATTENDOUT_MODELS", str(home))
    wheels = tmp_path / "wheels.whl"
    wheels.write_text("not a folder")
    assert main(["models", "setup", "mpnet-base", "--wheels", str(wheels)]) == 2
    line = one_line(capsys)
    assert f"--wheels {wheels} is a file" in line and "must be a folder" in line, line
    assert "is not in" not in line
    assert not home.exists()


def test_models_home_that_is_a_file_is_one_line_naming_the_variable(tmp_path, capsys, monkeypatch):
    home = tmp_path / "afile"
    home.write_text("")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    monkeypatch.setenv("ATTENDOUT_MODELS", str(home))
    assert main(["models", "setup", "mpnet-base", "--wheels", str(wheels)]) == 2
    line = one_line(capsys)
    assert f"ATTENDOUT_MODELS is {home}" in line and "a file" in line and "folder" in line, line
    assert "FileExistsError" not in line
    assert home.read_text() == ""


def cpus_here() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def test_bench_jobs_times_threads_beyond_the_cpus_warns_once(tiny_run, capsys, caplog):
    path = write_experiment(tiny_run)
    root = tiny_run["tmp"] / "results"
    threads = cpus_here()  # 2 jobs x every CPU: twice the CPUs
    with caplog.at_level(logging.WARNING):
        assert main(["bench", str(path), "--results", str(root), "--dry-run", "--jobs", "2", "--threads",
                     str(threads)]) == 0  # fmt: skip
    found = [r.getMessage() for r in caplog.records if "share" in r.getMessage()]
    assert found == [
        f"--jobs 2 x --threads {threads} = {2 * threads} torch threads share {threads} CPU(s) here, so the runs "
        "slow each other down; give fewer --threads (or leave it out: the CPUs divided by --jobs)"
    ], found
    assert "error" not in capsys.readouterr().err


def test_bench_jobs_times_threads_within_the_cpus_says_nothing(tiny_run, caplog):
    path = write_experiment(tiny_run)
    root = tiny_run["tmp"] / "results"
    with caplog.at_level(logging.WARNING):
        assert main(["bench", str(path), "--results", str(root), "--dry-run", "--jobs", "2"]) == 0
    assert not [r for r in caplog.records if "share" in r.getMessage()]
