"""The hook, measured inside real (tiny) model forwards: eq. 2-4, padding, recording, families."""

from __future__ import annotations

import pytest
import torch
from transformers import DebertaConfig, DebertaForSequenceClassification

import attendout
from attendout.attention import get_controller
from conftest import (
    ATTENTION_DROPOUT,
    FAMILIES,
    SCORE_FAMILIES,
    assert_same_outputs,
    make_batch,
    no_dropout,
    outputs_on_each_drop_path,
    tiny_model,
)

PADDED = {1: 7, 3: 4}  # rows 1 and 3 are padded from positions 7 and 4


def capture_weights(model):
    """Forward hooks that keep each attention module's returned weights (after masks and dropout)."""
    controller = get_controller(model)
    captured: dict[int, torch.Tensor] = {}
    handles = []
    for index, module in enumerate(controller.attention_modules):

        def hook(_module, _inputs, output, index=index):
            captured[index] = output[1]

        handles.append(module.register_forward_hook(hook))
    return captured, handles


def valid_keys(batch) -> torch.Tensor:
    return batch["attention_mask"].bool()[:, None, None, :]  # (B, 1, 1, Lk)


def test_stock_and_hook_agree_in_eval_and_train(bert):
    batch = make_batch(pad_from=PADDED)
    bert.eval()
    stock = bert(**batch).logits
    attendout.apply(bert, "none")
    assert bert.config._attn_implementation == "attendout"
    # Exact: with nothing to do the hook calls transformers' own SDPA function with the same arguments.
    torch.testing.assert_close(bert(**batch).logits, stock, rtol=0, atol=0)
    attendout.remove(bert)
    assert bert.config._attn_implementation == "sdpa"


def test_none_in_train_mode_is_exactly_stock_dropout():
    model = tiny_model("bert")  # with the model's own dropouts on
    batch = make_batch(pad_from=PADDED)
    model.train()
    torch.manual_seed(3)
    stock = model(**batch).logits
    attendout.apply(model, "none")
    torch.manual_seed(3)
    # Exact: the same SDPA call as stock, with the same dropout draws.
    torch.testing.assert_close(model(**batch).logits, stock, rtol=0, atol=0)


@pytest.mark.parametrize("p", [0.1, 0.4])
def test_scores_dropout_rate_and_padding(bert, p):
    batch = make_batch(batch=16, length=24, pad_from=PADDED)
    handle = attendout.apply(bert, "scores-dropout", p=p)
    bert.train()
    with attendout.record_attention(bert) as rec:
        bert(**batch)
    valid = valid_keys(batch)
    for layer, probs in rec.probs.items():
        assert probs.shape == (16, 4, 24, 24)
        assert torch.all(probs.masked_select(~valid.expand_as(probs)) == 0), "padding key got attention"
        # a softmax row sums to 1 up to float32 rounding of 24 terms: assert_close's float32
        # defaults (rtol 1.3e-6, atol 1e-5) hold it with room (over `make test-matrix`: at most 2.1%)
        torch.testing.assert_close(probs.sum(-1), torch.ones(16, 4, 24))
        zero_rate = (probs == 0).logical_and(valid).sum() / valid.expand_as(probs).sum()
        assert abs(zero_rate.item() - p) < 0.03, (layer, zero_rate)
    stats = handle.stats()
    assert set(stats) == {"scores-dropout/drop_rate/L0", "scores-dropout/drop_rate/L1"}
    assert all(abs(v - p) < 0.03 for v in stats.values())
    assert handle.stats() == {}, "statistics are reset when read"


def test_all_scores_dropped_gives_uniform_attention_over_real_keys(bert):
    """eq. 4: Softmax(M) with every element -inf is 1/n over the non-padding keys."""
    batch = make_batch(pad_from=PADDED)
    attendout.apply(bert, "scores-dropout", p=1.0)
    bert.train()
    with attendout.record_attention(bert) as rec:
        bert(**batch)
    valid = valid_keys(batch).float()
    expected = (valid / valid.sum(-1, keepdim=True)).expand(4, 4, 12, 12)
    for probs in rec.probs.values():
        torch.testing.assert_close(probs, expected)


