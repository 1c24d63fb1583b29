"""A checkpoint's classification head meets a task: kept, reordered by name, or refused (issue 21)."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import AutoModelForSequenceClassification

from attendout.models.loading import HeadMismatchError, head_plan, load_for_task
from attendout.tasks import Task
from conftest import make_batch, save_tiny_model_dir


def nli_task(*labels: str) -> Task:
    return Task(
        name="nli",
        kind="classification",
        text_fields=("text",),
        label_names=labels,
        metrics=("accuracy",),
        eval_split_names=("dev",),
        description="",
    )


def saved_head(tmp_path, names: list[str], name: str = "model") -> str:
    id2label = dict(enumerate(names))
    return save_tiny_model_dir(
        tmp_path / name,
        num_labels=len(names),
        id2label=id2label,
        label2id={v: k for k, v in id2label.items()},
        hidden_dropout_prob=0.0,
    )


def logits(model, batch) -> torch.Tensor:
    model.eval()
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def test_labels_named_in_another_order_are_mapped_by_name_and_the_head_rows_permuted(tmp_path, caplog):
    path = saved_head(tmp_path, ["CONTRADICTION", "NEUTRAL", "ENTAILMENT"])
    task = nli_task("contradiction", "entailment", "neutral")  # sorted: another order
    original = AutoModelForSequenceClassification.from_pretrained(path)
    with caplog.at_level(logging.WARNING, logger="attendout.models.loading"):
        model, _, _ = load_for_task(path, task)
    batch = make_batch(3, 10)
    # the task's class i is the checkpoint's class order[i]: contradiction 0, entailment 2, neutral 1
    assert torch.equal(logits(model, batch), logits(original, batch)[:, [0, 2, 1]])
    assert model.config.id2label == {0: "contradiction", 1: "entailment", 2: "neutral"}
    assert "mapped by name" in caplog.text and "CONTRADICTION, NEUTRAL, ENTAILMENT" in caplog.text


def test_the_same_names_in_the_same_order_or_unnamed_classes_keep_the_head(tmp_path):
    path = saved_head(tmp_path, ["neg", "pos"])
    original = AutoModelForSequenceClassification.from_pretrained(path)
    model, _, _ = load_for_task(path, nli_task("NEG", "pos"))
    batch = make_batch(3, 10)
    assert torch.equal(logits(model, batch), logits(original, batch))
    # LABEL_0, LABEL_1 (transformers' defaults) carry no names: taken by position
    assert head_plan(("LABEL_0", "LABEL_1"), nli_task("b", "a")) == ("keep", None)
    assert head_plan(("0", "1"), nli_task("b", "a")) == ("keep", None)
    assert head_plan(None, nli_task("a", "b")) == ("new", None)
    regression = Task("sts", "regression", ("text",), None, ("pearson",), ("dev",), "")
    assert head_plan(("<regression>",), regression) == ("keep", None)
    assert (
        head_plan(("a", "b"), regression)[0]
        == head_plan(("<regression>",), nli_task("a", "b"))[0]
        == "mismatch"
    )


def test_a_head_with_another_label_count_is_an_error_naming_the_option(tmp_path):
    path = saved_head(tmp_path, ["neg", "pos"])
    with pytest.raises(
        HeadMismatchError, match=r"2 labels \(neg, pos\).*3 labels \(a, b, c\).*--ignore-mismatched-head"
    ):
        load_for_task(path, nli_task("a", "b", "c"))
    # other names, same count: the head's classes mean something else
    with pytest.raises(HeadMismatchError, match="--ignore-mismatched-head"):
        load_for_task(path, nli_task("spam", "ham"))


def test_with_the_option_the_head_is_new_and_one_line_names_both_label_sets(tmp_path, caplog):
    path = saved_head(tmp_path, ["neg", "pos"])
    with caplog.at_level(logging.WARNING, logger="attendout.models.loading"):
        model, _, _ = load_for_task(path, nli_task("a", "b", "c"), ignore_mismatched_head=True)
    assert model.config.num_labels == 3 and model.config.id2label == {0: "a", 1: "b", 2: "c"}
    lines = [r.getMessage() for r in caplog.records if "new head" in r.getMessage()]
    assert len(lines) == 1 and "(a, b, c)" in lines[0] and "(neg, pos)" in lines[0]
    assert model.classifier.weight.shape == (3, 32)
    # same count, other names: re-initialised too (not the old rows under new names)
    old = AutoModelForSequenceClassification.from_pretrained(path).classifier.weight
    model, _, _ = load_for_task(path, nli_task("spam", "ham"), ignore_mismatched_head=True)
    assert not torch.equal(model.classifier.weight, old)
    assert model.classifier.bias.abs().sum() == 0  # initialised as transformers initialises a new head
