"""Synthetic attention logits: the variants of the Synthesizer paper as small modules.

Tay, Bahri, Metzler, Juan, Zhao, Zheng, "Synthesizer: Rethinking Self-Attention in Transformer
Models", ICML 2021 (arXiv:2005.00743). A synthesizer replaces the query-key logits ``Q K^T / sqrt(d)``
of a self-attention layer by logits that involve no token-token interaction:

==================  ============================================  ==========================  =========
variant             logits of query position i over key j          parameters per layer         paper
==================  ============================================  ==========================  =========
dense               ``F(X_i)_j``, F = W2 ReLU(W1 X_i + b1) + b2     d^2 + d + H (d + 1) l        §3.1
factorized-dense    ``A(X_i)[j // b] * B(X_i)[j mod b]``, a*b >= l  d^2 + d + H (d + 1)(a + b)  §3.1
random              ``R[i, j]``, R learned or ``fixed``            H l^2                       §3.2
factorized-random   ``(R1 R2^T)[i, j]``, R1, R2 of rank k          2 H l k                     §3.2
==================  ============================================  ==========================  =========

(d the hidden size, H the heads, l = ``l_max``; with ``shared_heads`` read H = 1.) Every variant is
per head by default: each head has its own logits (its own R, or its own rows of the dense output
layer W2), while the dense hidden layer W1 (d -> d) is shared by the heads of a layer. With
``shared_heads=True`` one set of logits serves all heads (cheaper, but every head of the layer then
attends alike).

A mixture (§3.3, "Mixture of Synthesizers") adds the dot-product logits, in one of three forms
(``mixing``):

* ``layer`` (the default), as the official code (``synthetic_attention`` in
  ``mesh_tensorflow/transformer/attention.py`` of tensorflow/mesh, modes ``random_plus_alpha`` and
  ``dense_plus_alpha``, lines 288-295 and 315-322): ``(1 - a) * dot + a * synth`` with one scalar per
  layer ``a = sigmoid(w)``, ``w`` initialised to 0, so ``a`` starts at 1/2 and stays in (0, 1): the
  two weights sum to 1, as the paper asks;
* ``head``: one raw, unbounded weight ``a_h`` per head (attendout's form before issue 50), starting at
  0 (``init="exact"``: the mixture computes exactly what the dot-product attention computed) or 1/2
  (``init="paper"``);
* ``sum``: ``dot + synth``, the official plain-sum modes (``random_plus``, ``dense_plus``, lines 296-297).

**Initialisation of the random matrices** (``random_init``): ``glorot`` (the default) draws R (and R1,
R2) as the official code does, whose ``mtf.get_variable(..., initializer=None)`` is TensorFlow's
``glorot_uniform`` over the variable's shape: R of shape (l, H, l) gets U(+-sqrt(6 / (l (H + l)))),
R1 and R2 of shape (k, H, l) get U(+-sqrt(6 / (k (H + l)))), with l = ``l_max`` where the official code
has 512; the logits start close to 0, so attention starts close to uniform. ``normal`` draws R from
N(0, 1) (factorized: R1 R2^T of unit variance), attendout's form before issue 50: a fixed R then gives
each query a distinct, mildly peaked row.

The modules here only produce logits; the attention hook (:mod:`attendout.attention`) masks padding
keys, applies the softmax, the model's attention dropout, and the layer's own value projection.

**Decoders (causal) and KV caches.** Every variant produces logits for every key position, later ones
included; in a causal layer the hook masks keys after the query (to -inf, before the softmax), so a
position never sees a later one. A call brings Lq queries over Lk keys; query i sits at position
t = Lk - Lq + i (without a cache Lq = Lk and t = i; generating with a cache, Lq = 1 and t = Lk - 1).
The random variants read row t of R (or of R1 R2^T), columns 0..Lk-1; the dense variants compute
F(X_t) from the query token's own input and keep its first Lk entries (rows 0..Lk-1 of W2). So step t
of generation reads exactly the row that position t read in training, and Lk must not exceed l_max.
That needs a cache holding exactly the earlier positions (transformers' dynamic cache, the default of
``generate``); a static cache, longer than the sequence so far, is refused with an error.
Positions are cache slots: a left-padded prompt shifts them, as it shifts absolute position embeddings.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .variants import (
    MIXINGS,
    OFFICIAL_RANK,
    VARIANTS,
    base_variant,
    is_mixture,
)


def glorot_limit(shape: tuple[int, ...]) -> float:
    """The bound of TensorFlow's ``glorot_uniform`` for a variable of ``shape``: sqrt(6 / (fan_in +
    fan_out)) with fan_in = shape[-2] * r and fan_out = shape[-1] * r, r the product of the other dims."""
    receptive = math.prod(shape[:-2])
    return math.sqrt(6.0 / (receptive * (shape[-2] + shape[-1])))


class RandomLogits(nn.Module):
    """Random Synthesizer (Tay et al. 2021, §3.2): one l x l logits matrix per head, input-independent.

    ``fixed=True`` keeps R as a buffer (saved, never trained: the paper's "Fixed Random"). ``init``
    ``glorot`` draws R as the official code (its variable is (l, H, l), so U(+-sqrt(6 / (l (H + l)))):
    rows start close to uniform); ``normal`` from N(0, 1), so a fixed R gives each query a distinct,
    mildly peaked attention row.
    """

    needs_input = False

    def __init__(self, heads: int, l_max: int, fixed: bool = False, init: str = "glorot") -> None:
        super().__init__()
        if init == "glorot":
            limit = glorot_limit((l_max, heads, l_max))
            logits = torch.empty(heads, l_max, l_max).uniform_(-limit, limit)  # (H, l, l)
        else:
            logits = torch.randn(heads, l_max, l_max)  # (H, l, l)
        if fixed:
            self.register_buffer("logits", logits)
        else:
            self.logits = nn.Parameter(logits)

    def forward(self, x: torch.Tensor | None, lq: int, lk: int) -> torch.Tensor:
        return self.logits[:, lk - lq : lk, :lk].unsqueeze(0)  # (1, H, Lq, Lk): rows of positions t


class FactorizedRandomLogits(nn.Module):
    """Factorized Random Synthesizer (Tay et al. 2021, §3.2): R = R1 R2^T with R1, R2 of shape (l, k).

    ``init`` ``glorot``: as the official code, whose R1 and R2 are variables of shape (k, H, l), so
    U(+-sqrt(6 / (k (H + l)))); ``normal``: N(0, k^-1/2), so that the entries of R1 R2^T have unit
    variance, as :class:`RandomLogits`' ``normal``. ``fixed=True`` keeps both factors as buffers.
    """

    needs_input = False

    def __init__(self, heads: int, l_max: int, rank: int, fixed: bool = False, init: str = "glorot") -> None:
        super().__init__()
        if init == "glorot":
            limit = glorot_limit((rank, heads, l_max))
            left = torch.empty(heads, l_max, rank).uniform_(-limit, limit)  # (H, l, k)
            right = torch.empty(heads, l_max, rank).uniform_(-limit, limit)  # (H, l, k)
        else:
            std = rank**-0.25
            left = torch.randn(heads, l_max, rank) * std  # (H, l, k)
            right = torch.randn(heads, l_max, rank) * std  # (H, l, k)
        if fixed:
            self.register_buffer("left", left)
            self.register_buffer("right", right)
        else:
            self.left = nn.Parameter(left)
            self.right = nn.Parameter(right)

    def forward(self, x: torch.Tensor | None, lq: int, lk: int) -> torch.Tensor:
        left = self.left[:, lk - lq : lk]  # (H, Lq, k): the query positions
        right = self.right[:, :lk]  # (H, Lk, k)
        return torch.matmul(left, right.transpose(-1, -2)).unsqueeze(0)  # (1, H, Lq, Lk)


class _Hidden(nn.Module):
    """The dense synthesizers' first layer, ReLU(W1 X + b1), d -> d, shared by the heads of a layer."""

    def __init__(self, hidden_size: int, init_std: float) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size)
        nn.init.normal_(self.linear.weight, std=init_std)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))  # (B, L, d)


