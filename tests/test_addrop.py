"""AD-DROP (paper 002): masks, attribution checks, train mode, cross-tuning, the loop, the CLI, inspect."""

from __future__ import annotations

import json
import logging
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import attendout
from attendout.attention import AttentionEdit, AttentionMethod, get_controller, install, layer_key_valid
from attendout.bench import load_experiment
from attendout.cli import main
from attendout.config import TrainConfig
from attendout.methods import settle_for_task
from attendout.methods.addrop import (
    ADDropConfig,
    addrop_active,
    attribute,
    candidate_count,
    candidate_region,
    modes_restored,
    random_drops,
    sample_drops,
    task_settings,
)
from attendout.run.loop import TrainingLoop
from attendout.tasks import get_task
from conftest import FAMILIES, make_batch, no_dropout, panels, tiny_model, toy_cli_args, toy_train_config

PADDED = {1: 7, 3: 4}  # rows 1 and 3 are padded from positions 7 and 4


def key_valid(batch) -> torch.Tensor:
    """(B, 1, L, L) bool, True = non-padding key (what the hook sees)."""
    mask = batch["attention_mask"].bool()  # (B, L)
    return mask[:, None, None, :].expand(-1, 1, mask.shape[1], -1)


def inputs(batch) -> dict[str, torch.Tensor]:
    return {k: v for k, v in batch.items() if k != "labels"}


# --------------------------------------------------------------------------------------------------
# Masks
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 1.0])
def test_candidate_region_is_exactly_the_top_p_of_non_padding_keys(p):
    batch = make_batch(batch=6, length=13, pad_from={0: 1, 1: 7, 3: 4, 5: 2})
    valid = key_valid(batch)  # (B, 1, L, L)
    scores = torch.randn(6, 3, 13, 13)  # distinct values: the top-k is unique
    candidate = candidate_region(scores, valid, p)
    assert candidate.dtype == torch.bool and candidate.shape == (6, 3, 13, 13)
    assert not (candidate & ~valid).any(), "a padding key is in the candidate region"
    for b in range(6):
        keys = valid[b, 0, 0].nonzero().squeeze(-1)  # the row's non-padding keys
        k = math.ceil(Fraction(str(p)) * len(keys))  # the authors' count, in exact arithmetic
        for h in range(3):
            for i in range(13):
                expected = set(keys[scores[b, h, i, keys].topk(k).indices].tolist())
                assert set(candidate[b, h, i].nonzero().squeeze(-1).tolist()) == expected


def test_candidate_count_is_the_authors_ceil_of_p_times_n():
    """4 of 11 keys at p 0.3, as the public code's threshold (n - floor((1 - p) n) keys at or above it)."""
    scores = torch.randn(1, 2, 11, 11)
    valid = torch.ones(1, 1, 11, 11, dtype=torch.bool)
    assert (candidate_region(scores, valid, 0.3).sum(-1) == 4).all()
    assert (candidate_region(scores, valid, 0.3, rounding="round").sum(-1) == 3).all()  # the old rule
    n = torch.arange(1, 129)
    for tenths in range(1, 10):
        p = tenths / 10
        exact = torch.tensor([math.ceil(Fraction(tenths, 10) * int(length)) for length in n])
        # the public code: (p_rate * actual_len).long() on (1 - p), a float32 tensor, kept from the top
        authors = n - ((1 - p) * n).long()
        assert torch.equal(authors, exact) and torch.equal(candidate_count(n, p), exact), p
        # the old rule takes one key fewer at 51-53 of the 128 lengths at every p but 0.5
        fewer = int((candidate_count(n, p, "round") < exact).sum())
        assert (fewer == 0) if tenths == 5 else (51 <= fewer <= 53), (p, fewer)
        assert not (candidate_count(n, p, "round") > exact).any()
    fraction = {r: (candidate_count(n, 0.3, r) / n).mean().item() for r in ("ceil", "round")}
    assert fraction == {"ceil": pytest.approx(0.3207, abs=1e-4), "round": pytest.approx(0.3009, abs=1e-4)}


def test_ties_are_broken_at_random_not_by_position():
    valid = torch.ones(1, 1, 1, 20, dtype=torch.bool)
    picks = torch.stack(
        [candidate_region(torch.zeros(1, 1, 1, 20), valid, 0.25)[0, 0, 0] for _ in range(200)]
    )  # (200, 20)
    assert (picks.sum(-1) == 5).all()
    share = picks.float().mean(0)  # each key ~ 5/20 of the time
    assert share.min() > 0.1 and share.max() < 0.45, share


def test_drop_rate_inside_the_candidate_region_is_q():
    valid = key_valid(make_batch(batch=16, length=40, pad_from={2: 10, 5: 25}))
    candidate = candidate_region(torch.randn(16, 4, 40, 40), valid, 0.3)
    for q in (0.2, 0.5):
        drop = sample_drops(candidate, q)
        assert drop.dtype == torch.bool and not (drop & ~candidate).any()
        assert abs(drop.sum().item() / candidate.sum().item() - q) < 0.02


# The public code's mask functions (TaoYang225/AD-DROP, cola/utils.py lines 3-61), as they are written
# (1 = keep), to check ours against.
def authors_generate_mask_low(p_rate, q_rate, grad_t, extend_attn_mask, attn_mask):
    heads, max_len = grad_t.shape[1], attn_mask.shape[-1]
    drop_nums = (p_rate * torch.sum(attn_mask, dim=-1)).long()  # compute_actual_lens
    onehot = torch.eye(max_len)[drop_nums].unsqueeze(1).unsqueeze(2).expand([-1, heads, max_len, -1])
    grad_p = grad_t + (1 - extend_attn_mask) * 100
    sorted_grad = torch.sort(grad_p, dim=-1)[0]
    st_grad = torch.sum(onehot * sorted_grad, dim=-1).unsqueeze(-1).expand([-1, -1, -1, max_len])
    grad_masks = torch.ge(grad_p, st_grad).long() * extend_attn_mask
    sampler_masks = torch.bernoulli((1 - q_rate) * torch.ones_like(grad_masks).float())
    return ((grad_masks + sampler_masks) >= 1).long() * extend_attn_mask, grad_masks


