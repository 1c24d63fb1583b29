"""MPNet (model_type mpnet, e.g. all-mpnet-base-v2): its attention adds a relative position bias in its own
code, outside AttentionInterface; the route of attendout/attention/mpnet.py hands its projections, mask
and bias to the hook's paths. The families' shared tests (conftest's FAMILIES, SCORE_FAMILIES; the CLI
runs of tests/test_families.py) cover it too; here what is MPNet's own."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification

import attendout
from attendout.attention import AttentionEdit, AttentionMethod, get_controller
from attendout.attention import paths as attention_paths
from attendout.cli import main
from attendout.contract import ForwardEdits
from conftest import make_batch, no_dropout, save_tiny_model_dir, tiny_model, write_sentiment_csv

PADDED = {1: 7, 3: 4}


def mpnet(**overrides):
    return tiny_model("mpnet", **{**no_dropout("mpnet"), **overrides})


def attention(model):
    return [layer.attention.attn for layer in model.mpnet.encoder.layer]


def logits(model, batch, **kwargs) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch, **kwargs).logits


class NoDrops(AttentionMethod):
    """Drops nothing, but through the fused SDPA path (a drop mask of zeros is an edit)."""

    name = "no-drops"

    def edit(self, call):
        return AttentionEdit(drop_scores=torch.zeros(1, 1, 1, 1, dtype=torch.bool))


def is_stock(model) -> bool:
    """No attendout state left: no controller, slots, instance forwards or model hooks."""
    modules = [model, *attention(model), *model.mpnet.encoder.layer]
    return (
        get_controller(model) is None
        and not any("forward" in m.__dict__ or "_attendout_slot" in m.__dict__ for m in modules)
        and not model._forward_pre_hooks
        and not model._forward_hooks
        and not any(m._forward_pre_hooks for m in attention(model))
        and "attendout_synthesizer" not in model._modules
    )


@pytest.mark.parametrize("padded", [False, True])
def test_the_idle_hook_is_stock_mpnet_bit_for_bit(padded):
    batch = make_batch(pad_from=PADDED if padded else None)
    model = mpnet()
    for training in (False, True):
        model.train(training)
        stock = logits(model, batch)
        attendout.install(model)
        assert "forward" in attention(model)[0].__dict__
        torch.testing.assert_close(logits(model, batch), stock, rtol=0, atol=0)
        attendout.apply(model, "scores-dropout", p=0.3)  # a regulariser: idle in eval mode
        if not training:
            torch.testing.assert_close(logits(model, batch), stock, rtol=0, atol=0)
        attendout.remove(model)
        assert is_stock(model)
    # with the model's own dropouts on: the same draws, since the stock forward runs
    model = tiny_model("mpnet").train()
    torch.manual_seed(3)
    stock = logits(model, batch)
    attendout.apply(model, "none")
    torch.manual_seed(3)
    torch.testing.assert_close(logits(model, batch), stock, rtol=0, atol=0)


def hidden(model, batch) -> torch.Tensor:
    """The encoder's last hidden states (B, L, d): every position, O(1) values after the LayerNorm."""
    with torch.no_grad():
        return model.mpnet(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])[0]


def hooked_paths(model, batch, monkeypatch) -> dict[str, torch.Tensor]:
    """The model's eval hidden states through the explicit path (a recorder) and the fused SDPA path
    (drops of nothing), each checked to have run."""
    calls = []
    fused = attention_paths.masked_sdpa
    monkeypatch.setattr(attention_paths, "masked_sdpa", lambda *a, **k: calls.append(1) or fused(*a, **k))
    out = {}
    with attendout.record_attention(model) as rec:
        out["explicit"] = hidden(model, batch)
    assert sorted(rec.probs) == [0, 1]
    attendout.install(model)
    get_controller(model).add(NoDrops())
    model.train()  # the method acts in training; the model's dropouts are off, so it computes eval's
    out["fused"] = hidden(model, batch)
    model.eval()
    assert len(calls) == 2  # one per layer
    attendout.remove(model)
    return out


