"""The fine-tuning loop: a few steps end to end, the run directory, checkpoints, seeds, failures."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

import attendout
import plain
from attendout.attention import AttentionEdit, AttentionMethod
from attendout.config import TrainConfig
from attendout.core.optim import TrainingError
from attendout.methods import MethodConfig, register_method
from attendout.run.loop import TrainingLoop, finetune
from attendout.run.runfolder import RunExistsError
from conftest import toy_train_config


def config(tiny_run, **overrides) -> TrainConfig:
    options = dict(method="scores-dropout", method_options={"p": 0.2}, max_steps=6, eval_steps=3, log_steps=2)
    return toy_train_config(tiny_run, **{**options, **overrides})


def read_log(run_dir):
    return [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]


def test_a_few_steps_write_a_complete_run_directory(tiny_run):
    results = finetune(config(tiny_run))
    run = tiny_run["tmp"] / "run"
    assert json.loads((run / "results.json").read_text()) == json.loads(json.dumps(results))
    assert set(results["eval"]) == {"dev"} and 0 <= results["eval"]["dev"]["accuracy"] <= 1
    saved = json.loads((run / "config.json").read_text())
    assert saved["sizes"]["dev"] == 24 and saved["sizes"]["train"] + saved["sizes"]["validation"] == 96
    assert saved["config"]["method_options"] == {"name": "scores-dropout", "p": 0.2, "layers": None}
    log = read_log(run)
    steps = [r for r in log if "loss" in r]
    assert [r["step"] for r in steps] == [2, 4, 6]
    assert all(abs(r["scores-dropout/drop_rate/L0"] - 0.2) < 0.1 for r in steps)
    assert steps[0]["lr"] > 0
    evals = [r for r in log if "validation" in r]
    assert [r["step"] for r in evals] == [3, 6]
    predictions = (run / "predictions" / "dev.jsonl").read_text().splitlines()
    assert len(predictions) == 24 and set(json.loads(predictions[0])) == {
        "index",
        "prediction",
        "label",
        "score",
    }


def test_training_learns_the_toy_task(tiny_run):
    results = finetune(
        config(
            tiny_run,
            method="none",
            method_options={},
            max_steps=60,
            eval_steps=20,
            learning_rate=3e-3,
            warmup_ratio=0.0,
        )
    )
    assert results["eval"]["dev"]["accuracy"] >= 0.8


LOAD_AND_PREDICT = """
import json, sys, torch
from transformers import AutoModelForSequenceClassification
model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1]).eval()
batch = json.loads(sys.argv[2])
with torch.no_grad():
    logits = model(**{k: torch.tensor(v) for k, v in batch.items()}).logits