def authors_generate_mask_random(p_rate, q_rate, extend_attn_mask):
    sampler_masks1 = torch.bernoulli((1 - p_rate) * torch.ones_like(extend_attn_mask).float())
    sampler_masks2 = torch.bernoulli((1 - q_rate) * torch.ones_like(extend_attn_mask).float())
    return ((sampler_masks1 + sampler_masks2) >= 1).long() * extend_attn_mask


@pytest.mark.parametrize(("p", "q"), [(0.3, 0.2), (0.5, 0.5), (0.9, 0.3)])
def test_random_control_drops_a_binomial_count_as_the_authors_generate_mask_random(p, q):
    """rd (default form): each real key dropped with probability p q, so a row of n keys drops
    Binomial(n, p q); mean and variance against the binomial and against their function."""
    torch.manual_seed(0)
    lengths = torch.tensor([7, 12, 20, 33])  # short rows: where ceil(p n) and n p differ most
    length = int(lengths.max())
    attn_mask = (torch.arange(length)[None, :] < lengths[:, None]).long().repeat(400, 1)  # (1600, L)
    valid = attn_mask.bool()[:, None, None, :].expand(-1, 1, 3, length)  # (B, 1, 3 queries, L)
    candidate, drop = random_drops(valid, 2, p, q)  # (B, 2 heads, 3, L)
    assert not (drop & ~valid).any() and not (drop & ~candidate).any()
    counts = drop.sum(-1).double()  # (B, H, 3) drops per row
    extend = attn_mask[:, None, None, :].expand(-1, 2, 3, -1)
    theirs = (extend - authors_generate_mask_random(p, q, extend)).sum(-1).double()  # dropped per row
    for i, n in enumerate(lengths.tolist()):
        rows = slice(i, None, len(lengths))  # every row of n keys: 400 x 2 heads x 3 queries = 2,400
        mean, var = n * p * q, n * p * q * (1 - p * q)
        for sample in (counts[rows], theirs[rows]):
            se_mean, se_var = math.sqrt(var / sample.numel()), var * math.sqrt(2 / sample.numel())
            assert abs(sample.mean().item() - mean) < 5 * se_mean, (n, sample.mean().item(), mean)
            assert abs(sample.var().item() - var) < 5 * se_var + 0.02 * var, (n, sample.var().item(), var)
    # the exact form drops ceil(p n) q on average: a fifth more than n p q in rows of 7 keys at p 0.3
    exact = candidate_count(torch.tensor(7), 0.3).item() * 0.2
    assert exact / (7 * 0.3 * 0.2) == pytest.approx(1 / 0.7, abs=1e-9)


def test_random_control_in_the_method_follows_p_times_q_and_the_exact_form_stays_an_option(bert):
    batch = make_batch(batch=16, length=12, pad_from=PADDED)
    valid = key_valid(batch)  # (B, 1, L, L)
    n = valid.sum(-1).double()  # (B, 1, L) keys per row
    heads = bert.config.num_attention_heads
    for sampling in ("authors", "exact"):
        handle = attendout.apply(
            bert, "addrop", attribution="rd", p=0.5, q=0.4, layers="0", rd_sampling=sampling
        )
        handle.method.keep_masks = True
        bert.train()
        counts = []
        for _ in range(60):
            handle.method.prepare(bert, batch)
            counts.append(handle.method.last_masks[0][1].sum(-1).double())  # (B, H, L)
        counts = torch.stack(counts)  # (60, B, H, L)
        handle.remove()
        rows = n.expand(16, heads, 12).expand_as(counts)
        if sampling == "authors":  # Binomial(n, 0.2) per row: standardised sums
            mean, var = rows * 0.2, rows * 0.2 * 0.8
            z = ((counts - mean).sum() / var.sum().sqrt()).item()
            ratio = ((counts - mean) ** 2).sum().item() / var.sum().item()
            assert abs(z) < 5 and abs(ratio - 1) < 0.05, (z, ratio)
        else:  # ceil(0.5 n) candidates, each dropped with 0.4
            k = torch.ceil(rows * 0.5)
            z = ((counts - k * 0.4).sum() / (k * 0.24).sum().sqrt()).item()
            assert abs(z) < 5, z
    assert ADDropConfig(attribution="rd").rd_sampling == "authors"
    assert ADDropConfig(attribution="ga").rd_sampling is None  # not an rd run: no form to record


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.7])
def test_drop_low_candidates_are_the_lowest_attributions_as_generate_mask_low(p):
    """dropping='low': the floor(p n) real keys of lowest attribution in each row, exactly the keys the
    public code's generate_mask_low leaves below its threshold (distinct scores: no ties)."""
    batch = make_batch(batch=6, length=13, pad_from={0: 1, 1: 7, 3: 4, 5: 2})
    valid = key_valid(batch)
    scores = torch.randn(6, 3, 13, 13)
    low = candidate_region(scores, valid, p, lowest=True)
    high = candidate_region(scores, valid, p)
    attn_mask = batch["attention_mask"]
    extend = attn_mask[:, None, None, :].expand(-1, 3, 13, -1)
    _, kept = authors_generate_mask_low(p, 0.5, scores, extend, attn_mask)
    assert torch.equal(low, (kept == 0) & extend.bool())
    for b in range(6):
        keys = valid[b, 0, 0].nonzero().squeeze(-1)
        k = math.floor(Fraction(str(p)) * len(keys))
        for h in range(3):
            for i in range(13):
                lowest = set(keys[scores[b, h, i, keys].topk(k, largest=False).indices].tolist())
                assert set(low[b, h, i].nonzero().squeeze(-1).tolist()) == lowest
    if p <= 0.5:
        assert not (low & high).any()  # the two ends of each row


