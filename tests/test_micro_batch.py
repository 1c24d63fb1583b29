"""Micro-batches (``micro_batch_size``): the gradient of a batch accumulated over parts of it.

The update must be the whole batch's. With the model's dropout off and methods whose masks do not
depend on how the batch is cut, training with micro-batches reaches the same weights as training
on whole batches, up to float rounding.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from attendout.core.optim import TrainingError
from attendout.run.loop import TrainingLoop, finetune
from conftest import no_dropout, save_tiny_model_dir, toy_train_config


def read_log(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


def weights(folder) -> dict[str, torch.Tensor]:
    return AutoModelForSequenceClassification.from_pretrained(folder).state_dict()


# Methods whose training is deterministic once the model's dropout is off, and whose masks do not
# depend on the cut: AD-DROP with q = 1 drops its whole (attribution-ranked) candidate region, per
# example; AttendOut samples the Generator's masks for the whole batch and cuts them with it.
METHODS = [
    ("none", {}),
    ("addrop", {"attribution": "ga", "q": 1.0, "cross_tuning": "off", "start": "addrop"}),
    ("attendout", {"dropout_steps": 2, "eval_samples": 8, "reinit_temperature": 0.0}),
]


@pytest.mark.parametrize("method,options", METHODS, ids=[m for m, _ in METHODS])
def test_micro_batches_reach_the_weights_of_whole_batches(tiny_run, method, options):
    model = save_tiny_model_dir(tiny_run["tmp"] / "no-dropout", **no_dropout("bert"))
    results = {}
    for name, micro in (("whole", None), ("micro", 5)):  # 16 = 5 + 5 + 5 + 1: unequal parts
        config = toy_train_config(
            tiny_run,
            model=model,
            method=method,
            method_options=options,
            micro_batch_size=micro,
            learning_rate=1e-3,
            max_steps=5,
            eval_steps=5,
            log_steps=1,
            output_dir=str(tiny_run["tmp"] / name),
        )
        results[name] = finetune(config)
    # Micro-batches are another computation: smaller matrix products sum in another order, and the
    # parts' gradients are added up, so the two runs agree only up to float32 rounding, whose size
    # depends on the CPU's kernels (ATEN_CPU_CAPABILITY) and the thread count. Measured over
    # `make test-matrix` (default, avx2, avx512 kernels x 1, 2 threads): weights within 2.4e-7,
    # training and evaluation losses within 2e-7 relative. The bounds below are ~50-100x that, and
    # ~100x below what a wrong accumulation does: weighting the four parts equally instead of by
    # their share of the batch moved the weights by 5e-3, the training losses by 2% and the
    # evaluation loss by 0.3% (training itself moves the weights by 3e-3).
    whole, micro = weights(tiny_run["tmp"] / "whole" / "model"), weights(tiny_run["tmp"] / "micro" / "model")
    start = weights(model)
    assert any(not torch.allclose(whole[k], start[k], atol=1e-4) for k in start)  # training moved them
    for key, value in whole.items():
        torch.testing.assert_close(micro[key], value, rtol=1e-4, atol=2e-5, msg=key)
    losses = {name: [r["loss"] for r in read_log(tiny_run["tmp"] / name) if "loss" in r] for name in results}
    assert len(losses["whole"]) == 5
    assert losses["micro"] == pytest.approx(losses["whole"], rel=1e-5)
    # Accuracy and F1 count predictions (steps of 1/24 here): rounding cannot move them unless a
    # logit margin is below 1e-6, so within the tolerance they must be equal.
    for split, metrics in results["whole"]["eval"].items():
        assert results["micro"]["eval"][split] == pytest.approx(metrics, rel=1e-5), split
    assert results["micro"]["validation"] == pytest.approx(results["whole"]["validation"], rel=1e-5)


def test_micro_batches_cover_the_batch_once_in_order(tiny_run):
    trainer = TrainingLoop(toy_train_config(tiny_run, micro_batch_size=3))
    batch = next(trainer.train_set.batches(8))
    parts = trainer.micro_batches(batch)
    assert [(rows.start, rows.stop) for rows, _ in parts] == [(0, 3), (3, 6), (6, 8)]
    for key, value in batch.items():
        torch.testing.assert_close(torch.cat([part[key] for _, part in parts]), value)
        assert all(part[key].shape[1:] == value.shape[1:] for _, part in parts)  # the batch's padded length
    trainer.config.micro_batch_size = 8
    assert len(trainer.micro_batches(batch)) == 1


def test_a_nan_micro_batch_stops_before_any_weight_changes(tiny_run):
    trainer = TrainingLoop(toy_train_config(tiny_run, micro_batch_size=4))
    batch = next(trainer.train_set.batches(16))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    calls = []
    forward = trainer.model.forward

    def third_part_is_nan(**inputs):
        calls.append(len(calls))
        out = forward(**inputs)
        if len(calls) == 3:
            out.loss = out.loss * float("nan")
        return out

    trainer.model.forward = third_part_is_nan
    with pytest.raises(TrainingError, match="loss is nan at step 1"):
        trainer.train_step(batch)
    assert calls == [0, 1, 2]  # the fourth micro-batch never ran
    assert all(torch.equal(v, before[k]) for k, v in trainer.model.state_dict().items())
    assert all(p.grad is None for p in trainer.model.parameters())


def test_bad_micro_batch_size_is_a_clear_error(tiny_run):
    with pytest.raises(ValueError, match="micro_batch_size must be at least 1, got 0"):
        toy_train_config(tiny_run, micro_batch_size=0)