assert not any(name.startswith("attendout") for name in sys.modules), "attendout was imported"
print(json.dumps(logits.tolist()))
"""


def test_checkpoint_gives_the_same_logits_in_plain_transformers(tiny_run):
    trainer = TrainingLoop(config(tiny_run, method="attn-layerdrop", method_options={}))
    trainer.fit()
    batch = trainer.eval_sets["dev"].batch(list(range(8)))
    batch.pop("labels")
    trainer.model.eval()
    with torch.no_grad():
        expected = trainer.model(**batch).logits
    out = plain.run(
        LOAD_AND_PREDICT,
        str(tiny_run["tmp"] / "run" / "model"),
        json.dumps({k: v.tolist() for k, v in batch.items()}),
        check=True,
    )
    # Another process, with torch's default thread count instead of the suite's: a reduction split over
    # other threads rounds differently. rtol 1e-5 is about 100 float32 ulps (measured: equal to the bit
    # on every setting of `make test-matrix`).
    torch.testing.assert_close(torch.tensor(json.loads(out.stdout)), expected, rtol=1e-5, atol=1e-6)


def test_data_seed_fixes_the_split_independently_of_the_model_seed(tiny_run):
    def split(**kw):
        trainer = TrainingLoop(config(tiny_run, **kw))
        return trainer.inputs.train_examples.text_a, trainer.inputs.validation_examples.text_a

    a = split(seed=1, data_seed=0, max_train_samples=40)
    b = split(seed=2, data_seed=0, max_train_samples=40, output_dir=str(tiny_run["tmp"] / "b"))
    c = split(seed=1, data_seed=5, max_train_samples=40, output_dir=str(tiny_run["tmp"] / "c"))
    assert a == b and len(a[0]) == 40
    assert a != c


@dataclasses.dataclass
class _NanAfter(MethodConfig):
    """Test-only method: attention weights become NaN from the 3rd training forward on."""


class _Poison(AttentionMethod):
    def __init__(self, config: _NanAfter) -> None:
        self.calls = 0  # training forwards of this model

    def edit(self, call):
        if call.layer == 0:
            self.calls += 1
        if self.calls >= 3:
            return AttentionEdit(scale_weights=torch.tensor(float("nan")))
        return None


register_method("test-nan-after", _NanAfter, _Poison)


def test_nan_loss_stops_with_a_clear_error_and_keeps_the_best_checkpoint(tiny_run):
    with pytest.raises(TrainingError, match=r"loss is nan at step 3"):
        finetune(config(tiny_run, method="test-nan-after", method_options={}, eval_steps=1))
    run = tiny_run["tmp"] / "run"
    assert not (run / "results.json").exists()
    from transformers import AutoModelForSequenceClassification

    AutoModelForSequenceClassification.from_pretrained(run / "model")  # the step-2 checkpoint is intact


def test_a_finished_run_is_not_overwritten(tiny_run):
    finetune(config(tiny_run, max_steps=2))
    run = tiny_run["tmp"] / "run"
    before = (run / "results.json").read_text()
    with pytest.raises(RunExistsError, match="holds a finished run"):
        finetune(config(tiny_run, max_steps=2))
    assert (run / "results.json").read_text() == before
    finetune(config(tiny_run, max_steps=3, overwrite=True))
    assert json.loads((run / "results.json").read_text())["total_steps"] == 3


def test_unsupported_model_fails_before_writing_anything(tiny_run, tmp_path):
    from transformers import DebertaConfig, DebertaForSequenceClassification

    deberta = tmp_path / "deberta"  # DeBERTa v1: its own disentangled attention, not hooked
    DebertaForSequenceClassification(
        DebertaConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37
        )
    ).save_pretrained(deberta)
    for source in (tmp_path / "model").iterdir():
        if source.name.startswith(("tokenizer", "vocab", "special")):
            (deberta / source.name).write_bytes(source.read_bytes())
    with pytest.raises(attendout.UnsupportedModelError, match="DebertaForSequenceClassification"):
        finetune(config(tiny_run, model=str(deberta)))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("batch_size", 0, "batch_size must be at least 1, got 0"),
        ("validation_split", 1.0, r"validation_split must be in \(0, 1\)"),
        ("method", "nope", "unknown method 'nope'"),
        ("precision", "fp8", "precision must be fp32, bf16 or fp16"),
    ],
)
def test_bad_train_config_is_a_clear_error(tiny_run, field, value, match):
    with pytest.raises(ValueError, match=match):
        config(tiny_run, **{field: value, "method_options": {}})


def test_max_steps_0_evaluates_the_model_as_it_is_and_refuses_a_method(tiny_run, tmp_path):
    """A zero-shot floor: no step is taken, the saved and evaluated model is the one loaded."""
    from transformers import AutoModelForSequenceClassification

    config = toy_train_config(tiny_run, max_steps=0, output_dir=str(tmp_path / "zero"))
    results = finetune(config)
    assert results["total_steps"] == 0 and results["best_step"] == 0 and "dev" in results["eval"]
    before = AutoModelForSequenceClassification.from_pretrained(tiny_run["model"])
    after = AutoModelForSequenceClassification.from_pretrained(tmp_path / "zero" / "model")
    base = {k: v for k, v in before.state_dict().items() if not k.startswith("classifier")}
    for name, value in base.items():
        assert torch.equal(after.state_dict()[name], value), name  # untouched: no optimizer step
    with pytest.raises(
        ValueError, match="max_steps 0 evaluates the model as it is, .* method 'addrop' cannot act"
    ):
        dataclasses.replace(config, method="addrop")
    with pytest.raises(ValueError, match="max_steps must be at least 0"):
        dataclasses.replace(config, max_steps=-1)


def test_model_selection_last_keeps_the_final_model_and_best_keeps_the_best(tiny_run, tmp_path):
    """'last' evaluates the model at the end of the budget (validated every epoch all the same); 'best'
    the one of the best validation. The same seed and data: only the kept model differs."""
    runs = {}
    for selection in ("best", "last"):
        config = toy_train_config(
            tiny_run, max_steps=None, epochs=4, eval_steps=1, model_selection=selection,
            learning_rate=5e-3, output_dir=str(tmp_path / selection),
        )  # fmt: skip
        results = finetune(config)
        validations = [
            r for r in (tmp_path / selection / "log.jsonl").read_text().splitlines() if '"validation"' in r
        ]
        runs[selection] = (results, [json.loads(v) for v in validations])
    last, curve = runs["last"]
    assert last["best_step"] == last["total_steps"] == curve[-1]["step"]
    assert last["validation"] == curve[-1]["validation"]
    best, best_curve = runs["best"]
    assert [r["validation"] for r in best_curve] == [r["validation"] for r in curve]  # the same training
    scores = [r["validation"]["accuracy"] for r in best_curve]
    assert best["validation"]["accuracy"] == max(scores)
    assert best_curve[scores.index(max(scores))]["step"] == best["best_step"]
    assert best["best_step"] < last["best_step"]  # this toy peaks early: the two keep different models
    assert best["eval"] != last["eval"]
    with pytest.raises(ValueError, match="model_selection must be 'best' or 'last'"):
        dataclasses.replace(toy_train_config(tiny_run), model_selection="first")
    with pytest.raises(ValueError, match="early_stopping_patience stops at the best validation"):
        dataclasses.replace(toy_train_config(tiny_run), model_selection="last", early_stopping_patience=2)