def test_drop_low_in_the_method_drops_the_lowest_gradient_attributions(bert):
    batch = make_batch(batch=4, length=12, pad_from=PADDED)
    handle = attendout.apply(bert, "addrop", p=0.5, q=1.0, layers="0", dropping="low")
    handle.method.keep_masks = True
    bert.train()
    expected = attribute(bert, batch, [0], "ga")
    extra = handle.method.prepare(bert, batch)
    with attendout.record_attention(bert) as rec:
        bert(**batch, **extra)
    valid = key_valid(batch)
    zeros = (rec.probs[0] == 0) & valid
    candidate, dropped = handle.method.last_masks[0]
    assert torch.equal(dropped, candidate) and torch.equal(zeros, candidate)
    n = valid.sum(-1, keepdim=True)
    assert (zeros.sum(-1, keepdim=True) == torch.floor(n * 0.5)).all()
    scores = expected.scores[0]
    ranked = scores.masked_fill(~valid, 0).abs().sum(-1) > 0  # rows with a gradient: no ties
    assert ranked.sum() >= 100
    # every dropped key is below every kept real key of its row
    top_dropped = scores.masked_fill(~candidate, float("-inf")).amax(-1)
    low_kept = scores.masked_fill(candidate | ~valid, float("inf")).amin(-1)
    assert (top_dropped[ranked] < low_kept[ranked]).all()
    with pytest.raises(ValueError, match="dropping 'low' drops the lowest attributions; attribution 'rd'"):
        ADDropConfig(attribution="rd", dropping="low")


def test_training_pass_drops_exactly_the_sampled_candidates(bert):
    """q = 1: the training forward's zero-probability real keys are exactly the top-p by attribution."""
    batch = make_batch(batch=4, length=12, pad_from=PADDED)
    handle = attendout.apply(bert, "addrop", p=0.5, q=1.0, layers="0,1")
    handle.method.keep_masks = True
    bert.train()
    expected = attribute(bert, batch, [0, 1], "ga")
    extra = handle.method.prepare(bert, batch)
    with attendout.record_attention(bert) as rec:
        bert(**batch, **extra)
    valid = key_valid(batch)
    for layer in (0, 1):
        zeros = (rec.probs[layer] == 0) & valid  # (B, H, L, L) dropped real keys
        n = valid.sum(-1, keepdim=True)  # (B, 1, L, 1)
        assert (zeros.sum(-1, keepdim=True) == torch.ceil(n * 0.5)).all()
        candidate, dropped = handle.method.last_masks[layer]
        assert torch.equal(dropped, candidate) and torch.equal(zeros, candidate)
        # the ranking of an independent attribution pass (the same operations on the same model and
        # batch, hence exact), in rows without ties (padding queries and, in the last layer, every
        # query but [CLS] have zero gradient: their candidates are random)
        scores = expected.scores[layer]  # (B, H, L, L)
        ranked = scores.masked_fill(~valid, 0).abs().sum(-1) > 0  # (B, H, L)
        assert ranked.sum() >= (16 if layer == 1 else 100)
        independent = candidate_region(scores, valid, 0.5)
        assert torch.equal(candidate[ranked], independent[ranked])
    stats = handle.stats()
    assert stats["addrop/drop_rate_in_candidates"] == 1.0
    assert abs(stats["addrop/candidate_fraction"] - 0.5) < 0.1
    with attendout.record_attention(bert) as rec:
        bert(**batch, **handle.method.plain())  # the drops went with that forward: this one is plain
    assert not ((rec.probs[0] == 0) & valid).any()
    with pytest.raises(RuntimeError, match="came without AD-DROP's drops, so it would train plainly"):
        bert(**batch)  # a training forward that nobody prepared


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_trains_a_step_with_addrop(family):
    model = tiny_model(family, **no_dropout(family))
    batch = make_batch(pad_from=PADDED)
    handle = attendout.apply(model, "addrop", layers="all", q=1.0)
    model.train()
    extra = handle.method.prepare(model, batch)
    model(**batch, **extra).loss.backward()
    stats = handle.stats()
    # ceil(0.3 n) candidates of each row's n visible keys: the non-padding keys (every query row of an
    # example alike), within the window on ModernBERT's local layer
    real = batch["attention_mask"].bool()[:, None, None, :].expand(4, 1, 12, 12)
    counts = torch.stack(
        [layer_key_valid(model, i, real).sum(-1).double() for i in range(model.config.num_hidden_layers)]
    )
    expected = torch.ceil(counts * 0.3).sum() / counts.sum()
    assert stats["addrop/candidate_fraction"] == pytest.approx(expected.item(), rel=1e-6)
    assert stats["addrop/drop_rate_in_candidates"] == 1


# --------------------------------------------------------------------------------------------------
# Attribution
# --------------------------------------------------------------------------------------------------


class Perturb(AttentionMethod):
    """Test probe: multiplies the weights of one layer by ``factor`` (bool-free tensor) in every mode."""

    acts_in_eval = True

    def __init__(self, layer: int, factor: torch.Tensor | float):
        self.layers = [layer]
        self.factor = torch.as_tensor(factor)

    def edit(self, call):
        return AttentionEdit(scale_weights=self.factor)


def label_logit(model, batch, label, probe=None) -> torch.Tensor:
    controller = install(model)
    if probe is not None:
        controller.add(probe)
    try:
        with torch.no_grad():
            return model(**inputs(batch)).logits.gather(-1, label[:, None]).squeeze(-1)  # (B,)
    finally:
        if probe is not None:
            controller.remove(probe)


