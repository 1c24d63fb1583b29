"""Early stopping: ``early_stopping_patience`` ends a run after N validations in a row without a new best."""

from __future__ import annotations

import json

import pytest

from attendout.report.results import format_results
from attendout.run.loop import TrainingLoop, finetune
from conftest import toy_train_config

# Validation scores by step (every 2 steps): best at step 4, then three worse ones.
SCORES = {2: 0.5, 4: 0.6, 6: 0.55, 8: 0.58, 10: 0.52, 12: 0.51}


@pytest.fixture
def scripted_validation(monkeypatch):
    """The validation split scores SCORES[step]; every other split is evaluated for real."""
    evaluate = TrainingLoop.evaluate

    def scripted(self, data):
        metrics, predictions, scores = evaluate(self, data)
        if data is self.validation_set:
            metrics = {**metrics, self.task.metrics[0]: SCORES[self.state.step]}
        return metrics, predictions, scores

    monkeypatch.setattr(TrainingLoop, "evaluate", scripted)


def run_config(tiny_run, **overrides):
    settings = dict(max_steps=12, eval_steps=2, log_steps=1, output_dir=str(tiny_run["tmp"] / "run"))
    return toy_train_config(tiny_run, **{**settings, **overrides})


def read_log(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


def test_patience_stops_after_that_many_validations_without_a_new_best(tiny_run, scripted_validation):
    results = finetune(run_config(tiny_run, early_stopping_patience=2))
    assert results["stopped_early"] == {"step": 8, "patience": 2}  # 6 and 8 are below the best (4)
    assert results["best_step"] == 4 and results["total_steps"] == 12
    log = read_log(tiny_run["tmp"] / "run")
    assert max(r["step"] for r in log if "loss" in r) == 8  # no training after the stop
    assert [r["step"] for r in log if "validation" in r] == [2, 4, 6, 8]
    assert log[-2]["stopped_early"] is True  # the validation that stopped it, then the final eval
    assert (tiny_run["tmp"] / "run" / "predictions" / "dev.jsonl").is_file()
    assert "stopped early at step 8 of 12" in format_results(results)


def test_without_patience_the_whole_budget_runs(tiny_run, scripted_validation):
    whole = finetune(run_config(tiny_run))
    assert "stopped_early" not in whole and whole["best_step"] == 4
    three = finetune(run_config(tiny_run, early_stopping_patience=3, output_dir=str(tiny_run["tmp"] / "p3")))
    assert three["stopped_early"] == {"step": 10, "patience": 3}
    # the fourth worse validation is the last one of the budget: nothing was stopped early
    four = finetune(run_config(tiny_run, early_stopping_patience=4, output_dir=str(tiny_run["tmp"] / "p4")))
    assert "stopped_early" not in four
    assert max(r["step"] for r in read_log(tiny_run["tmp"] / "p4") if "loss" in r) == 12


def test_a_resumed_run_keeps_counting_from_its_checkpoint(tiny_run, scripted_validation):
    class Killed(Exception):
        pass

    def kill_at_7(record):
        if record.get("step") == 7 and "loss" in record:
            raise Killed

    config = run_config(tiny_run, early_stopping_patience=2, checkpoint_steps=1)
    with pytest.raises(Killed):
        TrainingLoop(config, on_log=kill_at_7).fit()
    resumed = TrainingLoop(run_config(tiny_run, early_stopping_patience=2, checkpoint_steps=1, resume=True))
    assert resumed.state.step == 6 and resumed.state.evals_since_best == 1
    assert resumed.fit()["stopped_early"] == {"step": 8, "patience": 2}


def test_bad_patience_is_a_clear_error(tiny_run):
    with pytest.raises(ValueError, match="early_stopping_patience must be at least 1, got 0"):
        run_config(tiny_run, early_stopping_patience=0)
