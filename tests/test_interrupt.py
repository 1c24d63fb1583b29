"""Ctrl-C and SIGTERM (issue 41, class 1): a run stops at its next whole step with a checkpoint, names
it and the command that goes on, and the resumed run reaches the uninterrupted run's numbers.

The signals are real (``os.kill`` of this process, or of a child), sent from inside the part of the loop
under test: mid-step (a training forward), during a validation, during a checkpoint write, during an
AttendOut game and during AD-DROP's attribution pass. A second signal stops at once and leaves the last
complete checkpoint as it was.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys

import pytest
import torch
from transformers import TrainerCallback

import attendout.core.folder as folder_mod
import attendout.run.runfolder as runfolder_mod
import attendout.run.setup as setup_mod
import forked
from attendout.cli import main
from attendout.core.folder import CHECKPOINT_DIR
from attendout.methods.addrop import ADDrop
from attendout.methods.attendout.strategy import AttendOutStrategy
from attendout.run import interrupt
from attendout.run.interrupt import Stopped
from attendout.run.loop import TrainingLoop, finetune
from conftest import toy_cli_args
from test_resume import read_log, run_config


def send(signum: int = signal.SIGINT, times: int = 1) -> None:
    for _ in range(times):
        os.kill(os.getpid(), signum)


def on_call(at: int, action):
    """A wrapper factory: the wrapped function runs ``action`` at its ``at``-th call, then itself."""

    def wrap(function):
        calls = {"n": 0}

        def wrapped(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == at:
                action()
            return function(*args, **kwargs)

        return wrapped

    return wrap


def patch(monkeypatch, owner, name: str, at: int, action) -> None:
    monkeypatch.setattr(owner, name, on_call(at, action)(getattr(owner, name)))


def signal_in_forward(trainer: TrainingLoop, at: int, signum: int) -> None:
    """The signal arrives inside the ``at``-th training forward (mid-step)."""
    calls = {"n": 0}

    def hook(module, args, kwargs):
        if module.training:
            calls["n"] += 1
            if calls["n"] == at:
                send(signum)

    trainer.model.register_forward_pre_hook(hook, with_kwargs=True)


def same_as_whole(run, whole_dir, results, whole) -> None:
    assert results["eval"] == whole["eval"] and results["validation"] == whole["validation"]
    assert results["best_step"] == whole["best_step"]
    assert (run / "predictions" / "dev.jsonl").read_text() == (
        whole_dir / "predictions" / "dev.jsonl"
    ).read_text()
    assert read_log(run) == read_log(whole_dir)
    assert not (run / CHECKPOINT_DIR).exists()


POINTS = [  # (where, method, options, signal): SIGINT and SIGTERM act alike in a loop
    ("mid-step", "none", {}, signal.SIGTERM),
    ("validation", "scores-dropout", {"p": 0.3}, signal.SIGINT),
    ("checkpoint write", "none", {}, signal.SIGTERM),
    ("attendout game", "attendout", {"dropout_steps": 3, "eval_samples": 8}, signal.SIGINT),
    ("addrop attribution", "addrop", {"cross_tuning": "off", "start": "addrop"}, signal.SIGINT),
]


@pytest.mark.parametrize("where,method,options,signum", POINTS, ids=[p[0] for p in POINTS])
def test_a_signal_stops_at_a_whole_step_with_a_checkpoint_and_the_run_resumes_to_the_same_numbers(
    tiny_run, monkeypatch, where, method, options, signum
):
    whole = finetune(run_config(tiny_run, "whole", method, options))
    # no checkpoint until the stop (the stop writes one), but when the stop lands in a checkpoint write
    every = 2 if where == "checkpoint write" else None
    trainer = TrainingLoop(run_config(tiny_run, "stopped", method, options, checkpoint_steps=every))
    if where == "mid-step":
        signal_in_forward(trainer, at=5, signum=signum)
    elif where == "validation":
        patch(monkeypatch, TrainingLoop, "evaluate", 2, lambda: send(signum))  # the validation at step 6
    elif where == "checkpoint write":
        patch(monkeypatch, runfolder_mod, "write_checkpoint", 2, lambda: send(signum))  # at step 3's best
    elif where == "attendout game":
        patch(monkeypatch, AttendOutStrategy, "score", 3, lambda: send(signum))
    else:
        patch(monkeypatch, ADDrop, "prepare", 4, lambda: send(signum))
    with pytest.raises(Stopped) as stopped:
        trainer.fit()
    stop = stopped.value
    assert stop.signum == signum and stop.exit_code == 128 + signum
    assert 0 < stop.step < 9 and stop.total == 9
    if where == "mid-step":
        assert stop.step == 5  # the step it landed in, finished
    run = tiny_run["tmp"] / "stopped"
    assert stop.checkpoint == run / CHECKPOINT_DIR
    assert json.loads((stop.checkpoint / "state.json").read_text())["step"] == stop.step
    assert not (run / "results.json").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the caller's handlers are back
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    monkeypatch.undo()

    resumed = TrainingLoop(
        run_config(tiny_run, "stopped", method, options, checkpoint_steps=every, resume=True)
    )
    assert resumed.state.step == stop.step
    same_as_whole(run, tiny_run["tmp"] / "whole", resumed.fit(), whole)


def test_the_first_signal_says_what_happens_and_where_it_stopped(tiny_run, capsys):
    trainer = TrainingLoop(run_config(tiny_run, "stopped", "none", {}))
    signal_in_forward(trainer, at=3, signum=signal.SIGINT)
    with pytest.raises(Stopped, match=r"stopped by SIGINT at step 3 of 9; the checkpoint in .* is complete"):
        trainer.fit()
    lines = [line for line in capsys.readouterr().err.splitlines() if "%|" not in line and line]  # no bars
    assert lines == [
        "attendout: SIGINT: stopping after this step or evaluation batch, with a checkpoint (Ctrl-C again stops at once)"
    ]


def test_a_second_signal_stops_at_once_leaving_the_last_complete_checkpoint(tiny_run, monkeypatch):
    whole = finetune(run_config(tiny_run, "whole", "none", {}))
    trainer = TrainingLoop(
        run_config(tiny_run, "stopped", "none", {})
    )  # checkpoints every 2 steps and at a best
    run = tiny_run["tmp"] / "stopped"
    state = run / CHECKPOINT_DIR / "state.json"
    before = []

    def twice():
        before.append(state.read_text())
        send(times=2)  # inside a checkpoint write: the second raises before the new one is swapped in

    patch(monkeypatch, runfolder_mod, "write_checkpoint", 3, twice)
    with pytest.raises(Stopped) as stopped:
        trainer.fit()
    assert stopped.value.checkpoint is None  # stopped where it was, not at a step
    assert state.read_text() == before[0]  # the last complete checkpoint, untouched
    step = json.loads(before[0])["step"]
    monkeypatch.undo()
    resumed = TrainingLoop(run_config(tiny_run, "stopped", "none", {}, resume=True))
    assert resumed.state.step == step
    same_as_whole(run, tiny_run["tmp"] / "whole", resumed.fit(), whole)


def test_a_second_signal_inside_torch_save_is_a_stop_not_a_failure(tiny_run, monkeypatch):
    # torch.save calls the file's write from C++, which turns an exception raised there into a
    # RuntimeError: the stop at once must still be a stop, and the last complete checkpoint stays.
    trainer = TrainingLoop(run_config(tiny_run, "stopped", "none", {}))
    state = trainer.run.path / CHECKPOINT_DIR / "state.json"
    before, writes = [], []
    write = folder_mod._Sink.write

    def write_then_signal(sink, data):
        writes.append(state.exists())
        if writes.count(True) == 2:  # not the first write: torch then reports it as "unexpected pos"
            before.append(state.read_text())
            send(signal.SIGTERM, times=2)
        return write(sink, data)

    monkeypatch.setattr(folder_mod._Sink, "write", write_then_signal)
    with pytest.raises(Stopped, match="SIGTERM") as stopped:
        trainer.fit()
    assert before and stopped.value.checkpoint is None
    assert state.read_text() == before[0]  # the last complete checkpoint, untouched
    assert not list(trainer.run.path.glob(".*tmp*"))  # no half-written folder left beside it


def test_outside_a_loop_a_signal_raises_at_once_and_is_remembered_for_check():
    with interrupt.handling():
        with pytest.raises(Stopped):
            send(signal.SIGTERM)
        with pytest.raises(Stopped, match="SIGTERM"):
            interrupt.check()  # remembered: a stop swallowed where it landed is raised again here
        with interrupt.deferred():
            interrupt.check()  # inside a loop the loop stops at its step, not here
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL and interrupt.requested() is None


def test_a_handler_of_the_callers_own_is_left_alone(tiny_run):
    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        trainer = TrainingLoop(run_config(tiny_run, "mine", "none", {}))
        signal_in_forward(trainer, at=2, signum=signal.SIGTERM)
        results = trainer.fit()  # the caller's handler saw it; the run went on
        assert seen == [signal.SIGTERM] and results["total_steps"] == 9
    finally:
        signal.signal(signal.SIGTERM, previous)


DRIVER = r"""
import os, signal, sys
import torch
import attendout.run.loop as train