def _head_rows(heads: int, rows: int, hidden_size: int, init_std: float) -> tuple[nn.Parameter, nn.Parameter]:
    """A per-head output layer: weight (H, rows, d) ~ N(0, init_std), bias (H, rows) = 0."""
    weight = nn.Parameter(torch.randn(heads, rows, hidden_size) * init_std)
    bias = nn.Parameter(torch.zeros(heads, rows))
    return weight, bias


class DenseLogits(nn.Module):
    """Dense Synthesizer (Tay et al. 2021, §3.1): ``F(X_i) = W2 ReLU(W1 X_i + b1) + b2`` in R^l.

    Token i's logits over key positions come from token i alone. W1 (d x d) is shared by the heads;
    W2 (l x d per head) and b2 have one block of rows per head. Rows of W2 beyond the batch's length
    are not computed. Weights start as the encoder's own (N(0, initializer_range)), biases at 0.
    """

    needs_input = True

    def __init__(self, hidden_size: int, heads: int, l_max: int, init_std: float = 0.02) -> None:
        super().__init__()
        self.hidden = _Hidden(hidden_size, init_std)
        self.weight, self.bias = _head_rows(heads, l_max, hidden_size, init_std)  # (H, l, d), (H, l)

    def forward(self, x: torch.Tensor | None, lq: int, lk: int) -> torch.Tensor:
        if x is None:
            raise ValueError("the dense synthesizer needs the layer's input hidden states")
        hidden = self.hidden(x)  # (B, Lq, d): the query tokens' inputs
        weight = self.weight[:, :lk]  # (H, Lk, d)
        logits = torch.einsum("bid,hjd->bhij", hidden, weight)  # (B, H, Lq, Lk)
        return logits + self.bias[:, :lk].unsqueeze(0).unsqueeze(2)  # + (1, H, 1, Lk)


