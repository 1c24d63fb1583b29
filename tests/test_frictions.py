"""Frictions a new user met (issue 49): start-up imports, --threads, set-up lines, one-class runs, help."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import attendout.run.loop as train
import plain
from attendout.cli import main
from attendout.run.runfolder import single_class
from conftest import toy_cli_args, toy_train_config

HEAVY = ("torch", "transformers", "matplotlib", "optuna")


def heavy_modules_after(code: str) -> list[str]:
    """The heavy packages a fresh interpreter has imported after running ``code``."""
    check = f"{code}\nimport sys\nprint('heavy:' + ','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return [m for m in out.stdout.strip().splitlines()[-1].removeprefix("heavy:").split(",") if m]


def test_importing_the_loop_leaves_the_attention_hook_and_scipy_for_a_run():
    # the hook imports transformers' attention code (seconds); a bench or advise worker imports the loop
    # before it says which run it starts, and tests time their stops by that line. scipy (1.5 s of CPU)
    # waits for a statistic: a run that prints its results table (finetune, every bench cell) needs none
    code = (
        "import attendout.run.loop, attendout.report.results, sys\n"
        "print('hook:', 'attendout.attention.hook' in sys.modules, 'scipy:', 'scipy' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip().endswith("hook: False scipy: False"), out.stdout + out.stderr[-2000:]


def test_import_attendout_and_the_cli_help_import_no_heavy_package():
    assert heavy_modules_after("import attendout") == []
    assert heavy_modules_after("from attendout.cli import main; main(['--help'])") == []


def test_a_run_config_is_data_it_imports_no_heavy_package_and_loads_nothing():
    """Issue 58: TrainConfig is plain data: building and checking one (the method's config included) and
    writing it as a dict import no torch or transformers; loading is the run's set-up, not the config's."""
    code = (
        "from attendout.config import TrainConfig\n"
        "c = TrainConfig(task='sst2', method='scores-dropout', method_options={'p': 0.2})\n"
        "assert c.to_dict()['method_options']['p'] == 0.2"
    )
    assert heavy_modules_after(code) == []
    from attendout.config import TrainConfig

    assert not [name for name in vars(TrainConfig) if name.startswith("load")]


@pytest.mark.parametrize("command", ["methods", "tasks"])
def test_listing_methods_and_tasks_imports_no_heavy_package(command):
    # the configs are data: listing them needs no torch (benchmarks/bench_startup.py times it)
    assert heavy_modules_after(f"from attendout.cli import main; main([{command!r}])") == []


def test_every_public_name_is_still_there_after_a_lazy_import():
    code = (
        "import attendout\n"
        "assert 'apply' in dir(attendout) and callable(attendout.apply)\n"
        "from attendout import *\n"
        "missing = [n for n in attendout.__all__ if n not in globals()]\n"
        "assert not missing, missing\n"
        "from attendout.attention.controller import ROUTES\n"
        "assert 'deberta' in ROUTES  # a lazy name's first use registers DeBERTa's route\n"
    )
    out = plain.run(code)  # a process that has not imported attendout yet
    assert out.returncode == 0, out.stderr[-2000:]
    import attendout

    with pytest.raises(AttributeError, match="no attribute 'nothing_of_that_name'"):
        attendout.nothing_of_that_name  # noqa: B018


@pytest.mark.parametrize("command", ["finetune", "predict"])
def test_threads_below_one_is_a_usage_error(command, tmp_path, capsys):
    threads = torch.get_num_threads()
    argv = ["finetune", "--output-dir", str(tmp_path / "run")] if command == "finetune" else []
    argv = argv or ["predict", str(tmp_path / "run"), "--split", "dev"]
    assert main([*argv, "--threads", "0"]) == 2
    assert "--threads must be at least 1, got 0" in capsys.readouterr().err
    assert torch.get_num_threads() == threads
    with pytest.raises(SystemExit):
        main([command, "--help"])
    assert "--threads THREADS" in capsys.readouterr().out


def test_threads_sets_torch_threads_for_a_finetune(tiny_run, capsys):
    threads = torch.get_num_threads()
    try:
        argv = toy_cli_args(tiny_run, "--max-steps", "1", "--threads", "2")
        assert main(argv) == 0, capsys.readouterr().err
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)


def test_a_run_predicting_one_class_says_so_and_records_it(tiny_run, monkeypatch, caplog, capsys):
    real = train.predict_batches

    def one_class(*args, **kwargs):  # the model answers label 0 for everything
        preds, scores, loss = real(*args, **kwargs)
        return np.zeros_like(preds), scores, loss

    monkeypatch.setattr(train, "predict_batches", one_class)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)  # set-up lines are for a terminal
    config = toy_train_config(tiny_run, max_steps=1, progress=True)
    with caplog.at_level(logging.WARNING):
        results = train.finetune(config)
    out = tiny_run["tmp"] / "run"
    label = json.loads((out / "config.json").read_text())["task"]["label_names"][0]
    assert results["single_class"] == {"dev": label}
    assert json.loads((out / "results.json").read_text())["single_class"] == {"dev": label}
    warned = [r.getMessage() for r in caplog.records if "predicts one class" in r.getMessage()]
    assert warned == [
        f"the model predicts one class ({label}) for every example of dev: its scores are the majority "
        "baseline's"
    ]
    err = capsys.readouterr().err  # the set-up's lines, before the first bar (progress=True)
    for line in ("attendout: reading the data", "attendout: loading the model", "attendout: encoding"):
        assert line in err, err


def test_single_class_needs_one_label_for_every_example():
    assert single_class("dev", [1, 1, 1], ("neg", "pos"), warn=False) == {"dev": "pos"}
    assert single_class("dev", np.array([0, 0]), None, warn=False) == {"dev": "0"}
    assert single_class("dev", [0, 1, 1], ("neg", "pos"), warn=False) == {}
    assert single_class("dev", [1], ("neg", "pos"), warn=False) == {}  # one example says nothing


def test_a_run_without_progress_or_a_terminal_prints_no_setup_lines(tiny_run, monkeypatch, capsys):
    train.finetune(toy_train_config(tiny_run, max_steps=1, progress=True))  # stderr is no terminal here
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    train.finetune(toy_train_config(tiny_run, max_steps=1, overwrite=True))  # progress=False
    assert "attendout: loading the model" not in capsys.readouterr().err


@pytest.mark.parametrize("method", ["scheduled", "addrop", "drophead"])
def test_help_shows_each_default_once_and_readable_metavars(method, capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--method", method, "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert not re.search(r"\(default:[^()]*\)\s*\(default:", text), text
    assert not re.search(r"default[^()]*\)\s*\(default:", text), text
    assert "METHOD__" not in text
    assert "--layers LAYERS" in text


def test_a_csv_cell_longer_than_pythons_default_field_limit_is_read(tmp_path):
    """Long documents are a feature: a 300,000-character cell reads from CSV as it does from JSONL, and the
    process-wide csv limit is left as it was."""
    import csv

    from attendout.tasks.readers import read_file

    text = "word " * 60_000
    path = tmp_path / "long.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["text", "label"])
        writer.writerow([text, "1"])
        writer.writerow(["short", "0"])
    before = csv.field_size_limit()
    raw = read_file(path, text_columns=["text"], label_column="label")
    assert len(raw.texts[0][0]) == len(text) and raw.labels == ["1", "0"]
    assert csv.field_size_limit() == before


def test_a_finetune_makes_the_methods_config_once_and_applies_that_one(tiny_run, monkeypatch, capsys):
    """From ``--p`` to the mask the method's config is made once (the CLI settles it for the task) and the
    loop applies that object; before, the CLI, the run's config and the loop each made their own."""
    import attendout.methods
    from attendout.methods import ScoresDropoutConfig, base

    made, applied = [], []
    real_init, real_prepare = ScoresDropoutConfig.__post_init__, base.prepare

    def counted(self):
        made.append(self)
        real_init(self)

    def seen(model, config, **kwargs):
        applied.append(config)
        return real_prepare(model, config, **kwargs)

    monkeypatch.setattr(ScoresDropoutConfig, "__post_init__", counted)
    monkeypatch.setattr(attendout.methods, "prepare", seen)
    argv = toy_cli_args(tiny_run, "--max-steps", "1", "--method", "scores-dropout", "--p", "0.3")
    assert main(argv) == 0, capsys.readouterr().err
    assert len(made) == 1 and applied == made and applied[0] is made[0]
    assert made[0].p == 0.3
    record = json.loads((tiny_run["tmp"] / "run" / "config.json").read_text())
    assert record["config"]["method_options"] == {"name": "scores-dropout", "p": 0.3, "layers": None}


def test_a_method_config_made_by_the_caller_must_be_the_one_the_run_config_names():
    from attendout.config import TrainConfig
    from attendout.methods import DropHeadConfig, ScoresDropoutConfig

    made = ScoresDropoutConfig(p=0.3)
    config = TrainConfig(method="scores-dropout", method_options={"p": 0.3}, method_made=made)
    assert config.method_config() is made
    with pytest.raises(ValueError, match="not the config of method 'scores-dropout'.*differs in p"):
        TrainConfig(method="scores-dropout", method_options={"p": 0.1}, method_made=made)
    with pytest.raises(ValueError, match="not the config of method 'drophead'"):
        TrainConfig(method="drophead", method_options={}, method_made=made)
    assert TrainConfig(method="drophead").method_config() == DropHeadConfig()