def test_ga_matches_finite_differences():
    model = tiny_model("bert", initializer_range=0.2, **no_dropout("bert")).double()
    batch = make_batch(batch=3, length=9, pad_from={1: 6})
    model.eval()
    result = attribute(model, batch, [0, 1], "ga")
    label = result.predicted
    eps = 1e-4
    for layer, b, h, i, j in [(0, 0, 0, 0, 0), (0, 1, 2, 3, 5), (1, 2, 1, 0, 4), (1, 0, 3, 8, 2)]:
        weight = result.probs[layer][b, h, i, j].item()
        assert weight > 1e-3
        factor = torch.ones(3, 4, 9, 9, dtype=torch.float64)
        factor[b, h, i, j] = 1 + eps / weight  # weight + eps
        up = label_logit(model, batch, label, Perturb(layer, factor))[b]
        factor[b, h, i, j] = 1 - eps / weight  # weight - eps
        down = label_logit(model, batch, label, Perturb(layer, factor))[b]
        numeric = ((up - down) / (2 * eps)).item()
        # float64 central differences: truncation error ~eps^2 = 1e-8 relative, rounding ~1e-16 / eps
        # = 1e-12; rel 1e-4 leaves room for the curvature of a random model, abs 1e-7 for near-zero
        # gradients
        assert result.scores[layer][b, h, i, j].item() == pytest.approx(numeric, rel=1e-4, abs=1e-7)
    assert not any(p.grad is not None for p in model.parameters()), "attribution touched .grad"


def test_iga_approaches_completeness_as_steps_grow():
    """sum of attributions -> F(A) - F(0 weights) for the label logit, per example (002 eq. 4)."""
    model = tiny_model("bert", initializer_range=0.3, **no_dropout("bert")).double()
    batch = make_batch(pad_from=PADDED)
    model.eval()
    errors = []
    for steps in (1, 4, 32):
        result = attribute(model, batch, [0], "iga", ig_steps=steps, ig_form="textbook")
        total = result.scores[0].sum(dim=(1, 2, 3))  # (B,)
        gap = label_logit(model, batch, result.predicted) - label_logit(
            model, batch, result.predicted, Perturb(0, 0.0)
        )
        errors.append(((total - gap).abs() / gap.abs().max()).max().item())
    assert errors[0] > errors[1] > errors[2] and errors[2] < 0.1, errors
    # m = 1 is gradient x weights (the "ga times weights" variant), in either form
    ga = attribute(model, batch, [0], "ga")
    for form in ("textbook", "authors"):
        one = attribute(model, batch, [0], "iga", ig_steps=1, ig_form=form)
        # two computations of one product, in float64: assert_close's float64 defaults (1e-7) are far
        # above their rounding
        torch.testing.assert_close(one.scores[0], ga.scores[0] * ga.probs[0].float())


def authors_iga(model, batch, layer: int, steps: int) -> torch.Tensor:
    """The public code's integrated gradients, step by step (TaoYang225/AD-DROP, utils.py): a forward
    hook scales the layer's self-attention output (the heads' outputs) by alpha, the label is predicted
    again at each alpha, the gradient is taken with respect to the unscaled attention weights, and the
    mean gradient is multiplied by the weights."""
    self_attention = model.bert.encoder.layer[layer].attention.self
    grads, weights = [], None
    for k in range(1, steps + 1):
        alpha = k / steps
        hook = self_attention.register_forward_hook(
            lambda module, args, out, alpha=alpha: (out[0] * alpha, *out[1:])
        )
        try:
            with attendout.record_attention(model, [layer], grads=True) as rec:
                logits = model(**inputs(batch)).logits  # (B, C)
                label = logits.argmax(-1)  # pseudo label at this alpha
                (grad,) = torch.autograd.grad(logits.gather(1, label[:, None]).sum(), rec.probs[layer])
        finally:
            hook.remove()
        grads.append(grad)
        weights = rec.probs[layer].detach()  # alpha = 1 last: the unscaled weights
    return weights * torch.stack(grads).mean(0)


def test_iga_authors_form_is_the_public_codes_and_differs_from_the_textbook_form():
    model = tiny_model("bert", initializer_range=0.3, **no_dropout("bert")).double()
    batch = make_batch(batch=16, length=12, pad_from={1: 7, 3: 4, 9: 5})
    model.eval()
    steps = 8
    authors = attribute(model, batch, [0, 1], "iga", ig_steps=steps, ig_form="authors")
    textbook = attribute(model, batch, [0, 1], "iga", ig_steps=steps, ig_form="textbook")
    for layer in (0, 1):
        reference = authors_iga(model, batch, layer, steps)  # float64
        error = (authors.scores[layer].double() - reference).abs().max().item()
        # attendout keeps attributions in float32: the float64 gradients are rounded (6e-8 relative)
        # before they are summed, so the two agree to ~1e-7 of the largest attribution
        assert error <= 1e-6 * reference.abs().max().item()
    # the label the public code attributes changes with alpha for some examples of this model (measured:
    # the labels at alpha 1/8 differ from those at each of the 7 larger alphas)
    labels = [label_logit_argmax(model, batch, Perturb(0, k / steps)) for k in range(1, steps + 1)]
    assert any(not torch.equal(labels[0], other) for other in labels[1:])
    # the two forms choose different candidates in a good share of the rows with real keys (measured:
    # 53% of layer 0's rows, 3% of layer 1's, where only [CLS] rows have a gradient)
    valid = key_valid(batch)
    rows = valid[..., 0].expand(-1, 4, -1)  # (B, H, L): real query rows
    differ = []
    for layer in (0, 1):
        a = candidate_region(authors.scores[layer], valid, 0.3, torch.Generator().manual_seed(0))
        t = candidate_region(textbook.scores[layer], valid, 0.3, torch.Generator().manual_seed(0))
        differ.append((a != t).any(-1)[rows].float().mean().item())
    assert differ[0] > 0.1, differ
    assert ADDropConfig().ig_form == "authors"


def label_logit_argmax(model, batch, probe) -> torch.Tensor:
    controller = install(model)
    controller.add(probe)
    try:
        with torch.no_grad():
            return model(**inputs(batch)).logits.argmax(-1)  # (B,)
    finally:
        controller.remove(probe)


def test_aa_is_the_attention_and_regression_uses_the_gold_loss():
    model = tiny_model("bert", num_labels=1, problem_type="regression", **no_dropout("bert"))
    batch = make_batch(pad_from=PADDED)
    batch["labels"] = torch.randn(4)
    aa = attribute(model, batch, [0], "aa")
    with attendout.record_attention(model) as rec, torch.no_grad():
        model.eval()(**inputs(batch))
    torch.testing.assert_close(aa.scores[0], rec.probs[0])
    ga = attribute(model, batch, [0], "ga")
    assert ga.predicted is None and ga.scores[0].abs().sum() > 0
    with pytest.raises(ValueError, match="gold 'labels'"):
        attribute(model, inputs(batch), [0], "ga")


