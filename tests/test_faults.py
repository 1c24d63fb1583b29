"""Fault injection (issue 21): `attendout finetune` killed with SIGKILL at chosen moments (inside a
checkpoint write, inside a model save, during evaluation, inside an AttendOut game, inside the results
write, after a step), resumed each time, ends with exactly the numbers of an uninterrupted run; at no
moment does a file under its final name hold half its contents.

Each run is a real process (the kill is the kernel's, nothing is cleaned up): a small driver patches the
chosen function to kill its own process at the chosen call, then runs ``attendout.cli.main``. The short
version (default suite) chains four kills through one run of ``none`` and one kill inside a game of
``attendout``; the long one (``-m slow``) does every registered method.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

import forked
from conftest import log_numbers, save_tiny_model_dir, write_sentiment_csv

DRIVER = r"""
import os, signal, sys
import torch

torch.set_num_threads(1)
fault = os.environ.get("ATTENDOUT_FAULT", "")
kind, _, at = fault.partition(":")
at = int(at or 1)
calls = {"n": 0}


def die():
    os.kill(os.getpid(), signal.SIGKILL)


def hit():
    calls["n"] += 1
    return calls["n"] == at


import attendout.core.folder as rundir
import attendout.run.loop as train
import attendout.run.runfolder as runfolder