torch.set_num_threads(1)
if os.environ.get("STOP_WITH"):  # the signal arrives during the second validation (step 6 of 9)
    signum = getattr(signal, os.environ["STOP_WITH"])
    evaluate = train.TrainingLoop.evaluate
    calls = {"n": 0}

    def evaluate_and_stop(self, data):
        calls["n"] += 1
        if calls["n"] == 2:
            os.kill(os.getpid(), signum)
        return evaluate(self, data)

    train.TrainingLoop.evaluate = evaluate_and_stop
from attendout.cli import main

sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_cli_prints_one_line_with_the_command_that_goes_on(tiny_run, signum):
    driver = tiny_run["tmp"] / "driver.py"
    driver.write_text(DRIVER)

    def finetune_process(args, stop_with=""):
        env = {**os.environ, "STOP_WITH": stop_with, "OMP_NUM_THREADS": "1"}
        return forked.run(forked.script(driver, *args), env=env)

    flags = ["--max-steps", "9", "--eval-steps", "3", "--log-steps", "1"]
    name = signal.Signals(signum).name
    done = finetune_process(toy_cli_args(tiny_run, *flags, output_dir=tiny_run["tmp"] / "stopped"), name)
    assert done.returncode == 128 + signum, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"attendout finetune: stopped by {name} at step 6 of 9; the checkpoint in ")
    command = shlex.split(last.split("To go on: ", 1)[1])
    assert command[:2] == ["attendout", "finetune"] and command[-1] == "--resume"

    resumed = finetune_process(command[1:])  # the line, as printed
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    whole = finetune_process(toy_cli_args(tiny_run, *flags, output_dir=tiny_run["tmp"] / "whole"))
    assert whole.returncode == 0, whole.stderr[-3000:]
    ours, theirs = (
        json.loads((tiny_run["tmp"] / d / "results.json").read_text()) for d in ("stopped", "whole")
    )
    assert ours["resumed"]["step"] == 6
    assert ours["eval"] == theirs["eval"] and ours["validation"] == theirs["validation"]