# --------------------------------------------------------------------------------------------------
# Train mode and dropout
# --------------------------------------------------------------------------------------------------


def mode_map(model: nn.Module) -> dict[str, bool]:
    return {name: module.training for name, module in model.named_modules()}


@pytest.mark.parametrize("method", ["ga", "iga", "aa"])
def test_attribution_restores_every_modules_mode(method):
    model = tiny_model("bert")
    model.train()
    model.bert.embeddings.eval()  # a deliberately mixed state must come back as it was
    before = mode_map(model)
    attribute(model, make_batch(pad_from=PADDED), [0], method, ig_steps=2)
    assert mode_map(model) == before
    model.eval()
    with modes_restored(model, dropout=True):
        pass
    assert not any(mode_map(model).values())


def config(tiny_run, **overrides) -> TrainConfig:
    options = dict(
        method="addrop", method_options={"cross_tuning": "off", "layers": "all"}, max_steps=2, log_steps=1
    )
    return toy_train_config(tiny_run, **{**options, **overrides})


def test_training_pass_runs_with_dropout_on_after_an_eval_mode_attribution(tiny_run):
    trainer = TrainingLoop(config(tiny_run))
    seen: list[tuple[bool, ...]] = []  # per forward: every dropout module's mode
    dropouts = [m for m in trainer.model.modules() if isinstance(m, nn.Dropout)]
    attention = get_controller(trainer.model).attention_modules
    modules = dropouts + attention
    trainer.model.bert.encoder.layer[0].attention.register_forward_pre_hook(
        lambda *_: seen.append(tuple(m.training for m in modules))
    )
    trainer.model.train()
    before = mode_map(trainer.model)
    batch = next(trainer.train_set.batches(16))
    loss = trainer.train_step(batch)
    assert torch.isfinite(loss)
    assert len(seen) == 2, "one attribution and one training forward"
    assert not any(seen[0]), "the attribution pass runs without dropout (default)"
    assert all(seen[1]), "the training pass runs with every dropout on"
    assert mode_map(trainer.model) == before
    stats = trainer.strategy.stats()
    assert stats["addrop/active"] == 1.0 and abs(stats["addrop/drop_rate_in_candidates"] - 0.2) < 0.1

    kept = TrainingLoop(config(tiny_run, method_options={"cross_tuning": "off", "attribution_dropout": True}))
    kept_dropouts = [m for m in kept.model.modules() if isinstance(m, nn.Dropout)]
    kept.model.bert.encoder.layer[0].attention.register_forward_pre_hook(
        lambda *_: seen.append(tuple(m.training for m in kept_dropouts))
    )
    seen.clear()
    kept.train_step(batch)
    assert len(seen) == 2 and all(seen[0]) and all(seen[1])


# --------------------------------------------------------------------------------------------------
# Cross-tuning
# --------------------------------------------------------------------------------------------------


def test_cross_tuning_alternates_by_steps_and_by_epochs():
    by_steps = [addrop_active(s, 10, "step", 3, "finetune") for s in range(12)]
    assert by_steps == [False] * 3 + [True] * 3 + [False] * 3 + [True] * 3
    by_epochs = [addrop_active(s, 4, "epoch", 1, "addrop") for s in range(12)]
    assert by_epochs == [True] * 4 + [False] * 4 + [True] * 4
    assert all(addrop_active(s, 4, "off", 1, "finetune") for s in range(12))


def test_cross_tuning_in_the_loop_by_epoch_and_by_step(tiny_run):
    # 86 training examples, batch 32: 3 steps per epoch; 3 epochs -> finetune, addrop, finetune
    trainer = TrainingLoop(
        config(
            tiny_run,
            method_options={},
            batch_size=32,
            max_steps=None,
            epochs=3,
            log_steps=3,
            save_model=False,
        )
    )
    assert trainer.steps_per_epoch == 3
    trainer.fit()
    log = [json.loads(line) for line in (tiny_run["tmp"] / "run" / "log.jsonl").read_text().splitlines()]
    lines = [r for r in log if "loss" in r]
    assert [r["addrop/active"] for r in lines] == [0.0, 1.0, 0.0]
    # ceil(0.3 n) of the n keys of each row: a little above 0.3 for these rows of 7-12 keys
    assert "addrop/candidate_fraction" not in lines[0] and 0.3 < lines[1]["addrop/candidate_fraction"] < 0.45

    trainer = TrainingLoop(
        config(
            tiny_run,
            method_options={"cross_tuning": "step", "period": 1, "start": "addrop"},
            max_steps=4,
            log_steps=1,
            save_model=False,
            overwrite=True,
        )
    )
    trainer.fit()
    log = [json.loads(line) for line in (tiny_run["tmp"] / "run" / "log.jsonl").read_text().splitlines()]
    assert [r["addrop/active"] for r in log if "loss" in r] == [1.0, 0.0, 1.0, 0.0]


def test_never_active_schedule_warns(tiny_run, caplog):
    with caplog.at_level("WARNING"):
        TrainingLoop(config(tiny_run, method_options={}, max_steps=3))
    assert "AD-DROP never acts" in caplog.text
    assert "--cross-tuning step" in caplog.text and "--start addrop" in caplog.text  # attendout's CLI: flags


def test_the_never_active_warning_names_python_options_outside_attendouts_loop(caplog):
    """Used from prepare or a Trainer, the remedy is a keyword, not a command-line flag (issue 49)."""
    strategy = attendout.prepare(tiny_model("bert"), "addrop")
    loop = attendout.LoopContext(device="cpu", total_steps=3, steps_per_epoch=5, task=get_task("cola"))
    with caplog.at_level(logging.WARNING):
        strategy.start(loop)
    assert "AD-DROP never acts" in caplog.text
    assert "cross_tuning='step'" in caplog.text and "start='addrop'" in caplog.text
    assert "--" not in caplog.text.split("never acts")[1]