class FactorizedDenseLogits(nn.Module):
    """Factorized Dense Synthesizer (Tay et al. 2021, §3.1): two small heads A (a values), B (b values).

    The paper tiles A and B to length a*b >= l and multiplies them; we lay the products out so that
    every pair appears once: the logit of key position j is ``A[j // b] * B[j mod b]`` (the flattened
    outer product A B^T). Here a = ``rank`` and b = ceil(l / a). W1 is shared as in
    :class:`DenseLogits`.
    """

    needs_input = True

    def __init__(self, hidden_size: int, heads: int, l_max: int, rank: int, init_std: float = 0.02) -> None:
        super().__init__()
        self.a = rank
        self.b = math.ceil(l_max / rank)
        self.hidden = _Hidden(hidden_size, init_std)
        self.weight_a, self.bias_a = _head_rows(heads, self.a, hidden_size, init_std)  # (H, a, d), (H, a)
        self.weight_b, self.bias_b = _head_rows(heads, self.b, hidden_size, init_std)  # (H, b, d), (H, b)

    def forward(self, x: torch.Tensor | None, lq: int, lk: int) -> torch.Tensor:
        if x is None:
            raise ValueError("the factorized dense synthesizer needs the layer's input hidden states")
        hidden = self.hidden(x)  # (B, Lq, d)
        used = math.ceil(lk / self.b)  # the A values that reach key positions < Lk
        a = torch.einsum("bid,had->bhia", hidden, self.weight_a[:, :used])  # (B, H, Lq, a')
        a = a + self.bias_a[:, :used].unsqueeze(0).unsqueeze(2)
        b = torch.einsum("bid,hcd->bhic", hidden, self.weight_b)  # (B, H, Lq, b)
        b = b + self.bias_b.unsqueeze(0).unsqueeze(2)
        logits = (a.unsqueeze(-1) * b.unsqueeze(-2)).flatten(-2)  # (B, H, Lq, a' * b)
        return logits[..., :lk]  # (B, H, Lq, Lk)


