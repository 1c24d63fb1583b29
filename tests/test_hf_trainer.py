"""Every method through transformers.Trainer (attendout.hf.Trainer), and no silent no-op in the stock one."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch.utils.data import SequentialSampler
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, TrainingArguments

import attendout
from attendout.attention import get_controller
from attendout.hf import Trainer as MethodTrainer
from attendout.methods import METHODS
from attendout.run.loop import TrainingLoop
from conftest import make_batch, no_dropout, save_tiny_model_dir, tiny_model, toy_train_config

pytestmark = pytest.mark.usefixtures("one_thread")


class InOrder(MethodTrainer):
    """Batches in the dataset's order (the test gives the order of attendout's own loop)."""

    def _get_train_sampler(self, *args, **kwargs):
        return SequentialSampler(self.train_dataset)


def features(encoded, indices=None) -> list[dict]:
    indices = range(len(encoded)) if indices is None else indices
    return [{**encoded.features[i], "labels": int(encoded.labels[i])} for i in indices]


def hf_args(tmp_path, **overrides) -> TrainingArguments:
    values = dict(
        output_dir=str(tmp_path / "hf"),
        per_device_train_batch_size=16,
        per_device_eval_batch_size=16,
        max_steps=4,
        learning_rate=5e-5,
        weight_decay=0.01,
        warmup_steps=0,
        lr_scheduler_type="linear",
        max_grad_norm=1.0,
        optim="adamw_torch",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        use_cpu=True,
        seed=42,
        disable_tqdm=True,
    )
    values.update(overrides)
    return TrainingArguments(**values)


def hf_trainer(
    tiny_run, method: str, options: dict | None = None, *, model_init: bool = False, **args
) -> MethodTrainer:
    """A tiny model, the toy data tokenised by attendout's loop, and attendout.hf.Trainer.

    ``model_init``: the model comes from ``model_init`` (a fresh one at each ``train()``), not ``model``.
    """
    data = TrainingLoop(toy_train_config(tiny_run))  # for its tokenised splits

    def load():
        return AutoModelForSequenceClassification.from_pretrained(tiny_run["model"])

    return MethodTrainer(
        **({"model_init": load} if model_init else {"model": load()}),
        args=hf_args(tiny_run["tmp"], **args),
        train_dataset=features(data.train_set),
        eval_dataset=features(data.eval_sets["dev"]),
        data_collator=DataCollatorWithPadding(data.tokenizer),
        method=method,
        method_options=options or {},
        validation_dataset=features(data.validation_set),
        max_length=16,
    )


def logged(trainer, key: str) -> list[float]:
    return [record[key] for record in trainer.state.log_history if key in record]


OPTIONS = {
    "addrop": {"cross_tuning": "off", "q": 1.0},
    "attendout": {"dropout_steps": 2, "eval_samples": 8},
    "synthesizer": {"synthesizer_lr": 0.01},
}


#: attendout's own methods (tests register others of their own)
BUILT_IN = sorted(name for name, config in METHODS.items() if config.__module__.startswith("attendout."))


@pytest.mark.parametrize("method", BUILT_IN)
def test_every_method_trains_through_transformers_trainer_and_logs_its_statistics(tiny_run, method):
    trainer = hf_trainer(tiny_run, method, OPTIONS.get(method))
    trainer.train()
    losses = logged(trainer, "loss")
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    stats = {k for record in trainer.state.log_history for k in record if "/" in k}
    if method == "none":
        assert stats == set()
    else:
        assert stats, f"{method}: no statistics reached log_history"
    if method == "addrop":
        assert min(logged(trainer, "addrop/candidate_fraction")) > 0.2
        assert logged(trainer, "addrop/drop_rate_in_candidates") == [1.0] * 4
    if method == "attendout":
        assert logged(trainer, "attendout/games")[-1] == 2  # a game every 2 of the 4 steps
        assert logged(trainer, "attendout/generator_updates")[-1] == 1
    if method == "synthesizer":
        assert {g["lr"] for g in trainer.optimizer.param_groups if g["params"]} >= {0.0}  # decayed to 0
        assert {g["initial_lr"] for g in trainer.optimizer.param_groups} == {0.01, 5e-5}


def test_scheduled_dropout_follows_the_trainers_progress(tiny_run):
    trainer = hf_trainer(tiny_run, "scheduled", {"start": 0.6, "slopes": [-0.4]})
    trainer.train()
    rates = logged(trainer, "scheduled/scheduled_p/L0")
    # a log line after each of the 4 steps: the rate of the step's progress 0, 1/4, 2/4, 3/4
    assert rates == pytest.approx([0.6, 0.5, 0.4, 0.3])


def test_addrop_cross_tuning_follows_the_trainers_epochs(tiny_run):
    trainer = hf_trainer(tiny_run, "addrop", {}, max_steps=-1, num_train_epochs=2)
    trainer.train()
    active = logged(trainer, "addrop/active")
    per_epoch = len(active) // 2
    assert active == [0.0] * per_epoch + [1.0] * per_epoch  # plain first, AD-DROP the next epoch


def test_attendout_needs_a_validation_dataset(tiny_run):
    trainer = hf_trainer(tiny_run, "attendout", OPTIONS["attendout"])
    trainer.validation_dataset = None
    with pytest.raises(ValueError, match="pass validation_dataset="):
        trainer.train()


@pytest.mark.parametrize(
    ("method", "message"),
    [
        ("addrop", "came without AD-DROP's drops"),
        ("attendout", "came without the Attacker's masks"),
        ("scheduled", "before any progress was given"),
    ],
)
def test_the_stock_trainer_cannot_train_plainly_in_silence(tiny_run, method, message):
    """``apply`` alone, then the stock Trainer: the first training forward raises, naming the way out."""
    model = AutoModelForSequenceClassification.from_pretrained(tiny_run["model"])
    attendout.apply(model, method)
    data = TrainingLoop(toy_train_config(tiny_run))
    trainer = transformers.Trainer(
        model=model,
        args=hf_args(tiny_run["tmp"]),
        train_dataset=features(data.train_set),
        data_collator=DataCollatorWithPadding(data.tokenizer),
    )
    with pytest.raises(RuntimeError, match=message) as error:
        trainer.train()
    assert "attendout.hf.Trainer" in str(error.value)


def test_none_reaches_the_weights_of_attendouts_own_loop(tiny_run):
    """Same data order, seed, schedule and clipping; no dropout: the two loops make the same updates.

    Differences come from float rounding only (fused AdamW here, for-each AdamW there): measured at
    most 7.5e-9 in any weight after 5 steps; training moved the weights by up to 1.5e-4, and the same
    run with the batches in another order ends 2.3e-4 away. The bound, 1e-6, lies between.
    """
    model_dir = save_tiny_model_dir(tiny_run["tmp"] / "still", "bert", **no_dropout("bert"))
    run = {**tiny_run, "model": model_dir}
    ours = TrainingLoop(toy_train_config(run, max_steps=5, warmup_ratio=0.0, save_model=False))
    order = torch.randperm(len(ours.train_set), generator=torch.Generator().manual_seed(0)).tolist()
    start = {k: v.clone() for k, v in ours.model.state_dict().items()}
    ours.fit()

    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    theirs = InOrder(
        model=model,
        args=hf_args(tiny_run["tmp"], max_steps=5),
        train_dataset=features(ours.train_set, order),
        data_collator=DataCollatorWithPadding(ours.tokenizer),
        method="none",
    )
    theirs.train()
    moved = max((ours.model.state_dict()[k] - v).abs().max().item() for k, v in start.items())
    assert moved > 1e-5
    for key, value in ours.model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[key], value, rtol=0, atol=1e-6, msg=key)


def test_prepare_drives_a_method_in_a_hand_written_loop():
    """The contract without any Trainer: attach, optimizer from the method's groups, start, steps."""
    model = tiny_model("bert", **no_dropout("bert"))
    strategy = attendout.prepare(model, "addrop", cross_tuning="off", q=1.0)
    optimizer = torch.optim.AdamW(strategy.param_groups(model, 0.01), lr=1e-3)
    strategy.start(attendout.LoopContext(device="cpu", total_steps=3, steps_per_epoch=3))
    model.train()
    for step in range(3):
        batch = make_batch(batch=4, length=10, seed=step)
        extra = strategy.before_forward(model, batch, attendout.StepInfo(step))
        model(**batch, **extra).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        strategy.after_step([batch], attendout.StepInfo(step))
    stats = strategy.stats()
    assert stats["addrop/active"] == 1.0 and stats["addrop/drop_rate_in_candidates"] == 1.0


