"""The hook under ``torch.compile``: no graph break of ours, and the branch-free eq. 4 that allows it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

import attendout
from attendout.attention import AttentionCall
from attendout.attention.paths import attention_probs, masked_sdpa
from conftest import make_batch, tiny_model

PACKAGE = Path(attendout.__file__).resolve().parent


def _ours(reason) -> bool:
    """Whether a graph break happened with a frame of attendout's own code on its stack."""
    return any(Path(frame.filename).resolve().is_relative_to(PACKAGE) for frame in reason.user_stack)


#: every method that acts through the hook alone, with options that make it act in a short trace
HOOK_METHODS = {
    "scores-dropout": {"p": 0.3},
    "attn-dropout": {"p": 0.3},
    "attn-dropout (no rescale)": {"p": 0.3, "rescale": False},
    "drophead": {"p": 0.3},
    "attn-layerdrop": {"p": 0.5},
    "attn-layerdrop (per sample)": {"p": 0.5, "per_sample": True},
    "scheduled": {"start": 0.3, "slopes": [0.0, 0.0]},
}


@pytest.mark.parametrize("method", list(HOOK_METHODS))
def test_compiled_hook_method_has_no_graph_break_in_attendout(method):
    # Stock BertForSequenceClassification (transformers 5.x) traces as one graph; a break that
    # transformers itself may cause in another version is not ours, so only breaks with a frame in
    # attendout's files count. What this guards against: a host sync per layer per forward (e.g.
    # `bool(empty.any())` for eq. 4, or attention LayerDrop's skip decided on the host) and ops that
    # dynamo cannot trace (e.g. `random_` with bounds, the eager mask draw).
    model = tiny_model("bert", num_attention_heads=2)  # hidden 32, 2 layers, intermediate 37, vocab 99
    handle = attendout.apply(model, method.split(" ")[0], **HOOK_METHODS[method])
    handle.set_progress(0.5)
    model.train()
    batch = make_batch(pad_from={1: 7, 3: 4})
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(**batch)  # traces and runs (eager), no C++ compiler
    ours = [
        f"{reason.reason.splitlines()[0]} at "
        + ", ".join(f"{Path(f.filename).name}:{f.lineno}" for f in reason.user_stack[-2:])
        for reason in explanation.break_reasons
        if _ours(reason)
    ]
    assert not ours, ours
    # The drop-rate statistics still accumulate through the traced forward (a side effect dynamo replays).
    stats = {k: v for k, v in handle.stats().items() if "/drop_rate/" in k or "/p/" in k}
    assert {k.rsplit("/", 1)[1] for k in stats} == {"L0", "L1"}, stats
    if method == "scores-dropout":
        assert all(0.1 < v < 0.5 for v in stats.values()), stats


class _Attention(nn.Module):
    is_causal = False


@pytest.mark.parametrize("padded", [False, True])
def test_masked_sdpa_eq4_rows_equal_the_explicit_softmax(padded):
    """Eq. 4 through SDPA with a zeroed query (no data-dependent branch) = the explicit softmax path.

    Rows partly dropped and rows wholly dropped (every real key), forward and gradients; the query of
    a wholly dropped row gets no gradient on either path.
    """
    torch.manual_seed(0)
    b, h, length, d = 3, 2, 9, 8
    query, key, value = (torch.randn(b, h, length, d, requires_grad=True) for _ in range(3))
    valid = None
    if padded:
        valid = torch.ones(b, 1, length, length, dtype=torch.bool)
        valid[1, ..., 6:] = False  # sample 1 has 6 real keys
        valid[2, ..., 3:] = False  # sample 2 has 3
    drop = torch.rand(b, h, length, length) < 0.4  # partly dropped rows
    drop[:, :, 2] = True  # wholly dropped
    drop[2, 1, 5, :3] = True  # padded: every real key of this row dropped, its padding keys not
    drop[0, 0, 7, :] = True
    module = _Attention().train()
    results = []
    for explicit in (False, True):
        for t in (query, key, value):
            t.grad = None
        call = AttentionCall(0, module, query, key, value, valid, True)
        if explicit:
            probs = attention_probs(call, [], None, drop)
            output = torch.matmul(probs, value).transpose(1, 2)  # (B, Lq, H, d)
        else:
            output, _ = masked_sdpa(call, valid, drop, None, None, 0.0)
        weights = torch.randn(output.shape, generator=torch.Generator().manual_seed(1))
        (output * weights).sum().backward()
        results.append((output.detach(), *(t.grad.clone() for t in (query, key, value))))
    for fast, slow in zip(*results, strict=True):
        torch.testing.assert_close(fast, slow)
    query_grad = results[0][1]
    wholly = [query_grad[:, :, 2], query_grad[0, 0, 7]] + ([query_grad[2, 1, 5]] if padded else [])
    assert all(g.abs().max() == 0 for g in wholly)
    assert query_grad[:, :, 0].abs().max() > 0