class FixedEdit(attendout.attention.AttentionMethod):
    """Drops a fixed random half of the scores (one row of each sample entirely) and scales each head."""

    def __init__(self, scale_heads: bool) -> None:
        self.scale_heads = scale_heads

    def edit(self, call):
        b, h, lq, lk = call.shape
        g = torch.Generator().manual_seed(call.layer)
        drop = torch.rand(b, h, lq, lk, generator=g) < 0.5
        drop[:, :, 2, :] = True  # eq. 4 rows
        scale = torch.rand(b, h, 1, 1, generator=g) + 0.5 if self.scale_heads else None
        return attendout.attention.AttentionEdit(drop_scores=drop, scale_weights=scale)


@pytest.mark.parametrize("scale_heads", [False, True])
def test_sdpa_path_for_dropped_scores_equals_the_explicit_softmax(bert, scale_heads):
    """Drops and per-head scales go through SDPA; recording forces the explicit path: same logits, grads."""
    batch = make_batch(pad_from=PADDED)
    attendout.apply(bert, "none")
    get_controller(bert).add(FixedEdit(scale_heads))
    bert.train()
    results = []
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    weights = torch.randn(12, bert.config.hidden_size, generator=torch.Generator().manual_seed(0))
    for explicit in (False, True):
        bert.zero_grad()
        if explicit:
            with attendout.record_attention(bert):
                hidden = bert.bert(**inputs).last_hidden_state  # every position, not only [CLS]
        else:
            hidden = bert.bert(**inputs).last_hidden_state
        (hidden * weights).sum().backward()
        results.append((hidden.detach(), bert.bert.encoder.layer[0].attention.self.query.weight.grad.clone()))
    (fast, fast_grad), (slow, slow_grad) = results
    # Two computations (fused SDPA, matmul + softmax): equal up to float32 rounding. assert_close's
    # float32 defaults (rtol 1.3e-6, atol 1e-5) are a few ulps of these O(1) values; over
    # `make test-matrix` the largest difference used under 4% of them.
    torch.testing.assert_close(fast, slow)
    torch.testing.assert_close(fast_grad, slow_grad)
    assert fast_grad.abs().max() > 0


@pytest.mark.parametrize("family", SCORE_FAMILIES)
@pytest.mark.parametrize("scale_heads", [False, True])
def test_dropped_scores_filled_in_place_equal_sdpa_and_the_explicit_softmax(family, scale_heads, monkeypatch):
    """With the model's attention dropout on, dropped scores are filled in place on a CPU; under one seed
    that path, SDPA's and the explicit softmax give the same hidden states and gradients: padding,
    eq. 4 rows, ModernBERT's windows (a padding query whose window holds only padding), the model's own
    dropout drawn alike on all three."""
    overrides = {ATTENTION_DROPOUT.get(family, "attention_probs_dropout_prob"): 0.1}
    model = tiny_model(family, **overrides)
    attendout.install(model)
    get_controller(model).add(FixedEdit(scale_heads))
    model.train()
    batch = make_batch(pad_from=PADDED)
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "token_type_ids")}
    base = model.base_model
    results = outputs_on_each_drop_path(model, lambda: base(**inputs).last_hidden_state, monkeypatch)
    assert_same_outputs(results)


class GivenDrops(attendout.attention.AttentionMethod):
    """Drops the given mask of each layer."""

    def __init__(self, masks: dict[int, torch.Tensor]) -> None:
        self.masks = masks

    def edit(self, call):
        return attendout.attention.AttentionEdit(drop_scores=self.masks[call.layer])


