"""attendout advise: the regime reader, the search (never the evaluation split; resumable), the
confirmation's seeds, the verdict, the config file it writes and the command line."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import optuna
import pytest

import forked
from attendout.advise import AdviseConfig, advise, choose_budget, read_regime, search_space, verdict
from attendout.advise import objective as objective_mod
from attendout.advise import search as search_mod
from attendout.advise.confirm import Confirmation, ConfirmRow
from attendout.advise.plan import SearchPlan
from attendout.advise.power import Noise, pooled_df, seeds_needed
from attendout.advise.regime import FLAT, LEARNING, PLATEAU, UNKNOWN, read_trend
from attendout.advise.search import reclaim_stale, run_search, search_results
from attendout.advise.spaces import SEARCH_SPACES, Choice, describe, grid_of, suggest
from attendout.advise.storage import open_storage
from attendout.cli import main
from attendout.configfile import load_config, load_config_file, save_config
from attendout.core.lock import process_start_time, this_host
from attendout.methods import get_method_config
from attendout.report.regime import EpochCurves
from attendout.report.stats import detectable_difference, pooled_sd
from conftest import make_tiny_run, toy_cli_args, toy_train_config
from search_plans import search_plan

optuna.logging.set_verbosity(optuna.logging.WARNING)


def curves(validation, validation_loss, train_loss=None) -> EpochCurves:
    n = len(validation)
    train_loss = train_loss if train_loss is not None else list(np.linspace(0.7, 0.01, n))
    return EpochCurves(
        metric="mcc",
        epochs=np.arange(1.0, n + 1),
        validation=np.array(validation, dtype=float),
        validation_loss=np.array(validation_loss, dtype=float),
        train_epochs=np.arange(1.0, n + 1),
        train_loss=np.array(train_loss, dtype=float),
    )


# -- stage 1: the regime --------------------------------------------------------------------------


def test_regime_reader_sees_overfitting_and_chooses_an_odd_budget_after_the_peak():
    # CoLA-500's probe: validation MCC peaks at epoch 4 of 12 and falls; its loss climbs from epoch 2
    reading = read_regime(
        curves(
            [0, 0, 0.078, 0.134, 0.111, 0.08, 0.097, 0.104, 0.096, 0.088, 0.096, 0.077],
            [0.61, 0.61, 0.69, 1.07, 1.24, 1.46, 1.64, 1.74, 1.85, 1.88, 1.91, 1.91],
        )
    )
    assert reading.overfits and reading.best_epoch == 4 and reading.peak_epoch == 4
    assert reading.budget == 7  # ceil(1.5 * 4) + 1 = 7, odd
    assert "It overfits" in reading.sentence and "7 epochs" in reading.sentence


def test_regime_reader_takes_the_start_of_a_plateau_as_the_peak():
    # SST-2-500's probe: 0.840 at epoch 3, the best 0.844 only at epoch 6; the loss climbs from epoch 3
    reading = read_regime(
        curves(
            [0.703, 0.81, 0.84, 0.826, 0.842, 0.844, 0.83, 0.838, 0.836, 0.842, 0.84, 0.842],
            [0.66, 0.46, 0.43, 0.59, 0.68, 0.72, 0.82, 0.87, 0.89, 0.9, 0.91, 0.92],
        )
    )
    assert reading.best_epoch == 6 and reading.peak_epoch == 3 and reading.budget == 7


@pytest.mark.parametrize(
    "validation, loss",
    [
        ([0.1, 0.2, 0.3, 0.4, 0.5, 0.6], [0.9, 0.8, 0.7, 0.6, 0.5, 0.45]),  # still learning
        ([0.5] * 6, [0.69] * 6),  # flat: nothing learned, nothing lost
    ],
)
def test_regime_reader_says_plainly_when_plain_fine_tuning_does_not_overfit(validation, loss):
    reading = read_regime(curves(validation, loss))
    assert not reading.overfits
    assert reading.budget == 6  # every epoch that was run
    assert "does NOT overfit" in reading.sentence and "little room" in reading.sentence


def test_regime_reader_counts_a_rising_validation_loss_as_overfitting_and_a_dip_within_the_plateau_not():
    rising = read_regime(curves([0.5, 0.6, 0.61, 0.61, 0.61], [0.5, 0.4, 0.5, 0.7, 0.9]))
    assert rising.overfits
    dip = read_regime(curves([0.5, 0.6, 0.61, 0.61 - PLATEAU / 2], [0.5, 0.4, 0.39, 0.39]))
    assert not dip.overfits


def test_regime_reader_warns_when_the_model_is_not_learning():
    reading = read_regime(curves([0.5] * 5, [0.69] * 5, train_loss=[0.69, 0.69, 0.69, 0.68, 0.68]))
    assert "not learning" in reading.sentence


@pytest.mark.parametrize(
    "peak, run", [(1, 12), (2, 12), (4, 12), (5, 6), (8, 8), (3, 3), (1, 2), (4, 4), (3, 4)]
)
def test_budget_is_odd_and_within_the_run(peak, run):
    budget = choose_budget(peak, run)
    assert 1 <= budget <= run
    assert budget >= min(3, run) - (run % 2 == 0 and run < 3)
    if any(b % 2 == 1 and max(peak, 3) <= b <= run for b in range(run + 1)):
        assert budget % 2 == 1  # odd wherever an odd budget that keeps the peak fits in the run
    if math.ceil(1.5 * peak) + 1 <= run:
        assert budget >= math.ceil(1.5 * peak) + 1
    assert budget >= min(peak, run)  # the peak is always inside the budget


def test_a_metric_still_rising_at_the_end_keeps_every_epoch_and_says_so():
    # the validation loss climbs (overfitting) while the metric is best at the last of 4 epochs
    reading = read_regime(curves([0.70, 0.75, 0.78, 0.789], [0.6, 0.52, 0.507, 0.538]))
    assert reading.overfits and reading.budget == 4
    assert "still best at the last epoch" in reading.sentence


# -- search spaces ---------------------------------------------------------------------------------


@pytest.mark.parametrize("method", sorted(SEARCH_SPACES))
def test_every_range_and_grid_point_is_a_valid_setting_of_its_method(method):
    space = search_space(method)
    for name, r in space.items():
        values = r.values if isinstance(r, Choice) else (r.low, r.high)
        for value in (*values, *r.grid):
            get_method_config(method, **{name: value})  # raises if the method refuses it
    default = get_method_config(method)
    if method == "addrop":  # p, q unset until a task settles them: the authors' main.py defaults
        default = default.for_task(None)
    for name, r in space.items():  # each range brackets the paper's default; a choice holds it
        if isinstance(r, Choice):
            assert getattr(default, name) in r.values
        else:
            assert r.low < getattr(default, name) < r.high


def test_suggested_options_are_rounded_to_two_significant_digits():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(20):
        trial = study.ask()
        options = suggest(trial, "addrop")
        for name, value in options.items():
            assert value == float(f"{value:.2g}")
            assert abs(value - trial.params[name]) <= 0.05 * trial.params[name] + 1e-12
        study.tell(trial, 0.0)


def test_a_choice_is_suggested_among_its_values_and_described_by_name():
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    seen = set()
    for _ in range(30):
        trial = study.ask()
        options = suggest(trial, "synthesizer")
        assert options["variant"] in SEARCH_SPACES["synthesizer"]["variant"].values
        seen.add(options["variant"])
        study.tell(trial, 0.0)
    assert len(seen) > 2
    assert describe("synthesizer", {"variant": "dense", "init": "paper"}) == "variant = dense"
    with pytest.raises(ValueError, match="at least two distinct"):
        Choice(("a",), grid=("a",))
    with pytest.raises(ValueError, match="among its values"):
        Choice(("a", "b"), grid=("c",))


def test_methods_without_a_strength_are_refused_with_a_reason():
    with pytest.raises(ValueError, match="no strength to search.*none"):
        search_space("none")
    with pytest.raises(ValueError, match="unknown method"):
        search_space("dropconnect")


# -- the study's settings --------------------------------------------------------------------------


def test_confirmation_seeds_may_not_include_the_search_seed(tiny_run):
    recipe = toy_train_config(tiny_run, max_steps=None)
    with pytest.raises(ValueError, match="include the search seed 2"):
        AdviseConfig(recipe, search_seed=2, seeds=(1, 2, 3))
    with pytest.raises(ValueError, match="at least 2 seeds"):
        AdviseConfig(recipe, seeds=(1,))
    with pytest.raises(ValueError, match="no strength to search"):
        AdviseConfig(recipe, methods=["none"])
    with pytest.raises(ValueError, match="is searched; it cannot also be fixed"):
        AdviseConfig(recipe, methods=["addrop"], fixed_options={"addrop": {"p": 0.3}})


# -- stage 2: the search, with a stand-in for training ---------------------------------------------


def fake_finetune(score, calls: list, *, interrupt_at=None):
    """A finetune that 'validates' once per epoch with score(options, epoch), and records each call."""

    def finetune(config, on_log=None):
        calls.append(config)
        options = config.method_options
        epochs = int(config.epochs)
        out = Path(config.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        best = -math.inf
        lines = []
        for epoch in range(1, epochs + 1):
            if interrupt_at is not None and interrupt_at(config, epoch):
                raise KeyboardInterrupt
            value = (
                score(options, epoch) if score.__code__.co_argcount == 2 else score(options, epoch, config)
            )
            best = max(best, value)
            record = {
                "step": epoch,
                "epoch": float(epoch),
                "validation": {"accuracy": value, "loss": 1.0 - value},
            }
            lines.append(json.dumps(record))
            if on_log is not None:
                on_log(record)
        (out / "log.jsonl").write_text("\n".join(lines) + "\n")
        results = {"validation": {"accuracy": best}, "best_step": epochs, "train_time_s": 0.0, "eval": {}}
        (out / "results.json").write_text(json.dumps(results))
        return results

    return finetune


def plan_for(tmp_path, **overrides) -> SearchPlan:
    from attendout.config import TrainConfig

    values = dict(
        base=TrainConfig(task="file", train_file="unused.csv", progress=False),
        out=tmp_path,
        storage=f"sqlite:///{tmp_path / 'search.db'}",
        methods=("scores-dropout", "drophead"),
        epochs=5,
        steps_per_epoch=3,
        metric="accuracy",
        trials=6,
        repeats=1,
        objective="score",  # v0.4's objective: these tests are of the machinery; the paired one is below
        progress=False,
        echo=lambda line: None,
    )
    values.update(overrides)
    return search_plan(**values)


def peaked(options, epoch):
    """Validation accuracy that is best at a rate of 0.2 and grows with the epochs (plain: 0.8)."""
    if not options:
        return 0.8 + 0.01 * epoch
    rate = next(iter(options.values()))
    return 0.9 - abs(math.log(rate / 0.2)) * 0.1 + 0.01 * epoch


def test_search_finds_the_rate_the_validation_score_rewards_and_prunes_bad_ones(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(search_mod, "finetune", fake_finetune(peaked, calls))
    results = run_search(plan_for(tmp_path, trials=12, methods=("scores-dropout",)))
    s = results["scores-dropout"]
    assert len(calls) == 12 and s.finished == 12
    assert abs(math.log(s.options["p"] / 0.2)) < abs(math.log(0.02 / 0.2)) / 2  # nearer 0.2 than a random end
    assert s.value == max(t["value"] for t in s.trials if t["state"] == "COMPLETE")
    pruned = [t for t in s.trials if t["state"] == "PRUNED"]
    assert pruned, "a trial below the median after half the budget is pruned"
    for t in pruned:  # never before half the budget (epoch 3 of 5)
        assert max(t["by_epoch"]) >= 3
    # every trial trained with the search seed, on the validation split only, and kept no model
    assert {c.seed for c in calls} == {0} and not any(c.evaluate or c.save_model for c in calls)


def seeded(options, epoch, config):
    """peaked() plus a large effect of the seed that every run at that seed shares (init, batch order)."""
    return peaked(options, epoch) + {0: 0.0, 1000: -0.08, 2000: 0.05}[config.seed]


def test_the_paired_objective_cancels_what_a_seed_shares_and_measures_its_own_noise(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(search_mod, "finetune", fake_finetune(seeded, calls))
    plan = plan_for(
        tmp_path, trials=4, methods=("scores-dropout",), objective="delta", repeats=3, pruning=False
    )
    s = run_search(plan)["scores-dropout"]
    # plain fine-tuning is trained once per search seed, before and for every trial
    plain = [c for c in calls if c.method == "none"]
    assert sorted(c.seed for c in plain) == [0, 1000, 2000] and len(calls) == 3 + 4 * 3
    for t in s.trials:  # each seed's score is the method's minus plain's: the seed's share cancels
        truth = peaked(t["params"], 5) - peaked({}, 5)
        assert t["by_seed"] == pytest.approx({0: truth, 1000: truth, 2000: truth})
        assert t["value"] == pytest.approx(truth)
    noise = objective_mod.search_noise(plan, {"scores-dropout": s})
    assert noise.sd == pytest.approx(0.0, abs=1e-12) and noise.trials == 4
    assert noise.reference == pytest.approx({0: 0.85, 1000: 0.77, 2000: 0.90})
    # the raw score keeps the seed's share: one trial's seeds spread by it, but every trial shares it at a
    # seed, so it cancels between trials: the noise that separates two trials (their own) is none here
    raw_plan = plan_for(tmp_path / "raw", trials=4, methods=("scores-dropout",), repeats=3, pruning=False)
    raw = run_search(raw_plan)["scores-dropout"]
    raw_noise = objective_mod.search_noise(raw_plan, {"scores-dropout": raw})
    assert raw_noise.sd == pytest.approx(np.std([0.0, -0.08, 0.05], ddof=1))
    assert raw_noise.comparable and raw_noise.own_df == 3 * 2
    assert raw_noise.se == pytest.approx(0.0, abs=1e-9)
    assert "standard error" in raw_noise.sentence(100.0) and "4 complete trials" in raw_noise.sentence(100.0)
    # one seed per trial: no noise to measure, and the sentence says so
    one = objective_mod.SearchNoise("score", "accuracy", (0,), float("nan"), 0, {})
    assert "cannot be measured" in one.sentence(100.0)


def test_the_samplers_seed_includes_the_recipe(tmp_path, monkeypatch):
    """Two tasks searched with the same search seed do not try the same points."""
    drawn = {}
    for key in ("cola", "sst2"):
        calls: list = []
        monkeypatch.setattr(search_mod, "finetune", fake_finetune(peaked, calls))
        plan = plan_for(tmp_path / key, trials=3, methods=("scores-dropout",), recipe_key=key, pruning=False)
        drawn[key] = [t["params"]["p"] for t in run_search(plan)["scores-dropout"].trials]
    assert drawn["cola"] != drawn["sst2"]
    again: list = []
    monkeypatch.setattr(search_mod, "finetune", fake_finetune(peaked, again))
    plan = plan_for(
        tmp_path / "cola-again", trials=3, methods=("scores-dropout",), recipe_key="cola", pruning=False
    )
    assert [t["params"]["p"] for t in run_search(plan)["scores-dropout"].trials] == drawn["cola"]


def test_without_a_signal_the_search_has_no_preference(tmp_path, monkeypatch):
    """The control: scores that do not depend on the rate give a choice spread like the draws."""
    calls: list = []
    monkeypatch.setattr(search_mod, "finetune", fake_finetune(lambda options, epoch: 0.5, calls))
    s = run_search(plan_for(tmp_path, trials=8, methods=("scores-dropout",), pruning=False))["scores-dropout"]
    assert {t["value"] for t in s.trials} == {0.5}
    assert s.trial == 0  # ties go to the first trial: no rate is preferred


def test_a_killed_search_resumes_without_rerunning_a_finished_trial(tmp_path, monkeypatch):
    calls: list = []
    killed = {"done": False}

    def interrupt_at(config, epoch):  # the 4th trial is killed at its 3rd epoch, once
        if len(calls) == 4 and epoch == 3 and not killed["done"]:
            killed["done"] = True
            return True
        return False

    monkeypatch.setattr(search_mod, "finetune", fake_finetune(peaked, calls, interrupt_at=interrupt_at))
    plan = plan_for(tmp_path, trials=3)
    with pytest.raises(KeyboardInterrupt):
        run_search(plan)
    assert len(calls) == 4
    first_dirs = [c.output_dir for c in calls[:3]]
    killed_call = calls[3]
    results = run_search(plan)
    rerun = calls[4:]
    assert all(c.output_dir not in first_dirs for c in rerun), "no finished trial reruns"
    again = [c for c in rerun if c.method == killed_call.method][0]  # methods take turns: its next trial
    assert again.output_dir == killed_call.output_dir  # the killed trial goes on in its own folder
    assert again.method_options == killed_call.method_options
    assert len(rerun) == 3  # the killed one, then the rest of the 6 trials
    assert all(r.finished == 3 for r in results.values())
    # a third invocation trains nothing
    run_search(plan)
    assert len(calls) == 7


def test_a_trial_left_running_by_a_dead_process_is_queued_again(tmp_path):
    plan = plan_for(tmp_path, methods=("scores-dropout",))
    storage = open_storage(plan.study.storage_url)
    study = search_mod._study(plan, storage, "scores-dropout")
    trial = study.ask()
    trial.suggest_float("p", 0.02, 0.5, log=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    for key, value in {
        "host": this_host(),
        "pid": dead.pid,
        "pid_start": "0",
        "heartbeat": 0.0,
        "run_dir": str(tmp_path / "t"),
    }.items():
        trial.set_user_attr(key, value)
    alive = study.ask()  # a trial of this very process: left alone
    for key, value in {"host": this_host(), "pid": os.getpid(), "heartbeat": 0.0}.items():
        alive.set_user_attr(key, value)
    alive.set_user_attr("pid_start", process_start_time(os.getpid()))
    assert reclaim_stale(study, storage, 900.0, lambda line: None) == 1
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states[trial.number] == "FAIL" and states[alive.number] == "RUNNING"
    queued = [t for t in study.get_trials() if t.state.name == "WAITING"]
    assert len(queued) == 1 and queued[0].system_attrs["fixed_params"] == trial.params
    assert queued[0].user_attrs["resume_dir"] == str(tmp_path / "t")


def _running_elsewhere(plan, tmp_path):
    """A trial of ``plan``'s one method left RUNNING by another live process (a child that sleeps)."""
    storage = open_storage(plan.study.storage_url)
    study = search_mod._study(plan, storage, plan.study.methods[0])
    trial, options = search_mod._ask(plan, study, plan.study.methods[0])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    for key, value in {
        "host": this_host(),
        "pid": other.pid,
        "pid_start": process_start_time(other.pid),
        "heartbeat": 0.0,
        "run_dir": str(tmp_path / "elsewhere"),
    }.items():
        trial.set_user_attr(key, value)
    return study, trial, options, other


