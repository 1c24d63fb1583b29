"""What a method sees and says: one attention call, one method's edit of it, and their combination.

* :class:`AttentionCall`: one call of one layer (query, key, value, the keys each query may see);
* :class:`AttentionEdit` and :class:`RandomDrops`: what a method asks of that call (eq. 2, 3 and 4 of
  paper 001);
* :class:`AttentionMethod`: the base of every method that acts through the hook, and
  :class:`RateMeter`, which methods keep their drop rates in;
* :func:`own_edit`, :func:`combine_edits` and :class:`CombinedEdits`: the per-call state an attention
  path works from, every acting method's edit and the forward's own combined;
* :class:`AttentionRecorder`: what keeps a call's probabilities, and :class:`MethodHost`, what a method
  is attached to (the model's :class:`~attendout.attention.controller.Controller`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from ..contract import ForwardEdits
from .families import Family
from .masks import bernoulli_drop


@dataclass
class AttentionCall:
    """One attention call of one layer, as methods see it."""

    layer: int
    module: nn.Module
    query: torch.Tensor  # (B, H, Lq, d)
    key: torch.Tensor  # (B, H_kv, Lk, d): grouped-query models have fewer key/value heads
    value: torch.Tensor  # (B, H_kv, Lk, d)
    key_valid: torch.Tensor | None  # (B, 1, Lq, Lk) bool, True = a real (non-padding) key; None = no padding
    training: bool
    #: this forward's edits, passed as ``model(..., attendout_edits=...)`` (None: the forward brought none)
    edits: ForwardEdits | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(B, H, Lq, Lk) of the attention matrix."""
        b, h, lq, _ = self.query.shape
        return b, h, lq, self.key.shape[2]

    def valid(self) -> torch.Tensor:
        """(B, 1, Lq, Lk) bool mask of non-padding keys (all True without padding)."""
        if self.key_valid is not None:
            return self.key_valid
        b, _, lq, lk = self.shape
        return torch.ones(b, 1, lq, lk, dtype=torch.bool, device=self.query.device)

    def block_shape(self, rows: slice) -> tuple[int, int, int, int]:
        """(B, H, number of query rows in ``rows``, Lk): the shape of a block of this call's scores."""
        b, h, lq, lk = self.shape
        return b, h, len(range(lq)[rows]), lk

    def dropped_fraction(
        self, dropped: torch.Tensor, rows: slice = slice(None)
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(number of dropped non-padding positions, number of non-padding positions), as tensors.

        ``dropped`` is a bool mask broadcastable to (B, H, Lq, Lk), or to (B, H, rows, Lk) for the query
        rows ``rows``. Returned as tensors so that a caller can sum over many steps without a device
        sync per call.
        """
        b, h, lq, lk = self.block_shape(rows)
        size, valid = b * h * lq * lk, query_rows(self.key_valid, rows)
        # count_nonzero: a bool .sum() would first copy the mask to int64. A mask broadcast over heads
        # (or rows) is counted once and multiplied by its copies.
        dropped = dropped if valid is None else dropped & valid
        total = (
            torch.tensor(size, device=dropped.device)
            if valid is None
            else valid.count_nonzero() * (size // valid.numel())
        )
        return dropped.count_nonzero() * (size // dropped.numel()), total


@dataclass
class AttentionEdit:
    """What one method asks of one attention call. All fields optional; they combine across methods.

    drop_scores:   bool, broadcastable to (B, H, Lq, Lk); True = that score becomes -inf (eq. 3).
                   A row with every key dropped gets uniform attention over its non-padding keys (eq. 4).
    random_drops:  scores dropped independently at random (:class:`RandomDrops`), as ``drop_scores``
                   but drawn by the attention path where it needs them, block by block of query rows
                   where it can, so that no whole (B, H, Lq, Lk) mask need exist.
    scale_weights: float or bool, broadcastable to (B, H, Lq, Lk); multiplies the weights after the
                   softmax (eq. 2). Rescaling (1/(1-p)) is the method's choice and goes in the values.
    skip:          the whole layer attends uniformly to its non-padding keys (eq. 4).
    dropout:       replaces the model's own attention-dropout probability for this call.
    """

    drop_scores: torch.Tensor | None = None
    random_drops: RandomDrops | None = None
    scale_weights: torch.Tensor | None = None
    skip: bool = False
    dropout: float | None = None


@dataclass(frozen=True)
class RandomDrops:
    """Each score dropped with probability ``p``, independently (a Bernoulli mask of eq. 3).

    ``count`` (optional) receives, for every draw, the number of dropped non-padding positions and the
    number of non-padding positions (tensors: no host sync), e.g. a :class:`RateMeter`'s ``add``.
    """

    p: float
    count: Callable[[torch.Tensor, torch.Tensor], None] | None = None

    def draw(self, call: AttentionCall, rows: slice = slice(None)) -> torch.Tensor:
        """The mask of query rows ``rows``: bool (B, H, rows, Lk), True = dropped."""
        drop = bernoulli_drop(call.block_shape(rows), self.p, call.query.device)
        if self.count is not None:
            self.count(*call.dropped_fraction(drop, rows))
        return drop


class MethodHost(Protocol):
    """What :meth:`AttentionMethod.attach` and :meth:`~AttentionMethod.detach` are given: the model's
    :class:`~attendout.attention.controller.Controller`, by what a method reads of it (the controller
    holds methods, so this module names it by protocol and does not import it)."""

    model: nn.Module
    family: Family
    attention_modules: list[nn.Module]
    blocks: list[nn.Module]
    num_layers: int


class AttentionRecorder:
    """Keeps each layer's attention probabilities (B, H, Lq, Lk) of the latest forward pass.

    The probabilities are the softmax output, before any weights mask and before attention dropout.
    With ``grads=True`` they stay in the autograd graph and keep their gradient after ``backward()``
    (``recorder.probs[layer].grad``), which attribution methods need. Works in train and eval mode.
    """

    def __init__(self, layers: Sequence[int] | None = None, grads: bool = False) -> None:
        self.layers = None if layers is None else set(layers)
        self.grads = grads
        self.probs: dict[int, torch.Tensor] = {}

    def wants(self, layer: int) -> bool:
        return self.layers is None or layer in self.layers

    def record(self, layer: int, probs: torch.Tensor) -> None:
        if self.grads and probs.requires_grad:
            probs.retain_grad()
            self.probs[layer] = probs
        else:
            self.probs[layer] = probs.detach()

    def clear(self) -> None:
        self.probs = {}


class AttentionMethod:
    """Base of everything that acts on attention through the hook.

    Subclasses override :meth:`edit` (and, for architectural changes, :meth:`transform_scores` with
    ``acts_in_eval = True``). Regularisers act only in training mode: the hook never asks them in
    eval mode, so an eval-mode model is the unmodified model.
    """

    name: str = "method"
    #: Architectural changes (Synthesizer) act in eval mode too; regularisers do not.
    acts_in_eval: bool = False
    #: Layers this method acts on; None = all.
    layers: Sequence[int] | None = None
    #: Methods whose drops come with each training forward (``call.edits``: AD-DROP's, AttendOut's): what
    #: a training forward without them raises, instead of training plainly. "" = they come from :meth:`edit`.
    without_edits: str = ""

    def acts_on(self, layer: int, training: bool) -> bool:
        if not (training or self.acts_in_eval):
            return False
        return self.layers is None or layer in self.layers

    def edit(self, call: AttentionCall) -> AttentionEdit | None:
        if self.without_edits and call.edits is None:
            raise RuntimeError(self.without_edits)
        return None

    def transform_scores(self, call: AttentionCall, scores: torch.Tensor) -> torch.Tensor | None:
        """Replace or modify the scaled scores (B, H, Lq, Lk); None = leave them."""
        return None

    # lifecycle -------------------------------------------------------------------------------
    def attach(self, controller: MethodHost) -> None:
        """Called once when the method is added to a model (validate layers, wrap blocks...)."""
        if self.layers is not None:
            bad = [i for i in self.layers if not 0 <= i < controller.num_layers]
            if bad:
                stacks = (
                    " self-attention layers, the encoder's then the decoder's; cross-attention layers are not "
                    "numbered: no method acts on them"
                    if controller.family.stacks
                    else " layers"
                )
                raise ValueError(
                    f"{self.name}: layers {bad} do not exist; the model has {controller.num_layers}{stacks} "
                    f"(0..{controller.num_layers - 1})"
                )

    def detach(self, controller: MethodHost) -> None:
        """Undo :meth:`attach`."""

    def set_progress(self, fraction: float) -> None:
        """Training progress in [0, 1], for methods with schedules."""

    # statistics ------------------------------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """Statistics accumulated since the last call, then reset (e.g. realised drop rate per layer)."""
        return {}


class RateMeter:
    """Accumulates (dropped, total) counts per key without a device sync per update."""

    def __init__(self) -> None:
        self._sums: dict[str, list[torch.Tensor]] = {}

    def add(self, key: str, dropped: torch.Tensor, total: torch.Tensor) -> None:
        pair = self._sums.get(key)
        if pair is None:
            self._sums[key] = [dropped.detach().float(), total.detach().float()]
        else:
            pair[0] = pair[0] + dropped.detach()
            pair[1] = pair[1] + total.detach()

    def pop(self) -> dict[str, float]:
        out = {k: (d / t.clamp(min=1)).item() for k, (d, t) in self._sums.items()}
        self._sums = {}
        return dict(sorted(out.items()))


def rewrites_scores(method: AttentionMethod) -> bool:
    """Whether the method replaces or modifies the scores themselves (Synthesizer), not only masks them."""
    return type(method).transform_scores is not AttentionMethod.transform_scores


def own_edit(
    edits: ForwardEdits | None, layer: int, training: bool, shape: tuple[int, int, int, int]
) -> AttentionEdit | None:
    """The forward's own edit of ``layer`` (training only), its drops checked against (B, H, Lq, Lk)."""
    own = edits.layers.get(layer) if edits is not None and training else None
    if own is not None and own.drop_scores is not None:
        given = tuple(own.drop_scores.shape)
        if len(given) != 4 or any(n not in (1, m) for n, m in zip(given, shape, strict=True)):
            raise ValueError(
                f"attendout: the drops given to layer {layer} ({edits.driver or 'attendout_edits'}) have shape "
                f"{given}, which does not fit this forward's attention {shape}; make them from the "
                "batch this forward runs on"
            )
    return own


@dataclass
class CombinedEdits:
    """Every acting method's edit of one call and the forward's own, combined.

    ``drop`` (given masks, OR-ed) and ``random`` (random drops, drawn on demand) together are the
    dropped scores; ``skip`` drops every score of the layer (eq. 4 for the whole layer). ``scale``
    is the product of the scales; ``dropout`` the model's attention-dropout probability, or the one a
    method put in its place.
    """

    drop: torch.Tensor | None
    random: list[RandomDrops]
    scale: torch.Tensor | None
    skip: bool
    dropout: float

    @property
    def drops_any(self) -> bool:
        return self.skip or self.drop is not None or bool(self.random)

    def drops(self, call: AttentionCall, rows: slice = slice(None)) -> torch.Tensor | None:
        """Every dropped score of the query rows ``rows``: bool, broadcastable to (B, H, rows, Lk); None = none.

        Random drops are drawn here, once per call of this function: a path asks once for each block.
        """
        if self.skip:
            return torch.ones(1, 1, 1, 1, dtype=torch.bool, device=call.query.device)
        drop = query_rows(self.drop, rows)
        for random in self.random:
            drawn = random.draw(call, rows)
            drop = drawn if drop is None else drop | drawn
        return drop


def combine_edits(
    call: AttentionCall, methods: list[AttentionMethod], own: AttentionEdit | None, dropout: float
) -> CombinedEdits:
    """Every acting method's edit and the forward's own, combined.

    Drops are OR-ed, scales multiplied, a skip wins; a method's dropout replaces the model's own.
    """
    drop: torch.Tensor | None = None
    random: list[RandomDrops] = []
    scale: torch.Tensor | None = None
    skip = False
    for edit in [method.edit(call) for method in methods] + [own]:
        if edit is None:
            continue
        if edit.drop_scores is not None:
            drop = edit.drop_scores if drop is None else drop | edit.drop_scores
        if edit.random_drops is not None:
            random.append(edit.random_drops)
        if edit.scale_weights is not None:
            scale = edit.scale_weights if scale is None else scale * edit.scale_weights
        skip = skip or edit.skip
        if edit.dropout is not None:
            dropout = edit.dropout if call.training else 0.0
    return CombinedEdits(drop, random, scale, skip, dropout)


def query_rows(mask: torch.Tensor | None, rows: slice) -> torch.Tensor | None:
    """The query rows ``rows`` of a (B|1, H|1, Lq|1, Lk|1) tensor (a row broadcast over Lq stays)."""
    if mask is None or mask.shape[-2] == 1 or rows == slice(None):
        return mask
    return mask[:, :, rows]