# hyperparameter search: the method's options in the search space -----------------------------------


def methods_on(model) -> list:
    """The attendout methods on ``model``'s hook (none without the hook)."""
    controller = get_controller(model)
    return [] if controller is None else list(controller.methods)


def test_a_model_from_model_init_trains_with_the_method(tiny_run):
    """``train()`` makes a new model with ``model_init``: the method goes to it, not to the first one."""
    trainer = hf_trainer(tiny_run, "attn-dropout", {"p": 0.15}, model_init=True, max_steps=2)
    first = trainer.model
    trainer.train()
    assert trainer.model is not first
    assert [m.p for m in methods_on(trainer.model)] == [0.15]
    assert methods_on(first) == []  # taken off the model left behind
    assert logged(trainer, "attn-dropout/p/L0") == [0.15, 0.15]  # the trained model's forwards used it


def test_hyperparameter_search_trains_each_trial_with_its_method_options(tiny_run):
    optuna = pytest.importorskip("optuna")
    # layers=[1]: an option of the Trainer's own that each trial keeps (only layer 1's rate is logged)
    trainer = hf_trainer(tiny_run, "attn-dropout", {"p": 0.2, "layers": [1]}, model_init=True, max_steps=2)
    trials, seen = {}, []

    def hp_space(trial):
        trials[trial.number] = trial
        return {
            "learning_rate": trial.suggest_float("learning_rate", 1e-5, 1e-4, log=True),
            "method.p": trial.suggest_float("method.p", 0.05, 0.3),
        }

    def objective(metrics):  # after the trial's training and evaluation, on its model
        model = trainer.model
        rates = {
            k: v for r in trainer.state.log_history for k, v in r.items() if k.startswith("attn-dropout/")
        }
        seen.append(
            {
                "config": trainer.method_config,
                "strategy": trainer.strategy.config,
                "on_model": [(m.p, m.layers) for m in methods_on(model)],
                "logged": rates,
                "learning_rate": trainer.args.learning_rate,
                "strategy_on_model": trainer.strategy.model is model,
                "started": trainer.strategy.loop is not None,  # _start_method ran for this trial's strategy
            }
        )
        return metrics["eval_loss"]

    best = trainer.hyperparameter_search(
        backend="optuna",
        hp_space=hp_space,
        compute_objective=objective,
        n_trials=2,
        direction="minimize",
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    assert len(seen) == 2 and sorted(trials) == [0, 1]
    for number, trial in trials.items():
        p = trial.params["method.p"]
        run = seen[number]
        assert run["config"].p == p and run["config"].layers == [1]
        assert run["strategy"] is run["config"] and run["strategy_on_model"] and run["started"]
        assert run["on_model"] == [(p, [1])]  # one method on the trained model: this trial's
        assert run["logged"] == {"attn-dropout/p/L1": p}  # what its training forwards handed SDPA
        assert run["learning_rate"] == trial.params["learning_rate"]  # the rest still reaches args
    assert trials[0].params["method.p"] != trials[1].params["method.p"]
    # the trainer is left with the last trial's method, as with its args
    assert trainer.method_config.p == trials[1].params["method.p"]
    assert trainer.strategy.config is trainer.method_config
    assert trainer.strategy.model is trainer.model  # None: transformers released it, and the method did
    assert set(best.hyperparameters) == {"learning_rate", "method.p"}
    trainer.train()  # a plain run after the search: a new model, with the method the trainer reports
    assert [(m.p, m.layers) for m in methods_on(trainer.model)] == [(trials[1].params["method.p"], [1])]


def test_hyperparameter_search_can_switch_the_method(tiny_run):
    """``"method"`` picks the trial's method; the Trainer's options belong to its own method and stay there."""
    pytest.importorskip("optuna")
    trainer = hf_trainer(tiny_run, "attn-dropout", {"rescale": False}, model_init=True, max_steps=1)
    seen = []

    def hp_space(trial):
        return [{"method": "scores-dropout", "method.p": 0.25}, {"method.p": 0.05}][trial.number]

    def objective(metrics):
        seen.append((trainer.method_config, [type(m).__name__ for m in methods_on(trainer.model)]))
        return metrics["eval_loss"]

    trainer.hyperparameter_search(
        backend="optuna", hp_space=hp_space, compute_objective=objective, n_trials=2
    )
    (first, first_on), (second, second_on) = seen
    assert (first.name, first.p, first_on) == ("scores-dropout", 0.25, ["ScoresDropout"])
    # a trial that names no method: the Trainer's own, with its options, not the last trial's method
    assert (second.name, second.p, second.rescale, second_on) == (
        "attn-dropout",
        0.05,
        False,
        ["WeightsDropout"],
    )


@pytest.mark.parametrize(
    ("space", "error", "message"),
    [
        ({"method.p": 1.5}, ValueError, r"attn-dropout: p must be in \[0, 1\), got 1.5"),
        ({"method.nope": 1}, ValueError, r"method 'attn-dropout' has no option 'nope'"),
        ({"method": "no-such-method"}, ValueError, r"unknown method 'no-such-method'"),
    ],
)
def test_a_method_option_the_method_refuses_stops_the_search(tiny_run, space, error, message):
    """Not a warning and a trial run without it (what transformers does with keys it does not know)."""
    pytest.importorskip("optuna")
    trainer = hf_trainer(tiny_run, "attn-dropout", {"p": 0.2}, model_init=True, max_steps=1)
    with pytest.raises(error, match=message) as raised:
        trainer.hyperparameter_search(backend="optuna", hp_space=lambda trial: space, n_trials=1)
    assert "from hp_space" in str(raised.value)
    assert trainer.state.global_step == 0  # refused before any training


def test_hyperparameter_search_needs_model_init(tiny_run):
    """As transformers requires: each trial needs a fresh model to put its method on."""
    pytest.importorskip("optuna")
    trainer = hf_trainer(tiny_run, "attn-dropout", {"p": 0.2})
    with pytest.raises(RuntimeError, match="model_init"):
        trainer.hyperparameter_search(backend="optuna", hp_space=lambda t: {"method.p": 0.1}, n_trials=1)


def test_a_model_init_that_returns_the_same_model_gets_one_method_at_a_time(tiny_run):
    """The last trial's method comes off before the next is put on: never two methods on one model."""
    pytest.importorskip("optuna")
    trainer = hf_trainer(tiny_run, "attn-dropout", {"p": 0.2}, max_steps=1)
    model = trainer.model
    trainer.model_init = lambda: model
    seen = []

    def objective(metrics):
        seen.append([m.p for m in methods_on(model)])
        return metrics["eval_loss"]

    space = [{"method.p": 0.1}, {"method.p": 0.3}]
    trainer.hyperparameter_search(
        backend="optuna", hp_space=lambda t: space[t.number], compute_objective=objective, n_trials=2
    )
    assert seen == [[0.1], [0.3]]
