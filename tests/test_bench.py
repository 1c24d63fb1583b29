"""attendout bench: experiment files, the dry run, invalid cells, claims, SIGKILL recovery, shards."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import re
import runpy
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attendout.bench import Budget, ExperimentError, ResultsStore, load_experiment
from attendout.bench.store import default_results_root
from attendout.cli import main
from attendout.core.lock import process_start_time

REPO = Path(__file__).resolve().parents[1]
METHODS = """
[[methods]]
name = "none"

[[methods]]
name = "scores-dropout"
options = { p = 0.2 }
"""


def write_experiment(
    tiny_run, *, methods: str = METHODS, seeds=(1, 2), max_steps: int = 8, extra: str = ""
) -> Path:
    """A tiny grid on the toy CSVs of conftest (1 model x 1 task x methods x seeds)."""
    path = tiny_run["tmp"] / "tiny.toml"
    path.write_text(
        f"""
[experiment]
name = "tiny"
seeds = {list(seeds)}
data_seed = 0

[training]
max_steps = {max_steps}
batch_size = 16
max_length = 16
eval_steps = 4
log_steps = 1
{extra}

[[models]]
id = "tiny-bert"
name = "{tiny_run["model"]}"

[[tasks]]
id = "toy"
name = "file"
train_file = "{tiny_run["train"]}"
eval_files = {{ dev = "{tiny_run["dev"]}" }}
text_columns = ["text"]
label_column = "label"
{methods}
"""
    )
    return path


def _bench_child(argv: list[str], log: str) -> None:
    """Body of a forked job: its output goes to ``log``; it exits with bench's return code."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = sys.stdout
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    code = 1
    try:
        code = main(["bench", *argv, "--threads", "1"])
    finally:
        sys.stdout.flush()
        os._exit(code)


def bench_process(experiment: Path, root: Path, *extra: str, log: Path) -> multiprocessing.Process:
    """``attendout bench`` in a child process of its own (forked: it need not import torch again)."""
    job = multiprocessing.get_context("fork").Process(
        target=_bench_child, args=([str(experiment), "--results", str(root), *extra], str(log))
    )
    job.start()
    return job


def finished_cells(root: Path) -> list[str]:
    """The cells with results, MODEL/TASK/METHOD/seed-N. The hidden folders (``.work``, where running cells
    replace their checkpoints) are not walked: a folder that vanishes mid-walk would fail the glob."""
    models = [m for m in root.iterdir() if m.is_dir() and not m.name.startswith(".")] if root.is_dir() else []
    return sorted(str(p.parent.relative_to(root)) for m in models for p in m.glob("*/*/seed-*/results.json"))


def events(root: Path, kind: str) -> list[dict]:
    lines = (root / ".bench" / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e["event"] == kind]


def assert_complete_cell(folder: Path, steps: int) -> None:
    """One whole run: every file, and a log with each step exactly once (no remains of a killed attempt)."""
    for name in ("cell.json", "config.json", "log.jsonl", "results.json", "predictions/dev.jsonl.gz"):
        assert (folder / name).is_file(), f"{folder} has no {name}"
    assert not (folder / "model").exists()  # no weights unless --save-model
    records = [json.loads(line) for line in (folder / "log.jsonl").read_text().splitlines()]
    logged = [r["step"] for r in records]
    train_steps = [r["step"] for r in records if "loss" in r]  # one line per training step (log_steps 1)
    assert train_steps == list(range(1, steps + 1)), logged


# --------------------------------------------------------------------------------------------------
# Experiment files


def test_experiment_file_errors_name_the_file_key_and_value(tiny_run):
    cases = {
        "epoch = 2": ("epoch = 2", "did you mean 'epochs'"),
        'epochs = "two"': ("epochs = 'two'", "must be a number"),
        "seed = 3": ("seed = 3", "set by the grid"),
    }
    for extra, expected in cases.items():
        path = write_experiment(tiny_run, extra=extra)
        with pytest.raises(ExperimentError) as error:
            load_experiment(path)
        message = str(error.value)
        assert str(path) in message and all(e in message for e in expected), message
    path = write_experiment(tiny_run, methods=METHODS + '[[methods]]\nname = "none"\nlearning_rate = 1e-3\n')
    with pytest.raises(ExperimentError, match="learning_rate = 0.001.*methods take options only"):
        load_experiment(path)
    path = write_experiment(tiny_run, methods=METHODS + '[[methods]]\nname = "none"\n')
    with pytest.raises(ExperimentError, match=r"\[\[methods\]\] #3 id = 'none'.*repeats"):
        load_experiment(path)


def test_grid_order_keys_and_budget_overrides(tiny_run):
    experiment = load_experiment(write_experiment(tiny_run, seeds=(1, 2, 3)))
    cells = experiment.cells(Budget(max_train_samples=50, epochs=1))
    assert [c.key for c in cells[:3]] == [
        "tiny-bert/toy/none/seed-1",
        "tiny-bert/toy/scores-dropout/seed-1",
        "tiny-bert/toy/none/seed-2",
    ]  # seed-major: an interrupted grid has whole seeds
    config = cells[0].config
    assert config.max_train_samples == 50 and config.epochs == 1.0 and config.save_model is False
    assert config.data_seed == 0 and {c.config.seed for c in cells} == {1, 2, 3}
    assert Budget(max_train_samples=50, epochs=1).suffix() == "-train50-ep1"
    # the fingerprint ignores where the data is, but not what the run does
    same = experiment.cells(Budget(max_train_samples=50, epochs=1), data_dir="/elsewhere")[0]
    other = experiment.cells(Budget(max_train_samples=60, epochs=1))[0]
    assert same.fingerprint == cells[0].fingerprint != other.fingerprint
    # nor how a machine fits the batch into memory: a finished cell stays done with micro-batches
    micro = experiment.cells(Budget(max_train_samples=50, epochs=1), micro_batch_size=4)[0]
    assert micro.config.micro_batch_size == 4 and micro.fingerprint == cells[0].fingerprint