@pytest.mark.parametrize(("epochs", "warned"), [(2, True), (3, False), (4, True)])
def test_a_budget_that_ends_inside_an_addrop_phase_warns(epochs, warned, caplog):
    # cross-tuning by epoch, plain first: epochs 2 and 4 are AD-DROP epochs, 1 and 3 plain
    strategy = attendout.prepare(tiny_model("bert"), "addrop")
    loop = attendout.LoopContext(
        device="cpu", total_steps=5 * epochs, steps_per_epoch=5, task=get_task("cola")
    )
    with caplog.at_level(logging.WARNING):
        strategy.start(loop)
    assert ("ends inside an AD-DROP phase" in caplog.text) == warned


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"attribution": "grad"}, "attribution must be one of ga, iga, aa, rd, got 'grad'"),
        ({"p": 0.0}, "p must be in \\(0, 1\\], got 0.0"),
        ({"q": 1.5}, "q must be in \\[0, 1\\], got 1.5"),
        ({"period": 0}, "period must be an integer of at least 1, got 0"),
        ({"cross_tuning": "epochs"}, "cross_tuning must be one of epoch, step, off, got 'epochs'"),
        ({"start": "plain"}, "start must be one of finetune, addrop, got 'plain'"),
        ({"ig_steps": 0}, "ig_steps must be an integer of at least 1"),
        ({"ig_form": "paper"}, "ig_form must be one of authors, textbook, got 'paper'"),
        ({"rounding": "floor"}, "rounding must be one of ceil, round, got 'floor'"),
        ({"layers": "first"}, "layers must be 'all' or comma-separated integers"),
    ],
)
def test_bad_options_name_the_field_and_value(options, message):
    with pytest.raises(ValueError, match=message):
        ADDropConfig(**options)


def test_default_options_drop_a_fifth_of_the_top_30_percent_by_gradient_in_the_first_layer(bert, caplog):
    """The public code's defaults: ga attribution, p 0.3, q 0.2, the first layer when no task is known.
    (Cross-tuning's default, plain fine-tuning first and AD-DROP the next epoch, is in the loop test
    below; the layers per task in the next test.)"""
    batch = make_batch(batch=16, length=24, pad_from=PADDED)
    handle = attendout.apply(bert, "addrop")
    handle.method.keep_masks = True
    bert.train()
    gradients = attribute(bert, batch, [0], "ga")
    with caplog.at_level(logging.WARNING):
        extra = handle.method.prepare(bert, batch)
    assert "AD-DROP acts on layer 0" in caplog.text and "pass layers= to choose" in caplog.text
    with attendout.record_attention(bert) as rec:
        bert(**batch, **extra)
    assert list(handle.method.last_masks) == [0]
    valid = key_valid(batch)
    assert not ((rec.probs[1] == 0) & valid).any()  # the second layer is left alone
    # The candidates are the top 30% of each row's real keys by gradient attribution: the same ranking
    # as an independent pass (the same operations on the same model and batch), in rows without ties.
    candidate, dropped = handle.method.last_masks[0]
    ranked = gradients.scores[0].masked_fill(~valid, 0).abs().sum(-1) > 0  # (B, H, L)
    assert ranked.float().mean() > 0.5
    assert torch.equal(candidate[ranked], candidate_region(gradients.scores[0], valid, 0.3)[ranked])
    assert torch.equal((rec.probs[0] == 0) & valid, dropped)  # the training pass drops exactly those
    stats = handle.stats()
    lengths = batch["attention_mask"].sum(-1).double()  # (B,): ceil(0.3 n) of each row's n keys
    assert stats["addrop/candidate_fraction"] == pytest.approx(
        (torch.ceil(lengths * 0.3).sum() / lengths.sum()).item()
    )
    assert abs(stats["addrop/drop_rate_in_candidates"] - 0.2) < 0.03  # ~6,000 candidates: > 10 sd


@pytest.mark.parametrize(
    ("task", "layers"),
    [("cola", [0, 1]), ("mrpc", [0, 1]), ("rte", [0, 1]), ("sst2", [0]), ("stsb", [0]), ("mnli", [0]),
     ("rotten-tomatoes", [0]), (None, [0])],
)  # fmt: skip
def test_default_layers_follow_the_authors_scripts_per_task(task, layers, caplog):
    """All layers for CoLA, MRPC and RTE, the first otherwise (their run_addrop.sh): settled from the task
    the loop names, or written into the run's options before it starts (CLI, bench)."""
    model = tiny_model("bert", **no_dropout("bert"))
    strategy = attendout.prepare(model, "addrop", cross_tuning="off", q=1.0)
    strategy.method.keep_masks = True
    loop = attendout.LoopContext(
        device="cpu", total_steps=1, steps_per_epoch=1, task=None if task is None else get_task(task)
    )
    with caplog.at_level(logging.WARNING):
        strategy.start(loop)
    assert ("named no task" in caplog.text) == (task is None)
    model.train()
    strategy.before_forward(model, make_batch(pad_from=PADDED), attendout.StepInfo(0))
    assert sorted(strategy.method.last_masks) == layers
    settled = settle_for_task("addrop", {"attribution": "rd"}, task)
    all_layers = None if len(layers) == 2 else [0]  # None = all
    assert settled == {"attribution": "rd", "layers": all_layers, "p": 0.3, "q": 0.2}
    chosen = settle_for_task("addrop", {"layers": "1", "attribution": "ga"}, task)
    assert chosen == {"layers": "1", "attribution": "ga", "p": 0.3, "q": 0.2}  # chosen layers stay


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ("conll2003", {"p": 0.8, "q": 0.1, "attribution": "ga", "layers": None}),  # ner/main.py 80-81
        ("mrpc", {"p": 0.3, "q": 0.2, "attribution": "iga", "layers": None}),  # mrpc/run_addrop.sh 16
        ("wmt16-en-ro", {"p": 0.2, "q": 0.2, "attribution": "ga", "layers": "encoder"}),  # en_ro 95-96
        ("cola", {"p": 0.3, "q": 0.2, "attribution": "ga", "layers": None}),  # grid only: main.py's
        ("sst2", {"p": 0.3, "q": 0.2, "attribution": "ga", "layers": [0]}),
        ("SST-2", {"p": 0.3, "q": 0.2, "attribution": "ga", "layers": [0]}),  # names resolve
        (None, {"p": 0.3, "q": 0.2, "attribution": "ga", "layers": [0]}),
    ],
)
def test_unset_p_q_and_attribution_resolve_per_task_as_the_authors_scripts(task, expected):
    """An unset option takes the task's setting from the authors' scripts (else their main.py defaults);
    a value the user gives always wins."""
    settings = {k: expected[k] for k in ("p", "q", "attribution")}
    assert task_settings(task) == settings
    settled = settle_for_task("addrop", {}, task)
    assert settled == expected
    config = ADDropConfig().for_task(task)
    assert (config.p, config.q, config.attribution) == (expected["p"], expected["q"], expected["attribution"])
    explicit = {"p": 0.45, "q": 0.35, "attribution": "aa"}
    for name, value in explicit.items():
        assert settle_for_task("addrop", {name: value}, task)[name] == value
        assert getattr(ADDropConfig(**{name: value}).for_task(task), name) == value
    # the strategy settles them from the loop's task when the config was not settled before
    model = tiny_model("bert", **no_dropout("bert"))
    strategy = attendout.prepare(model, "addrop", cross_tuning="off", layers="0", q=0.25)
    loop = attendout.LoopContext(
        device="cpu", total_steps=1, steps_per_epoch=1, task=None if task is None else get_task(task)
    )
    strategy.start(loop)
    method = strategy.method
    assert (method.p, method.q, method.attribution) == (expected["p"], 0.25, expected["attribution"])