def _then(monkeypatch, action):
    """Run ``action`` as the search looks at the running trials the second time (it waited once)."""
    looks = []
    real = search_mod._running

    def running(studies, stale_after):
        looks.append(1)
        if len(looks) == 2:
            action()
        return real(studies, stale_after)

    monkeypatch.setattr(search_mod, "_running", running)
    return looks


def test_a_process_with_no_trial_left_waits_for_those_others_run_and_takes_their_best(tmp_path, monkeypatch):
    """Two processes share a study: the one that finds every trial taken must not confirm before the
    other's trial ends, or the two would confirm different settings."""
    calls: list = []
    monkeypatch.setattr(search_mod, "finetune", fake_finetune(peaked, calls))
    lines: list[str] = []
    plan = plan_for(tmp_path, methods=("scores-dropout",), trials=1, poll=0.01, echo=lines.append)
    study, trial, _, other = _running_elsewhere(plan, tmp_path)
    try:
        looks = _then(monkeypatch, lambda: study.tell(trial, 0.97))
        results = run_search(plan)
    finally:
        other.kill()
        other.wait()
    assert len(looks) >= 2 and calls == []  # it waited; the budget (1 trial) was the other's: no training
    assert lines == [
        "search: waiting for scores-dropout trial 0 running in another process before confirming"
    ]
    best = results["scores-dropout"]
    assert best.trial == trial.number and best.value == 0.97  # read after the other trial finished


