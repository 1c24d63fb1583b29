"""Resuming a killed run from its checkpoint reaches the numbers of the uninterrupted run."""

from __future__ import annotations

import json

import pytest

from attendout.core.folder import CHECKPOINT_DIR, CHECKPOINT_FILE
from attendout.core.optim import TrainingError
from attendout.run.loop import TrainingLoop, finetune
from attendout.run.runfolder import RunExistsError
from conftest import log_numbers, toy_train_config

KILL_AT = 5  # the step after which the "killed" run stops; its last checkpoint is at step 4


class Killed(Exception):
    pass


def kill_at(step: int):
    def on_log(record: dict) -> None:
        if record.get("step") == step and "loss" in record:
            raise Killed

    return on_log


def run_config(tiny_run, name: str, method: str, options: dict, **overrides):
    settings = dict(
        method=method,
        method_options=options,
        max_steps=9,  # 96 - 9 validation examples = 87 -> 6 batches an epoch: the resume crosses an epoch
        eval_steps=3,
        log_steps=1,
        checkpoint_steps=2,
        output_dir=str(tiny_run["tmp"] / name),
        # Dropout in the model too, so that the random generators' state matters.
        model=tiny_run["model"],
    )
    settings.update(overrides)
    return toy_train_config(tiny_run, **settings)


def read_log(run_dir) -> list[dict]:
    return log_numbers(run_dir)


# Every registered method, with options that make it act in these 9 steps.
METHODS = [
    ("none", {}),
    ("attn-dropout", {"p": 0.3}),
    ("scores-dropout", {"p": 0.3}),
    ("layerdrop", {"p": 0.3}),
    ("attn-layerdrop", {"p": 0.3}),
    ("scheduled", {"start": 0.6, "slopes": "-0.5,-0.2"}),  # the rate depends on the step
    ("drophead", {"p": 0.3}),
    ("addrop", {"cross_tuning": "off", "start": "addrop"}),
    ("synthesizer", {"variant": "random+dot", "synthesizer_lr": 0.01}),
    ("attendout", {"dropout_steps": 3, "eval_samples": 8}),
]


def test_every_registered_method_is_resumed_here():
    from attendout.methods import METHODS as REGISTRY

    ours = {name for name, config in REGISTRY.items() if config.__module__.startswith("attendout.")}
    assert {method for method, _ in METHODS} == ours  # the README says "tested for every method"


@pytest.mark.parametrize("method,options", METHODS, ids=[m for m, _ in METHODS])
def test_a_killed_run_resumes_to_the_uninterrupted_runs_numbers(tiny_run, method, options):
    whole = finetune(run_config(tiny_run, "whole", method, options))

    killed = run_config(tiny_run, "killed", method, options)
    with pytest.raises(Killed):
        TrainingLoop(killed, on_log=kill_at(KILL_AT)).fit()
    run = tiny_run["tmp"] / "killed"
    assert (run / CHECKPOINT_DIR / CHECKPOINT_FILE).is_file() and not (run / "results.json").exists()
    assert max(r["step"] for r in read_log(run)) == KILL_AT

    resumed = TrainingLoop(run_config(tiny_run, "killed", method, options, resume=True))
    assert resumed.state.step == 4
    results = resumed.fit()

    # Exact, not within a tolerance: in this process, with the same threads and CPU kernels, the
    # resumed run repeats the uninterrupted run's sequence of operations on the same values (weights,
    # optimizer state, schedule, data order and random generators all come back bit for bit).
    assert results["eval"] == whole["eval"] and results["validation"] == whole["validation"]
    assert results["best_step"] == whole["best_step"]
    whole_dir = tiny_run["tmp"] / "whole"
    assert (run / "predictions" / "dev.jsonl").read_text() == (
        whole_dir / "predictions" / "dev.jsonl"
    ).read_text()
    # The log reads as one run: what the killed run wrote after its checkpoint was dropped and redone.
    assert read_log(run) == read_log(whole_dir)
    assert not (run / CHECKPOINT_DIR).exists()  # finished: nothing left to resume


def test_without_a_checkpoint_resume_starts_afresh(tiny_run, caplog):
    config = run_config(tiny_run, "fresh", "none", {}, resume=True, checkpoint_steps=None)
    results = finetune(config)
    assert results["total_steps"] == 9 and read_log(tiny_run["tmp"] / "fresh")[0]["step"] == 1


def test_a_run_without_resume_refuses_an_unfinished_runs_checkpoint_unless_told_to_overwrite(tiny_run):
    with pytest.raises(Killed):
        TrainingLoop(run_config(tiny_run, "again", "none", {}), on_log=kill_at(KILL_AT)).fit()
    checkpoint = tiny_run["tmp"] / "again" / CHECKPOINT_DIR
    before = (checkpoint / CHECKPOINT_FILE).read_bytes()
    with pytest.raises(
        RunExistsError, match=r"unfinished run with a checkpoint of step 4 .*--resume.*--overwrite"
    ):
        TrainingLoop(run_config(tiny_run, "again", "none", {}, checkpoint_steps=None))
    assert (checkpoint / CHECKPOINT_FILE).read_bytes() == before  # the user's run, untouched
    trainer = TrainingLoop(run_config(tiny_run, "again", "none", {}, checkpoint_steps=None, overwrite=True))
    assert trainer.state.step == 0 and not checkpoint.exists()


def test_resuming_with_other_settings_or_a_broken_checkpoint_is_a_clear_error(tiny_run):
    with pytest.raises(Killed):
        TrainingLoop(run_config(tiny_run, "run", "none", {}), on_log=kill_at(KILL_AT)).fit()
    with pytest.raises(TrainingError, match=r"other settings \(learning_rate 5e-05 -> 0.001\)"):
        TrainingLoop(run_config(tiny_run, "run", "none", {}, resume=True, learning_rate=1e-3))
    # save_model decides where the best model so far is kept: it must match (RESUME_MUST_MATCH)
    with pytest.raises(TrainingError, match=r"other settings \(save_model True -> False\)"):
        TrainingLoop(run_config(tiny_run, "run", "none", {}, resume=True, save_model=False))
    # The paths, devices, batch splits and the checkpoint interval may change between the two.
    free = dict(checkpoint_steps=3, progress=True, micro_batch_size=4, eval_batch_size=8)
    resumed = TrainingLoop(run_config(tiny_run, "run", "none", {}, resume=True, **free))
    assert resumed.state.step == 4
    state = tiny_run["tmp"] / "run" / CHECKPOINT_DIR / CHECKPOINT_FILE
    state.write_bytes(state.read_bytes()[:100])
    with pytest.raises(TrainingError, match=r"cannot resume .*state.pt has 100 bytes.*\(truncated\)"):
        TrainingLoop(run_config(tiny_run, "run", "none", {}, resume=True))


def test_the_cli_resumes_and_says_so(tiny_run, capsys):
    from attendout.cli import main
    from conftest import toy_cli_args

    settings = {"max_steps": 9, "checkpoint_steps": 2, "log_steps": 1}
    with pytest.raises(Killed):
        TrainingLoop(toy_train_config(tiny_run, **settings), on_log=kill_at(KILL_AT)).fit()
    flags = ["--max-steps", "9", "--checkpoint-steps", "2", "--log-steps", "1"]
    assert main(toy_cli_args(tiny_run, *flags, "--resume")) == 0
    out = capsys.readouterr().out
    assert "resumed at step 4 from the checkpoint" in out
    results = json.loads((tiny_run["tmp"] / "run" / "results.json").read_text())
    assert results["resumed"]["step"] == 4 and results["total_steps"] == 9