def test_a_cli_run_records_the_tasks_settings_and_an_explicit_value_wins(monkeypatch):
    """`attendout finetune` writes the task's p, q and attribution into the run's options."""

    class Captured(Exception):
        pass

    def capture(config, on_log=None):
        raise Captured(config)

    monkeypatch.setattr("attendout.run.finetune", capture)
    with pytest.raises(Captured) as caught:
        main(["finetune", "--task", "conll2003", "--method", "addrop", "--q", "0.3"])
    options = caught.value.args[0].method_options
    assert (options["p"], options["q"], options["attribution"], options["layers"]) == (0.8, 0.3, "ga", None)


def test_the_forms_before_issue_50_leave_published_fingerprints_alone():
    """A pinned rd_sampling 'exact' (the form rd cells ran with), an unset one (not rd) and dropping
    'high' hash as the options did before they existed; the authors' rd form and drop-low do not."""
    import hashlib

    from attendout.bench import spec

    def fingerprint_without(config, *names):
        data = {
            k: v
            for k, v in config.to_dict().items()
            if k not in spec.FINGERPRINT_EXCLUDE
            and not (k in spec.FINGERPRINT_NEUTRAL and v == spec.FINGERPRINT_NEUTRAL[k])
        }
        for name in ("cross_attention", *names):
            data["method_options"].pop(name, None)
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]

    def config(**options):
        return TrainConfig(
            task="cola", model="minilm", method="addrop", method_options={"layers": None, **options}
        )

    for options in ({"attribution": "rd", "rd_sampling": "exact"}, {"attribution": "ga"}):
        cell = config(p=0.3, q=0.2, **options)
        assert spec.config_fingerprint(cell) == fingerprint_without(cell, "rd_sampling", "dropping")
    for options in ({"attribution": "rd"}, {"attribution": "ga", "dropping": "low"}):
        cell = config(p=0.3, q=0.2, **options)
        assert spec.config_fingerprint(cell) != fingerprint_without(cell, "rd_sampling", "dropping")


def test_bench_cells_carry_the_layers_of_their_task(monkeypatch):
    """`attendout bench` writes each cell's layers into its options: they reach the fingerprint, so the
    layer-0 CoLA and MRPC cells run before this are stale, the SST-2 ones keep the first layer."""
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    experiment = load_experiment("cpu-small")
    layers = {
        (cell.task.name, cell.method.id): cell.config.method_options["layers"]
        for cell in experiment.cells()
        if cell.method.name == "addrop" and cell.seed == 1
    }
    assert layers == {
        (task, method): None if task in ("cola", "mrpc") else [0]
        for task in ("cola", "mrpc", "sst2")
        for method in ("addrop-ga", "addrop-rd")
    }


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def test_cli_finetune_with_addrop(tiny_run, capsys):
    args = toy_cli_args(
        tiny_run,
        *("--method", "addrop", "--attribution", "iga", "--ig-steps", "2", "--cross-tuning", "off"),
        *("--layers", "0,1", "--max-steps", "2", "--log-steps", "2", "--no-save-model"),
        output_dir=tiny_run["tmp"] / "cli",
    )
    assert main(args) == 0
    results = json.loads((tiny_run["tmp"] / "cli" / "results.json").read_text())
    assert results["method_options"]["attribution"] == "iga" and results["method_options"]["layers"] == [0, 1]
    assert (
        results["method_options"]["ig_form"] == "authors" and results["method_options"]["rounding"] == "ceil"
    )
    assert "| dev |" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["finetune", "--method", "addrop", "--help"])
    help_text = capsys.readouterr().out
    for text in (
        "else 0.3",
        "else 0.2",
        "first layer",
        "--cross-tuning",
        "--start",
        "--ig-form",
        "--dropping",
    ):
        assert text in " ".join(help_text.split()), text
    assert "every layer for CoLA, MRPC and RTE" in " ".join(help_text.split())

    # layers="task" is written into the run's config before it starts: the first layer for this task
    args = toy_cli_args(
        tiny_run,
        *("--method", "addrop", "--cross-tuning", "off", "--max-steps", "1", "--no-save-model"),
        output_dir=tiny_run["tmp"] / "cli-task",
    )
    assert main(args) == 0
    config = json.loads((tiny_run["tmp"] / "cli-task" / "config.json").read_text())
    assert config["config"]["method_options"]["layers"] == [0]