def test_scores_dropout_draws_a_block_of_rows_at_a_time_and_applies_what_it_drew(bert, monkeypatch):
    """The filled path draws scores dropout's mask a block of query rows at a time: the blocks tile the
    rows once, the realised rate is p on real keys (and is what the statistic says), heads and examples
    are independent, a seed reproduces them, and the output and gradients are those of the explicit
    softmax given the same masks."""
    from attendout import attention
    from attendout.attention import paths

    monkeypatch.setattr(paths, "BLOCK_BYTES", 1)  # the smallest blocks: 16 rows
    monkeypatch.setattr(paths, "fills_in_place", lambda call, dropout: True)  # the model's dropout is off
    drawn: dict[int, list] = {}
    draw = attention.RandomDrops.draw

    def spy(self, call, rows=slice(None)):
        mask = draw(self, call, rows)
        drawn.setdefault(call.layer, []).append((rows, mask))
        return mask

    monkeypatch.setattr(attention.RandomDrops, "draw", spy)
    p, length = 0.3, 40
    batch = make_batch(batch=8, length=length, pad_from={1: 30, 5: 12})
    handle = attendout.apply(bert, "scores-dropout", p=p)
    bert.train()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    weights = torch.randn(length, bert.config.hidden_size, generator=torch.Generator().manual_seed(0))

    def run():
        drawn.clear()
        bert.zero_grad()
        torch.manual_seed(11)
        hidden = bert.bert(**inputs).last_hidden_state
        (hidden * weights).sum().backward()
        return hidden.detach(), bert.bert.encoder.layer[0].attention.self.query.weight.grad.clone()

    filled, filled_grad = run()
    masks = {}
    for layer, blocks in drawn.items():
        assert [(r.start, r.stop) for r, _ in blocks] == [(0, 16), (16, 32), (32, 48)]
        masks[layer] = torch.cat([m for _, m in blocks], dim=2)  # (B, H, L, L)
    valid = valid_keys(batch).expand(8, 4, length, length)
    stats = handle.stats()
    for layer, mask in masks.items():
        assert mask.shape == (8, 4, length, length)
        n = int(valid.sum())
        dropped = int((mask & valid).sum())
        assert abs(dropped - n * p) < 5 * (n * p * (1 - p)) ** 0.5
        assert stats[f"scores-dropout/drop_rate/L{layer}"] == pytest.approx(dropped / n)
        # heads and examples drawn independently: both dropped at the rate p * p, not p
        for a, b in ((mask[:, 0], mask[:, 1]), (mask[0], mask[2])):
            both = (a & b).float().mean().item()
            assert abs(both - p * p) < 0.02, both
    assert not torch.equal(masks[0], masks[1])
    again, _ = run()
    torch.testing.assert_close(again, filled, rtol=0, atol=0)
    assert all(torch.equal(torch.cat([m for _, m in drawn[layer]], 2), masks[layer]) for layer in masks)

    # the explicit softmax (a recorder forces it), given the masks the filled path drew
    attendout.remove(bert)
    attendout.install(bert)
    get_controller(bert).add(GivenDrops(masks))
    with attendout.record_attention(bert):
        explicit, explicit_grad = run()
    torch.testing.assert_close(filled, explicit)
    torch.testing.assert_close(filled_grad, explicit_grad)


def test_attn_layerdrop_skip_is_uniform_and_cuts_query_key_gradients(bert):
    batch = make_batch(pad_from=PADDED)
    attendout.apply(bert, "attn-layerdrop", p=1.0)
    bert.train()
    with attendout.record_attention(bert) as rec:
        bert(**batch).loss.backward()
    valid = valid_keys(batch).float()
    for probs in rec.probs.values():
        torch.testing.assert_close(probs, (valid / valid.sum(-1, keepdim=True)).expand_as(probs))
    attn = bert.bert.encoder.layer[0].attention.self
    assert attn.query.weight.grad is None or attn.query.weight.grad.abs().max() == 0  # W_Q skipped
    assert attn.value.weight.grad.abs().max() > 0  # values still train


def test_a_skipped_layer_goes_through_sdpa_and_equals_the_explicit_uniform_rows(bert):
    """Without a recorder a skipped layer runs on SDPA (zeroed queries over the real keys); it must give
    what the explicit softmax path gives (the path a recorder forces), outputs and gradients alike."""
    batch = make_batch(pad_from=PADDED)
    attendout.apply(bert, "attn-layerdrop", p=1.0, layers=[1])
    bert.train()
    results = []
    for recorded in (False, True):
        bert.zero_grad()
        if recorded:
            with attendout.record_attention(bert, layers=[1]):
                loss = bert(**batch).loss
        else:
            loss = bert(**batch).loss
        loss.backward()
        results.append((loss.detach(), bert.bert.encoder.layer[1].attention.self.value.weight.grad.clone()))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])
    assert bert.bert.encoder.layer[1].attention.self.query.weight.grad.abs().max() == 0


