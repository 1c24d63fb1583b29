"""Several processes (torchrun, gloo on CPU, 2 processes): the same updates, one run directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from attendout.run.loop import TrainingLoop
from conftest import no_dropout, save_tiny_model_dir, toy_cli_args, toy_train_config

# Two torchrun launches of 2 fresh processes each: a step of its own in CI (marker `processes`).
pytestmark = pytest.mark.processes

WORKER = Path(__file__).with_name("distributed_worker.py")
ATTENDOUT = Path(sys.executable).with_name("attendout")


def torchrun(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(WORKER.parent), *sys.path]),
    }
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The tiny model (no dropout) and toy data; two processes ran `none` (through the CLI) and the others."""
    tmp = tmp_path_factory.mktemp("ddp")
    from conftest import write_sentiment_csv

    run = {
        "model": save_tiny_model_dir(tmp / "model", "bert", **no_dropout("bert")),
        "train": write_sentiment_csv(tmp / "train.csv", 96, seed=0),
        "dev": write_sentiment_csv(tmp / "dev.csv", 24, seed=1),
        "tmp": tmp,
    }
    cli = toy_cli_args(run, "--max-steps", "4", "--warmup-ratio", "0", output_dir=tmp / "none-2")
    cli_run = torchrun(str(ATTENDOUT), *cli)
    jobs = {
        "attendout": {"method": "attendout", "method_options": {"dropout_steps": 2, "eval_samples": 8}},
        "addrop": {"method": "addrop", "method_options": {"cross_tuning": "off", "layers": "all"}},
        "layerdrop": {"method": "layerdrop", "method_options": {"p": 0.5}},
        "dropout": {"method": "scores-dropout", "checkpoint_steps": 2},
        "dropout-resumed": {"method": "scores-dropout", "checkpoint_steps": 2},
    }
    spec = {
        "dump": str(tmp),
        "jobs": [
            {
                "name": name,
                "config": asdict(toy_train_config(run, max_steps=6, output_dir=str(tmp / name), **options)),
                **({"interrupt_at": 3} if name.endswith("resumed") else {}),
            }
            for name, options in jobs.items()
        ],
    }
    torchrun(str(WORKER), json.dumps(spec))
    return {**run, "cli": cli_run}


def test_two_processes_make_the_updates_of_one_with_the_whole_batch(runs):
    """Per-process batch 8 on 2 processes = batch 16 on one, same data order: the same weights up to
    rounding (two means averaged instead of one mean over 16 rows): measured 3.7e-9 at most, where
    training moved the weights by up to 1.3e-4 (a wrongly weighted or unsynchronised update moves them
    by that order)."""
    from transformers import AutoModelForSequenceClassification

    one = TrainingLoop(
        toy_train_config(runs, max_steps=4, warmup_ratio=0.0, output_dir=str(runs["tmp"] / "none-1"))
    )
    start = {k: v.clone() for k, v in one.model.state_dict().items()}
    one.fit()
    two = AutoModelForSequenceClassification.from_pretrained(runs["tmp"] / "none-2" / "model")
    moved = max((one.model.state_dict()[k] - v).abs().max().item() for k, v in start.items())
    assert moved > 1e-5
    for key, value in one.model.state_dict().items():
        torch.testing.assert_close(two.state_dict()[key], value, rtol=0, atol=1e-6, msg=key)
    results = json.loads((runs["tmp"] / "none-2" / "results.json").read_text())
    assert results["eval"]["dev"] == pytest.approx(
        json.loads((runs["tmp"] / "none-1" / "results.json").read_text())["eval"]["dev"], abs=1e-6
    )


def test_the_run_directory_is_written_once(runs):
    out = runs["tmp"] / "none-2"
    lines = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in lines if "loss" in r]
    assert steps == sorted(set(steps)) and len(steps) == 1  # log_steps 10 > 4 steps: the last step only
    assert json.loads((out / "config.json").read_text())["processes"] == 2
    assert runs["cli"].stdout.count("| validation (model selection)") == 1  # the table printed once


def test_attendout_keeps_one_generator_on_every_process(runs):
    ranks = [torch.load(runs["tmp"] / f"attendout-rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert ranks[0]["games"] == ranks[1]["games"] == 3
    initial = torch.load(runs["tmp"] / "attendout-rank0.pt", weights_only=True)["generator"]
    for key, value in ranks[0]["generator"].items():
        assert torch.equal(value, ranks[1]["generator"][key]), key
    for key, value in ranks[0]["model"].items():
        assert torch.equal(value, ranks[1]["model"][key]), key
    assert initial.keys() == ranks[0]["generator"].keys()


@pytest.mark.parametrize("name", ["addrop", "layerdrop"])
def test_methods_complete_under_ddp_with_identical_weights_on_every_process(runs, name):
    ranks = [torch.load(runs["tmp"] / f"{name}-rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert ranks[0]["processes"] == 2
    for key, value in ranks[0]["model"].items():
        assert torch.equal(value, ranks[1]["model"][key]), key
    assert (runs["tmp"] / name / "results.json").is_file()


def test_a_resumed_run_on_two_processes_reaches_the_uninterrupted_weights(runs):
    """Stopped at step 3 of 6 (checkpoint at step 2), resumed with --resume on both processes."""
    whole = torch.load(runs["tmp"] / "dropout-rank0.pt", weights_only=True)["model"]
    for rank in (0, 1):
        resumed = torch.load(runs["tmp"] / f"dropout-resumed-rank{rank}.pt", weights_only=True)["model"]
        for key, value in whole.items():
            torch.testing.assert_close(resumed[key], value, rtol=0, atol=0, msg=key)  # the same operations
    results = json.loads((runs["tmp"] / "dropout-resumed" / "results.json").read_text())
    assert results["resumed"]["step"] == 2