@pytest.mark.parametrize("padded", [True, False])  # unpadded: MPNet's mask is None, and no edit is causal
def test_the_relative_position_bias_survives_every_path(padded, monkeypatch):
    """With its absolute position embeddings zeroed, the relative bias is all MPNet knows of positions:
    without it too (its table zeroed) the model is permutation-equivariant, with it not; the hook matches
    stock both ways, on the input and on a permutation of it, on the explicit and the fused path. (A route
    that lost the bias would be equivariant where stock is not.)"""
    batch = make_batch(pad_from=PADDED)
    perm = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    permuted = {k: batch[k][:, perm] for k in ("input_ids", "attention_mask")}
    biased = mpnet().eval()
    torch.nn.init.zeros_(biased.mpnet.embeddings.position_embeddings.weight)
    table = biased.mpnet.encoder.relative_attention_bias.weight
    table.data = torch.randn(table.shape, generator=torch.Generator().manual_seed(0))  # a bias that matters
    unbiased = copy.deepcopy(biased)
    torch.nn.init.zeros_(unbiased.mpnet.encoder.relative_attention_bias.weight)
    for name, model in (("biased", biased), ("unbiased", unbiased)):
        stock, stock_permuted = hidden(model, batch), hidden(model, permuted)
        equivariant = torch.allclose(stock_permuted, stock[:, perm], atol=1e-5)
        assert equivariant == (name == "unbiased"), name
        for inputs, b, expected in (("input", batch, stock), ("permuted", permuted, stock_permuted)):
            for path, hooked in hooked_paths(model, b, monkeypatch).items():
                # other computations than stock's (SDPA, a scaled product): float32 rounding
                torch.testing.assert_close(hooked, expected, msg=f"{name} {inputs} {path}")


def test_output_attentions_gives_the_weights_when_a_method_acts():
    batch = make_batch(pad_from=PADDED)
    model = mpnet().train()
    with torch.no_grad():
        stock = model(**batch, output_attentions=True).attentions
        attendout.apply(model, "scores-dropout", p=0.0)
        hooked = model(**batch, output_attentions=True).attentions
    assert len(hooked) == 2
    for mine, theirs in zip(hooked, stock, strict=True):
        torch.testing.assert_close(mine, theirs)
    attendout.remove(model)
    attendout.apply(model, "layerdrop", p=1.0)  # a skipped block hands on its input and no weights
    out = model(**batch, output_attentions=True)
    assert out.attentions == (None, None)


def test_all_scores_dropped_is_uniform_over_real_keys_and_the_drop_rate_is_p():
    batch = make_batch(pad_from=PADDED)
    model = mpnet().train()
    attendout.apply(model, "scores-dropout", p=1.0)
    with attendout.record_attention(model) as rec:
        model(**batch)
    real = batch["attention_mask"].bool()[:, None, None, :].float()
    expected = (real / real.sum(-1, keepdim=True)).expand(4, 4, 12, 12)  # eq. 4: the bias too is gone
    for probs in rec.probs.values():
        torch.testing.assert_close(probs, expected)
    attendout.remove(model)
    handle = attendout.apply(model, "scores-dropout", p=0.4)
    batch = make_batch(batch=16, length=24, pad_from=PADDED)
    real = batch["attention_mask"].bool()[:, None, None, :]
    with attendout.record_attention(model) as rec:
        model(**batch)
    for probs in rec.probs.values():
        assert not probs.masked_select(~real.expand_as(probs)).any()  # padding keys
        zero_rate = ((probs == 0) & real).sum() / real.expand_as(probs).sum()
        assert abs(zero_rate.item() - 0.4) < 0.03
    assert all(abs(v - 0.4) < 0.03 for v in handle.stats().values())


HOOK_METHODS = {  # method: options that make it act on a 2-layer model in one forward
    "none": {},
    "attn-dropout": {"p": 0.5},
    "scores-dropout": {"p": 0.5},
    "layerdrop": {"p": 0.5},
    "attn-layerdrop": {"p": 0.5},
    "scheduled": {},
    "drophead": {"p": 0.5},
    "synthesizer": {"variant": "dense+dot", "l_max": 16},
}