def test_a_stop_before_training_says_nothing_was_saved(tiny_run, monkeypatch, capsys):
    def stop_while_loading(*args, **kwargs):
        send(signal.SIGINT)

    monkeypatch.setattr(setup_mod, "load_for_task", stop_while_loading)
    assert main(toy_cli_args(tiny_run)) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(
        "attendout finetune: stopped by SIGINT. Nothing was saved to resume from; to start again: "
    )


class SignalAt(TrainerCallback):
    """Sends ``signum`` to this process as the loop begins step ``step`` (1-based)."""

    def __init__(self, step: int, signum: int = signal.SIGINT) -> None:
        self.step, self.signum = step, signum

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step + 1 == self.step:
            send(self.signum)


def test_transformers_trainer_stops_with_a_checkpoint_that_resumes_to_the_same_weights(tiny_run):
    from test_hf_trainer import hf_trainer

    options = {"p": 0.3}
    whole = hf_trainer(tiny_run, "scores-dropout", options, output_dir=str(tiny_run["tmp"] / "whole"))
    whole.train()
    out = tiny_run["tmp"] / "hf"
    stopped = hf_trainer(tiny_run, "scores-dropout", options, output_dir=str(out))
    stopped.add_callback(SignalAt(2, signal.SIGTERM))
    with pytest.raises(Stopped, match="to go on: trainer.train") as caught:
        stopped.train()
    stop = caught.value
    assert (stop.signum, stop.step, stop.total) == (signal.SIGTERM, 2, 4)
    assert stop.checkpoint == out / "checkpoint-2" and (stop.checkpoint / "trainer_state.json").is_file()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

    resumed = hf_trainer(tiny_run, "scores-dropout", options, output_dir=str(out))
    resumed.train(resume_from_checkpoint=str(stop.checkpoint))
    assert resumed.state.global_step == 4
    for (name, ours), theirs in zip(
        resumed.model.state_dict().items(), whole.model.state_dict().values(), strict=True
    ):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6, msg=name)


def test_transformers_trainer_says_a_stateful_methods_checkpoint_cannot_be_resumed(tiny_run, caplog):
    from test_hf_trainer import OPTIONS, hf_trainer

    trainer = hf_trainer(tiny_run, "attendout", OPTIONS["attendout"], output_dir=str(tiny_run["tmp"] / "hf"))
    trainer.add_callback(SignalAt(2))
    with pytest.raises(Stopped) as caught:
        trainer.train()
    assert caught.value.checkpoint is None and caught.value.step == 2
    assert "cannot be resumed from" in caplog.text


def test_a_stop_dropped_by_a_garbage_collection_callback_prints_no_traceback(capsys):
    """A signal landing in a finaliser raises there, where Python can only report it: within handling()
    the stop is remembered (check() raises it again) and nothing is printed; other such errors still are."""
    import gc

    class Finalised:
        def __init__(self, error):
            self.error = error

        def __del__(self):
            raise self.error

    seen = []
    previous = sys.unraisablehook
    sys.unraisablehook = ours = lambda unraisable: seen.append(type(unraisable.exc_value).__name__)
    try:
        with interrupt.handling():
            Finalised(interrupt.Stopped(signal.SIGTERM))
            Finalised(ValueError("a real finaliser bug"))
            gc.collect()
        hook_after = sys.unraisablehook
    finally:
        sys.unraisablehook = previous
    assert seen == ["ValueError"] and hook_after is ours  # the caller's hook is back after the block
    assert "Traceback" not in capsys.readouterr().err
