"""Every method through transformers.Trainer (attendout.hf.Trainer), and no silent no-op in the stock one."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch.utils.data import SequentialSampler
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, TrainingArguments

import attendout
from attendout.hf import Trainer as MethodTrainer
from attendout.methods import METHODS
from attendout.train import Trainer
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


def hf_trainer(tiny_run, method: str, options: dict | None = None, **args) -> MethodTrainer:
    """A tiny model, the toy data tokenised by attendout's loop, and attendout.hf.Trainer."""
    data = Trainer(toy_train_config(tiny_run))  # for its tokenised splits
    model = AutoModelForSequenceClassification.from_pretrained(tiny_run["model"])
    return MethodTrainer(
        model=model,
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
    data = Trainer(toy_train_config(tiny_run))
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
    ours = Trainer(toy_train_config(run, max_steps=5, warmup_ratio=0.0, save_model=False))
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
