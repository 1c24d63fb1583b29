"""Where a run directory stands (issue 61, part 1): one reader (:meth:`attendout.core.folder.RunDir.state`)
tells a finished run from a stopped or unfinished one, and ``attendout predict`` / ``Predictor.load`` /
the generation predictor refuse a run that is not finished (its state, its model's step, the command
that finishes it), or with ``--allow-unfinished`` predict, warn, and record the run's state.

A stopped run here is a real one: a SIGINT inside a training forward (as tests/test_interrupt.py sends
them) stops the toy run at step 4 of 9 with a checkpoint, its best model kept from the validation of
step 3.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import shlex
import shutil
import signal

import pytest

import forked
from attendout.cli import main
from attendout.cli.finetune import config_from_args, finetune_argv, finishing_command, how_to_finish
from attendout.config import TrainConfig
from attendout.core.folder import CHECKPOINT_DIR, CHECKPOINT_FILE, RunDir
from attendout.core.state import RUN_KINDS
from attendout.predict.base import UnfinishedRunError
from attendout.predict.classification import Predictor, write_predictions
from attendout.predict.generative import GenerationPredictor
from attendout.run.interrupt import Stopped
from attendout.run.loop import TrainingLoop, finetune
from attendout.run.runfolder import checkpoint_config
from attendout.tasks import Examples
from conftest import toy_train_config
from test_interrupt import signal_in_forward

pytestmark = pytest.mark.usefixtures("one_thread")

SETTINGS = dict(max_steps=9, eval_steps=3, log_steps=1)
TWO = Examples(text_a=["good fun", "bad dull"], text_b=None, labels=None)


def stop_at(config: TrainConfig, step: int) -> Stopped:
    """Train ``config`` and stop it by SIGINT inside the forward of ``step``: it stops after that step."""
    trainer = TrainingLoop(config)
    signal_in_forward(trainer, at=step, signum=signal.SIGINT)
    with pytest.raises(Stopped) as stopped:
        trainer.fit()
    return stopped.value


@pytest.fixture
def runs(tiny_run):
    """{"finished": a whole toy run, "stopped": one stopped at step 4 of 9 (model of step 3)}."""
    finetune(toy_train_config(tiny_run, **SETTINGS, output_dir=str(tiny_run["tmp"] / "finished")))
    stop = stop_at(toy_train_config(tiny_run, **SETTINGS, output_dir=str(tiny_run["tmp"] / "stopped")), 4)
    assert (stop.step, stop.total) == (4, 9)
    return {"finished": tiny_run["tmp"] / "finished", "stopped": tiny_run["tmp"] / "stopped"}


def unfinished_copy(run, to):
    """``run`` (stopped) without its checkpoint: as a run killed before its first checkpoint leaves it."""
    shutil.copytree(run, to)
    shutil.rmtree(to / CHECKPOINT_DIR)
    return to


def test_the_state_reader_tells_finished_stopped_and_unfinished_apart(runs, tiny_run):
    finished = RunDir(runs["finished"]).state()
    assert (finished.kind, finished.step, finished.total_steps, finished.finished) == ("finished", 9, 9, True)
    assert finished.best_step == json.loads((runs["finished"] / "results.json").read_text())["best_step"]
    assert finishing_command(finished) is None and RunDir(runs["finished"]).finished

    stopped = RunDir(runs["stopped"]).state()
    assert (stopped.kind, stopped.step, stopped.total_steps, stopped.best_step) == ("stopped", 4, 9, 3)
    assert (
        stopped.model and stopped.resumable and not stopped.finished and not RunDir(runs["stopped"]).finished
    )
    assert stopped.describe() == "stopped at step 4 of 9"
    assert stopped.weights() == "its model is of step 3 (the best so far)"
    command = finishing_command(stopped)
    assert command[:2] == ["attendout", "finetune"] and command[-1] == "--resume"
    assert how_to_finish(stopped) == f"to go on: {shlex.join(command)}"  # the words a stopped finetune prints

    unfinished = RunDir(unfinished_copy(runs["stopped"], tiny_run["tmp"] / "killed")).state()
    assert (unfinished.kind, unfinished.step, unfinished.total_steps, unfinished.best_step) == (
        "unfinished", 4, 9, 3,
    )  # fmt: skip
    assert (
        "killed or failed before its first checkpoint; its log reaches step 4 of 9" in unfinished.describe()
    )
    assert finishing_command(unfinished)[-1] != "--resume"
    assert how_to_finish(unfinished).startswith(
        "nothing was saved to resume from; to start again: attendout finetune"
    )

    broken = tiny_run["tmp"] / "broken"
    shutil.copytree(runs["stopped"], broken)
    state_pt = broken / CHECKPOINT_DIR / CHECKPOINT_FILE
    state_pt.write_bytes(state_pt.read_bytes()[:100])  # cut short: its manifest disagrees
    cut = RunDir(broken).state()
    assert cut.kind == "unfinished" and "its checkpoint cannot be used" in cut.describe()
    assert finishing_command(cut)[-1] == "--overwrite"  # --resume would refuse the checkpoint; start afresh

    empty = RunDir(tiny_run["tmp"] / "nothing-here").state()
    assert (empty.kind, empty.step, empty.best_step, empty.model, finishing_command(empty)) == (
        "unfinished", None, None, False, None,
    )  # fmt: skip
    assert {finished.kind, stopped.kind, unfinished.kind} == set(RUN_KINDS)


def test_cli_predict_refuses_a_stopped_run_with_its_state_and_the_command_that_finishes_it(
    runs, tiny_run, capsys
):
    run, out = runs["stopped"], tiny_run["tmp"] / "pred.csv"
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    assert main(["predict", str(run), "--input", tiny_run["dev"], "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"attendout: error: run {run} is not finished: stopped at step 4 of 9;"
    )
    assert "its model is of step 3 (the best so far)" in err[0] and "--allow-unfinished" in err[0]
    assert (
        not out.exists() and sorted(p.relative_to(run) for p in run.rglob("*")) == before
    )  # nothing written

    # The command it names finishes the run: it resumes from the checkpoint, and predict then works.
    command = shlex.split(err[0].split("to go on: ", 1)[1].split("; or pass", 1)[0])
    assert command[:2] == ["attendout", "finetune"] and command[-1] == "--resume"
    assert main(command[1:]) == 0
    results = json.loads((run / "results.json").read_text())
    whole = json.loads((runs["finished"] / "results.json").read_text())
    assert results["resumed"]["step"] == 4 and results["eval"] == whole["eval"]  # as if never stopped
    capsys.readouterr()
    assert main(["predict", str(run), "--input", tiny_run["dev"], "--output", str(out)]) == 0
    assert "not finished" not in capsys.readouterr().err and out.is_file()


def test_cli_predict_allow_unfinished_predicts_warns_with_the_step_and_records_the_state(runs, tiny_run):
    out = tiny_run["tmp"] / "pred.csv"
    command = ["-m", "attendout.cli", "predict", str(runs["stopped"]), "--allow-unfinished"]
    command += ["--input", tiny_run["dev"], "--output", str(out), "--no-progress", "--threads", "1"]
    done = forked.run(command, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    warning = [line for line in done.stderr.splitlines() if "not finished" in line]
    assert len(warning) == 1 and warning[0].startswith(
        f"attendout: WARNING: run {runs['stopped']} is not finished (stopped at step 4 of 9): predicting "
        "with the weights of step 3;"
    )
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 24 and rows[0]["prediction"] in ("0", "1")
    state = json.loads(rows[0]["run_state"])
    assert state == {
        "kind": "stopped", "step": 4, "total_steps": 9, "model_step": 3, "run": str(runs["stopped"])
    }  # fmt: skip


def test_predictor_load_refuses_an_unfinished_run_unless_allowed(runs, tiny_run, caplog):
    killed = unfinished_copy(runs["stopped"], tiny_run["tmp"] / "killed")
    for run, said in ((runs["stopped"], "stopped at step 4 of 9"), (killed, "unfinished (killed or failed")):
        with pytest.raises(
            UnfinishedRunError, match="is not finished: " + said.replace("(", r"\(")
        ) as refused:
            Predictor.load(run, device="cpu")
        assert refused.value.state.kind == RunDir(run).state().kind

    with caplog.at_level(logging.WARNING, logger="attendout"):
        predictor = Predictor.load(runs["stopped"], device="cpu", allow_unfinished=True)
    assert [r.getMessage() for r in caplog.records if "not finished" in r.getMessage()][0].startswith(
        f"run {runs['stopped']} is not finished (stopped at step 4 of 9): predicting with the weights of step 3;"
    )
    assert predictor.run_state.kind == "stopped" and predictor.run_state.best_step == 3
    predictions = predictor.predict_examples(TWO)
    assert predictions.run_state == {
        "kind": "stopped", "step": 4, "total_steps": 9, "model_step": 3, "run": str(runs["stopped"])
    }  # fmt: skip
    out = write_predictions(tiny_run["tmp"] / "p.jsonl", predictions, TWO)
    assert all(json.loads(line)["run_state"]["model_step"] == 3 for line in out.read_text().splitlines())


def test_a_finished_run_and_a_model_folder_predict_as_before_without_a_warning(runs, tiny_run, caplog):
    with caplog.at_level(logging.WARNING, logger="attendout"):
        predictor = Predictor.load(runs["finished"], device="cpu")
        folder = Predictor.load(
            runs["stopped"] / "model", device="cpu", max_length=16
        )  # a plain model folder
    assert not [r for r in caplog.records if "not finished" in r.getMessage()]
    assert predictor.run_state is None and folder.run_state is None
    predictions = predictor.predict_examples(TWO)
    assert predictions.run_state is None
    out = write_predictions(tiny_run["tmp"] / "p.csv", predictions, TWO)
    assert next(csv.reader(out.open())) == ["text_a", "prediction", "p_0", "p_1"]


TINY_LM = dict(model_layers=2, model_hidden=32, model_heads=2, vocab_size=300, max_length=16, batch_size=8)


def test_the_generation_predictor_refuses_a_stopped_run_unless_allowed(tmp_path, capsys):
    words = ["the cat", "a dog", "the bird", "my friend"]
    (tmp_path / "train.txt").write_text("\n".join(f"{w} sat on {v}" for w in words for v in words) + "\n")
    run = tmp_path / "lm"
    config = TrainConfig(
        task="lm", train_file=str(tmp_path / "train.txt"), model="gpt2", model_init="scratch", max_steps=6,
        eval_steps=2, log_steps=1, output_dir=str(run), progress=False, **TINY_LM,
    )  # fmt: skip
    stop_at(config, 3)
    assert RunDir(run).state().describe() == "stopped at step 3 of 6"
    with pytest.raises(UnfinishedRunError, match="stopped at step 3 of 6; its model is of step 2"):
        GenerationPredictor.load(run, device="cpu")
    assert main(["predict", str(run), "--prompt", "the cat"]) == 2
    assert "--resume" in capsys.readouterr().err
    predictor = Predictor.load(run, device="cpu", allow_unfinished=True, max_new_tokens=3)
    assert isinstance(predictor, GenerationPredictor) and predictor.run_state.best_step == 2
    generations = predictor.generate(["the cat"])
    assert (
        generations.run_state["kind"] == "stopped" and generations.rows()[0]["run_state"]["model_step"] == 2
    )


@pytest.mark.parametrize(
    "task,method,options,extra",
    [
        ("file", "none", {}, {}),
        ("file", "scheduled", {"slopes": [0.1, -0.2], "layers": [0, 1]}, {"early_stopping_patience": 2}),
        ("file", "addrop", {"p": 0.3, "q": 0.5, "attribution": "ga", "layers": [1]}, {"save_model": False}),
        ("conll2003", "attn-dropout", {"p": 0.1, "rescale": False}, {"batch_size": 32}),  # its default is 8
    ],
)
def test_the_command_of_a_runs_options_parses_back_to_the_same_options(
    tiny_run, task, method, options, extra
):
    """What ``--resume`` checks against the checkpoint (:func:`checkpoint_config`) survives the trip
    config.json -> command line -> config, for a run made in Python with options of every type."""
    files = {} if task == "file" else {"train_file": None, "eval_files": None, "text_columns": None}
    config = toy_train_config(
        tiny_run, task=task, method=method, method_options=options, learning_rate=3e-5, **files, **extra
    )
    recorded = json.loads(json.dumps(config.to_dict()))  # as config.json holds it
    argv = finetune_argv(recorded, config.output_dir)
    parsed, _ = config_from_args([*argv, "--resume"])
    assert checkpoint_config(parsed) == checkpoint_config(config)


def test_options_no_command_line_gives_say_so_instead_of_a_wrong_command(runs, tiny_run):
    """AD-DROP's layers="task", left unsettled in Python, has no flag (the CLI settles it for the task):
    no command, and words that say what to run instead."""
    config = toy_train_config(tiny_run, method="addrop", method_options={"p": 0.3, "q": 0.5})
    assert config.to_dict()["method_options"]["layers"] == "task"
    assert finetune_argv(json.loads(json.dumps(config.to_dict())), config.output_dir) is None
    settings = json.loads((runs["stopped"] / "config.json").read_text())
    settings["config"] = config.to_dict()
    (runs["stopped"] / "config.json").write_text(json.dumps(settings))
    state = RunDir(runs["stopped"]).state()
    assert finishing_command(state) is None
    assert how_to_finish(state) == (
        "to go on: run what started it again with --resume (Python: resume=True); no command line gives its "
        "options (a run started from Python)"
    )
