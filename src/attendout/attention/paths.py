"""The three attention paths a call with edits can take, and the masks they share.

:func:`~attendout.attention.hook.attendout_attention` picks one for each call:

* **fused SDPA** (:func:`masked_sdpa`): the drops join the padding mask and a per-head scale scales
  the output, so transformers' SDPA attention does the work;
* **filled** (:func:`filled_softmax`): on a CPU with the model's attention dropout on, dropped scores
  are filled in place a block of query rows at a time (:data:`BLOCK_BYTES`), with no whole mask;
* **explicit** (:func:`attention_probs`): the softmax written out, for what needs the probabilities
  themselves (recorders, score transforms, a scale per weight).

All three give the same values and gradients under one seed (eq. 3 and 4 of paper 001; tests/test_attention.py).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

from .call import AttentionCall, AttentionMethod, CombinedEdits, query_rows


def per_query_head(call: AttentionCall, states: torch.Tensor) -> torch.Tensor:
    """Grouped-query key or value heads repeated to one per query head (the explicit softmax needs them)."""
    return repeat_kv(states, getattr(call.module, "num_key_value_groups", 1))


def per_head(scale: torch.Tensor) -> bool:
    """A scale that is constant along each row of weights: (B|1, H|1, 1, 1) or a scalar."""
    return scale.dim() == 0 or (scale.dim() == 4 and scale.shape[-2:] == (1, 1))


def allowed_keys(call: AttentionCall, drop: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys each query may attend to after ``drop`` (eq. 3), and the rows where none is left.

    Returns ``allowed`` (B, H|1, Lq, Lk) bool, where an emptied row falls back to its non-padding
    keys, and ``empty`` (B, H|1, Lq, 1) bool: the rows that eq. 4 makes uniform.
    """
    valid = call.key_valid
    allowed = ~drop if valid is None else valid > drop  # valid and not dropped, in one pass over bools
    empty = _no_key_left(allowed)
    if valid is None:
        return allowed | empty, empty
    return torch.where(empty, valid, allowed), empty


def uniform_weights(call: AttentionCall) -> torch.Tensor:
    """(B, 1, Lq, Lk) uniform weights over each row's non-padding keys (eq. 4)."""
    uniform = call.valid().to(call.query.dtype)
    return uniform / uniform.sum(-1, keepdim=True).clamp(min=1)