#: What the fingerprints of the published cells (results/) were computed from. Adding a TrainConfig
#: field changes every fingerprint, and every finished cell turns stale, unless the field goes into
#: attendout.config.NEUTRAL_OPTIONS (not part of the recipe) or FINGERPRINT_NEUTRAL (with its old
#: behaviour).
FINGERPRINTED = {
    "batch_size", "data_seed", "epochs", "eval_files", "eval_steps", "hub", "label_column", "learning_rate",
    "log_steps", "max_eval_samples", "max_grad_norm", "max_length", "max_steps", "max_train_samples", "method",
    "method_options", "model", "precision", "seed", "task", "text_columns", "train_file", "validation_split",
    "warmup_ratio", "weight_decay",
}  # fmt: skip


def test_every_training_option_is_fingerprinted_excluded_or_neutral(tiny_run, monkeypatch):
    from attendout.bench import spec
    from attendout.config import TrainConfig

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    new = fields - spec.FINGERPRINT_EXCLUDE - set(spec.FINGERPRINT_NEUTRAL) - FINGERPRINTED
    assert not new, (
        f"new TrainConfig fields {sorted(new)}: add them to NEUTRAL_OPTIONS or FINGERPRINT_NEUTRAL"
    )
    # An option at its neutral value leaves the fingerprint as it was before the option existed.
    cell = load_experiment(write_experiment(tiny_run)).cells()[0]
    before = cell.fingerprint
    monkeypatch.setattr(spec, "FINGERPRINT_NEUTRAL", {"max_grad_norm": 1.0})
    assert spec.config_fingerprint(cell.config) != before  # max_grad_norm 1.0 is now left out
    monkeypatch.setattr(spec, "FINGERPRINT_NEUTRAL", {"max_grad_norm": 1.0, "hub": False})
    trimmed = {k: v for k, v in cell.config.to_dict().items() if k not in spec.FINGERPRINT_EXCLUDE}
    trimmed.pop("max_grad_norm"), trimmed.pop("hub")
    expected = hashlib.sha256(json.dumps(trimmed, sort_keys=True, default=str).encode()).hexdigest()[:16]
    assert spec.config_fingerprint(cell.config) == expected
    changed = dataclasses.replace(cell.config, max_grad_norm=0.5)
    assert spec.config_fingerprint(changed) != expected  # away from the neutral value it counts again


# --------------------------------------------------------------------------------------------------
# Dry run and invalid cells


def test_dry_run_lists_every_cell_and_flags_a_bad_option_or_an_unknown_name(tiny_run, capsys):
    methods = (
        METHODS
        + '[[methods]]\nid = "bad"\nname = "scores-dropout"\noptions = { q = 0.1 }\n'
        + '[[methods]]\nname = "scores-dropuot"\n'
    )
    path = write_experiment(tiny_run, methods=methods)
    root = tiny_run["tmp"] / "results"
    assert main(["bench", str(path), "--results", str(root), "--dry-run"]) == 2
    out = capsys.readouterr()
    lines = [line for line in out.out.splitlines() if "tiny-bert/toy/" in line]
    assert len(lines) == 8  # 4 methods x 2 seeds, none dropped
    bad = [line for line in lines if "/bad/" in line]
    assert all("INVALID" in line and "'q'" in line for line in bad) and len(bad) == 2
    typo = [line for line in lines if "/scores-dropuot/" in line]
    assert len(typo) == 2 and all("INVALID" in line for line in typo)
    assert all(
        "unknown method 'scores-dropuot' (did you mean 'scores-dropout'?); methods: " in x for x in typo
    )
    assert sum("todo" in line for line in lines) == 4
    assert "train 86, validation 10, dev 24" in out.out  # the data was loaded and measured
    assert "invalid cell" in out.err
    assert not root.exists()  # a dry run writes nothing
    # A run refuses to start while a cell is invalid.
    assert main(["bench", str(path), "--results", str(root)]) == 2


def test_a_dry_run_refuses_an_unknown_task_as_a_real_run_would(tiny_run, capsys):
    path = write_experiment(tiny_run)
    path.write_text(path.read_text().replace('name = "file"', 'name = "colaa"'))
    assert main(["bench", str(path), "--results", str(tiny_run["tmp"] / "results"), "--dry-run"]) == 2
    lines = [line for line in capsys.readouterr().out.splitlines() if "tiny-bert/toy/" in line]
    assert lines and all(
        "INVALID" in line and "unknown task 'colaa'; known tasks: " in line for line in lines
    )


