"""A stop during an evaluation (issue 59, class 2): SIGTERM during the final decoding, or a validation's,
ends it at the next batch with a checkpoint, the command line prints the resume command (exit 143), and
the resumed run reaches the uninterrupted run's numbers, predictions and log."""

from __future__ import annotations

import json
import os
import shlex
import signal

import pytest

import attendout.run.loop as train_mod
from attendout.cli import main
from attendout.config import TrainConfig
from attendout.core.folder import CHECKPOINT_DIR
from attendout.run.interrupt import Stopped
from attendout.run.loop import TrainingLoop, finetune
from conftest import log_numbers

SOURCES = [f"the {a} {b} on the {c}" for a in ("cat", "dog") for b in ("sat", "ran") for c in ("mat", "log")]
TARGETS = [
    f"die {a} {b} auf der {c}" for a in ("katze", "hund") for b in ("sass", "lief") for c in ("matte", "holz")
]


@pytest.fixture
def mt(tmp_path):
    rows = [f"{s}\t{t}\n" for s, t in zip(SOURCES, TARGETS, strict=True)]
    (tmp_path / "train.tsv").write_text("source\ttarget\n" + "".join(rows) * 6)  # 36 train, 12 validation
    (tmp_path / "dev.tsv").write_text("source\ttarget\n" + "".join(rows[:6]))
    return tmp_path


def config(tmp_path, name: str, **values) -> TrainConfig:
    base = dict(
        task="seq2seq", model="t5", model_init="scratch", train_file=str(tmp_path / "train.tsv"),
        eval_files={"dev": str(tmp_path / "dev.tsv")}, model_layers=1, model_hidden=32, model_heads=2,
        vocab_size=300, max_length=16, max_new_tokens=8, batch_size=4, eval_batch_size=2, max_steps=6,
        eval_steps=3, log_steps=1, learning_rate=3e-3, validation_split=0.25, progress=False,
        output_dir=str(tmp_path / name), method="scores-dropout", method_options={"p": 0.2},
    )  # fmt: skip
    return TrainConfig(**{**base, **values})


def decoding_stops_at(monkeypatch, *, evaluation: int, batch: int, signum=signal.SIGTERM) -> dict:
    """SIGTERM arrives in this process during the ``batch``-th decoded batch of the ``evaluation``-th
    evaluation of the run (validations first, the final evaluation last); counts what was decoded."""
    seen = {"evaluations": 0, "batches": []}
    evaluate = TrainingLoop.evaluate

    def evaluate_and_count(self, data):
        seen["evaluations"] += 1
        seen["batches"].append(0)
        model = self.strategy.eval_model()
        real = model.generate

        def generate(*args, **kwargs):
            seen["batches"][-1] += 1
            if seen["evaluations"] == evaluation and seen["batches"][-1] == batch:
                os.kill(os.getpid(), signum)
            return real(*args, **kwargs)

        model.generate = generate
        try:
            return evaluate(self, data)
        finally:
            del model.generate

    monkeypatch.setattr(TrainingLoop, "evaluate", evaluate_and_count)
    return seen


def read_log(run) -> list[dict]:
    return log_numbers(run)


def same_as_whole(tmp_path, results, whole) -> None:
    run, uninterrupted = tmp_path / "stopped", tmp_path / "whole"
    assert results["eval"] == whole["eval"] and results["validation"] == whole["validation"]
    assert results["best_step"] == whole["best_step"]
    prediction = "predictions/dev.jsonl"
    assert (run / prediction).read_text() == (uninterrupted / prediction).read_text()
    assert read_log(run) == read_log(uninterrupted)
    assert not (run / CHECKPOINT_DIR).exists()


# the dev split: 6 pairs in 3 batches of 2; validations at steps 3 and 6, then the final evaluation (the 3rd)
WHERE = [("the final evaluation", 3, 6), ("the validation at step 3", 1, 3)]


@pytest.mark.parametrize("during,evaluation,step", WHERE, ids=["final decoding", "validation decoding"])
def test_a_stop_during_decoding_ends_it_at_the_next_batch_and_resumes_to_the_same_results(
    mt, monkeypatch, during, evaluation, step
):
    whole = finetune(config(mt, "whole"))
    seen = decoding_stops_at(monkeypatch, evaluation=evaluation, batch=2)
    with pytest.raises(Stopped) as stopped:
        TrainingLoop(config(mt, "stopped")).fit()
    stop = stopped.value
    assert seen["evaluations"] == evaluation and seen["batches"][-1] == 2  # batch 3 was never decoded
    assert (stop.signum, stop.exit_code, stop.step, stop.total) == (signal.SIGTERM, 143, step, 6)
    run = mt / "stopped"
    assert stop.checkpoint == run / CHECKPOINT_DIR and f"stopped during {during}" in stop.describe()
    state = json.loads((run / CHECKPOINT_DIR / "state.json").read_text())
    assert state["step"] == step and not (run / "results.json").exists()
    monkeypatch.undo()

    resumed = TrainingLoop(config(mt, "stopped", resume=True))
    assert resumed.state.step == step and resumed.state.validation_due == (evaluation < 3)
    same_as_whole(mt, resumed.fit(), whole)


def test_the_cli_stopped_in_the_final_decoding_exits_143_with_the_command_that_resumes(
    mt, monkeypatch, capsys
):
    args = [
        "finetune", "--task", "seq2seq", "--model-init", "scratch", "--model", "t5", "--train-file",
        str(mt / "train.tsv"), "--eval-file", f"dev={mt / 'dev.tsv'}", "--model-layers", "1", "--model-hidden", "32",
        "--model-heads", "2", "--vocab-size", "300", "--max-length", "16", "--max-new-tokens", "8",
        "--batch-size", "4", "--eval-batch-size", "2", "--max-steps", "4", "--eval-steps", "4",
        "--validation-split", "0.25", "--no-progress", "--output-dir", str(mt / "cli"),
    ]  # fmt: skip
    decoding_stops_at(
        monkeypatch, evaluation=2, batch=1
    )  # the validation at step 4, then the final evaluation
    assert main(args) == 143
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("attendout finetune: stopped by SIGTERM at step 4 of 4; the checkpoint in ")
    assert "stopped during the final evaluation" in last
    command = shlex.split(last.split("To go on: ", 1)[1])
    assert command[:2] == ["attendout", "finetune"] and command[-1] == "--resume"
    monkeypatch.undo()
    assert main(command[1:]) == 0
    results = json.loads((mt / "cli" / "results.json").read_text())
    assert results["resumed"]["step"] == 4 and results["eval"]["dev"]["bleu"] >= 0


def test_a_stop_between_batches_is_checked_in_every_process_together(monkeypatch):
    """The check before each batch asks every process (one collective), as the step's check does."""
    asked = []
    monkeypatch.setattr(train_mod, "agreed", lambda distributed: asked.append(distributed) or None)

    class Fake:
        distributed = object()

    TrainingLoop.stop_between_batches(Fake())
    assert asked == [Fake.distributed]