if kind == "checkpoint":  # half of state.pt's temporary file written, then killed (before the rename)
    import io

    save = torch.save

    def half_save(obj, f, *args, **kwargs):
        if hit():
            buffer = io.BytesIO()
            save(obj, buffer, *args, **kwargs)
            data = buffer.getvalue()
            f.write(data[: len(data) // 2])
            f.flush()
            die()
        save(obj, f, *args, **kwargs)

    torch.save = half_save
elif kind == "model":  # inside a model save: its folder written under the temporary name, not renamed
    replace = os.replace

    def killing_replace(src, dst, *args, **kwargs):
        if str(src).endswith(".model.tmp") and hit():
            die()
        replace(src, dst, *args, **kwargs)

    rundir.os.replace = killing_replace
elif kind == "results":  # half of results.json's temporary file written
    write = runfolder.write_json_atomic

    def half_results(path, data):
        if path.name == "results.json" and hit():
            (path.parent / ".results.json.partial").write_text('{"task": "fi')
            die()
        write(path, data)

    runfolder.write_json_atomic = half_results
elif kind == "eval":  # inside an evaluation (validation or a final split)
    evaluate = train.TrainingLoop.evaluate

    def killing_evaluate(self, data):
        if hit():
            die()
        return evaluate(self, data)

    train.TrainingLoop.evaluate = killing_evaluate
elif kind == "game":  # inside an AttendOut game, between scoring the Defender and the Attacker
    from attendout.methods.attendout.strategy import AttendOutStrategy

    score = AttendOutStrategy.score

    def killing_score(self, model, data, indices):
        result = score(self, model, data, indices)
        if hit():
            die()
        return result

    AttendOutStrategy.score = killing_score
elif kind == "step":  # right after the log line of step `at`
    log = runfolder.RunFolder.log

    def killing_log(self, record):
        log(self, record)
        if record.get("step") == at and "loss" in record:
            die()

    runfolder.RunFolder.log = killing_log
elif kind:
    raise SystemExit(f"unknown fault {fault!r}")

from attendout.cli import main

sys.exit(main(sys.argv[1:]))
"""

# Every registered method, with options that make it act in these 9 steps (as tests/test_resume.py).
from test_resume import METHODS  # noqa: E402


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    (root / "driver.py").write_text(DRIVER)
    return {
        "root": root,
        "model": save_tiny_model_dir(root / "model"),  # the model's dropout on: the generators' states matter
        "train": write_sentiment_csv(root / "train.csv", 96, seed=0),
        "dev": write_sentiment_csv(root / "dev.csv", 24, seed=1),
    }


def method_flags(method: str, options: dict) -> list[str]:
    flags = ["--method", method]
    for key, value in options.items():
        flags.append(f"--{key.replace('_', '-')}={value}")  # =: a value may start with '-'
    return flags


def run(toy, out: Path, method: str, options: dict, fault: str | None = None, resume: bool = False):
    args = [
        "finetune", "--task", "file", "--train-file", toy["train"], "--eval-file", f"dev={toy['dev']}",
        "--model", toy["model"], "--batch-size", "16", "--max-length", "16", "--max-steps", "9",
        "--eval-steps", "3", "--log-steps", "1", "--checkpoint-steps", "2", "--no-progress",
        "--output-dir", str(out), *method_flags(method, options),
    ]  # fmt: skip
    if resume:
        args.append("--resume")
    env = {**os.environ, "ATTENDOUT_FAULT": fault or "", "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
    driver = str(toy["root"] / "driver.py")
    return forked.run(forked.script(driver, *args), env=env, timeout=600)


def assert_whole(out: Path) -> None:
    """Every file under its final name is whole: JSON parses, every log line parses, state.pt loads."""
    for path in out.rglob("*"):
        if not path.is_file() or any(part.startswith(".") for part in path.relative_to(out).parts):
            continue  # temporary files and folders (never read under these names)
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".jsonl":
            for line in path.read_text().splitlines():
                json.loads(line)
        elif path.suffix == ".pt":
            torch.load(path, weights_only=True)
        elif path.suffix == ".safetensors":
            from safetensors.torch import load_file

            load_file(path)


def same_numbers(out: Path, whole: Path) -> None:
    ours, theirs = (json.loads((d / "results.json").read_text()) for d in (out, whole))
    for key in ("eval", "validation", "best_step", "total_steps"):
        assert ours[key] == theirs[key], key
    assert (out / "predictions" / "dev.jsonl").read_text() == (
        whole / "predictions" / "dev.jsonl"
    ).read_text()
    assert log_numbers(out) == log_numbers(whole)
    assert not (out / "checkpoint").exists() and not (out / ".attendout.lock").exists()


def killed_and_resumed(toy, name: str, method: str, options: dict, faults: list[str]) -> None:
    whole = toy["root"] / f"{name}-whole"
    done = run(toy, whole, method, options)
    assert done.returncode == 0, done.stderr
    out = toy["root"] / name
    for i, fault in enumerate(faults):
        killed = run(toy, out, method, options, fault=fault, resume=i > 0)
        assert killed.returncode == -9, (
            f"{fault}: not killed (exit {killed.returncode}): {killed.stderr[-2000:]}"
        )
        assert not (out / "results.json").exists()
        assert_whole(out)
    resumed = run(toy, out, method, options, resume=True)
    assert resumed.returncode == 0, resumed.stderr
    assert "Traceback" not in resumed.stderr
    same_numbers(out, whole)


def test_a_run_killed_four_times_ends_with_the_uninterrupted_runs_numbers(toy):
    """Kills, each run resumed from the last whole checkpoint: inside the first model save (step 3),
    inside the 3rd checkpoint write (step 6), inside the 2nd evaluation (step 9), inside the results write."""
    killed_and_resumed(toy, "none", "none", {}, ["model:1", "checkpoint:3", "eval:2", "results:1"])


def test_a_run_killed_inside_an_attendout_game_resumes_to_the_same_numbers(toy):
    options = {"dropout_steps": 3, "eval_samples": 8}
    killed_and_resumed(toy, "attendout", "attendout", options, ["game:3", "step:8"])


@pytest.mark.slow
@pytest.mark.parametrize("method,options", METHODS, ids=[m for m, _ in METHODS])
def test_every_method_killed_at_every_kind_of_moment(toy, method, options):
    """One run killed six times (seven for AttendOut), resumed after each: after step 1 (no checkpoint
    yet: afresh), inside the first model save (step 3), [inside the first game's scoring (step 3)],
    inside the 2nd checkpoint write, after step 5, inside the 2nd evaluation (step 9), inside the
    results write."""
    faults = ["step:1", "model:1", "checkpoint:2", "step:5", "eval:2", "results:1"]
    if method == "attendout":
        faults.insert(2, "game:1")
    killed_and_resumed(toy, f"slow-{method}", method, options, faults)


def test_a_kill_between_the_renames_of_a_model_save_is_recovered(tmp_path, monkeypatch):
    """save_model_atomic swaps folders with two renames; killed between them, the best model is only at
    .model.old: the next save (or a resume) puts it back."""
    import attendout.core.folder as rundir
    from conftest import tiny_model

    class Tokenizer:
        def save_pretrained(self, folder):
            (Path(folder) / "tokenizer.json").write_text("{}")

    target = tmp_path / "model"
    rundir.save_model_atomic(tiny_model(), Tokenizer(), target)
    replace = os.replace

    def killed_between(src, dst):
        replace(src, dst)
        if str(dst).endswith(".model.old"):
            raise KeyboardInterrupt  # stands for the kill

    monkeypatch.setattr(rundir.os, "replace", killed_between)
    with pytest.raises(KeyboardInterrupt):
        rundir.save_model_atomic(tiny_model(seed=1), Tokenizer(), target)
    monkeypatch.setattr(rundir.os, "replace", replace)
    assert not target.exists() and (tmp_path / ".model.old").is_dir()
    rundir.recover_folder(target)
    assert (target / "config.json").is_file() and not (tmp_path / ".model.old").exists()