def test_selection_runs_only_the_chosen_cells_and_names_unknown_ids(tiny_run, one_thread, capsys):
    path = write_experiment(tiny_run, seeds=(1, 2), max_steps=2)
    root = tiny_run["tmp"] / "results"
    assert main(["bench", str(path), "--results", str(root), "--methods", "none,attendout"]) == 2
    assert "unknown attendout; the methods of tiny are none, scores-dropout" in capsys.readouterr().err
    assert main(["bench", str(path), "--results", str(root), "--seeds", "7"]) == 2
    assert "--seeds '7': unknown 7" in capsys.readouterr().err
    assert not root.exists()
    assert (
        main(["bench", str(path), "--results", str(root), "--methods", "scores-dropout", "--seeds", "2"]) == 0
    )
    assert finished_cells(root) == ["tiny-bert/toy/scores-dropout/seed-2"]
    out = capsys.readouterr().out
    assert re.search(
        r"scores-dropout/seed-2: step 2/2: validation accuracy [\d.]+, f1 [\d.]+ \([\d.]+ min\)\n", out
    ), out
    assert main(["bench", str(path), "--results", str(root), "--dry-run", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert "summary (only seeds 1): 2 cells: 2 todo" in out  # the finished seed-2 cell is not this job's


def test_filters_apply_before_cells_are_checked_and_shards_split_the_selection(tiny_run, capsys):
    # a second task whose data is not on this machine: the grid is invalid only for a job that runs it
    gone = tiny_run["tmp"] / "gone.csv"
    tasks = (
        f'[[tasks]]\nid = "gone"\nname = "file"\ntrain_file = "{gone}"\n'
        'text_columns = ["text"]\nlabel_column = "label"\n'
    )
    path = write_experiment(tiny_run, methods=tasks + METHODS, seeds=(1, 2, 3))
    root = tiny_run["tmp"] / "results"
    assert main(["bench", str(path), "--results", str(root), "--dry-run"]) == 2
    assert "6 invalid cell(s)" in capsys.readouterr().err  # the gone task's 2 methods x 3 seeds
    assert main(["bench", str(path), "--results", str(root), "--dry-run", "--tasks", "toy"]) == 0
    out = capsys.readouterr().out
    assert "task gone" not in out  # its data was never read
    toy = [line.split() for line in out.splitlines() if "tiny-bert/toy/" in line]
    left_out = [line.split() for line in out.splitlines() if "tiny-bert/gone/" in line]
    assert len(toy) == 6 and len(left_out) == 6 and {row[1] for row in left_out} == {"-"}
    # grid order alternates toy and gone cells per seed; the 6 toy cells split 3 and 3, not by grid index
    for k in (1, 2):
        argv = [
            "bench",
            str(path),
            "--results",
            str(root),
            "--dry-run",
            "--tasks",
            "toy",
            "--shard",
            f"{k}/2",
        ]
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert f"summary (shard {k}/2) (only tasks toy): 3 cells: 3 todo" in out, out
    shards = [line.split()[1] for line in out.splitlines() if "tiny-bert/toy/" in line]
    assert shards == ["1/2", "2/2"] * 3


def test_published_cells_keep_compact_predictions_that_the_table_reads(tmp_path):
    from attendout.bench.store import compact_predictions, read_predictions

    folder = tmp_path / "cell"
    (folder / "predictions").mkdir(parents=True)
    rows = [
        {"index": i, "prediction": i % 3, "label": (i * 7) % 3, "score": [0.2, 0.3, 0.5]} for i in range(400)
    ]
    text = "".join(json.dumps(r) + "\n" for r in rows)
    (folder / "predictions" / "dev.jsonl").write_text(text)
    assert read_predictions(folder, "dev") == rows  # a finetune run directory: the plain file
    size = compact_predictions(folder)
    assert not (folder / "predictions" / "dev.jsonl").exists()
    gz = folder / "predictions" / "dev.jsonl.gz"
    assert size == gz.stat().st_size < len(text) / 10
    assert read_predictions(folder, "dev") == [
        {k: r[k] for k in ("index", "prediction", "label")} for r in rows
    ]
    first = gz.read_bytes()
    (folder / "predictions" / "dev.jsonl").write_text(text)
    compact_predictions(folder)
    assert gz.read_bytes() == first  # no time stamp: the same predictions give the same bytes in git
    assert read_predictions(folder, "test") is None


def _finished_at(root: Path, walls: dict[str, float]) -> None:
    """Give the finished seed-1 cells these wall times (method -> s), as a slower machine would have taken."""
    for method, wall in walls.items():
        record = root / "tiny-bert" / "toy" / method / "seed-1" / "cell.json"
        record.write_text(json.dumps({**json.loads(record.read_text()), "wall_time_s": wall}))


def test_the_time_left_is_each_methods_own_and_a_checkpoint_leaves_only_its_steps(
    tiny_run, one_thread, capsys, monkeypatch
):
    """Methods differ in cost (AttendOut about twice plain fine-tuning), and a resumed cell has only its
    remaining steps to run: the dry run's estimate and --jobs' progress line say so, where a mean over
    every finished cell and whole cells would not."""
    from attendout.bench.jobs import LocalJobs, Worker
    from attendout.bench.plan import prepare_cells
    from attendout.bench.runner import BenchJob

    path = write_experiment(tiny_run, seeds=(1, 2), max_steps=8)
    root = tiny_run["tmp"] / "results"
    assert main(["bench", str(path), "--results", str(root), "--seeds", "1"]) == 0
    _finished_at(root, {"none": 100.0, "scores-dropout": 300.0})
    stopped = "tiny-bert/toy/scores-dropout/seed-2"  # a checkpoint at step 4 of 8
    monkeypatch.setattr(
        ResultsStore, "resumable", lambda self, cell: (True, 4) if cell.key == stopped else (False, None)
    )
    capsys.readouterr()
    assert main(["bench", str(path), "--results", str(root), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "resumes at step 4; " in out
    # none seed 2 whole (100 s) and scores-dropout seed 2 from step 4 of 8 (300 s / 2): 250 s
    assert "estimated time left for this shard: 4.2 min of one job" in out, out

    store = ResultsStore(root)
    job = BenchJob(prepare_cells(load_experiment(path), Budget()), store)
    cells = job.plan.cells
    none_2, scores_2 = (
        next(c for c in cells if c.key == f"tiny-bert/toy/{m}/seed-2") for m in ("none", "scores-dropout")
    )
    jobs = LocalJobs(jobs=2)
    # scores-dropout seed 2 resumed from step 4 and has run 60 s of its 150; none seed 2 waits
    worker = Worker(scores_2, "", None, time.time() - 60, None)  # type: ignore[arg-type]
    line = jobs._progress(job, cells, [worker], [none_2], {stopped: 4})
    assert line.startswith("grid: 2 done, 1 running, 1 left; the last ends in about 1.7 min (2 at once)"), (
        line
    )
    # one run at a time: none seed 2 starts when scores-dropout ends (90 s + 100 s)
    line = LocalJobs(jobs=1)._progress(job, cells, [worker], [none_2], {stopped: 4})
    assert "the last ends in about 3.2 min (1 at once)" in line, line
    # a method with no finished cell takes its task's mean: scores-dropout then 200 s, 100 s from its
    # checkpoint, and none 200 s; with nothing of the task finished, the line gives no time
    _finished_at(root, {"none": 200.0})
    (root / "tiny-bert" / "toy" / "scores-dropout" / "seed-1" / "results.json").unlink()
    line = LocalJobs(jobs=1)._progress(job, cells, [], [scores_2, none_2], {})
    assert line == "grid: 1 done, 0 running, 2 left; the last ends in about 5.0 min (1 at once)", line
    (root / "tiny-bert" / "toy" / "none" / "seed-1" / "results.json").unlink()
    assert jobs._progress(job, cells, [], [scores_2, none_2], {}) == "grid: 0 done, 0 running, 2 left"


def test_experiments_sharing_a_results_folder_run_a_common_cell_once(tiny_run, one_thread, capsys):
    first = write_experiment(tiny_run, seeds=(1,), max_steps=2)
    text = first.read_text()
    second = first.with_name("other.toml")  # name "other", results "tiny": none is the same cell
    second.write_text(
        text.replace('name = "tiny"', 'name = "other"\nresults = "tiny"').replace(
            'name = "scores-dropout"\noptions = { p = 0.2 }', 'name = "drophead"'
        )
    )
    assert default_results_root(load_experiment(second)) == Path("results") / "tiny"
    root = tiny_run["tmp"] / "results"
    assert main(["bench", str(first), "--results", str(root)]) == 0
    assert main(["bench", str(second), "--results", str(root)]) == 0
    out = capsys.readouterr().out
    assert "bench other shard 1/1: 1 trained, 1 already done" in out
    assert finished_cells(root) == [
        "tiny-bert/toy/drophead/seed-1",
        "tiny-bert/toy/none/seed-1",
        "tiny-bert/toy/scores-dropout/seed-1",
    ]
    assert len(events(root, "done")) == 3  # none trained once, by the first experiment
    # an experiment that does not declare the folder is still refused, and told how to share it
    third = first.with_name("third.toml")
    third.write_text(text.replace('name = "tiny"', 'name = "third"'))
    assert main(["bench", str(third), "--results", str(root)]) == 2
    assert "results = 'tiny'" in capsys.readouterr().err
    bad = first.with_name("bad.toml")
    bad.write_text(text.replace('name = "tiny"', 'name = "bad"\nresults = "../elsewhere"'))
    with pytest.raises(ExperimentError, match="a folder name under results/"):
        load_experiment(bad)


def test_reuse_runs_copies_only_finished_runs_of_the_very_same_configuration(tiny_run, one_thread, capsys):
    first = write_experiment(tiny_run, seeds=(1,), max_steps=2)
    source = tiny_run["tmp"] / "earlier"
    assert main(["bench", str(first), "--results", str(source)]) == 0
    # another grid: its own ids, the same none and scores-dropout p 0.2, and a p 0.3 nobody has run
    other = first.with_name("other.toml")
    other.write_text(
        first.read_text()
        .replace('name = "tiny"', 'name = "other"')
        .replace('id = "toy"', 'id = "toy-again"')
        .replace(
            METHODS, METHODS + '\n[[methods]]\nid = "p3"\nname = "scores-dropout"\noptions = { p = 0.3 }\n'
        )
    )
    root = tiny_run["tmp"] / "results"
    capsys.readouterr()
    assert main(["bench", str(other), "--results", str(root), "--reuse-runs", str(source)]) == 0
    out = capsys.readouterr().out
    assert out.count("reused the finished run") == 2
    assert "1 trained, 2 already done" in out
    assert [e["cell"] for e in events(root, "done")] == ["tiny-bert/toy-again/p3/seed-1"]
    for method in ("none", "scores-dropout"):
        copied = root / "tiny-bert" / "toy-again" / method / "seed-1"
        record = json.loads((copied / "cell.json").read_text())
        assert record["cell"] == f"tiny-bert/toy-again/{method}/seed-1"
        assert record["reused_from"].endswith(f"toy/{method}/seed-1")
        original = source / "tiny-bert" / "toy" / method / "seed-1" / "results.json"
        assert (copied / "results.json").read_text() == original.read_text()
    assert main(["table", str(other), "--results", str(root)]) == 0
    assert (
        main(["bench", str(other), "--results", str(root), "--reuse-runs", str(tmp := source / "nope")]) == 2
    )
    assert f"--reuse-runs {tmp}: no such folder" in capsys.readouterr().err


def test_presets_pass_the_dry_run_offline(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    # a machine that never ran `make models`: its presets are listed all the same (issue 67)
    monkeypatch.setenv("ATTENDOUT_MODELS", str(tmp_path / "no-models"))
    monkeypatch.chdir(REPO)
    presets = sorted((REPO / "experiments").glob("*.toml"))
    assert {p.stem for p in presets} >= {"paper-table1", "paper-table3", "paper-table4", "cpu-small"}
    outs = {}
    for preset in presets:
        # paper-table2's PTB is NLTK's local sample: its data is checked where ATTENDOUT_DATA is set
        local = not preset.stem.startswith("paper-") or (
            preset.stem == "paper-table2" and not os.environ.get("ATTENDOUT_DATA")
        )
        extra = ["--no-data-check"] if local else []
        code = main(["bench", preset.stem, "--dry-run", "--results", str(tmp_path / preset.stem), *extra])
        out = outs[preset.stem] = capsys.readouterr().out
        assert code == 0, out
        assert "INVALID" not in out
        listed = set(re.findall(r"^\s+\d+\s+\S+\s+todo\s+([^/\s]+)/", out, re.M))
        offline = listed & {"mpnet-base", "opus-mt-en-fr", "smollm2-135m"}
        advice = [line for line in out.splitlines() if "make models" in line]
        if offline:  # every cell listed as to do, and one line that says what to set up
            assert len(advice) == 1 and advice[0].startswith("before training: "), out
            assert set(advice[0].split("attendout models setup ")[1].rstrip(")").split()) == offline
        else:
            assert not advice, out
    # a task's own learning rate reaches its cells, and only its cells
    cells = [line for line in outs["cpu-small"].splitlines() if "minilm/" in line]
    assert all(("lr 0.0001" in line) == ("/mrpc/" in line) for line in cells), cells
    assert all("lr 5e-05" in line for line in cells if "/cola/" in line)
    assert main(["bench", "paper-table1", "--dry-run", "--results", str(tmp_path / "t1")]) == 0
    out = capsys.readouterr().out
    assert "2 models x 5 tasks x 2 methods x 5 seeds = 100 cells" in out
    assert "dev_mismatched" not in out or "mnli" in out
    assert main(["bench", "paper-table4", "--dry-run", "--results", str(tmp_path / "t4")]) == 0
    out = capsys.readouterr().out
    swag = [line for line in out.splitlines() if "/swag/" in line]
    assert len(swag) == 15 and all(" todo " in line for line in swag)  # multiple choice is built
    assert (
        main(["bench", "cpu-table2", "--dry-run", "--no-data-check", "--results", str(tmp_path / "t2")]) == 0
    )
    cells = [line for line in capsys.readouterr().out.splitlines() if "minilm/" in line]
    assert len(cells) == 48 and all("lr 0.0001" in line for line in cells)
    assert all("1000 train examples" in line for line in cells if "/conll2003/" in line)


def test_a_grid_whose_model_is_not_set_up_is_one_line_naming_the_set_up_and_writes_nothing(
    tmp_path, monkeypatch, capsys
):
    """Issue 67/69: a machine that never ran `make models`. The grid is not at fault: the line says what
    to set up, not "fix the experiment file", and nothing is written before it."""
    monkeypatch.setenv("ATTENDOUT_MODELS", str(tmp_path / "no-models"))
    monkeypatch.chdir(REPO)
    results = tmp_path / "grid"
    code = main(["bench", "smollm2-movie-reviews", "--no-data-check", "--results", str(results)])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err == (
        "attendout: error: model smollm2-135m not set up on this machine; set it up with: make models "
        "(or: attendout models setup smollm2-135m)"
    )
    assert not results.exists()


def test_a_grid_whose_set_up_model_was_tampered_with_is_one_line_before_any_worker_starts(
    tmp_path, monkeypatch, capsys
):
    """Issue 69, class 6: a set-up model whose file changed since (a byte, the size kept) is found once by
    the pre-flight check, with the command that repairs it, not by every cell's load under --jobs."""
    from attendout.core.folder import write_manifest

    folder = tmp_path / "models" / "smollm2-135m"
    folder.mkdir(parents=True)
    (folder / "offline-model.json").write_text(json.dumps({"name": "smollm2-135m"}))
    (folder / "model.safetensors").write_bytes(b"weights")
    write_manifest(folder)
    (folder / "model.safetensors").write_bytes(b"Weights")
    monkeypatch.setenv("ATTENDOUT_MODELS", str(tmp_path / "models"))
    monkeypatch.chdir(REPO)
    results = tmp_path / "grid"
    code = main(
        ["bench", "smollm2-movie-reviews", "--no-data-check", "--jobs", "2", "--results", str(results)]
    )
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        "attendout: error: model smollm2-135m not set up on this machine (smollm2-135m is damaged: "
        "model.safetensors has other bytes than when it was written (its sha256 differs from manifest.json)); "
        "set it up with: make models (or: attendout models setup smollm2-135m)"
    )
    assert not results.exists()


# --------------------------------------------------------------------------------------------------
# Claims and publication (in-process, no training)


def test_claims_are_exclusive_and_stale_ones_are_taken_over(tiny_run):
    experiment = load_experiment(write_experiment(tiny_run))
    cell = experiment.cells()[0]
    store = ResultsStore(tiny_run["tmp"] / "results", stale_after=60)
    store.prepare(experiment, Budget())
    claim = store.try_claim(cell)
    assert claim is not None and store.status(cell)[0] == "running"
    assert store.try_claim(cell) is None  # a live owner keeps it
    claim.release()
    assert not store.claim_path(cell).exists()

    def plant(**fields) -> None:
        info = {"cell": cell.key, "token": "old", "started": 0.0, "work_dir": "leftover", **fields}
        store.claim_path(cell).write_text(json.dumps(info))
        (store.work_root / "leftover").mkdir(exist_ok=True)

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    plant(host=socket.gethostname(), pid=dead.pid, pid_start=None)
    taken = store.try_claim(cell)  # dead process on this host: stale
    assert taken is not None and not (store.work_root / "leftover").exists()
    taken.release()
    plant(host=socket.gethostname(), pid=os.getpid(), pid_start="1")  # our pid, another start: reused pid
    if process_start_time(os.getpid()) is not None:
        taken = store.try_claim(cell)
        assert taken is not None
        taken.release()
    plant(host="elsewhere", pid=1, pid_start=None)
    assert store.try_claim(cell) is None  # another host with a fresh heartbeat
    old = time.time() - 120
    os.utime(store.claim_path(cell), (old, old))
    taken = store.try_claim(cell)  # another host, silent for longer than stale_after
    assert taken is not None
    taken.release()


def test_only_the_first_publication_of_a_cell_counts(tiny_run):
    experiment = load_experiment(write_experiment(tiny_run))
    cell = experiment.cells()[0]
    store = ResultsStore(tiny_run["tmp"] / "results")
    store.prepare(experiment, Budget())
    for name in ("a", "b"):
        work = store.work_root / name
        work.mkdir()
        (work / "results.json").write_text(json.dumps({"who": name}))
        (work / "cell.json").write_text(json.dumps({"fingerprint": cell.fingerprint}))
    assert store.publish(cell, store.work_root / "a") is True
    assert store.publish(cell, store.work_root / "b") is False
    assert json.loads((store.cell_dir(cell) / "results.json").read_text()) == {"who": "a"}
    assert store.status(cell)[0] == "done"


def test_changed_configuration_makes_finished_cells_stale(tiny_run, capsys):
    path = write_experiment(tiny_run)
    experiment = load_experiment(path)
    root = tiny_run["tmp"] / "results"
    store = ResultsStore(root)
    store.prepare(experiment, Budget())
    cell = experiment.cells()[0]
    folder = store.cell_dir(cell)
    folder.mkdir(parents=True)
    (folder / "results.json").write_text("{}")
    (folder / "cell.json").write_text(json.dumps({"fingerprint": "from-an-older-file"}))
    assert main(["bench", str(path), "--results", str(root), "--dry-run", "--no-data-check"]) == 0
    assert "stale" in [line for line in capsys.readouterr().out.splitlines() if cell.key in line][0]
    assert main(["bench", str(path), "--results", str(root)]) == 2
    assert "--rerun-stale" in capsys.readouterr().err
    # a job with another budget may not write into this root
    with pytest.raises(ExperimentError, match="use another --results folder"):
        store.prepare(experiment, Budget(max_steps=3))


# --------------------------------------------------------------------------------------------------
# Real jobs: SIGKILL inside a cell, and two shards at once


def test_sigkill_inside_a_running_cell_then_a_rerun_completes_the_grid_once(tiny_run, one_thread):
    steps = 16
    path = write_experiment(tiny_run, seeds=(1,), max_steps=steps)
    root = tiny_run["tmp"] / "results"
    job = bench_process(path, root, log=tiny_run["tmp"] / "killed.log")
    deadline = time.time() + 120
    victim = None
    while victim is None and time.time() < deadline and job.is_alive():
        for log in root.glob(".work/*/log.jsonl"):
            if log.read_text().count('"loss"') >= 2:  # the cell is training: its log grows
                victim = log.parent
                break
        time.sleep(0.01)
    assert victim is not None, (tiny_run["tmp"] / "killed.log").read_text()[-2000:]
    os.kill(job.pid, signal.SIGKILL)
    job.join()
    assert job.exitcode == -signal.SIGKILL
    killed_cell = "/".join(victim.name.split("--")[:4])  # KEY--HOST-PID-TOKEN, KEY with / as --
    assert killed_cell not in finished_cells(root)  # never counted half-done
    assert list(root.glob(".claims/*.json"))  # the dead job's claim is still there

    assert main(["bench", str(path), "--results", str(root)]) == 0  # the rerun
    expected = ["tiny-bert/toy/none/seed-1", "tiny-bert/toy/scores-dropout/seed-1"]
    assert finished_cells(root) == expected
    for key in expected:
        assert_complete_cell(root / key, steps)
    done = [e["cell"] for e in events(root, "done")]
    assert sorted(done) == expected  # each cell published exactly once over both jobs
    assert [e["cell"] for e in events(root, "takeover")] == [killed_cell]
    assert not list(root.glob(".work/*")) and not list(root.glob(".claims/*"))


@pytest.mark.parametrize(
    "how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT], ids=["SIGKILL", "SIGTERM", "SIGINT"]
)
def test_a_cell_killed_after_a_checkpoint_resumes_there_to_the_uninterrupted_numbers(
    tiny_run, one_thread, how, capsys
):
    steps = 16
    path = write_experiment(tiny_run, seeds=(1,), max_steps=steps)  # the model's dropout: generators matter
    root = tiny_run["tmp"] / "results"
    log = tiny_run["tmp"] / "killed.log"
    job = bench_process(path, root, log=log)
    deadline = time.time() + 120
    while not list(root.glob(".work/*/checkpoint/state.json")) and time.time() < deadline and job.is_alive():
        time.sleep(0.005)
    assert list(root.glob(".work/*/checkpoint/state.json")), log.read_text()[-2000:]
    os.kill(job.pid, how)
    job.join()
    assert finished_cells(root) == []
    # SIGKILL leaves the dead job's claim; a stop releases it, and the kept folder must survive the sweep.
    assert bool(list(root.glob(".claims/*.json"))) == (how == signal.SIGKILL)
    if how != signal.SIGKILL:  # a stop: the step it landed in is finished and checkpointed, one line says so
        assert job.exitcode == 128 + how
        last = log.read_text().strip().splitlines()[-1]
        assert re.match(
            rf"attendout bench: stopped by {how.name} at step \d+ of {steps}; the checkpoint ", last
        )
        assert "Finished cells are kept" in last and f"To go on: attendout bench {path}" in last
        assert "Traceback" not in log.read_text()
    assert main(["bench", str(path), "--results", str(root), "--dry-run"]) == 0
    listed = re.search(r"todo +tiny-bert/toy/\S+/seed-1 +resumes at step (\d+);", capsys.readouterr().out)
    assert listed

    assert main(["bench", str(path), "--results", str(root)]) == 0  # the rerun resumes the cell
    (start,) = [e for e in events(root, "start") if e.get("resumed_at")]
    assert start["resumed_at"] == int(listed.group(1)) and 4 <= start["resumed_at"] < steps
    if how == signal.SIGKILL:
        assert start["resumed_at"] % 4 == 0  # a validation's checkpoint: the last written before the kill
    cell = root / start["cell"]
    assert_complete_cell(cell, steps)
    assert not (cell / "checkpoint").exists() and not list(root.glob(".work/*"))
    assert json.loads((cell / "results.json").read_text())["resumed"]["step"] == start["resumed_at"]

    whole = tiny_run["tmp"] / "whole"
    assert main(["bench", str(path), "--results", str(whole)]) == 0  # the same grid, uninterrupted
    ours, theirs = (json.loads((r / start["cell"] / "results.json").read_text()) for r in (root, whole))
    # Exact: every part ran on one thread with the same CPU kernels, and the resumed part repeats the
    # uninterrupted run's operations on the same values (weights, optimizer, generators bit for bit).
    assert ours["eval"] == theirs["eval"] and ours["validation"] == theirs["validation"]
    assert (cell / "predictions" / "dev.jsonl.gz").read_bytes() == (
        whole / start["cell"] / "predictions" / "dev.jsonl.gz"
    ).read_bytes()


def test_two_shards_at_the_same_time_complete_the_grid_exactly_once(tiny_run):
    path = write_experiment(tiny_run, seeds=(1,))
    root = tiny_run["tmp"] / "results"
    jobs = [
        bench_process(path, root, "--shard", f"{k}/2", log=tiny_run["tmp"] / f"shard{k}.log") for k in (1, 2)
    ]
    for job in jobs:
        job.join(timeout=300)
    logs = [(tiny_run["tmp"] / f"shard{k}.log").read_text() for k in (1, 2)]
    assert [job.exitcode for job in jobs] == [0, 0], logs
    expected = ["tiny-bert/toy/none/seed-1", "tiny-bert/toy/scores-dropout/seed-1"]
    assert finished_cells(root) == expected
    done = events(root, "done")
    assert sorted(e["cell"] for e in done) == expected and not events(root, "discarded")
    # cells 1 and 2 are none and scores-dropout: shard 1/2 takes 1, shard 2/2 takes 2
    assert {e["pid"]: e["cell"] for e in done} == {jobs[0].pid: expected[0], jobs[1].pid: expected[1]}
    for key in expected:
        assert_complete_cell(root / key, 8)


def test_a_failing_cell_is_recorded_the_grid_goes_on_and_a_rerun_retries_it(tiny_run):
    from attendout.bench import prepare_cells, run_cells
    from attendout.core.optim import TrainingError

    experiment = load_experiment(write_experiment(tiny_run))
    plan = prepare_cells(experiment, Budget(), check_data=False)
    store = ResultsStore(tiny_run["tmp"] / "results")

    def fake_train(config, fail: str | None):
        if fail and f"/{config.method}/seed-{config.seed}" in fail:
            raise TrainingError("loss is nan at step 3")
        out = Path(config.output_dir)
        out.mkdir(parents=True)
        results = {"main_metric": "accuracy", "eval": {"dev": {"accuracy": 0.5}}}
        (out / "results.json").write_text(json.dumps(results))
        return results

    lines: list[str] = []
    failing = "tiny-bert/toy/scores-dropout/seed-1"
    summary = run_cells(plan, store, echo=lines.append, train=lambda c, on_log: fake_train(c, failing))
    assert summary.failed == [failing] and len(summary.trained) == 3
    assert any("FAILED: TrainingError: loss is nan at step 3" in line for line in lines)
    cell = next(c for c in plan.cells if c.key == failing)
    assert store.status(cell) == ("failed", "TrainingError: loss is nan at step 3")
    assert not store.cell_dir(cell).exists() and not list(store.work_root.iterdir())
    summary = run_cells(plan, store, echo=lines.append, train=lambda c, on_log: fake_train(c, None))
    assert summary.trained == [failing] and len(summary.skipped_done) == 3
    assert store.status(cell)[0] == "done"


@pytest.mark.parametrize("selection", ["best", "last"])
def test_the_tables_protocol_says_which_model_of_each_run_it_reports(tiny_run, selection, capsys):
    """A grid that keeps each run's final model (``model_selection = "last"``) must not be described as
    choosing the best checkpoint (the addrop-opus-mt table was, before)."""
    extra = f'model_selection = "{selection}"'
    path = write_experiment(tiny_run, seeds=(1,), max_steps=4, extra=extra)
    root = tiny_run["tmp"] / "results"
    assert main(["bench", str(path), "--results", str(root), "--threads", "1"]) == 0
    assert main(["table", str(path), "--results", str(root), "--out", str(root / "report")]) == 0
    text = (root / "report" / "table.md").read_text()
    final = "each run's final model is reported"
    best = "the checkpoint with the best main metric on the validation split carved from train"
    assert (final in text, best in text) == ((True, False) if selection == "last" else (False, True))


def test_the_table_names_the_cells_that_kept_a_model_from_before_their_method_acted(tiny_run):
    """Four steps are less than an epoch: AD-DROP's cross-tuning, plain first, never acts, and the table
    says so of its cells; started with AD-DROP (the control), the same cells are not named."""
    methods = (
        METHODS
        + """
[[methods]]
id = "addrop-late"
name = "addrop"
options = { layers = "all" }

[[methods]]
id = "addrop-early"
name = "addrop"
options = { layers = "all", start = "addrop" }
"""
    )
    path = write_experiment(tiny_run, methods=methods, seeds=(1,), max_steps=4)
    root = tiny_run["tmp"] / "results"
    assert main(["bench", str(path), "--results", str(root), "--threads", "1"]) == 0
    assert main(["table", str(path), "--results", str(root), "--out", str(root / "report")]) == 0
    text = (root / "report" / "table.md").read_text()
    flagged = [line for line in text.splitlines() if "from before the method first acted" in line]
    assert len(flagged) == 1 and "addrop-late: 1 of 1 cells" in flagged[0]


def test_the_table_says_when_a_method_scores_the_same_at_every_seed(tiny_run):
    """SmolLM2's plain fine-tuning has no dropout and no new head: its 3 seeds were one run, and the table's
    significant Δ was about the other methods' draws in that run. The protocol says so of a method whose
    seeds agree (to 1e-6: a resumed run differs in the last digits), and of no method whose seeds differ."""
    from attendout.bench import prepare_cells, run_cells

    path = write_experiment(tiny_run, seeds=(1, 2, 3))
    experiment = load_experiment(path)
    plan = prepare_cells(experiment, Budget(), check_data=False)
    root = tiny_run["tmp"] / "results"

    def fake_train(config, invariant: str):
        score = 0.5 if config.method == invariant else 0.5 + 0.01 * config.seed
        if config.seed == 3:
            score *= 1 + 1e-8
        out = Path(config.output_dir)
        out.mkdir(parents=True)
        results = {"main_metric": "accuracy", "eval": {"dev": {"accuracy": score, "loss": 0.7}}}
        (out / "results.json").write_text(json.dumps(results))
        (out / "log.jsonl").write_text(json.dumps({"step": 4, "validation": {"accuracy": score}}) + "\n")
        saved = {"config": dataclasses.asdict(config), "total_steps": 8, "sizes": {"train": 32}}
        (out / "config.json").write_text(json.dumps(saved, default=str))
        return results

    def protocol(invariant: str) -> list[str]:
        shutil.rmtree(root, ignore_errors=True)
        run_cells(
            plan, ResultsStore(root), echo=lambda line: None, train=lambda c, on_log: fake_train(c, invariant)
        )
        assert main(["table", str(path), "--results", str(root), "--out", str(root / "r")]) == 0
        text = (root / "r" / "table.md").read_text()
        return [line for line in text.splitlines() if "scores the same at all" in line]

    flagged = protocol("none")
    assert len(flagged) == 1 and flagged[0].startswith("- **none scores the same at all 3 seeds on toy")
    flagged = protocol("scores-dropout")
    assert len(flagged) == 1 and flagged[0].startswith("- **scores-dropout")
    assert protocol("neither") == []


def test_a_published_seq2seq_cell_keeps_its_sources_and_the_copy_floor_is_read_from_the_grid(tmp_path):
    """advise's confirmation is a grid: the floor of BLEU (copying the source) needs the sources beside
    each prediction, and the publication of a cell (compaction) had dropped them, so no grid had a floor."""
    from attendout.advise.confirm import split_floor
    from attendout.report.comparison import build_table
    from attendout.report.stats import copy_floor

    pairs = [
        ("a red car", "ein rotes auto"),
        ("the dog runs", "der hund rennt"),
        ("a big house", "ein grosses haus"),
    ]
    (tmp_path / "pairs.tsv").write_text("src\ttgt\n" + "".join(f"{s}\t{t}\n" for s, t in pairs * 6))
    (tmp_path / "dev.tsv").write_text("src\ttgt\n" + "".join(f"{s}\t{t}\n" for s, t in pairs))
    path = tmp_path / "mt.toml"
    path.write_text(
        f"""
[experiment]
name = "mt"
seeds = [1]

[training]
model_init = "scratch"
model_layers = 1
model_hidden = 32
model_heads = 2
vocab_size = 300
max_length = 16
max_new_tokens = 4
batch_size = 4
max_steps = 2
validation_split = 0.2

[[models]]
id = "t5"
name = "t5"

[[tasks]]
id = "mt"
name = "seq2seq"
train_file = "{tmp_path / "pairs.tsv"}"
eval_files = {{ dev = "{tmp_path / "dev.tsv"}" }}
text_columns = ["src", "tgt"]

[[methods]]
name = "none"
"""
    )
    root = tmp_path / "results"
    assert main(["bench", str(path), "--results", str(root), "--threads", "1"]) == 0
    table = build_table(load_experiment(path), root)
    floor = split_floor(list(table.runs.values()), "dev", "bleu")
    assert floor is not None
    expected = copy_floor("bleu", [s for s, _ in pairs], [t for _, t in pairs])
    assert floor.score == pytest.approx(expected.score)


def test_a_grid_records_no_path_of_this_machine(tiny_run, one_thread, monkeypatch):
    """Issue 69, class 8: a new grid's files name its run, data and experiment folders as the one-time
    rewrite of results/ did (experiments/relative_paths.py): below the working folder relative to it, the
    data below the data root relative to that; a rewrite of them changes nothing."""
    tmp = tiny_run["tmp"]
    monkeypatch.chdir(tmp)
    monkeypatch.setenv("ATTENDOUT_DATA", str(tmp))  # the toy CSVs lie in the data root
    grid = write_experiment(tiny_run, seeds=(1,), max_steps=2)
    grid.write_text(grid.read_text().replace(f"{tmp}/", ""))  # its model and files as a user names them
    source, root = tmp / "earlier", tmp / "results"
    given = ["--data-dir", str(tmp), "--methods", "none"]
    assert main(["bench", str(grid), "--results", str(source), *given]) == 0
    assert main(["bench", str(grid), "--results", str(root), *given, "--reuse-runs", str(source)]) == 0
    published = [
        p
        for p in [*source.rglob("*"), *root.rglob("*")]
        if p.suffix in {".json", ".jsonl", ".md", ".csv", ".txt"} and ".work" not in p.parts
    ]
    assert published and [p for p in published if str(tmp) in p.read_text()] == []
    rewrite = runpy.run_path(str(Path(__file__).parents[1] / "experiments" / "relative_paths.py"))["rewrite"]
    assert [p for p in published if rewrite(p.read_text()) != p.read_text()] == []
    run = root / "tiny-bert" / "toy" / "none" / "seed-1"
    cell = json.loads((run / "cell.json").read_text())
    assert (cell["reused_from"], cell["experiment_file"]) == (
        "earlier/tiny-bert/toy/none/seed-1",
        "tiny.toml",
    )
    config = json.loads((run / "config.json").read_text())
    assert config["config"]["data_dir"] == "." and config["config"]["output_dir"].startswith("earlier/.work/")
    assert config["data_source"] == json.loads((run / "results.json").read_text())["data_source"]
    assert (
        "train.csv" in config["data_source"]
        and json.loads((root / "experiment.json").read_text())["file"] == "tiny.toml"
    )
