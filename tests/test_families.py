"""The encoders people fine-tune today: ModernBERT and EuroBERT (RoPE; through AttentionInterface),
DeBERTa-v2/v3 (disentangled attention; through module hooks, attendout/attention/deberta.py) and MPNet
(a relative position bias in its own attention code; attendout/attention/mpnet.py, tests/test_mpnet.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding

import attendout
from attendout.attention import AttentionEdit, get_controller
from attendout.cli import main
from attendout.config import TrainConfig
from attendout.contract import ForwardEdits
from attendout.hf import Trainer as MethodTrainer
from attendout.run.loop import TrainingLoop
from conftest import (
    FAMILIES,
    make_batch,
    no_dropout,
    save_tiny_model_dir,
    tiny_config,
    tiny_model,
    write_sentiment_csv,
)
from test_hf_trainer import features, hf_args

PADDED = {1: 7, 3: 4}
NEW = ["modernbert", "eurobert", "deberta-v2", "mpnet"]


def implementations():
    """(family, attention implementation) for every implementation a family's classes offer."""
    pairs = []
    for family in FAMILIES:
        cls = type(tiny_model(family))
        pairs += [(family, "eager")] + ([(family, "sdpa")] if cls._supports_sdpa else [])
    return pairs


def batch_for(family: str, **kwargs) -> dict:
    batch = make_batch(pad_from=PADDED, **kwargs)
    if family == "distilbert":
        batch.pop("token_type_ids", None)
    return batch


@pytest.mark.parametrize(("family", "implementation"), implementations())
def test_the_idle_hook_gives_stock_logits(family, implementation):
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(
        tiny_config(family, **no_dropout(family)), attn_implementation=implementation
    )
    batch = batch_for(family)
    model.eval()
    with torch.no_grad():
        stock = model(**batch).logits
        handle = attendout.apply(model, "scores-dropout", p=0.3)
        torch.testing.assert_close(model(**batch).logits, stock)  # eval mode: regularisers are idle
        model.train()  # no dropout of the model's own: p = 0 is the stock training forward
        handle.remove()
        stock_train = model(**batch).logits
        attendout.apply(model, "scores-dropout", p=0.0)
        torch.testing.assert_close(model(**batch).logits, stock_train)


def stock_probs(model, batch) -> dict[int, torch.Tensor]:
    model.eval()
    with torch.no_grad(), attendout.record_attention(model) as rec:
        model(**batch)
    return rec.probs


def test_modernbert_local_layers_keep_their_window_under_every_drop():
    model = tiny_model("modernbert", **no_dropout("modernbert"))
    assert model.config.layer_types[1] == "sliding_attention"
    batch = make_batch(pad_from=PADDED)
    window = stock_probs(model, batch)[1] > 0  # (B, H, L, L): the keys the local layer can see
    real = batch["attention_mask"].bool()
    band = (torch.arange(12)[:, None] - torch.arange(12)[None, :]).abs() <= model.config.sliding_window
    rows_with_keys = (band[None] & real[:, None, :]).any(-1)  # (B, Lq)
    assert torch.equal(window[:, 0], (band[None] & real[:, None, :]) & rows_with_keys[..., None])
    model.train()
    attendout.apply(model, "scores-dropout", p=0.5)
    with attendout.record_attention(model) as rec:
        model(**batch)
    assert not (rec.probs[1] > 0)[~window.expand_as(rec.probs[1])].any()  # nothing outside the window
    # every key dropped: eq. 4's uniform row, within the window (not over the whole sequence)
    attendout.remove(model)
    every = ForwardEdits({1: AttentionEdit(drop_scores=torch.ones(1, 1, 12, 12, dtype=torch.bool))})
    with attendout.record_attention(model) as rec:
        model(**batch, **every.kwargs())
    expected = window.float() / window.float().sum(-1, keepdim=True).clamp(min=1)
    torch.testing.assert_close(rec.probs[1], expected.expand_as(rec.probs[1]))


def test_addrop_candidates_on_a_local_layer_stay_inside_the_window():
    model = tiny_model("modernbert", **no_dropout("modernbert"))
    batch = make_batch(pad_from=PADDED)
    window = stock_probs(model, batch)[1] > 0
    strategy = attendout.prepare(model, "addrop", cross_tuning="off", q=1.0, p=0.9, layers="all")
    strategy.method.keep_masks = True
    strategy.start(attendout.LoopContext(device="cpu", total_steps=1, steps_per_epoch=1))
    model.train()
    strategy.before_forward(model, batch, attendout.StepInfo(0))
    candidate, dropped = strategy.method.last_masks[1]  # (B, H, L, L) each; q = 1 drops every candidate
    assert candidate.any() and not (candidate & ~window).any()
    assert torch.equal(dropped, candidate)