def build_logits(
    variant: str,
    *,
    hidden_size: int,
    heads: int,
    l_max: int,
    rank: int,
    fixed: bool,
    init_std: float,
    random_init: str | None = "glorot",
) -> nn.Module:
    """The logits module of a base variant ('dense', 'factorized-dense', 'random', 'factorized-random';
    :class:`SynthesizerLayer` has checked it)."""
    if variant == "dense":
        return DenseLogits(hidden_size, heads, l_max, init_std)
    if variant == "factorized-dense":
        return FactorizedDenseLogits(hidden_size, heads, l_max, rank, init_std)
    if variant == "random":
        return RandomLogits(heads, l_max, fixed, random_init or "glorot")
    return FactorizedRandomLogits(heads, l_max, rank, fixed, random_init or "glorot")


class SynthesizerLayer(nn.Module):
    """The synthesized attention logits of one layer, alone or mixed with the dot-product logits.

    ``forward(dot, x)`` takes the scaled dot-product scores (B, H, Lq, Lk) that the hook computed and the
    query tokens' input hidden states x (B, Lq, d) (None for the random variants) and returns the logits
    the hook feeds to its padding (and causal) mask and softmax.

    Mixture (Tay et al. 2021, §3.3), by ``mixing``: ``layer`` ``(1 - a) dot + a synth`` with
    ``a = sigmoid(mix)``, ``mix`` (1,) starting at 0 (the official form); ``head`` the same with one raw
    ``a_h`` per head in ``mix`` (H,); ``sum`` ``dot + synth`` (no weight).
    """

    def __init__(
        self,
        variant: str,
        *,
        hidden_size: int,
        heads: int,
        l_max: int,
        rank: int = OFFICIAL_RANK,
        fixed: bool = False,
        shared_heads: bool = False,
        init: str = "paper",
        init_std: float = 0.02,
        mixing: str | None = "layer",
        random_init: str | None = "glorot",
    ) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
        self.variant = variant
        self.heads = heads
        self.l_max = l_max
        self.logits = build_logits(
            base_variant(variant),
            hidden_size=hidden_size,
            heads=1 if shared_heads else heads,
            l_max=l_max,
            rank=rank,
            fixed=fixed,
            init_std=init_std,
            random_init=random_init,
        )
        self.mixing = (mixing or "layer") if is_mixture(variant) else None
        if self.mixing is not None and self.mixing not in MIXINGS:
            raise ValueError(f"mixing must be one of {', '.join(MIXINGS)}, got {mixing!r}")
        self.mix: nn.Parameter | None = None
        if self.mixing == "head":
            start = 0.0 if init == "exact" else 0.5
            self.mix = nn.Parameter(torch.full((heads,), start))  # (H,) weight of the synthetic logits
        elif self.mixing == "layer":
            # the official alpha: zeros_initializer, used through a sigmoid (a = 1/2 at the start)
            self.mix = nn.Parameter(torch.zeros(1))  # (1,) logit of the synthetic logits' weight

    @property
    def needs_input(self) -> bool:
        return self.logits.needs_input

    def weight(self) -> torch.Tensor | None:
        """The synthetic logits' weight in the mixture: (1,) in (0, 1) for ``layer``, (H,) raw for
        ``head``; None for ``sum`` and for variants that are not mixtures."""
        if self.mix is None:
            return None
        return torch.sigmoid(self.mix) if self.mixing == "layer" else self.mix

    def forward(self, dot: torch.Tensor, x: torch.Tensor | None) -> torch.Tensor:
        b, h, lq, lk = dot.shape
        synth = self.logits(x, lq, lk)  # (B|1, H|1, Lq, Lk)
        if self.mixing is None:
            return synth.expand(b, h, lq, lk)  # (B, H, Lq, Lk), a view
        if self.mixing == "sum":
            return dot + synth.to(dot.dtype)  # (B, H, Lq, Lk)
        weight = self.weight()
        weight = weight.view(1, -1, 1, 1).to(dot.dtype)  # (1, H|1, 1, 1)
        # (1 - a) dot + a synth in one fused op; with a = 0 it returns dot bit for bit
        return torch.lerp(dot, synth.to(dot.dtype), weight)  # (B, H, L, L)
