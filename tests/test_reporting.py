"""--report-to (issue 70): runs, grids and resumes read back from TensorBoard's and MLflow's own readers;
a tracker missing, unreachable, unwritable or failing mid-run."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from attendout.cli import main
from attendout.run import Listener, TrainingLoop
from attendout.track import Tracking
from conftest import toy_cli_args, toy_train_config
from test_bench import write_experiment

# Found, not imported: mlflow alone takes 2 s of CPU to import, in each test worker that collects this file.
pytestmark = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in ("tensorboard", "mlflow")),
    reason="needs tensorboard and mlflow (the dev extra)",
)


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the event files in ``folder``, read by TensorBoard's own reader: tag -> [(step, value)]."""
    from tensorboard.backend.event_processing import event_accumulator

    reader = event_accumulator.EventAccumulator(str(folder), size_guidance={event_accumulator.SCALARS: 0})
    reader.Reload()
    return {tag: [(e.step, e.value) for e in reader.Scalars(tag)] for tag in reader.Tags()["scalars"]}


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory) -> Path:
    """An empty MLflow SQLite store, made once (its tables take seconds to create): tests copy it."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture
def store(empty_store, tmp_path, monkeypatch):
    """A client of a fresh MLflow store that MLFLOW_TRACKING_URI names."""
    from mlflow.tracking import MlflowClient

    path = tmp_path / "mlflow" / "mlflow.db"
    path.parent.mkdir()
    shutil.copy(empty_store, path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{path}")
    return MlflowClient(tracking_uri=f"sqlite:///{path}")


def test_finetune_help_lists_report_to(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--report-to" in text and "tensorboard" in text and "mlflow" in text


def test_a_run_reported_to_tensorboard_reads_back(tiny_run):
    out = tiny_run["tmp"] / "run"
    argv = toy_cli_args(tiny_run, "--method", "scores-dropout", "--p", "0.2", "--max-steps", "4", "--log-steps", "1",
                        "--eval-steps", "2", "--report-to", "tensorboard", output_dir=str(out))  # fmt: skip
    assert main(argv) == 0
    found = scalars(out / "tensorboard")
    assert [step for step, _ in found["train/loss"]] == [1, 2, 3, 4]
    assert 0.0 < found["scores-dropout/drop_rate/L0"][0][1] < 0.5  # a per-layer realised drop rate
    assert found["train/steps_per_s"][0][1] > 0 and found["train/examples_per_s"][0][1] > 0
    assert [step for step, _ in found["validation/accuracy"]] == [2, 4]
    import json

    final = json.loads((out / "results.json").read_text())["eval"]["dev"]["accuracy"]
    assert found["eval/dev/accuracy"] == [(4, pytest.approx(final))]


def test_a_grid_reported_to_mlflow_is_one_experiment_of_tagged_runs(tiny_run, store):
    experiment = write_experiment(tiny_run, max_steps=4)
    root = tiny_run["tmp"] / "results"
    assert main(["bench", str(experiment), "--results", str(root), "--report-to", "mlflow"]) == 0
    (grid,) = [e for e in store.search_experiments() if e.name == "tiny"]
    runs = store.search_runs([grid.experiment_id])
    assert sorted((r.data.tags["method"], r.data.tags["seed"]) for r in runs) == [
        ("none", "1"), ("none", "2"), ("scores-dropout", "1"), ("scores-dropout", "2"),
    ]  # fmt: skip
    for run in runs:
        assert run.info.status == "FINISHED"
        assert run.data.tags["model"] == "tiny-bert" and run.data.tags["task"] == "toy"
        assert run.data.params["method"] == run.data.tags["method"]
        assert run.data.params["seed"] == run.data.tags["seed"] and run.data.params["max_steps"] == "4"
        assert 0.0 <= run.data.metrics["eval/dev/accuracy"] <= 1.0
        assert {a.path for a in store.list_artifacts(run.info.run_id)} == {"config.json", "results.json"}
    drops = [r for r in runs if r.data.tags["method"] == "scores-dropout"][0]
    assert "scores-dropout/drop_rate/L1" in drops.data.metrics


class KilledAfter(Listener):
    """The tracker's listener, until the run is killed outright after the trackers got step ``step``:
    nothing of the tracker runs at the kill (as SIGKILL)."""

    def __init__(self, tracker, step: int) -> None:
        self.tracker, self.step = tracker, step

    def start(self, run_dir, resumed_at) -> None:
        self.tracker.start(run_dir, resumed_at)

    def __call__(self, record) -> None:
        self.tracker(record)
        if record.get("step") == self.step and "loss" in record:
            raise RuntimeError("killed")


def test_a_resumed_run_makes_no_duplicate_in_either_tracker(tiny_run, store):
    tracking = Tracking.of("tensorboard,mlflow", "resumes", tiny_run["tmp"] / "tensorboard")
    config = toy_train_config(tiny_run, max_steps=9, log_steps=1, eval_steps=3, checkpoint_steps=2)
    with pytest.raises(RuntimeError, match="killed"):
        TrainingLoop(config, on_log=KilledAfter(tracking.run("r"), 5)).fit()  # checkpoint of step 4
    import dataclasses

    TrainingLoop(dataclasses.replace(config, resume=True), on_log=tracking.run("r")).fit()
    (run,) = store.search_runs([store.get_experiment_by_name("resumes").experiment_id])
    assert run.info.status == "FINISHED"
    history = store.get_metric_history(run.info.run_id, "train/loss")
    assert sorted(m.step for m in history) == list(range(1, 10))
    assert sorted(m.step for m in store.get_metric_history(run.info.run_id, "validation/accuracy")) == [
        3,
        6,
        9,
    ]
    found = scalars(tiny_run["tmp"] / "tensorboard" / "r")
    assert [step for step, _ in found["train/loss"]] == list(range(1, 10))
    assert [step for step, _ in found["validation/accuracy"]] == [3, 6, 9]


def test_a_stopped_run_is_not_left_running(tiny_run, store):
    tracking = Tracking.of("mlflow", "stops", tiny_run["tmp"] / "tb")
    from attendout.run import Stopped

    class Stop(Listener):
        def __init__(self, tracker):
            self.tracker = tracker

        def start(self, run_dir, resumed_at):
            self.tracker.start(run_dir, resumed_at)

        def __call__(self, record):
            self.tracker(record)
            raise Stopped(2)

        def end(self, status, results=None):
            self.tracker.end(status, results)

    with pytest.raises(KeyboardInterrupt):
        TrainingLoop(toy_train_config(tiny_run, log_steps=1), on_log=Stop(tracking.run("s"))).fit()
    (run,) = store.search_runs([store.get_experiment_by_name("stops").experiment_id])
    assert run.info.status == "KILLED"


@pytest.mark.parametrize("name,module", [("mlflow", "mlflow"), ("tensorboard", "torch.utils.tensorboard")])
def test_a_tracker_not_installed_is_one_line_before_training(tiny_run, monkeypatch, capsys, name, module):
    monkeypatch.setitem(sys.modules, module, None)  # `import module` now fails as if not installed
    out = tiny_run["tmp"] / "run"
    assert main(toy_cli_args(tiny_run, "--report-to", name, output_dir=str(out))) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"attendout: error: --report-to {name}: {name} is not installed; pip install 'attendout[{name}]'"
    )
    assert not (out / "log.jsonl").exists()


def test_an_unwritable_tensorboard_folder_is_one_line_before_training(tiny_run, capsys):
    blocker = tiny_run["tmp"] / "file"
    blocker.write_text("")
    assert main(toy_cli_args(tiny_run, "--report-to", "tensorboard", output_dir=str(blocker / "run"))) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("attendout: error: --report-to tensorboard: cannot write its folder")
        and "\n" not in err
    )


def test_an_unreachable_mlflow_uri_and_an_unknown_tracker_are_one_line(tiny_run, monkeypatch, capsys):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:9")  # nothing listens there
    out = tiny_run["tmp"] / "run"
    assert main(toy_cli_args(tiny_run, "--report-to", "mlflow", output_dir=str(out))) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot use the MLflow tracking URI http://127.0.0.1:9" in err and "\n" not in err
    assert main(toy_cli_args(tiny_run, "--report-to", "tensorbored", output_dir=str(out))) == 2
    assert "unknown tracker 'tensorbored'" in capsys.readouterr().err
    assert not (out / "log.jsonl").exists()


def test_a_tracker_failing_mid_run_warns_once_and_the_run_goes_on(tiny_run, monkeypatch, caplog):
    from attendout.track import backends

    def broken(self, metrics, step):
        raise OSError("disk full")

    monkeypatch.setattr(backends.TensorBoard, "log", broken)
    tracking = Tracking.of("tensorboard", "x", tiny_run["tmp"] / "tb")
    results = TrainingLoop(toy_train_config(tiny_run, log_steps=1), on_log=tracking.run("r")).fit()
    assert results["eval"]["dev"]["accuracy"] >= 0
    warned = [r for r in caplog.records if "the tracker failed" in r.getMessage()]
    assert len(warned) == 1 and "disk full" in warned[0].getMessage()


def test_an_advise_study_reads_as_its_regime_trials_confirmation_and_answer(tiny_run, store):
    from attendout.advise import advise
    from test_advise import tiny_study

    out = tiny_run["tmp"] / "advice"
    tracking = Tracking.of("mlflow", "study", out / "tensorboard")
    advice = advise(tiny_study(tiny_run, out, tracking=tracking))
    experiment = store.get_experiment_by_name("study")
    runs = store.search_runs([experiment.experiment_id])
    stages = sorted({r.data.tags["stage"] for r in runs})
    assert stages == ["confirmation", "reference", "regime", "trial"]
    trials = [r for r in runs if r.data.tags["stage"] == "trial"]
    assert len(trials) == 2 * 2  # 2 trials x 2 search seeds
    for run in trials:
        assert "trial/objective" in run.data.metrics and "param.p" in run.data.tags
        assert run.data.params["method_options/p"] == run.data.tags["param.p"]
    confirmation = [r for r in runs if r.data.tags["stage"] == "confirmation"]
    assert sorted((r.data.tags["method"], r.data.tags["seed"]) for r in confirmation) == [
        ("none", "1"), ("none", "2"), ("scores-dropout", "1"), ("scores-dropout", "2"),
    ]  # fmt: skip
    assert all(r.info.status == "FINISHED" for r in runs)
    assert experiment.tags["answer"] == advice.sentence


def test_wandb_offline_keeps_one_run_across_a_resume(tiny_run, monkeypatch):
    """W&B is not a dev extra (nothing to read its offline files back with here): run where it is installed."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tiny_run["tmp"] / "wandb"))
    (tiny_run["tmp"] / "wandb").mkdir()
    tracking = Tracking.of("wandb", "offline", tiny_run["tmp"] / "tb")
    config = toy_train_config(tiny_run, max_steps=9, log_steps=1, eval_steps=3, checkpoint_steps=2)
    with pytest.raises(RuntimeError, match="killed"):
        TrainingLoop(config, on_log=KilledAfter(tracking.run("r"), 5)).fit()
    import dataclasses
    import json

    TrainingLoop(dataclasses.replace(config, resume=True), on_log=tracking.run("r")).fit()
    state = json.loads((tiny_run["tmp"] / "run" / "tracking.json").read_text())
    folders = sorted(p.name for p in (tiny_run["tmp"] / "wandb" / "wandb").glob("offline-run-*"))
    assert len(folders) == 2 and all(f.endswith(state["ids"]["wandb"]) for f in folders)  # one run, resumed