def test_attn_layerdrop_per_sample_rate(bert):
    handle = attendout.apply(bert, "attn-layerdrop", p=0.5, per_sample=True)
    bert.train()
    batch = make_batch(batch=64, length=6)
    for _ in range(4):
        bert(**batch)
    rates = handle.stats()
    assert all(abs(v - 0.5) < 0.1 for v in rates.values()), rates


def test_weights_dropout_mask_rate_and_rescaling(bert):
    batch = make_batch(batch=16, length=24, pad_from=PADDED)
    attendout.apply(bert, "attn-dropout", p=0.25)
    bert.train()
    captured, _ = capture_weights(bert)
    with attendout.record_attention(bert) as rec:
        bert(**batch)
    valid = valid_keys(batch).expand(16, 4, 24, 24)
    for layer, weights in captured.items():
        probs = rec.probs[layer]
        dropped = (weights == 0) & valid
        assert abs(dropped.sum().item() / valid.sum().item() - 0.25) < 0.03
        kept = ~dropped & valid
        # rescaled by 1/(1-p): the hook multiplies by a mask of 1/0.75, we divide by 0.75, which may
        # round differently; float32 defaults of assert_close
        torch.testing.assert_close(weights[kept], probs[kept] / 0.75)
        assert torch.all(weights[~valid] == 0)


def test_weights_dropout_runs_inside_sdpa_at_its_rate_rescaled_and_independently_per_head():
    """attn-dropout (rescaled) is the model's dropout at its own p, inside SDPA: no mask of ours. Values
    set to the identity make the attention output the weights themselves, so the fused path's draws can
    be read: about p of the real weights are 0, the rest are the softmax's divided by (1 - p), and each
    example and head draws its own."""
    from attendout.attention import attendout_attention

    model = tiny_model("bert", **no_dropout("bert"))
    attendout.apply(model, "attn-dropout", p=0.25)
    module = get_controller(model).attention_modules[0].train()
    b, h, length = 8, 4, 24
    g = torch.Generator().manual_seed(0)
    query, key = torch.randn(b, h, length, 8, generator=g), torch.randn(b, h, length, 8, generator=g)
    value = torch.eye(length).expand(b, h, length, length)  # output row = weights row
    valid = torch.ones(b, 1, length, length, dtype=torch.bool)
    valid[1, ..., 10:] = False
    torch.manual_seed(0)
    output, weights = attendout_attention(module, query, key, value, valid, scaling=8**-0.5, dropout=0.1)
    assert weights is None  # the fused path: SDPA returns no weights
    weights = output.transpose(1, 2)  # (B, H, Lq, Lk)
    scores = (query @ key.transpose(-1, -2) * 8**-0.5).masked_fill(~valid, float("-inf"))
    probs = torch.softmax(scores, -1)
    real = valid.expand(b, h, length, length)
    dropped = (weights == 0) & real
    rate = dropped.sum() / real.sum()
    assert abs(rate.item() - 0.25) < 4 * (0.25 * 0.75 / real.sum().item()) ** 0.5  # not the model's 0.1
    kept = real & ~dropped
    torch.testing.assert_close(weights[kept], probs[kept] / 0.75)
    per_head = dropped.flatten(2).sum(-1) / real.flatten(2).sum(-1)  # (B, H): each near 0.25
    assert (per_head - 0.25).abs().max() < 0.1
    flat = dropped.flatten(2)
    assert not any(torch.equal(flat[0, i], flat[0, j]) for i in range(h) for j in range(i))
    assert not torch.equal(flat[0, 0], flat[2, 0])


