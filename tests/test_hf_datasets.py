"""attendout.hf.Trainer with a real ``datasets.Dataset`` (issue 49): AttendOut's games batch
``validation_dataset`` as the Trainer batches its own datasets, without the columns ``forward`` does not take."""

from __future__ import annotations

import random

import datasets
import pytest
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

from attendout.hf import Trainer
from conftest import WORDS, save_tiny_model_dir
from test_hf_trainer import hf_args, logged

pytestmark = pytest.mark.usefixtures("one_thread")

POS, NEG = ["good", "great", "fine", "fun", "nice"], ["bad", "awful", "poor", "dull", "boring"]


def sentences(n: int, seed: int) -> dict[str, list]:
    """Toy sentiment rows as a hub dataset has them: an ``idx``, a ``sentence`` string and a ``label``."""
    rng = random.Random(seed)
    rows = {"idx": [], "sentence": [], "label": []}
    for i in range(n):
        label = rng.randint(0, 1)
        words = rng.sample(POS if label else NEG, 2) + rng.sample(WORDS[6:14], 4)
        rng.shuffle(words)
        rows["idx"].append(i)
        rows["sentence"].append(" ".join(words))
        rows["label"].append(label)
    return rows


def tokenized(tokenizer, n: int, seed: int) -> datasets.Dataset:
    """A ``datasets.Dataset`` tokenised with ``.map``: the text column stays beside the encodings."""
    dataset = datasets.Dataset.from_dict(sentences(n, seed))
    return dataset.map(
        lambda batch: tokenizer(batch["sentence"], truncation=True, max_length=16), batched=True
    )


@pytest.fixture
def setting(tmp_path):
    folder = save_tiny_model_dir(tmp_path / "model")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return {
        "model": AutoModelForSequenceClassification.from_pretrained(folder),
        "tokenizer": tokenizer,
        "train": tokenized(tokenizer, 32, seed=0),
        "validation": tokenized(tokenizer, 16, seed=1),
        "tmp": tmp_path,
    }


def attendout_trainer(setting, validation, **args) -> Trainer:
    """AttendOut playing a game every 2 of 4 steps on ``validation``."""
    return Trainer(
        model=setting["model"],
        args=hf_args(setting["tmp"], per_device_train_batch_size=8, per_device_eval_batch_size=8, **args),
        train_dataset=setting["train"],
        data_collator=DataCollatorWithPadding(setting["tokenizer"]),
        processing_class=setting["tokenizer"],
        method="attendout",
        method_options={"dropout_steps": 2, "eval_samples": 8},
        validation_dataset=validation,
        max_length=16,
    )


def test_attendout_plays_its_games_on_a_datasets_dataset_with_a_text_column(setting):
    validation = setting["validation"]
    assert "sentence" in validation.column_names  # what the collator cannot pad
    trainer = attendout_trainer(setting, validation)
    trainer.train()
    assert logged(trainer, "attendout/games")[-1] == 2  # a game every 2 of the 4 steps
    assert logged(trainer, "attendout/generator_updates")[-1] == 1
    assert "sentence" in validation.column_names  # pruned in a copy: the caller's dataset is left as it was


def test_attendout_plays_its_games_on_a_list_of_dicts_with_a_text_column(setting):
    validation = [dict(row) for row in setting["validation"]]  # a plain (torch-style) dataset of dicts
    trainer = attendout_trainer(setting, validation)
    trainer.train()
    assert logged(trainer, "attendout/games")[-1] == 2


def test_remove_unused_columns_false_keeps_the_text_column_as_for_the_trainers_own_datasets(setting):
    """Without pruning the collator meets the text column (before the fix, the games always did)."""
    setting["train"] = setting["train"].remove_columns(["idx", "sentence"])  # only the games meet it
    trainer = attendout_trainer(setting, setting["validation"], remove_unused_columns=False)
    with pytest.raises(ValueError, match="`sentence`"):
        trainer.train()
    assert logged(trainer, "loss")  # it trained until the first game