def deberta():
    return tiny_model("deberta-v2", **no_dropout("deberta-v2"))


def test_deberta_drops_reach_its_mask_and_an_emptied_row_is_uniform_over_real_keys():
    model = deberta()
    batch = make_batch(pad_from=PADDED)
    real = batch["attention_mask"].bool()
    drop = torch.zeros(4, 4, 12, 12, dtype=torch.bool)
    drop[:, :, :, ::2] = True  # every even key
    drop[0, 1, 3] = True  # row 3 of head 1 of example 0: every key
    model.train()
    with attendout.record_attention(model, grads=True) as rec:
        model(**batch, **ForwardEdits({0: AttentionEdit(drop_scores=drop)}).kwargs()).logits[
            :, 1
        ].sum().backward()
    probs = rec.probs[0]
    rows = real[:, None, :, None]  # real queries
    keys = real[:, None, None, :]
    assert not probs[drop & keys & rows & ~(drop.all(-1, keepdim=True))].any()  # dropped = masked
    torch.testing.assert_close(probs[0, 1, 3], torch.full((12,), 1 / 12))  # eq. 4 (example 0 is unpadded)
    torch.testing.assert_close(
        probs.sum(-1)[rows.squeeze(-1).expand(4, 4, 12)], torch.ones(4 * 4 * 12 - 4 * (5 + 8))
    )
    assert not probs[~keys.expand_as(probs)].any()  # padding keys
    assert probs.grad is not None and probs.grad.abs().sum() > 0
    assert torch.equal(rec.probs[1] > 0, (rec.probs[1] > 0) & keys)  # layer 1 untouched but still masked
    with pytest.raises(ValueError, match="does not fit this forward's attention"):
        model(**batch, **ForwardEdits({0: AttentionEdit(drop_scores=drop[:, :, :5])}).kwargs())


def test_deberta_weight_scales_and_skips_act_after_its_softmax():
    model = deberta()
    batch = make_batch(pad_from=PADDED)
    model.train()
    captured = {}
    attendout.apply(model, "none")
    module = get_controller(model).attention_modules[0]
    handle = module.register_forward_hook(lambda m, i, o: captured.__setitem__("out", o[0]))
    scale = torch.ones(4, 4, 1, 1)
    scale[:, 2] = 0.0  # head 2 of every example dropped whole (DropHead's shape)
    model(**batch, **ForwardEdits({0: AttentionEdit(scale_weights=scale)}).kwargs())
    heads = captured["out"].view(4, 12, 4, 8)  # (B, L, H, d)
    assert not heads[:, :, 2].any() and heads[:, :, 1].abs().sum() > 0
    handle.remove()
    with attendout.record_attention(model) as rec:
        model(**batch, **ForwardEdits({1: AttentionEdit(skip=True)}).kwargs())
    real = batch["attention_mask"].bool()
    uniform = real[:, None, None, :].float() / real.sum(-1)[:, None, None, None]
    rows = real[:, None, :, None].expand(4, 4, 12, 12)
    torch.testing.assert_close(rec.probs[1][rows], uniform.expand(4, 4, 12, 12)[rows])


def test_deberta_uninstall_is_stock_again_and_eval_ignores_regularisers():
    model = deberta()
    batch = make_batch(pad_from=PADDED)
    model.eval()
    stock = model(**batch).logits
    attendout.apply(model, "attn-layerdrop", p=0.9)
    torch.testing.assert_close(model(**batch).logits, stock, rtol=0, atol=0)
    attendout.remove(model)
    module = model.deberta.encoder.layer[0].attention.self
    assert "forward" not in module.dropout.__dict__ and not module._forward_pre_hooks
    model.train()
    torch.testing.assert_close(
        model(**batch).logits, model(**batch).logits, rtol=0, atol=0
    )  # no dropout left
    assert not model._forward_pre_hooks and not model._forward_hooks  # the model's edits hooks are gone


@pytest.mark.parametrize("family", NEW)
def test_layerdrop_skips_whole_blocks_of_every_new_family(family):
    model = tiny_model(family, **no_dropout(family))
    handle = attendout.apply(model, "layerdrop", p=0.5)
    model.train()
    torch.manual_seed(0)
    for _ in range(8):
        model(**make_batch(pad_from=PADDED)).loss.backward()
    rates = handle.stats()
    assert len(rates) == model.config.num_hidden_layers and 0 < sum(rates.values()) < len(rates)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("families")
    return {
        "train": write_sentiment_csv(tmp / "train.csv", 48, seed=0),
        "dev": write_sentiment_csv(tmp / "dev.csv", 16, seed=1),
        "models": {family: save_tiny_model_dir(tmp / family, family) for family in NEW},
        "tmp": tmp,
    }