def test_weights_dropout_replaces_model_dropout():
    """With the model's own attention dropout at 0.5 and attn-dropout p=0.1, about 10% are dropped (on the
    explicit path, which a recorder forces and where the weights can be captured)."""
    model = tiny_model("bert", attention_probs_dropout_prob=0.5, hidden_dropout_prob=0.0)
    attendout.apply(model, "attn-dropout", p=0.1)
    captured, _ = capture_weights(model)
    model.train()
    batch = make_batch(batch=16, length=24)
    with attendout.record_attention(model):
        model(**batch)
    rate = (captured[0] == 0).float().mean().item()
    assert abs(rate - 0.1) < 0.03


def test_drophead_drops_whole_heads_and_rescales(bert):
    attendout.apply(bert, "drophead", p=0.5, schedule="fixed")
    bert.train()
    captured, _ = capture_weights(bert)
    with attendout.record_attention(bert) as rec:
        bert(**make_batch(batch=64, length=8))
    for layer, weights in captured.items():
        head_zero = weights.flatten(2).eq(0).all(-1)  # (B, H)
        assert abs(head_zero.float().mean().item() - 0.5) < 0.1
        kept = (~head_zero).sum(1, keepdim=True).clamp(min=1)  # (B, 1)
        scale = (4 / kept)[:, :, None, None].expand_as(weights)
        live = ~head_zero[:, :, None, None].expand_as(weights)
        torch.testing.assert_close(weights[live], (rec.probs[layer] * scale)[live])


def test_layerdrop_skips_blocks_in_training_only(bert):
    batch = make_batch(pad_from=PADDED)
    attendout.apply(bert, "layerdrop", p=1.0)
    bert.train()
    hidden = bert.bert(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    embedded = bert.bert.embeddings(input_ids=batch["input_ids"])
    torch.testing.assert_close(hidden, embedded)  # every block returned its input
    bert.eval()
    hidden_eval = bert.bert(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
    ).last_hidden_state
    assert not torch.allclose(hidden_eval, embedded)


def test_layerdrop_keeps_state_dict_and_removes_cleanly(bert):
    keys = list(bert.state_dict())
    handle = attendout.apply(bert, "layerdrop", p=0.5)
    assert list(bert.state_dict()) == keys
    assert "forward" in bert.bert.encoder.layer[0].__dict__
    handle.remove()
    assert "forward" not in bert.bert.encoder.layer[0].__dict__


@pytest.mark.parametrize(
    "method", ["attn-dropout", "scores-dropout", "layerdrop", "attn-layerdrop", "scheduled", "drophead"]
)
def test_eval_mode_is_the_plain_model(method):
    model = tiny_model("bert")
    batch = make_batch(pad_from=PADDED)
    model.eval()
    stock = model(**batch).logits
    attendout.apply(model, method).set_progress(0.0)  # the scheduled rates need a progress
    model.train()
    model(**batch)
    model.eval()
    # Exact: in eval mode no regulariser acts and the hook calls stock SDPA, as before apply().
    torch.testing.assert_close(model(**batch).logits, stock, rtol=0, atol=0)


@pytest.mark.parametrize(
    "method", ["attn-dropout", "scores-dropout", "scheduled", "drophead", "attn-layerdrop"]
)
def test_gradients_flow_through_masked_attention(method):
    model = tiny_model("bert", **no_dropout("bert"))
    handle = attendout.apply(model, method, **({"p": 0.3} if method != "scheduled" else {}))
    handle.set_progress(0.0)  # the scheduled rates (scheduled, drophead) need a progress
    model.train()
    model(**make_batch(batch=8, pad_from=PADDED)).loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads[:5])
    assert model.bert.encoder.layer[1].attention.self.value.weight.grad.abs().max() > 0


def test_layers_option_limits_masks(bert):
    handle = attendout.apply(bert, "scores-dropout", p=0.5, layers="1")
    bert.train()
    with attendout.record_attention(bert) as rec:
        bert(**make_batch(batch=8, length=16))
    assert (rec.probs[0] == 0).sum() == 0
    assert (rec.probs[1] == 0).float().mean() > 0.3
    assert list(handle.stats()) == ["scores-dropout/drop_rate/L1"]


