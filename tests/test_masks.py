"""The cheap mask draw and the mask bookkeeping of the fused path, against their definitions.

``bernoulli_drop`` draws 16 random bits per element (four per 64-bit word) instead of a float
uniform; ``dropped_fraction`` counts without copying a mask to int64; ``allowed_keys`` finds eq. 4
rows with a byte max. Each is checked against the plain formula it replaces.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from attendout.attention import AttentionCall, allowed_keys, empty_rows
from attendout.attention.masks import LEVELS, bernoulli_drop


def _within(count: int, n: int, p: float, sds: float = 5.0) -> bool:
    return abs(count - n * p) <= sds * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("p", [0.01, 0.1, 0.5, 0.9])
def test_draw_rate_is_p_in_every_lane_of_the_64_bit_word(p):
    # four masks elements share one 64-bit draw: each of the four lanes must drop at rate p (a bare
    # random_() leaves the sign bit of the top lane 0, which would make that lane never drop)
    torch.manual_seed(0)
    drop = bernoulli_drop((250, 8, 40, 50), p, "cpu")  # 400,000 elements, 100,000 per lane
    assert drop.dtype == torch.bool and drop.shape == (250, 8, 40, 50)
    lanes = drop.reshape(-1, 4)
    for lane in range(4):
        assert _within(int(lanes[:, lane].sum()), lanes.shape[0], p), (lane, lanes[:, lane].float().mean())
    # the realised probability is p rounded to 1/65536
    assert round(p * LEVELS) / LEVELS == pytest.approx(p, abs=0.5 / LEVELS)


def test_draw_is_independent_across_examples_heads_and_neighbours():
    torch.manual_seed(1)
    p = 0.3
    drop = bernoulli_drop((64, 4, 32, 32), p, "cpu").float()
    # pairs of elements one apart (same word), four apart (next word), and across heads and examples
    # are dropped together at rate p^2, as independent draws are
    pairs = [
        (drop[..., :-1], drop[..., 1:]),
        (drop[..., :-4], drop[..., 4:]),
        (drop[:, 0], drop[:, 1]),
        (drop[0::2], drop[1::2]),
    ]
    for a, b in pairs:
        both = int((a * b).sum())
        assert _within(both, a.numel(), p * p), (a.shape, both / a.numel())
    # per-example rates vary only as binomials do
    per_example = drop.mean(dim=(1, 2, 3))
    assert per_example.std() < 4 * math.sqrt(p * (1 - p) / (4 * 32 * 32))


def test_draw_is_reproducible_under_a_seed_and_odd_sizes_work():
    torch.manual_seed(7)
    a = bernoulli_drop((3, 5, 7), 0.25, "cpu")  # 105 elements: not a multiple of four
    torch.manual_seed(7)
    b = bernoulli_drop((3, 5, 7), 0.25, "cpu")
    c = bernoulli_drop((3, 5, 7), 0.25, "cpu")
    assert torch.equal(a, b) and not torch.equal(b, c)


def test_draw_edges_and_tensor_probabilities():
    assert not bernoulli_drop((4, 4), 0.0, "cpu").any()
    assert bernoulli_drop((4, 4), 1.0, "cpu").all()
    assert not bernoulli_drop((4, 4), 1e-7, "cpu").any()  # rounds to 0 of 65536
    torch.manual_seed(0)
    per_head = torch.tensor([0.0, 1.0, 0.5]).view(1, 3, 1, 1)
    drop = bernoulli_drop((2000, 3, 1, 1), per_head, "cpu")
    assert not drop[:, 0].any() and drop[:, 1].all()
    assert _within(int(drop[:, 2].sum()), 2000, 0.5)


class _Attention(nn.Module):
    is_causal = False


def _padded(b: int, length: int, real: dict[int, int]) -> torch.Tensor:
    """(B, 1, L, L) key mask where example i has its first real[i] keys real (the rest padding)."""
    valid = torch.ones(b, 1, length, length, dtype=torch.bool)
    for row, count in real.items():
        valid[row, ..., count:] = False
    return valid


def _call(b, h, lq, lk, valid):
    q = torch.zeros(b, h, lq, 4)
    k = torch.zeros(b, h, lk, 4)
    return AttentionCall(0, _Attention(), q, k, k, valid, True)


@pytest.mark.parametrize("drop_shape", [(3, 2, 6, 6), (3, 1, 1, 1), (1, 1, 1, 1), (3, 2, 1, 1), (1, 2, 6, 6)])
@pytest.mark.parametrize("padded", [False, True])
def test_dropped_fraction_counts_as_the_plain_formula(drop_shape, padded):
    torch.manual_seed(0)
    b, h, length = 3, 2, 6
    valid = _padded(b, length, {1: 4, 2: 2}) if padded else None
    call = _call(b, h, length, length, valid)
    drop = torch.rand(drop_shape) < 0.4
    dropped, total = call.dropped_fraction(drop)
    full_valid = call.valid().expand(b, h, length, length)
    assert int(dropped) == int((drop.expand(b, h, length, length) & full_valid).sum())
    assert int(total) == int(full_valid.sum())


@pytest.mark.parametrize("padded", [False, True])
def test_allowed_keys_and_empty_rows_match_the_plain_formula_with_eq4_rows(padded):
    torch.manual_seed(0)
    b, h, length = 3, 2, 7
    valid = _padded(b, length, {1: 5, 2: 2}) if padded else None
    drop = torch.rand(b, h, length, length) < 0.5
    drop[:, :, 3] = True  # wholly dropped rows
    drop[2, 0, 4, :2] = True  # every real key of this row (padded: its padding keys not dropped)
    allowed, empty = allowed_keys(_call(b, h, length, length, valid), drop)
    real = torch.ones(b, 1, length, length, dtype=torch.bool) if valid is None else valid
    plain_allowed = real & ~drop
    plain_empty = ~plain_allowed.any(-1, keepdim=True)
    assert torch.equal(empty, plain_empty)
    assert torch.equal(empty_rows(valid, drop), plain_empty)  # the filled path's own finding of them
    assert torch.equal(allowed, torch.where(plain_empty, real, plain_allowed))
    assert empty[:, :, 3].all() and (not padded or empty[2, 0, 4])


@pytest.mark.parametrize("padded", [False, True])
def test_dropped_fraction_of_a_block_of_rows_counts_those_rows(padded):
    torch.manual_seed(2)
    b, h, length = 3, 2, 9
    valid = _padded(b, length, {1: 5, 2: 2}) if padded else None
    call = _call(b, h, length, length, valid)
    rows = slice(3, 7)
    drop = torch.rand(b, h, 4, length) < 0.3
    dropped, total = call.dropped_fraction(drop, rows)
    block_valid = call.valid().expand(b, h, length, length)[:, :, rows]
    assert int(dropped) == int((drop & block_valid).sum())
    assert int(total) == int(block_valid.sum())