@pytest.mark.parametrize("method", ["attendout", "addrop", "synthesizer"])
@pytest.mark.parametrize("family", NEW)
def test_finetune_on_a_saved_model_of_every_new_family(toy, family, method, capsys):
    out = toy["tmp"] / f"run-{family}-{method}"
    args = [
        "finetune", "--task", "file", "--train-file", toy["train"], "--eval-file", f"dev={toy['dev']}",
        "--text-columns", "text", "--label-column", "label", "--model", toy["models"][family],
        "--batch-size", "16", "--max-length", "16", "--max-steps", "3", "--no-progress",
        "--output-dir", str(out), "--method", method,
    ]  # fmt: skip
    if method == "attendout":
        args += ["--dropout-steps", "2", "--eval-samples", "8"]
    if family == "deberta-v2" and method == "synthesizer":
        assert main(args) == 2
        assert "synthesizer rewrites attention scores" in capsys.readouterr().err
        assert not (out / "results.json").exists()
        return
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["method"] == method and "dev" in results["eval"]
    if method != "synthesizer":  # a plain transformers checkpoint, loaded without attendout
        saved = AutoModelForSequenceClassification.from_pretrained(out / "model")
        assert type(saved).__name__.lower().startswith(family.replace("-", "")[:6])


@pytest.mark.parametrize("family", ["modernbert", "deberta-v2", "mpnet"])
def test_transformers_trainer_runs_addrop_on_a_new_family(toy, family, tmp_path):
    config = dict(
        task="file", train_file=toy["train"], eval_files={"dev": toy["dev"]}, text_columns=["text"],
        label_column="label", model=toy["models"][family], batch_size=16, max_steps=2, max_length=16,
        progress=False, output_dir=str(tmp_path / "data"),
    )  # fmt: skip
    data = TrainingLoop(TrainConfig(**config))  # attendout's loop only tokenises here
    trainer = MethodTrainer(
        model=AutoModelForSequenceClassification.from_pretrained(toy["models"][family]),
        args=hf_args(tmp_path, max_steps=2),
        train_dataset=features(data.train_set),
        data_collator=DataCollatorWithPadding(data.tokenizer),
        method="addrop",
        method_options={"cross_tuning": "off", "q": 1.0},
        max_length=16,
    )
    trainer.train()
    rates = [r for r in trainer.state.log_history if any(k.startswith("addrop/") for k in r)]
    assert rates, trainer.state.log_history


@pytest.mark.slow  # two processes starting torch: about 30 s alone, a minute on a loaded machine
def test_new_families_train_under_torchrun_with_the_same_weights_on_every_process(toy, tmp_path):
    from test_distributed import WORKER, torchrun

    jobs = {
        "deberta-addrop": (
            "deberta-v2",
            {"method": "addrop", "method_options": {"cross_tuning": "off", "q": 1.0}},
        ),
        "modernbert-attendout": (
            "modernbert",
            {"method": "attendout", "method_options": {"dropout_steps": 2, "eval_samples": 8}},
        ),
        "eurobert-drophead": ("eurobert", {"method": "drophead", "method_options": {"p": 0.5}}),
    }
    spec = {"dump": str(tmp_path), "jobs": []}
    for name, (family, options) in jobs.items():
        config = TrainConfig(
            task="file", train_file=toy["train"], eval_files={"dev": toy["dev"]}, text_columns=["text"],
            label_column="label", model=toy["models"][family], batch_size=16, max_steps=4, max_length=16,
            progress=False, output_dir=str(tmp_path / name), **options,
        )  # fmt: skip
        spec["jobs"].append({"name": name, "config": dataclasses.asdict(config)})
    torchrun(str(WORKER), json.dumps(spec))
    for name in jobs:
        ranks = [torch.load(tmp_path / f"{name}-rank{r}.pt", weights_only=False) for r in (0, 1)]
        assert ranks[0]["processes"] == 2
        for key, value in ranks[0]["model"].items():
            torch.testing.assert_close(value, ranks[1]["model"][key], rtol=0, atol=0, msg=f"{name}: {key}")
        assert (tmp_path / name / "results.json").is_file()


@pytest.mark.parametrize("family", ["modernbert", "eurobert"])
def test_synthesizer_on_a_rope_family_needs_its_length_and_then_starts_exact(family):
    model = tiny_model(family, **no_dropout(family))
    with pytest.raises(ValueError, match="has rotary positions and no fixed length .*give l_max"):
        attendout.synthesize(model, "random")  # would size its logits by max_position_embeddings
    batch = make_batch(pad_from=PADDED)
    model.eval()
    before = model(**batch).logits
    attendout.synthesize(model, "random+dot", max_length=16, mixing="head")
    torch.testing.assert_close(model(**batch).logits, before)  # the mixture starts at 0 (up to rounding)