def test_inspect_draws_the_attention_the_candidates_and_the_drops(tiny_run, capsys, saved_figures):
    out = tiny_run["tmp"] / "figs" / "map.png"
    text = ["--model", tiny_run["model"], "--text", "the film was very good", "--text-pair", "a dull plot"]
    assert main(["inspect", *text, "--head", "0", "--q", "1", "--output", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "candidate" in capsys.readouterr().out
    (figure,) = saved_figures
    attention, attribution = panels(figure)
    tokens = [label.get_text() for label in attention.get_xticklabels()]
    assert tokens == ["[CLS]", "the", "film", "was", "very", "good", "[SEP]", "a", "dull", "plot", "[SEP]"]
    weights = attention.images[0].get_array()  # (query, key): head 0's attention, rows sum to 1
    assert weights.shape == (11, 11)
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)  # float32 softmax rows: rounding only
    shading = attribution.images[0].get_array()  # attribution, min-max normalised per row
    assert shading.shape == (11, 11) and shading.min() >= 0 and shading.max() == 1
    # p = 0.3 of 11 keys: ceil(3.3) = 4 candidates boxed per query row; q = 1 drops each (a circle, an x)
    assert len(attribution.patches) == 11 * 4
    assert [len(marks.get_offsets()) for marks in attribution.collections] == [44, 44]

    saved_figures.clear()
    assert main(["inspect", *text, "--head", "mean", "--output", str(out)]) == 0
    (figure,) = saved_figures
    attention, _ = panels(figure)
    np.testing.assert_allclose(attention.images[0].get_array().sum(-1), 1.0, rtol=1e-5)  # mean of heads
    assert "mean of 4 heads" in figure.get_suptitle()
    assert main(["inspect", "--model", tiny_run["model"], "--text", "good", "--head", "x"]) == 2


def test_fp16_attribution_is_loss_scaled_like_the_training_loss(bert):
    """Under fp16 small attribution gradients underflow to 0 unless the pass is scaled as the loss is."""
    batch = make_batch(batch=8, length=24, pad_from={1: 10, 3: 16})
    valid = key_valid(batch).expand(8, 4, 24, 24)

    def scores(loss_scale=None, dtype=None):
        with torch.autocast("cpu", dtype=dtype or torch.float16, enabled=dtype is not None):
            result = attribute(bert, batch, [0], "ga", loss_scale=loss_scale)
        return result.scores[0], result.loss_scale

    def zeros(s):
        return (s[valid] == 0).float().mean().item()

    def top3_agree(a, b):
        top = [x.masked_fill(~valid, -1e9).topk(3, -1).indices.sort(-1).values for x in (a, b)]
        return (top[0] == top[1]).all(-1)[valid[..., 0]].float().mean().item()

    reference, _ = scores()  # fp32
    plain, _ = scores(dtype=torch.float16)
    scaled, used = scores(2.0**16, torch.float16)
    # measured: fp32 6.6% exact zeros; fp16 60% unscaled, 6.6% scaled; top-3 agreement 0.32 vs 0.999
    assert zeros(plain) > 3 * zeros(reference)  # the underflow this guards against
    assert zeros(scaled) == pytest.approx(zeros(reference), abs=0.01)
    assert top3_agree(reference, scaled) > 0.95 > top3_agree(reference, plain)
    assert used == 2.0**15  # 2^16 overflows fp16 at the logits: halved once, as a GradScaler would

    # the strategy takes the loop's scale and remembers the largest one that did not overflow
    strategy = attendout.prepare(bert, "addrop", cross_tuning="off")
    loop = attendout.LoopContext(
        device="cpu",
        total_steps=2,
        steps_per_epoch=2,
        autocast_dtype=torch.float16,
        loss_scale=lambda: 2.0**16,
    )
    strategy.start(loop)
    bert.train()
    strategy.before_forward(bert, batch, attendout.StepInfo(0))
    assert strategy.method.scale_cap == 2.0**15


@pytest.mark.parametrize(
    ("cross_tuning", "period", "start", "per_epoch", "total"),
    [
        ("epoch", 1, "finetune", 63, 189),
        ("epoch", 2, "finetune", 5, 30),
        ("epoch", 1, "finetune", 6, 6),  # one epoch, plain: never acts
        ("epoch", 1, "addrop", 6, 18),
        ("step", 3, "finetune", 10, 20),
        ("step", 3, "finetune", 10, 3),
        ("off", 1, "finetune", 10, 20),
    ],
)
def test_acts_after_is_the_first_step_the_schedule_makes_addrop_act(
    cross_tuning, period, start, per_epoch, total
):
    """The config's closed form agrees with the schedule the strategy follows step by step."""
    c = ADDropConfig(cross_tuning=cross_tuning, period=period, start=start)
    first = next((s for s in range(total) if addrop_active(s, per_epoch, cross_tuning, period, start)), None)
    assert c.acts_after(per_epoch, total) == first


@pytest.mark.parametrize(("start", "flagged"), [("finetune", True), ("addrop", False)])
def test_a_run_that_keeps_a_model_from_before_addrop_acted_says_so(tiny_run, caplog, start, flagged):
    """One epoch of cross-tuning that starts plain is plain fine-tuning; its run says so, and the files
    it leaves tell a reader the same. Starting with AD-DROP, the same run is not flagged."""
    from attendout.run.record import kept_before_acting

    run = tiny_run["tmp"] / "run"
    options = {"layers": "all", "start": start}  # cross-tuning by epoch, the default
    with caplog.at_level(logging.WARNING):
        results = TrainingLoop(config(tiny_run, method_options=options, max_steps=None, epochs=1)).fit()
    assert ("from before addrop first acted" in caplog.text) is flagged
    saved = json.loads((run / "config.json").read_text())
    assert kept_before_acting(json.loads((run / "results.json").read_text()), saved) is flagged
    assert (
        kept_before_acting({**results, "method": "none", "method_options": {"name": "none"}}, saved) is False
    )