def test_a_waiting_process_takes_over_the_trial_of_one_that_dies(tmp_path, monkeypatch):
    """The other process dies while this one waits, between the pass that counted its trial as running
    and the next look: its trial is queued again and run here, with its options, in its folder."""
    calls: list = []
    monkeypatch.setattr(search_mod, "finetune", fake_finetune(peaked, calls))
    plan = plan_for(tmp_path, methods=("scores-dropout",), trials=1, poll=0.01)
    study, trial, options, other = _running_elsewhere(plan, tmp_path)
    _then(monkeypatch, lambda: (other.kill(), other.wait()))
    results = run_search(plan)
    assert len(calls) == 1
    assert calls[0].method_options == options and calls[0].output_dir == str(
        tmp_path / "elsewhere" / "seed-0"
    )
    assert results["scores-dropout"].finished == 1


def test_two_processes_on_one_study_draw_different_settings(tmp_path):
    plan = plan_for(tmp_path, methods=("addrop",))
    storage = open_storage(plan.study.storage_url)
    first = search_mod._study(plan, storage, "addrop")  # as two processes started at once open it
    second = search_mod._study(plan, storage, "addrop")
    drawn = [search_mod._ask(plan, study, "addrop")[1] for study in (first, second, first, second)]
    assert len({tuple(sorted(d.items())) for d in drawn}) == 4