@pytest.mark.parametrize("method", HOOK_METHODS)
def test_every_hook_method_trains_a_step_and_removes_to_stock(method):
    batch = make_batch(pad_from=PADDED)
    model = mpnet()
    model.eval()
    stock_eval = logits(model, batch)
    model.train()  # the model's own dropouts are off: the stock training forward is deterministic
    stock_train = hidden(model, batch)
    handle = attendout.apply(model, method, **HOOK_METHODS[method])
    handle.set_progress(0.0)
    torch.manual_seed(1)  # both LayerDrops skip something at this seed
    changed = hidden(model, batch)
    if method == "none":
        torch.testing.assert_close(changed, stock_train, rtol=0, atol=0)
    else:
        # a random tiny model attends almost uniformly, so an edit moves little; the hooked path's rounding
        # alone moves under 1e-5
        assert (changed - stock_train).abs().max() > 1e-4, method
    out = model(**batch)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.classifier.parameters())
    if method == "synthesizer":  # its new weights train too
        assert any(
            p.grad is not None and p.grad.abs().sum() > 0 for p in model.attendout_synthesizer.parameters()
        )
    handle.remove()
    attendout.remove(model)
    assert is_stock(model)
    model.eval()
    torch.testing.assert_close(logits(model, batch), stock_eval, rtol=0, atol=0)


def test_a_forwards_own_edits_reach_the_attention():
    batch = make_batch(pad_from=PADDED)
    model = mpnet().train()
    stock = logits(model, batch)
    drop = torch.zeros(4, 4, 12, 12, dtype=torch.bool)
    drop[:, :, :, ::2] = True  # every even key
    drop[0, 1, 3] = True  # row 3 of head 1 of example 0: every key
    edits = ForwardEdits({0: AttentionEdit(drop_scores=drop)})
    attendout.install(model)  # no method: the edits alone act
    assert not torch.allclose(logits(model, batch, **edits.kwargs()), stock, atol=1e-5)
    assert get_controller(model).forward_edits is None  # held for that forward only
    torch.testing.assert_close(logits(model, batch), stock, rtol=0, atol=0)
    with attendout.record_attention(model) as rec:
        logits(model, batch, **edits.kwargs())
    probs = rec.probs[0]
    keys = batch["attention_mask"].bool()[:, None, None, :]
    assert not probs[drop & keys & ~drop.all(-1, keepdim=True)].any()  # dropped = masked
    torch.testing.assert_close(probs[0, 1, 3], torch.full((12,), 1 / 12))  # eq. 4 (example 0 is unpadded)
    assert not rec.probs[1][(rec.probs[1] == 0) & keys].any()  # layer 1: no edit
    model.eval()  # edits act in training only
    torch.testing.assert_close(logits(model, batch, **edits.kwargs()), logits(model, batch), rtol=0, atol=0)
    model.train()
    with pytest.raises(ValueError, match="does not fit this forward's attention"):
        model(**batch, **ForwardEdits({0: AttentionEdit(drop_scores=drop[:, :, :5])}).kwargs())
    assert get_controller(model).forward_edits is None  # let go when the forward raised, too


def test_a_synthesized_mpnet_saves_and_loads_in_attendouts_form(tmp_path):
    model = mpnet()
    attendout.synthesize(model, "dense+dot", max_length=16)
    batch = make_batch(pad_from=PADDED)
    model.eval()
    expected = logits(model, batch)
    attendout.save_synthesized(model, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["base_config"]["model_type"] == "mpnet"
    with pytest.raises(ValueError, match="attendout-synthesizer"):
        AutoModelForSequenceClassification.from_pretrained(tmp_path / "m")
    loaded = attendout.load_synthesized(tmp_path / "m")
    torch.testing.assert_close(logits(loaded, batch), expected, rtol=0, atol=0)


def test_finetune_scores_dropout_on_a_saved_mpnet_and_transformers_loads_it(tmp_path):
    folder = save_tiny_model_dir(tmp_path / "mpnet", "mpnet")
    train = write_sentiment_csv(tmp_path / "train.csv", 32, seed=0)
    dev = write_sentiment_csv(tmp_path / "dev.csv", 16, seed=1)
    out = tmp_path / "run"
    args = [
        "finetune", "--task", "file", "--train-file", train, "--eval-file", f"dev={dev}",
        "--text-columns", "text", "--label-column", "label", "--model", folder, "--batch-size", "16",
        "--max-length", "16", "--max-steps", "2", "--no-progress", "--output-dir", str(out),
        "--method", "scores-dropout",
    ]  # fmt: skip
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["method"] == "scores-dropout" and "dev" in results["eval"]
    saved = AutoModelForSequenceClassification.from_pretrained(out / "model")
    assert type(saved).__name__ == "MPNetForSequenceClassification" and is_stock(saved)