def masked_sdpa(
    call: AttentionCall,
    attention_mask: torch.Tensor | None,
    drop: torch.Tensor | None,
    scale: torch.Tensor | None,
    scaling: float | None,
    dropout: float,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Eq. 3 and 4 (and a per-head eq. 2) through SDPA; the same result as the explicit softmax path.

    Eq. 4 needs no branch on the data (no host sync, no graph break under ``torch.compile``): an emptied
    row's mask falls back to its non-padding keys (``allowed_keys``), and its query is zeroed, so every score
    of that row is 0 and SDPA's softmax is uniform over those keys, with the model's dropout applied
    inside SDPA as on every other row. The zeroed query also cuts that row's query and key gradients,
    as the explicit path's zeroed scores do. Grouped-query key/value heads go to SDPA as they came (it
    repeats them itself). A relative position bias (T5) in ``kwargs`` is zeroed
    on eq. 4 rows too, so that they stay uniform, as on the explicit path. Without drops the model's own
    ``attention_mask`` goes to SDPA as it came (None for an unpadded causal batch: SDPA's ``is_causal``).
    """
    query, mask = call.query, attention_mask
    if drop is not None:
        mask, empty = allowed_keys(call, drop)  # empty: (B, H|1, Lq, 1)
        query = query.masked_fill(empty, 0.0)  # eq. 4 rows: all scores 0, uniform softmax
        if kwargs.get("position_bias") is not None:
            kwargs["position_bias"] = kwargs["position_bias"].masked_fill(empty, 0.0)
    output, _ = sdpa_attention_forward(
        call.module, query, call.key, call.value, mask, scaling=scaling, dropout=dropout, **kwargs
    )  # (B, Lq, H, d)
    if scale is not None:
        output = output * (scale if scale.dim() == 0 else scale.transpose(1, 2)).to(output.dtype)
    return output, None


def fills_in_place(call: AttentionCall, dropout: float) -> bool:
    """Whether dropped scores are cheaper filled in place (:func:`filled_softmax`) than given to SDPA.

    On a CPU, SDPA's fused kernel takes no dropout: with the model's attention dropout on (BERT's 0.1)
    it runs its math path, which materialises the whole (B, H, Lq, Lk) scores anyway, first turns a
    boolean mask into a float one of that size, and adds it. The filled path skips the conversion and
    the addition and works a block of rows at a time. Eager mode only: under ``torch.compile`` the
    compiler fuses the masked SDPA call itself, and an in-place write outside autograd is not what it
    should trace.
    """
    return (
        call.query.device.type == "cpu"
        and dropout > 0
        and call.query.is_floating_point()
        and not torch.compiler.is_compiling()
    )


def empty_rows(valid: torch.Tensor | None, drop: torch.Tensor) -> torch.Tensor:
    """(B, H|1, Lq, 1) bool: the rows whose every key the query may see (``valid``) was dropped (eq. 4).

    Without ``valid``, a min over bytes (every key dropped), with no negated copy of the mask.
    """
    if valid is None:
        return drop.view(torch.uint8).amin(dim=-1, keepdim=True) == 1
    return _no_key_left(valid > drop)


def _no_key_left(allowed: torch.Tensor) -> torch.Tensor:
    """(..., 1) bool: the rows of a bool ``allowed`` with no True left.

    A max over bytes (a row's largest entry is 0): many times faster than ``any()`` over bools.
    """
    return allowed.view(torch.uint8).amax(dim=-1, keepdim=True) == 0


#: The largest (B, H, rows, Lk) block of scores the filled path makes at once. Below glibc's largest
#: threshold for serving an allocation by a fresh mapping (32 MiB), so blocks reuse heap memory instead
#: of having new pages mapped and zeroed on every call, and a block's passes stay closer to the caches:
#: with it, scores dropout's step at 8,192 tokens is 0.65x of stock SDPA's (docs/results/cost.md, *By sequence
#: length*); unblocked, the same path's attention layer measured about 1.15x of SDPA's at 8,192.
BLOCK_BYTES = 16 << 20


def filled_softmax(
    call: AttentionCall, combined: CombinedEdits, scaling: float | None, bias: torch.Tensor | None
) -> tuple[torch.Tensor, None]:
    """Eq. 3 and 4 (and a per-head eq. 2) with dropped scores filled in place: the explicit path's result.

    The scores are made a block of query rows at a time (at most :data:`BLOCK_BYTES`), with each
    block's random drops drawn for it alone, so that neither the whole (B, H, Lq, Lk) mask nor the whole
    scores exist at once; autograd keeps what stock attention's math path keeps (the weights, the
    dropout mask, the dropped weights), a block at a time. See :func:`_filled_block` for one block.
    """
    b, h, lq, lk = call.shape
    factor = scaling if scaling is not None else call.query.shape[-1] ** -0.5
    query = call.query * factor
    keys = per_query_head(call, call.key).transpose(-1, -2)
    values = per_query_head(call, call.value)
    step = max(16, BLOCK_BYTES // max(1, b * h * lk * call.query.element_size()))
    outputs = []
    for start in range(0, lq, step):
        rows = slice(start, start + step)
        outputs.append(
            _filled_block(
                query[:, :, rows],
                keys,
                values,
                combined.drops(call, rows),
                query_rows(call.key_valid, rows),
                query_rows(bias, rows),
                combined.dropout,
            )
        )
    output = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)  # (B, H, Lq, d)
    if combined.scale is not None:
        output = output * combined.scale.to(output.dtype)
    return output.transpose(1, 2).contiguous(), None


def _filled_block(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    drop: torch.Tensor,
    valid: torch.Tensor | None,
    bias: torch.Tensor | None,
    dropout: float,
) -> torch.Tensor:
    """One block of query rows of :func:`filled_softmax`: (B, H, rows, d) from the scaled queries.

    A dropped score becomes a very negative number (half the dtype's lowest) and a padding or unseen
    key the lowest, both written into the scores outside autograd. A row with a real score left gives
    the dropped ones exactly zero weight, and so, through the softmax's backward, exactly zero gradient:
    the same values and gradients as ``-inf``. In a row with every seen key dropped, those keys tie
    above the unseen ones, so the softmax is uniform over them (eq. 4); its query (and T5's position
    bias) is zeroed before the product, which cuts that row's query and key gradients, as on the other
    paths. The model's attention dropout is ``torch.nn.functional.dropout``, the draw that the explicit
    path and SDPA's math path make.
    """
    empty = empty_rows(valid, drop)
    scores = torch.matmul(query.masked_fill(empty, 0.0), keys)  # (B, H, rows, Lk)
    if bias is not None:  # T5's relative position bias
        scores = scores + bias.masked_fill(empty, 0.0)
    # Outside autograd: the product's backward does not need its output, and the softmax saves only
    # its own, so nothing saved is overwritten (and no mask is kept for the backward pass).
    filled = scores.detach()
    lowest = torch.finfo(scores.dtype).min
    filled.masked_fill_(drop, lowest / 2)
    if valid is not None:
        filled.masked_fill_(~valid, lowest)
    probs = torch.softmax(scores, dim=-1)
    if valid is not None:
        keyless = ~valid.any(dim=-1, keepdim=True)  # a padding query that sees no real key
        if keyless.any():  # a host check, cheap on a CPU: most batches have no such row
            probs = probs.masked_fill(keyless, 0.0)
    probs = nn.functional.dropout(probs, p=dropout, training=True)  # the model's own, as stock
    return torch.matmul(probs, values)


def attention_probs(
    call: AttentionCall,
    methods: list[AttentionMethod],
    scaling: float | None,
    drop: torch.Tensor | None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax attention with eq. 3 (dropped scores = -inf) and eq. 4 (all dropped = uniform).

    ``bias`` (T5's relative position bias) is added after the methods' score transforms: a synthesizer
    replaces the token-token scores, and the position bias stays, as BERT's position embeddings do.
    """
    query, key = call.query, per_query_head(call, call.key)
    valid = call.key_valid  # (B, 1, Lq, Lk) or None
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale  # (B, H, Lq, Lk)
    for method in methods:
        changed = method.transform_scores(call, scores)
        if changed is not None:
            scores = changed
    if bias is not None:
        scores = scores + bias
    lowest = torch.finfo(scores.dtype).min
    if drop is not None:
        allowed, empty = allowed_keys(call, drop)  # rows with every real key dropped: eq. 4
        scores = scores.masked_fill(empty, 0.0).masked_fill(~allowed, lowest)
    elif valid is not None:
        scores = scores.masked_fill(~valid, lowest)
    return no_key_rows_zero(torch.softmax(scores, dim=-1), valid)


def no_key_rows_zero(probs: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Rows with no real key at all attend to nothing, as SDPA's fully masked rows do (zeros).

    Only a padding query can have such a row (e.g. in ModernBERT's local layers, a padding position
    whose window holds only padding); without this its softmax would spread over the padding keys.
    """
    return probs if valid is None else probs * valid.any(dim=-1, keepdim=True).to(probs.dtype)