def test_a_search_at_another_budget_is_refused_in_the_same_storage(tmp_path, monkeypatch):
    monkeypatch.setattr(search_mod, "finetune", fake_finetune(peaked, []))
    run_search(plan_for(tmp_path, trials=1, methods=("drophead",)))
    with pytest.raises(ValueError, match="was searched with"):
        search_results(plan_for(tmp_path, trials=1, methods=("drophead",), epochs=7))


def test_the_grid_sampler_runs_each_point_once(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(search_mod, "finetune", fake_finetune(peaked, calls))
    run_search(plan_for(tmp_path, trials=50, sampler="grid", methods=("addrop",), pruning=False))
    seen = sorted((c.method_options["p"], c.method_options["q"]) for c in calls)
    grid = grid_of("addrop")
    assert seen == sorted((p, q) for p in grid["p"] for q in grid["q"])


# -- the whole study on a tiny model ----------------------------------------------------------------


def tiny_study(tiny_run, out, **overrides) -> AdviseConfig:
    recipe = toy_train_config(tiny_run, max_steps=None, learning_rate=1e-2, log_steps=2)
    values = dict(
        output_dir=str(out),
        methods=("scores-dropout",),
        regime_epochs=3,
        trials=2,
        seeds=(1, 2),
        progress=False,
        echo=lambda line: None,
    )
    values.update(overrides)
    return AdviseConfig(recipe, **values)


def test_the_search_never_reads_the_evaluation_split(tiny_run, monkeypatch):
    """A planted evaluation split (the dev labels flipped) leaves every trial's score as it was."""
    flipped = tiny_run["tmp"] / "flipped.csv"
    lines = Path(tiny_run["dev"]).read_text().splitlines()
    flipped.write_text(
        "\n".join([lines[0]] + [f"{t.rsplit(',', 1)[0]},{1 - int(t[-1])}" for t in lines[1:]]) + "\n"
    )
    encoded: list[int] = []
    from attendout.run import setup

    real_encode = setup.encode_examples
    monkeypatch.setattr(
        setup,
        "encode_examples",
        lambda c, task, tok, ex: encoded.append(len(ex)) or real_encode(c, task, tok, ex),
    )
    found = {}
    for name, dev in (("dev", tiny_run["dev"]), ("planted", str(flipped))):
        config = tiny_study(tiny_run, tiny_run["tmp"] / name, until="search")
        config.recipe.eval_files = {"dev": dev}
        found[name] = [(t["params"], t["value"]) for t in advise(config).searches["scores-dropout"].trials]
    assert found["dev"] == found["planted"]
    dev_size = len(lines) - 1
    assert dev_size not in encoded  # only train and the validation split carved from it were encoded


@pytest.fixture(scope="module")
def finished_study(tmp_path_factory):
    """One tiny study run to its answer (``advice`` under its tiny run's folder), for the tests that read it
    or start another study beside it: each tiny study trains 11 runs. Tests that use it change none of its
    files but those a rerun writes again."""
    run = make_tiny_run(tmp_path_factory.mktemp("finished-study"))
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(run["tmp"])  # the folders it records are named from here (issue 69, class 8)
        advice = advise(tiny_study(run, run["tmp"] / "advice"))
    return run, advice


def test_a_trial_killed_mid_training_resumes_to_the_uninterrupted_score(finished_study, monkeypatch):
    tiny_run, uninterrupted = finished_study

    def values(study_dir):
        return [
            (t["params"], t["value"])
            for t in advise(tiny_study(tiny_run, study_dir, until="search")).searches["scores-dropout"].trials
        ]

    whole = [(t["params"], t["value"]) for t in uninterrupted.searches["scores-dropout"].trials]
    real = search_mod.finetune
    seen = {"validations": 0}

    def killed_at_the_second_validation(config, on_log=None):
        def listen(record):
            if "validation" in record and config.method != "none":  # a trial, not plain's reference run
                seen["validations"] += 1
                if seen["validations"] == 2:
                    raise KeyboardInterrupt
            if on_log is not None:
                on_log(record)

        return real(config, listen)

    monkeypatch.setattr(search_mod, "finetune", killed_at_the_second_validation)
    with pytest.raises(KeyboardInterrupt):
        values(tiny_run["tmp"] / "killed")
    monkeypatch.setattr(search_mod, "finetune", real)
    resumed = values(tiny_run["tmp"] / "killed")
    assert resumed[0] == whole[0]  # the killed trial: same options, same score as uninterrupted
    assert len(resumed) == len(whole)
    log = (
        tiny_run["tmp"] / "killed" / "search" / "scores-dropout" / "trial-000" / "seed-0" / "log.jsonl"
    ).read_text()
    assert "validation" in log  # the first trial's folder was resumed, not replaced


def test_advise_end_to_end_writes_its_answer_and_a_rerun_trains_nothing(finished_study, monkeypatch):
    tiny_run, advice = finished_study
    monkeypatch.chdir(tiny_run["tmp"])  # where the study ran: the folders it records are named from there
    out = tiny_run["tmp"] / "advice"
    for name in ("advice.md", "advice.png", "advice.toml", "search.db", "confirm.toml", "regime.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "regime.json").read_text())["run"] == "advice/regime"
    cell = json.loads(next((out / "confirm").rglob("cell.json")).read_text())
    assert cell["experiment_file"] == "advice/confirm.toml"
    assert advice.sentence in (out / "advice.md").read_text()
    # the confirmation's runs used the fresh seeds; the search's the search seed
    confirm_seeds = {
        json.loads(p.read_text())["config"]["seed"] for p in (out / "confirm").rglob("config.json")
    }
    search_seeds = {
        json.loads(p.read_text())["config"]["seed"] for p in (out / "search").rglob("config.json")
    }
    assert confirm_seeds == {1, 2} and search_seeds == {0, 1000}
    # the answer is a file finetune --config and load_config take
    method, training = load_config_file(out / "advice.toml")
    assert training["epochs"] == advice.regime.budget
    tuned = load_config(out / "tuned" / "scores-dropout.toml")
    assert tuned.p == advice.searches["scores-dropout"].options["p"]
    # a second invocation resumes: nothing trains again
    from attendout.run import loop

    monkeypatch.setattr(loop.TrainingLoop, "fit", lambda self: pytest.fail("a finished run trained again"))
    again = advise(tiny_study(tiny_run, out))
    assert again.sentence == advice.sentence


def test_the_confirmation_reuses_finished_runs_of_the_same_configuration(finished_study):
    tiny_run, mine = finished_study
    first = tiny_run["tmp"] / "advice"
    second = tiny_run["tmp"] / "second"  # another study of the same recipe: its none runs are the first's
    theirs = advise(tiny_study(tiny_run, second, until="confirm", reuse_runs=str(first / "confirm")))
    for seed in (1, 2):
        record = json.loads(next((second / "confirm").rglob(f"none/seed-{seed}/cell.json")).read_text())
        assert record["reused_from"].startswith(str(first / "confirm"))
        original = next((first / "confirm").rglob(f"none/seed-{seed}/results.json")).read_text()
        assert next((second / "confirm").rglob(f"none/seed-{seed}/results.json")).read_text() == original
    # a copied run was timed elsewhere: no time ratio against it (the first study timed its own runs)
    assert all(r.cost is not None and r.cost > 0 for r in mine.confirmation.rows)
    assert theirs.confirmation.rows and all(r.cost is None for r in theirs.confirmation.rows)
    # runs copied in are not fresh to the second study: its table and its answer say so (issue 57)
    assert mine.confirmation.fresh and not theirs.confirmation.fresh
    assert {k.split("/")[-2:][0] for k in theirs.confirmation.reused} >= {"none"}
    answer = advise(tiny_study(tiny_run, second, reuse_runs=str(first / "confirm")))
    text = (second / "advice.md").read_text()
    assert "**Runs not fresh to this study:**" in text and f"{len(theirs.confirmation.reused)} of its" in text
    assert "fresh seeds" not in text.split("## Search")[0] and "not fresh to this study" in answer.sentence


def test_a_study_whose_plain_run_learns_nothing_answers_chance_not_a_method(tiny_run):
    """The new user's mistake of issue 47: a budget at which plain fine-tuning predicts the majority class.
    --epochs given: no probe; advice.md's first sentence says "chance"; advice.toml stays plain."""
    out = tiny_run["tmp"] / "chance"
    config = tiny_study(tiny_run, out, epochs=1)
    config.recipe.learning_rate = 1e-12  # nothing is learned: the head's random start, all one class or near
    advice = advise(config)
    assert advice.regime is None and not (out / "regime").exists()  # --epochs given: the probe is skipped
    first = (out / "advice.md").read_text().split("**")[1].split(". ")[0]
    assert first.startswith("Cannot answer") and "chance" in first
    assert not advice.answered and advice.winner is None
    assert json.loads((out / "advice.json").read_text())["answered"] is False
    assert load_config_file(out / "advice.toml")[0].name == "none"
    assert "Search objective" in (out / "advice.md").read_text()  # the objective's noise is stated


def test_a_budget_the_probe_shows_too_short_says_so_in_the_answers_first_sentence(tiny_run):
    """--epochs below where the regime probe (--regime-run) still climbed: advice.md's first sentence says
    plain fine-tuning is still learning there ("undertrain"), and that the answer is for that budget."""
    probe = tiny_run["tmp"] / "probe"
    probe.mkdir()
    (probe / "config.json").write_text(json.dumps({"task": {"name": "file", "metrics": ["accuracy"]}}))
    (probe / "results.json").write_text(json.dumps({"main_metric": "accuracy"}))
    records = []
    for epoch, (score, loss) in enumerate([(0.6, 0.65), (0.7, 0.6), (0.8, 0.5), (0.86, 0.4), (0.9, 0.3)], 1):
        records.append({"step": 10 * epoch - 5, "epoch": epoch - 0.5, "loss": 0.7 - 0.1 * epoch})
        records.append(
            {"step": 10 * epoch, "epoch": float(epoch), "validation": {"accuracy": score, "loss": loss}}
        )
    (probe / "log.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    out = tiny_run["tmp"] / "undertrained"
    advice = advise(tiny_study(tiny_run, out, epochs=3, regime_run=str(probe)))
    assert advice.regime is not None and advice.regime.budget == 3  # the probe was read, the budget kept
    first = (out / "advice.md").read_text().split("**")[1].split(". ")[0]
    assert "still learning, so it undertrains" in advice.sentence, advice.sentence
    assert "over epochs 1-4 of the 5-epoch regime probe" in advice.sentence, advice.sentence
    if advice.answered:  # a recommendation (of a method, or of none) says so in its first sentence
        assert first.startswith("At this budget (3 epochs) plain fine-tuning is still learning"), first
        assert "this answer is for 3-epoch training" in first, first
    budget = json.loads((out / "advice.json").read_text())["budget"]
    assert budget["state"] == LEARNING and budget["epochs"] == [1, 2, 3, 4]


def test_a_regime_run_that_is_not_finished_is_refused_naming_its_state(tiny_run):
    """--regime-run of a run stopped (or killed) before its end: its curve stops where the run did, so it is
    refused through the one reader of a run's state (issue 61), before anything trains."""
    probe = tiny_run["tmp"] / "stopped-probe"
    probe.mkdir()
    (probe / "config.json").write_text(json.dumps({"task": {"name": "file", "metrics": ["accuracy"]}}))
    records = [{"step": 10, "epoch": 1.0, "validation": {"accuracy": 0.6, "loss": 0.6}}]
    (probe / "log.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")  # no results.json
    out = tiny_run["tmp"] / "from-a-stopped-probe"
    with pytest.raises(ValueError, match=r"--regime-run .*stopped-probe is not finished: it is unfinished"):
        advise(tiny_study(tiny_run, out, epochs=3, regime_run=str(probe)))
    assert not (out / "advice.md").exists()


def pilot_confirmation(seeds, sd: float, methods: int = 3, baseline: float = 0.8) -> Confirmation:
    """A confirmation over ``seeds`` whose methods' paired differences have standard deviation ``sd``."""
    from attendout.report.stats import paired_t_test

    plain = np.full(len(seeds), baseline)
    noise = np.random.default_rng(0).normal(0.0, 1.0, len(seeds))
    if len(seeds) > 1:
        noise = (noise - noise.mean()) / noise.std(ddof=1) * sd
    rows = [
        ConfirmRow.of_test(
            method, {}, paired_t_test(plain + noise, plain), mean=baseline, baseline_mean=baseline
        )
        for method in ("scores-dropout", "attn-dropout", "drophead")[:methods]
    ]
    return Confirmation.of_rows(rows, split="test", metric="accuracy", seeds=seeds, baseline_seeds=len(seeds))


def test_seeds_auto_runs_a_pilot_and_takes_the_count_that_detects_the_gain_at_its_noise_bound(tmp_path):
    from attendout.advise.power import Noise, pooled_df
    from attendout.advise.seeds import PILOT, choose

    trial = {"state": "COMPLETE", "seconds": 600.0}  # two seeds: 300 s a run
    searches = {"scores-dropout": search_mod.MethodSearch("scores-dropout", {"p": 0.1}, 0.01, 0, [trial])}
    plan = plan_for(tmp_path, repeats=2, objective="delta", search_seed=3)  # search seeds 3 and 1003
    piloted: list[tuple[int, ...]] = []

    def pilot(seeds):
        piloted.append(tuple(seeds))
        return pilot_confirmation(seeds, 0.02)

    def chosen(out, **overrides):
        values = dict(
            seeds="auto",
            out=out,
            plan=plan,
            searches=searches,
            methods=3,
            detect=0.02,
            alpha=0.05,
            max_seeds=60,
            confirm_hours=None,
            pilot=pilot,
            echo=lambda line: None,
        )
        values.update(overrides)
        return choose(**values)

    seeds = chosen(tmp_path / "a")
    assert piloted == [(1, 2, 4, 5, 6)]  # the pilot's PILOT fresh seeds, never a search seed
    bound = Noise(0.02, pooled_df([PILOT] * 3)).upper()
    assert bound > 0.02  # the count is sized at the bound, not at the noise observed
    assert len(seeds) == seeds_needed(bound, 0.02, 0.05, 3) > seeds_needed(0.02, 0.02, 0.05, 3)
    assert seeds[:PILOT] == piloted[0] and 3 not in seeds and 1003 not in seeds  # the pilot's runs come first
    record = json.loads((tmp_path / "a" / "seeds.json").read_text())
    assert record["seeds"] == list(seeds) and record["pilot"]["seeds"] == list(piloted[0])
    assert "upper bound" in record["why"]
    assert chosen(tmp_path / "a") == seeds and len(piloted) == 1  # kept on resuming: no second pilot
    # one hour at 300 s a run for 4 cells a seed fits 3 seeds: the pilot's 5 are kept
    assert len(chosen(tmp_path / "b", confirm_hours=1.0)) == PILOT
    assert "1 h at 300 s a run" in json.loads((tmp_path / "b" / "seeds.json").read_text())["why"]
    # at most --max-seeds
    assert len(chosen(tmp_path / "c", max_seeds=8)) == 8
    # a pilot whose differences have no spread measured (one seed each) keeps the pilot's seeds, and says why
    one = chosen(tmp_path / "d", pilot=lambda seeds: pilot_confirmation(seeds[:1], 0.02))
    assert len(one) == PILOT
    assert "no noise" in json.loads((tmp_path / "d" / "seeds.json").read_text())["why"]
    assert chosen(tmp_path / "e", seeds=(7, 8)) == (7, 8)  # given seeds are kept as given


def test_a_rerun_with_another_recipe_is_refused(tiny_run):
    out = tiny_run["tmp"] / "advice"
    advise(tiny_study(tiny_run, out, until="regime"))
    other = tiny_study(tiny_run, out, until="regime")
    other.recipe.learning_rate = 1e-4
    with pytest.raises(ValueError, match="holds a study with another recipe"):
        advise(other)


# -- stage 4: the verdict ---------------------------------------------------------------------------


def row(method, delta, p_holm, **extra) -> ConfirmRow:
    values = dict(
        method=method,
        options={"p": 0.2},
        setting="p = 0.2",
        seeds=5,
        mean=0.5 + delta,
        baseline_mean=0.5,
        delta=delta,
        sd=0.01,
        p=p_holm / 2,
        p_holm=p_holm,
        t_low=delta - 0.01,
        t_high=delta + 0.01,
        boot_low=None,
        boot_high=None,
        cost=1.02,
    )
    values.update(extra)
    return ConfirmRow(**values)


def confirmation(rows, detectable=0.03, floor=None) -> Confirmation:
    return Confirmation(
        split="dev",
        metric="accuracy",
        seeds=(1, 2, 3, 4, 5),
        rows=rows,
        baseline_seeds=5,
        detectable=detectable,
        detectable_alpha=detectable * 0.8,
        table=None,
        floor=floor,
        noise=Noise(
            pooled_sd([r.sd for r in rows], [r.seeds for r in rows]), pooled_df([r.seeds for r in rows])
        ),
    )


def test_verdict_recommends_only_a_confirmed_gain():
    v = verdict(confirmation([row("scores-dropout", 0.012, 0.03), row("drophead", 0.02, 0.2)]))
    assert v.winner.method == "scores-dropout"
    assert v.sentence.startswith("Use scores-dropout at p = 0.2: +1.2 ± 1.0 accuracy points")
    assert "p_Holm 0.030" in v.sentence and "1.02x" in v.sentence


def test_verdict_says_none_and_how_large_a_gain_could_hide():
    rows = [row("scores-dropout", 0.012, 0.06), row("drophead", -0.02, 0.01)]
    v = verdict(confirmation(rows), detect=0.05)  # a user who cares about 5 points: 3.0 is fine grain
    assert v.winner is None and v.answered
    assert v.sentence.startswith("None of them") and "3.0 accuracy points or more" in v.sentence
    assert "The closest, scores-dropout" in v.sentence


def test_a_design_that_cannot_see_the_gain_asked_for_says_so_and_how_many_seeds_would():
    rows = [row("scores-dropout", 0.012, 0.06, sd=0.02), row("drophead", -0.02, 0.5, sd=0.02)]
    v = verdict(confirmation(rows, detectable=0.045), detect=0.02)
    assert not v.answered and v.winner is None
    assert v.sentence.startswith("Cannot answer: this design cannot detect a gain you would care about")
    assert "Fine-tune plainly" not in v.sentence
    # the seeds it names detect +1 and +2 points at Holm's strictest level over the 2 methods, at the low and
    # the high end of the measured noise's 80% interval (sd 0.02 over 2 x 4 shared degrees of freedom)
    low_sd, high_sd = Noise(0.02, pooled_df([5, 5])).interval(0.8)
    assert low_sd < 0.02 < high_sd
    for points in (1, 2):
        low, high = (seeds_needed(sd, points / 100, 0.05, 2) for sd in (low_sd, high_sd))
        assert low < high and f"{low} to {high} seeds would detect +{points} point" in v.sentence
        for sd, n in ((low_sd, low), (high_sd, high)):
            assert (
                detectable_difference(sd, n, 0.025) <= points / 100 < detectable_difference(sd, n - 1, 0.025)
            )
    assert "80% interval" in v.sentence and "degrees of freedom" in v.sentence


def test_a_baseline_at_chance_is_a_plain_cannot_answer_with_chance_in_its_first_sentence():
    # CoLA with --epochs 1: every run predicts the majority class (0.5 on a balanced dev)
    rows = [row("scores-dropout", 0.03, 0.001, mean=0.5, baseline_mean=0.5)]
    v = verdict(confirmation(rows, floor=0.5))
    assert not v.answered and v.winner is None
    first = v.sentence.split(". ")[0]
    assert "chance" in first and first.startswith("Cannot answer")
    assert "Use " not in v.sentence and "more epochs" in v.sentence
    # a baseline clearly above the majority class is judged as before
    learned = [row("scores-dropout", 0.012, 0.03, baseline_mean=0.6)]
    assert verdict(confirmation(learned, floor=0.5)).winner is not None


def test_a_recommendation_at_a_budget_still_learning_says_so_first():
    trend = read_trend({1: 0.70, 2: 0.78, 3: 0.82, 4: 0.83}, 2, "accuracy", "the 4-epoch regime probe")
    assert trend.learning and "over epochs 1-4 of the 4-epoch regime probe" in trend.evidence
    v = verdict(confirmation([row("scores-dropout", 0.012, 0.03)]), trend=trend)
    assert v.answered and v.winner.method == "scores-dropout" and v.budget == LEARNING
    first = v.sentence.split(". ")[0]
    assert first.startswith(
        "At this budget (2 epochs) plain fine-tuning is still learning, so it undertrains"
    )
    assert "not for a model trained until it stops improving: use scores-dropout at p = 0.2" in first
    # no answer (a design that cannot see the gain asked for): it still starts "Cannot answer"
    blind = verdict(
        confirmation([row("scores-dropout", 0.012, 0.06, sd=0.02)], detectable=0.045), trend=trend
    )
    assert (
        blind.sentence.startswith("Cannot answer") and "still learning, so it undertrains" in blind.sentence
    )


@pytest.mark.parametrize(
    "curve, budget, state",
    [
        ({1: 0.60, 2: 0.70, 3: 0.80, 4: 0.86, 5: 0.90}, 3, LEARNING),  # the probe climbs past the budget
        ({e: 0.800 + 0.004 * (e - 1) for e in range(1, 8)}, 7, LEARNING),  # issue 57: 0.800 -> 0.824, steady
        ({1: 0.70, 2: 0.78, 3: 0.76, 4: 0.75}, 2, FLAT),  # the probe peaks at the budget
        ({1: 0.70, 2: 0.80, 3: 0.75, 4: 0.79}, 4, FLAT),  # the last epoch recovers, but not past epoch 2
        # CoLA-500's probe: the peak at epoch 4 is inside the budget of 7; epoch 8's bump is not a rise
        ({1: 0.0, 2: 0.0, 3: 0.078, 4: 0.134, 5: 0.111, 6: 0.08, 7: 0.097, 8: 0.104, 9: 0.096}, 7, FLAT),
        ({1: 0.70, 2: 0.78, 3: 0.82}, 3, UNKNOWN),  # three validations: no noise to set a slope against
        ({1: 0.70}, 1, UNKNOWN),  # one validation: "cannot tell", not "no"
        ({1: 0.70, 2: 0.75, 3: 0.8, 4: 0.81}, 6, UNKNOWN),  # the curve stops before the budget does
    ],
)
def test_the_trend_at_the_budget_is_read_from_the_slope_against_the_curves_noise(curve, budget, state):
    assert read_trend(curve, budget, "accuracy", "a test curve").state == state
    # perplexity falls as it improves: the same curves mirrored
    mirrored = {e: 50 * (2 - v) for e, v in curve.items()}
    assert read_trend(mirrored, budget, "perplexity", "a test curve").state == state


def test_seeds_needed_is_the_fewest_that_detect_the_difference():
    for sd, delta, m in ((0.02, 0.01, 1), (0.02, 0.02, 5), (1.5, 1.0, 2)):
        n = seeds_needed(sd, delta, 0.05, m)
        assert detectable_difference(sd, n, 0.05 / m) <= delta < detectable_difference(sd, n - 1, 0.05 / m)
    assert seeds_needed(1.0, 0.001, 0.05, 1) is None  # more than 200
    assert seeds_needed(float("nan"), 0.01) is None


# -- config files and the command line ----------------------------------------------------------------


def test_a_config_file_round_trips_and_finetune_takes_it(tiny_run, tmp_path):
    path = save_config(tmp_path / "best.toml", get_method_config("scores-dropout", p=0.15), {"epochs": 2})
    assert load_config(path) == get_method_config("scores-dropout", p=0.15)
    out = tmp_path / "run"
    args = toy_cli_args(tiny_run, "--config", str(path), output_dir=out)
    assert main(args) == 0
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["method"] == "scores-dropout" and config["method_options"]["p"] == 0.15
    assert config["epochs"] == 2.0
    # a flag overrides the file; a contradicting method is refused
    assert (
        main([*toy_cli_args(tiny_run, "--config", str(path), "--p", "0.3", output_dir=out), "--overwrite"])
        == 0
    )
    assert json.loads((out / "config.json").read_text())["config"]["method_options"]["p"] == 0.3
    assert main(toy_cli_args(tiny_run, "--config", str(path), "--method", "drophead", output_dir=out)) == 2


@pytest.mark.parametrize(
    "text, message",
    [
        ('[method]\nname = "scores-dropout"\np = 1.5\n', "p must be"),
        ('[method]\nname = "scores-dropout"\nq = 0.1\n', "has no option 'q'"),
        ('[method]\nname = "scores-dropout"\n[training]\nepoch = 3\n', "no field 'epoch'"),
        ("[training]\nepochs = 3\n", "needs a \\[method\\] table"),
        ('[method]\nname = "scores-dropout"\n[extra]\n', "unknown table"),
        ("[method\n", "not valid TOML"),
    ],
)
def test_a_bad_config_file_is_a_sentence_naming_it(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message) as error:
        load_config(path)
    assert str(path) in str(error.value)


def test_advise_help_and_a_bad_flag(capsys, tmp_path):
    with pytest.raises(SystemExit) as done:
        main(["advise", "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert "regime" in text and "--trials" in text and "--storage" in text and "--hours" in text
    assert main(["advise", "--methods", "none", "--output-dir", str(tmp_path / "a")]) == 2
    assert "no strength to search" in capsys.readouterr().err
    assert main(["advise", "--seeds", "some", "--output-dir", str(tmp_path / "b")]) == 2
    assert "--seeds must be a number of seeds or auto" in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize("url", ["nonsense", "postgresql://user@localhost/study"])
def test_a_storage_that_cannot_open_is_a_sentence(url):
    with pytest.raises(ValueError, match=f"--storage {url}"):
        open_storage(url)


def test_a_plain_postgresql_url_takes_psycopg_3_without_psycopg2_and_a_missing_driver_is_named(monkeypatch):
    from attendout.advise.storage import with_driver

    monkeypatch.setitem(sys.modules, "psycopg2", None)  # not installed: find_spec None, import fails
    assert with_driver("postgresql://u@/db?host=/tmp") == "postgresql+psycopg://u@/db?host=/tmp"
    assert with_driver("postgresql+psycopg2://u@h/db") == "postgresql+psycopg2://u@h/db"  # named: kept
    assert with_driver("sqlite:///x.db") == "sqlite:///x.db"
    monkeypatch.setitem(sys.modules, "psycopg", None)  # neither driver
    assert with_driver("postgresql://u@h/db") == "postgresql://u@h/db"
    with pytest.raises(ValueError, match=r"driver is not installed .*pip install 'psycopg\[binary\]'"):
        open_storage("postgresql://user@localhost/study")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_advise_with_the_command_that_goes_on(tiny_run, signum):
    out = tiny_run["tmp"] / "advice"
    args = [
        "-m", "attendout.cli", "advise",
        "--task", "file", "--train-file", tiny_run["train"], "--eval-file", f"dev={tiny_run['dev']}",
        "--text-columns", "text", "--label-column", "label", "--model", tiny_run["model"],
        "--batch-size", "16", "--max-length", "16", "--learning-rate", "1e-2",
        "--regime-epochs", "3", "--methods", "scores-dropout", "--trials", "2", "--seeds", "2",
        "--until", "search", "--output-dir", str(out), "--no-progress", "--threads", "1",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    job = forked.Popen(args, env=env)
    for line in job.stdout:
        if "search scores-dropout: trial 0" in line:  # the first trial has started training
            job.send_signal(signum)
            break
    _, err = job.communicate(timeout=120)
    assert job.returncode == 128 + signum, err
    assert f"stopped by {signal.Signals(signum).name}" in err and "To go on: attendout advise" in err
    assert "Traceback" not in err
    done = forked.run(args, env=env)
    assert done.returncode == 0, done.stderr
    study = optuna.load_study(study_name="scores-dropout", storage=f"sqlite:///{out / 'search.db'}")
    states = sorted(t.state.name for t in study.trials)
    assert states.count("COMPLETE") == 2 and states.count("FAIL") <= 1  # the stopped trial, queued again


def test_what_can_be_checked_without_training_is_checked_before_the_probe(tiny_run):
    """Issue 49, class 3: a typo in --method-option or a storage that cannot open costs no probe."""
    recipe = toy_train_config(tiny_run, max_steps=None)
    with pytest.raises(ValueError, match="--method-option addrop"):
        AdviseConfig(recipe, methods=["addrop"], fixed_options={"addrop": {"atribution": "rd"}})
    with pytest.raises(ValueError, match="--method-option addrop"):
        AdviseConfig(recipe, methods=["addrop"], fixed_options={"addrop": {"attribution": "magic"}})
    out = tiny_run["tmp"] / "early"
    with pytest.raises(ValueError, match="--storage nonsense"):
        advise(tiny_study(tiny_run, out, storage="nonsense"))
    assert not (out / "regime").exists()  # nothing trained


def test_a_worker_waits_for_the_confirmation_runs_of_others_and_takes_over_a_dead_ones(monkeypatch):
    import attendout.advise.confirm as confirm_mod
    from attendout.advise.confirm import _wait_for_others

    class Store:
        def __init__(self, states):
            self.states = list(states)

        def status(self, cell):
            return (self.states[0][cell], "")

        def tick(self):
            if len(self.states) > 1:
                self.states.pop(0)

    class Cell:
        def __init__(self, i):
            self.i, self.key = i, f"cell-{i}"

        def __hash__(self):
            return self.i

    cells = [Cell(0), Cell(1)]
    lines: list[str] = []
    finishing = Store([{cells[0]: "done", cells[1]: "running"}] * 3 + [{cells[0]: "done", cells[1]: "done"}])
    monkeypatch.setattr(confirm_mod.time, "sleep", lambda seconds: finishing.tick())
    assert _wait_for_others(cells, finishing, 0.0, lines.append) is False  # all done: answer
    assert len(lines) == 1 and "waiting for 1 run(s) of other processes (cell-1" in lines[0]
    dying = Store([{cells[0]: "done", cells[1]: "running"}, {cells[0]: "done", cells[1]: "todo"}])
    monkeypatch.setattr(confirm_mod.time, "sleep", lambda seconds: dying.tick())
    assert _wait_for_others(cells, dying, 0.0, lines.append) is True  # its process died: train it here


def test_a_second_worker_waits_for_the_probe_another_process_trains(tiny_run, monkeypatch):
    """Issue 49: a worker started while another is in the regime stage waits, then reads its probe."""
    from attendout.advise import study as study_mod
    from attendout.core.lock import LOCK_FILE

    out = tiny_run["tmp"] / "shared-probe"
    first = advise(tiny_study(tiny_run, out, until="regime"))  # the probe another worker trained
    finished = out / "regime" / "results.json"
    kept = finished.read_text()
    finished.unlink()  # ... as it was while that worker still trained it, holding the folder's lock
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); os.write(fd, b'pid of the other worker'); print('ready', flush=True); "
            "sys.stdin.read()",
            str(out / "regime" / LOCK_FILE),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "ready"
    lines: list[str] = []

    def other_worker_finishes(seconds):  # one poll later the other worker ends, its results written
        finished.write_text(kept)
        holder.stdin.close()
        holder.wait(timeout=30)

    monkeypatch.setattr(study_mod, "PROBE_POLL", 0.0)
    monkeypatch.setattr("time.sleep", other_worker_finishes)
    from attendout.run import loop

    monkeypatch.setattr(
        loop.TrainingLoop, "fit", lambda self: pytest.fail("the waiting worker trained the probe")
    )
    again = advise(tiny_study(tiny_run, out, until="regime", echo=lines.append))
    assert any(
        "waiting for the probe another process is training (pid of the other worker)" in x for x in lines
    )
    assert again.regime == first.regime


def test_an_answer_whose_runs_kept_models_from_before_addrop_acted_says_so_first(tiny_run):
    """A budget of one epoch: AD-DROP's cross-tuning, plain first, never acts, so every AD-DROP run of the
    study is plain fine-tuning. advice.md says so under its sentence; of scores dropout, which acts from
    the first step, it says nothing."""
    out = tiny_run["tmp"] / "advice"
    study = tiny_study(
        tiny_run, out, methods=("addrop", "scores-dropout"), epochs=1, trials=1, seeds=(1, 2),
        fixed_options={"addrop": {"layers": "all"}},
    )  # fmt: skip
    advise(study)
    text = (out / "advice.md").read_text()
    caveats = [line for line in text.splitlines() if "first acted" in line]
    assert len(caveats) == 1
    assert caveats[0].startswith("**addrop: 2 of 2 search runs and 2 of 2 confirmation runs kept a model")
    assert text.index(caveats[0]) < text.index("## Confirmed on")
    # the step each confirmation run kept, by method in seed order, as its results.json says
    kept = {}
    for path in sorted((out / "confirm").rglob("results.json")):
        results = json.loads(path.read_text())
        kept.setdefault(results["method"], {})[results["seed"]] = results["best_step"]
    line = next(line for line in text.splitlines() if line.startswith("Models kept"))
    for method, by_seed in kept.items():
        assert f"{method} {', '.join(str(by_seed[s]) for s in sorted(by_seed))}" in line
