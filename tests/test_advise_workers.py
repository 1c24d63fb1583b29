"""advise with several workers (issue 59, class 6): the trial budget is the study's, claimed atomically
(two workers that both count room for the last trial and both ask run one trial between them), and a
study database that is not one is a single line naming the file and what to do."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

import attendout.advise.search as search_mod
from attendout.advise.plan import SearchPlan
from attendout.advise.search import run_search, search_results
from attendout.advise.storage import open_storage
from attendout.config import TrainConfig
from search_plans import search_plan


def fake_finetune(calls: list):
    """A finetune that 'validates' once per epoch and writes what the search reads back."""

    def finetune(config, on_log=None):
        calls.append(config)
        out = Path(config.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        records = [
            {"step": e, "epoch": float(e), "validation": {"accuracy": 0.8, "loss": 0.2}}
            for e in range(1, int(config.epochs) + 1)
        ]
        for record in records:
            if on_log is not None:
                on_log(record)
        (out / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        results = {
            "validation": {"accuracy": 0.8},
            "best_step": len(records),
            "train_time_s": 0.0,
            "eval": {},
        }
        (out / "results.json").write_text(json.dumps(results))
        return results

    return finetune


def plan_for(tmp_path, lines: list, **overrides) -> SearchPlan:
    values = dict(
        base=TrainConfig(task="file", train_file="unused.csv", progress=False),
        out=tmp_path,
        storage=f"sqlite:///{tmp_path / 'search.db'}",
        methods=("scores-dropout",),
        epochs=2,
        steps_per_epoch=3,
        metric="accuracy",
        trials=1,
        repeats=1,
        objective="score",
        pruning=False,
        progress=False,
        poll=0.05,
        echo=lines.append,
    )
    values.update(overrides)
    return search_plan(**values)


@pytest.mark.parametrize("sampler", ["tpe", "grid"])
def test_two_workers_started_at_once_run_the_studys_budget_not_one_each(tmp_path, monkeypatch, sampler):
    calls: list = []
    monkeypatch.setattr(search_mod, "finetune", fake_finetune(calls))
    lines: list = []
    plan = plan_for(tmp_path, lines, sampler=sampler)
    open_storage(plan.study.storage_url)  # the tables exist before the two race (that race is storage.py's)
    both_counted = threading.Barrier(2, timeout=60)
    counted = search_mod._counted
    looks = threading.local()

    def count_then_meet(*args, **kwargs):
        found = counted(*args, **kwargs)
        looks.n = getattr(looks, "n", 0) + 1
        if looks.n == 2:  # the search loop's count (the first is the progress bar's): both see room
            both_counted.wait()  # for one more trial before either asks: the race of the issue
        return found

    monkeypatch.setattr(search_mod, "_counted", count_then_meet)
    errors: list = []

    def worker():
        try:
            run_search(plan)
        except BaseException as error:  # noqa: BLE001 - shown by the assertion below
            errors.append(error)

    workers = [threading.Thread(target=worker) for _ in range(2)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=120)
    assert not errors and not any(thread.is_alive() for thread in workers), errors
    assert len(calls) == 1  # one trial trained, by one of the two
    found = search_results(plan)["scores-dropout"]
    assert found.finished == 1 and [t["state"] for t in found.trials if t["state"] != "WAITING"] == [
        "COMPLETE"
    ]
    assert sum("given back" in line for line in lines) == 1
    import optuna

    study = optuna.load_study(study_name="scores-dropout", storage=plan.study.storage_url)
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    ran = [t.params for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))]
    assert len(ran) == 1 and all(t.system_attrs["fixed_params"] != ran[0] for t in waiting)  # not twice
    failed = study.get_trials(states=(optuna.trial.TrialState.FAIL,))  # (Optuna has no "never run")
    assert len(failed) == 1 and failed[0].user_attrs["given_back"].startswith("not a failure: never trained")


def test_a_budget_larger_than_one_is_shared_too(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(search_mod, "finetune", fake_finetune(calls))
    lines: list = []
    plan = plan_for(tmp_path, lines, trials=3)
    open_storage(plan.study.storage_url)
    workers = [threading.Thread(target=run_search, args=(plan,)) for _ in range(3)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join(timeout=120)
    assert len(calls) == 3 and search_results(plan)["scores-dropout"].finished == 3


def study_file(tmp_path) -> Path:
    lines: list = []
    plan = plan_for(tmp_path, lines)
    import optuna

    study = optuna.create_study(study_name="scores-dropout", storage=open_storage(plan.study.storage_url))
    for _ in range(40):
        trial = study.ask()
        trial.suggest_float("p", 0.0, 1.0)
        study.tell(trial, 0.5)
    return tmp_path / "search.db"


@pytest.mark.parametrize("damage", ["not a database", "truncated", "a damaged page"])
def test_a_damaged_study_database_is_one_line_naming_the_file_and_what_to_do(tmp_path, damage):
    path = study_file(tmp_path)
    data = path.read_bytes()
    if damage == "not a database":
        path.write_text("study results, exported as text\n" * 20)
    elif damage == "truncated":
        path.write_bytes(data[: len(data) // 3])
    else:
        page = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
        path.write_bytes(data[:page] + b"\x07" * page + data[2 * page :])
    with pytest.raises(ValueError) as error:
        open_storage(f"sqlite:///{path}")
    message = str(error.value)
    assert "\n" not in message and "Background on this error" not in message and "[SQL:" not in message
    assert message.startswith(f"{path} is the search's study database, but ")
    assert (
        "it is not an SQLite database" if damage == "not a database" else "SQLite finds it damaged"
    ) in message
    assert message.endswith(
        f"move it aside to start the search over (mv {path} {path}.damaged), or restore it from a backup"
    )


def test_an_intact_study_database_opens(tmp_path):
    path = study_file(tmp_path)
    assert open_storage(f"sqlite:///{path}") is not None