def test_layer_out_of_range_is_a_clear_error(bert):
    with pytest.raises(ValueError, match=r"layers \[5\] do not exist; the model has 2 layers"):
        attendout.apply(bert, "scores-dropout", layers=[5])


def test_recording_keeps_gradients_in_train_and_eval(bert):
    batch = make_batch(pad_from=PADDED)
    for train in (True, False):
        bert.train(train)
        with attendout.record_attention(bert, layers=[0], grads=True) as rec:
            out = bert(**batch)
            out.logits[:, 1].sum().backward()
        assert list(rec.probs) == [0]
        grad = rec.probs[0].grad
        assert grad is not None and grad.shape == (4, 4, 12, 12) and grad.abs().max() > 0
        bert.zero_grad()


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_is_hooked_per_layer(family):
    model = (
        tiny_model(family, num_hidden_layers=3) if family != "distilbert" else tiny_model(family, n_layers=3)
    )
    handle = attendout.apply(model, "scores-dropout", p=0.5)
    assert get_controller(model).num_layers == 3
    batch = make_batch(pad_from=PADDED)
    if family == "distilbert":
        batch.pop("token_type_ids", None)
    model.train()
    with attendout.record_attention(model) as rec:
        model(**batch).loss.backward()
    assert sorted(rec.probs) == [0, 1, 2]
    valid = valid_keys(batch)
    for probs in rec.probs.values():
        assert torch.all(probs.masked_select(~valid.expand_as(probs)) == 0)
    assert sorted(handle.stats()) == [f"scores-dropout/drop_rate/L{i}" for i in range(3)]
    model.eval()
    with attendout.record_attention(model) as rec:
        model(**batch)
    assert sorted(rec.probs) == [0, 1, 2]


def test_albert_layerdrop_keeps_layer_indices_in_step():
    model = tiny_model("albert", num_hidden_layers=4)
    attendout.apply(
        model,
        [
            attendout.get_method_config("layerdrop", p=0.5),
            attendout.get_method_config("scores-dropout", p=0.1),
        ],
    )
    model.train()
    torch.manual_seed(0)
    for _ in range(5):
        with attendout.record_attention(model) as rec:
            model(**make_batch())
        assert set(rec.probs) <= {0, 1, 2, 3}


def test_unsupported_model_names_its_class():
    config = DebertaConfig(
        vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37
    )
    model = DebertaForSequenceClassification(config)  # DeBERTa v1: its own disentangled attention code
    with pytest.raises(attendout.UnsupportedModelError, match="DebertaForSequenceClassification.*'deberta'"):
        attendout.apply(model, "none")


def test_weights_dropout_at_the_models_rate_is_the_same_noise_as_the_models_own_dropout():
    """`none` keeps the model's attention dropout inside SDPA; `attn-dropout` at that p replaces it.

    Same regulariser, so the logits' spread over dropout draws must match (stacked dropouts would
    give ~1.4x the spread, a lost dropout none at all).
    """
    model = tiny_model("bert", attention_probs_dropout_prob=0.3, hidden_dropout_prob=0.0)
    batch = make_batch(batch=2)
    model.train()

    def spread() -> float:
        with torch.no_grad():
            draws = torch.stack([model(**batch).logits for _ in range(400)])
        return draws.std(0).mean().item()

    torch.manual_seed(0)
    stock = spread()
    attendout.apply(model, "attn-dropout", p=0.3)
    torch.manual_seed(1)
    replaced = spread()
    assert stock > 0
    assert abs(replaced / stock - 1) < 0.15, (stock, replaced)


def test_weights_dropout_reports_the_rate_it_hands_sdpa_for_the_layers_it_acted_on():
    model = tiny_model("bert", **no_dropout("bert"))
    handle = attendout.apply(model, "attn-dropout", p=0.3, layers="1")
    model.eval()
    model(**make_batch())
    assert handle.stats() == {}  # eval: it never acted
    model.train()
    model(**make_batch())
    assert handle.stats() == {"attn-dropout/p/L1": 0.3}
    assert handle.stats() == {}  # reset after each call
