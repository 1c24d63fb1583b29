"""``addrop``: attribution-driven attention dropout with cross-tuning (paper 002, AD-DROP).

Per training batch AD-DROP (002 §2, Figure 1):

1. runs an **attribution pass** without any dropping and scores every attention position of the
   chosen layers for the *predicted* label ``c = argmax F(x)`` (for regression: the gold loss):

   * ``ga``  gradient attribution, ``B_h = dF_c(A) / dA_h`` (002 eq. 3): the plain gradient of the
     label's logit with respect to the attention weights, *not* multiplied by the weights, as in the
     paper. Gradient x weights is exactly ``iga`` with ``ig_steps=1``, so it stays one option away.
   * ``iga`` integrated gradients, ``B_h = A_h * int_0^1 dF_c(alpha A) / dA_h dalpha`` (002 eq. 4,
     after Hao et al.'s self-attention attribution), a right Riemann sum with ``m = ig_steps`` points.
     The weights of one layer are scaled by ``alpha`` through the hook (``AttentionEdit.scale_weights``)
     while every other layer runs normally; each layer costs ``m`` forward+backward passes.
   * ``aa``  the attention weights themselves (one forward pass, no backward).
   * ``rd``  random scores, the control (no attribution pass at all).

2. builds **masks**: in every query row of every head, the candidate discard region is the
   ``round(p * n)`` non-padding keys of highest attribution (``n`` = non-padding keys of the row;
   ties broken at random) and each candidate is dropped with probability ``q``. Masks are booleans.

3. runs the **training pass** with the model's ordinary dropout on; the dropped positions get a
   ``-inf`` score (002 eq. 1, 001 eq. 3; a row with every key dropped attends uniformly, 001 eq. 4).
   Its loss is the one that trains.

**Cross-tuning** (002 §2.4) alternates plain fine-tuning and AD-DROP with a period in epochs or steps.

The attribution pass runs with the model's ordinary dropout **off** by default (``attribution_dropout``):
the attribution then describes the model being trained, not one random sub-network, so ``ga`` is not
blurred towards ``rd`` by dropout noise and its predicted label is the evaluation-time prediction.
Every module's ``training`` flag is restored exactly afterwards, so the training pass always runs in
the mode it was given (the public implementation left the model in eval mode after its integrated
gradients, switching standard dropout off for the rest of training).

In any loop, :class:`ADDropStrategy` (``attendout.prepare(model, "addrop")``) runs the pass and cross-tuning
in ``before_forward``; by hand, one forward at a time::

    handle = attendout.apply(model, "addrop", attribution="ga")
    model.train()
    extra = handle.method.prepare(model, batch)  # attribution pass; train mode is restored afterwards
    loss = model(**batch, **extra).loss          # this forward drops; the drops go nowhere else

A training forward of the model without ``extra`` raises instead of training plainly.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..attention import (
    AttentionCall,
    AttentionEdit,
    AttentionMethod,
    RateMeter,
    install,
    record_attention,
)
from ..contract import ForwardEdits, LoopContext, StepInfo
from .base import MethodConfig, TrainingStrategy, check_probability, register_method

logger = logging.getLogger(__name__)

ATTRIBUTIONS = ("ga", "iga", "aa", "rd")
CROSS_TUNING = ("epoch", "step", "off")
STARTS = ("finetune", "addrop")

__all__ = [
    "ATTRIBUTIONS",
    "ADDrop",
    "ADDropConfig",
    "ADDropStrategy",
    "Attribution",
    "addrop_active",
    "attribute",
    "candidate_region",
    "modes_restored",
    "sample_drops",
]


# --------------------------------------------------------------------------------------------------
# Masks: pure functions
# --------------------------------------------------------------------------------------------------


def candidate_region(
    scores: torch.Tensor, valid: torch.Tensor, p: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """The candidate discard region: per query row, the top-p fraction of the non-padding keys.

    ``scores`` (B, H, Lq, Lk) attributions; ``valid`` bool, broadcastable to it, True = non-padding key.
    Returns a bool (B, H, Lq, Lk) mask with exactly ``floor(p * n + 1/2)`` True entries per row, all on
    non-padding keys (``n`` = the row's non-padding keys). Ties are broken at random (rows of equal
    scores, e.g. zero gradients, get random candidates instead of the first positions).
    """
    b, h, lq, lk = scores.shape
    valid = valid.expand(b, h, lq, lk)
    n = valid.sum(-1, keepdim=True)  # (B, H, Lq, 1)
    k = torch.floor(n.double() * p + 0.5).long()  # (B, H, Lq, 1)
    kmax = int(k.max()) if k.numel() else 0
    candidate = torch.zeros(b, h, lq, lk, dtype=torch.bool, device=scores.device)
    if kmax == 0:
        return candidate
    ranked = scores.float().masked_fill(~valid, float("-inf"))  # padding ranks last
    order = torch.randperm(lk, generator=generator, device=scores.device)  # random tie-break
    top = ranked[..., order].topk(kmax, dim=-1).indices  # (B, H, Lq, kmax), in shuffled coordinates
    chosen = torch.arange(kmax, device=scores.device) < k  # (B, H, Lq, kmax)
    return candidate.scatter_(-1, order[top], chosen)


def sample_drops(candidate: torch.Tensor, q: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Drop each candidate position with probability ``q``: bool (B, H, Lq, Lk), True = dropped."""
    if q <= 0:
        return torch.zeros_like(candidate)
    noise = torch.rand(candidate.shape, generator=generator, device=candidate.device)  # (B, H, Lq, Lk)
    return candidate & (noise < q)


# --------------------------------------------------------------------------------------------------
# Attribution
# --------------------------------------------------------------------------------------------------


@contextmanager
def modes_restored(model: nn.Module, dropout: bool = False) -> Iterator[None]:
    """Switch ``model`` to eval mode (unless ``dropout``) and restore every module's own flag after.

    Flags are restored one module at a time, so a model with some submodules deliberately in eval mode
    (a frozen part) comes back exactly as it was, not uniformly in train mode.
    """
    saved = [(module, module.training) for module in model.modules()]
    try:
        if not dropout:
            model.eval()
        yield
    finally:
        for module, mode in saved:
            module.training = mode


@dataclass
class Attribution:
    """The result of an attribution pass.

    scores:    layer -> (B, H, L, L) float32 attribution of each attention position.
    probs:     layer -> (B, H, L, L) attention weights of the attribution pass (detached).
    predicted: (B,) predicted labels whose logit was attributed (None for regression, aa and rd).
    logits:    (B, C) logits of the attribution pass (None for rd).
    """

    scores: dict[int, torch.Tensor]
    probs: dict[int, torch.Tensor] = field(default_factory=dict)
    predicted: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    loss_scale: float = 1.0  # the scale the gradients were taken at (fp16)


class _ScaleWeights(AttentionMethod):
    """Scales one layer's attention weights by ``alpha`` (the integrated-gradients path), in both modes."""

    name = "addrop-ig-path"
    acts_in_eval = True

    def __init__(self, layer: int, alpha: float):
        self.layers = [layer]
        self.alpha = alpha

    def edit(self, call: AttentionCall) -> AttentionEdit:
        return AttentionEdit(scale_weights=torch.tensor(self.alpha, device=call.query.device))


def _model_inputs(batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in batch.items() if k != "labels"}


def _is_regression(model: nn.Module) -> bool:
    config = model.config
    return getattr(config, "problem_type", None) == "regression" or getattr(config, "num_labels", 2) == 1


def _target(model: nn.Module, logits: torch.Tensor, batch: Mapping[str, torch.Tensor], label):
    """(scalar to attribute, predicted labels): the summed logit of each example's label, or -gold loss.

    Summing over the batch keeps every example's attribution its own (an example's logit depends on its
    own attention only). For regression the target is minus the squared error to the gold value, so
    a high attribution means "helps fit the label", as a high logit attribution means "supports it".
    """
    if _is_regression(model):
        if "labels" not in batch:
            raise ValueError("addrop: attribution of a regression model needs the gold 'labels' in the batch")
        gold = batch["labels"].to(logits.dtype).view_as(logits.squeeze(-1))
        return -((logits.squeeze(-1) - gold) ** 2).sum(), None
    predicted = logits.detach().argmax(-1) if label is None else label  # (B,)
    return logits.gather(-1, predicted[:, None]).sum(), predicted


def attribute(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    layers: Sequence[int],
    method: str = "ga",
    *,
    ig_steps: int = 20,
    dropout: bool = False,
    loss_scale: float | None = None,
) -> Attribution:
    """Attribution of every attention position of ``layers`` for the predicted label (002 eq. 3-4).

    ``batch`` holds the model's inputs (and ``labels`` for regression); ``method`` is one of
    ``ga``, ``iga``, ``aa``, ``rd``. Runs in eval mode unless ``dropout`` and restores every module's
    training flag afterwards. Gradients are taken with ``torch.autograd.grad``: parameter ``.grad``
    buffers are never touched. ``loss_scale`` (fp16 training: the loop's current loss scale) scales
    the attributed target before the backward pass and the gradients back after it, as a GradScaler
    does for the loss, so that small gradients do not underflow in half precision (on a tiny BERT under
    CPU fp16: 60% of layer-0 attributions exactly 0 unscaled, 6.6% scaled, as in fp32); should the
    scaled gradients overflow, the scale is halved and the pass repeated (``Attribution.loss_scale``
    says which scale was used).
    """
    if method not in ATTRIBUTIONS:
        raise ValueError(f"addrop: attribution must be one of {', '.join(ATTRIBUTIONS)}, got {method!r}")
    layers = list(layers)
    inputs = {**_model_inputs(batch), **ForwardEdits(driver="addrop attribution").kwargs()}
    with modes_restored(model, dropout):
        if method in ("aa", "rd"):
            with torch.no_grad(), record_attention(model, layers) as rec:
                logits = model(**inputs).logits
            probs = {layer: rec.probs[layer] for layer in layers}
            if method == "aa":
                scores = {layer: p.float() for layer, p in probs.items()}
            else:
                scores = {layer: torch.rand(p.shape, device=p.device) for layer, p in probs.items()}
            return Attribution(scores, probs, None, logits.detach())
        run = _gradient if method == "ga" else _integrated_gradients
        scale = float(loss_scale) if loss_scale else 1.0
        while True:
            result = run(model, batch, inputs, layers, ig_steps, scale)
            result.loss_scale = scale
            if scale <= 1.0 or all(torch.isfinite(s).all() for s in result.scores.values()):
                return result
            scale /= 2  # overflow: as a GradScaler does, halve and try again


def _gradient(model, batch, inputs, layers, steps: int, scale: float) -> Attribution:
    """``ga``: dF_c / dA for every chosen layer from one forward and one (activation-only) backward."""
    with torch.enable_grad(), record_attention(model, layers, grads=True) as rec:
        logits = model(**inputs).logits  # (B, C)
        target, predicted = _target(model, logits, batch, None)
        probs = [rec.probs[layer] for layer in layers]  # each (B, H, L, L)
        grads = torch.autograd.grad(target.float() * scale, probs, allow_unused=True)
    scores = {
        layer: (g if g is not None else torch.zeros_like(p)).detach().float() / scale
        for layer, p, g in zip(layers, probs, grads, strict=True)
    }
    return Attribution(
        scores,
        {layer: p.detach() for layer, p in zip(layers, probs, strict=True)},
        predicted,
        logits.detach(),
    )


def _integrated_gradients(model, batch, inputs, layers, steps: int, scale: float) -> Attribution:
    """``iga``: A * (1/m) sum_k dF_c(alpha_k A)/d(alpha_k A), alpha_k = k/m, one layer scaled at a time.

    The hook records the unscaled weights P and scales them to ``alpha P``; the recorded gradient is
    dF/dP = alpha * dF/d(alpha P), hence the division by alpha. The label is predicted once, at alpha = 1.
    """
    controller = install(model)
    scores: dict[int, torch.Tensor] = {}
    probs_out: dict[int, torch.Tensor] = {}
    predicted = None
    logits_out = None
    for layer in layers:
        total: torch.Tensor | None = None
        weights: torch.Tensor | None = None
        for k in range(steps, 0, -1):  # alpha = 1 first: its logits give the predicted label
            alpha = k / steps
            probe = _ScaleWeights(layer, alpha)
            controller.add(probe)
            try:
                with torch.enable_grad(), record_attention(model, [layer], grads=True) as rec:
                    logits = model(**inputs).logits  # (B, C)
                    target, label = _target(model, logits, batch, predicted)
                    p = rec.probs[layer]  # (B, H, L, L), unscaled
                    (grad,) = torch.autograd.grad(target.float() * scale, [p], allow_unused=True)
            finally:
                controller.remove(probe)
            if k == steps:
                weights = p.detach()
                if predicted is None:
                    predicted, logits_out = label, logits.detach()
            grad = torch.zeros_like(p) if grad is None else grad.detach().float() / scale
            total = grad.float() / alpha if total is None else total + grad.float() / alpha
        scores[layer] = weights.float() * total / steps  # (B, H, L, L)
        probs_out[layer] = weights
    return Attribution(scores, probs_out, predicted, logits_out)


# --------------------------------------------------------------------------------------------------
# The method acting through the hook
# --------------------------------------------------------------------------------------------------


class ADDrop(AttentionMethod):
    """AD-DROP's part in the hook: a guard, plus the masks and statistics of :meth:`prepare`.

    The drops of one training forward are made by :meth:`prepare` from an attribution pass and travel
    to the hook as that forward's keyword argument (:data:`attendout.contract.EDITS_KWARG`), so no
    state waits on this object between calls. A training forward without them raises: AD-DROP never
    trains plainly because nobody ran its attribution pass.
    """

    name = "addrop"

    def __init__(
        self,
        layers: Sequence[int] | None,
        attribution: str,
        p: float,
        q: float,
        ig_steps: int,
        attribution_dropout: bool,
    ):
        self.layers = layers
        self.attribution = attribution
        self.p, self.q = p, q
        self.ig_steps = ig_steps
        self.attribution_dropout = attribution_dropout
        self.num_layers: int | None = None
        self.num_heads: int | None = None
        self.meter = RateMeter()
        #: keep the masks of the last :meth:`prepare` in ``last_masks`` (for inspection and tests)
        self.keep_masks = False
        self.last_masks: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        #: the largest attribution loss scale that did not overflow (fp16), so later passes start there
        self.scale_cap = math.inf

    def attach(self, controller) -> None:
        super().attach(controller)
        self.num_layers = controller.num_layers
        self.num_heads = getattr(controller.model.config, "num_attention_heads", None)

    def chosen_layers(self) -> list[int]:
        if self.layers is not None:
            return list(self.layers)
        if self.num_layers is None:
            raise RuntimeError("addrop: the method is not attached to a model; use attendout.apply")
        return list(range(self.num_layers))

    def prepare(
        self, model: nn.Module, batch: Mapping[str, torch.Tensor], loss_scale: float | None = None
    ) -> dict[str, ForwardEdits]:
        """Attribution pass on ``batch``; returns the keyword arguments of the training forward on it.

        >>> extra = handle.method.prepare(model, batch)
        >>> loss = model(**batch, **extra).loss
        """
        layers = self.chosen_layers()
        valid = _key_valid(batch)  # (B, 1, L, L)
        if self.attribution == "rd":  # the control needs no pass: random scores
            b, _, length, _ = valid.shape
            heads = self.num_heads or 1
            scores = {layer: torch.rand(b, heads, length, length, device=valid.device) for layer in layers}
        else:
            result = attribute(
                model,
                batch,
                layers,
                self.attribution,
                ig_steps=self.ig_steps,
                dropout=self.attribution_dropout,
                loss_scale=None if loss_scale is None else min(loss_scale, self.scale_cap),
            )
            if loss_scale is not None and result.loss_scale < min(loss_scale, self.scale_cap):
                self.scale_cap = result.loss_scale
            scores = result.scores
        edits = {}
        for layer, layer_scores in scores.items():
            candidate = candidate_region(layer_scores, valid, self.p)  # (B, H, Lq, Lk) bool
            drop = sample_drops(candidate, self.q)  # (B, H, Lq, Lk) bool
            n_candidate = candidate.sum()
            self.meter.add("addrop/candidate_fraction", n_candidate, valid.sum() * candidate.shape[1])
            self.meter.add("addrop/drop_rate_in_candidates", drop.sum(), n_candidate)
            if self.keep_masks:
                self.last_masks[layer] = (candidate, drop)
            edits[layer] = AttentionEdit(drop_scores=drop)
        return ForwardEdits(edits, driver=self.name).kwargs()

    def plain(self) -> dict[str, ForwardEdits]:
        """The keyword arguments of a training forward that is plain on purpose (cross-tuning)."""
        return ForwardEdits(driver=self.name).kwargs()

    def note_step(self, active: bool) -> None:
        """Count a training step, with or without AD-DROP (the ``addrop/active`` statistic)."""
        self.meter.add("addrop/active", torch.tensor(float(active)), torch.tensor(1.0))

    def edit(self, call: AttentionCall) -> AttentionEdit | None:
        if call.edits is None:
            raise RuntimeError(
                "addrop: a training forward came without AD-DROP's drops, so it would train plainly. Pass "
                "them: extra = handle.method.prepare(model, batch); model(**batch, **extra) (or "
                "handle.method.plain() in a plain phase), or train through attendout.prepare(...), "
                "attendout.hf.Trainer or `attendout finetune`"
            )
        return None

    def stats(self) -> dict[str, float]:
        return self.meter.pop()


def _key_valid(batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """(B, 1, L, L) bool: the non-padding keys of each query row, from the batch's attention mask."""
    ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    if mask is None:
        mask = torch.ones_like(ids)
    b, length = mask.shape
    return mask.bool()[:, None, None, :].expand(b, 1, length, length)


# --------------------------------------------------------------------------------------------------
# Cross-tuning and the training strategy
# --------------------------------------------------------------------------------------------------


def addrop_active(step: int, steps_per_epoch: int, cross_tuning: str, period: int, start: str) -> bool:
    """Whether AD-DROP acts at training step ``step`` (0-based) under cross-tuning (002 §2.4).

    Phases of ``period`` epochs (or steps) alternate between plain fine-tuning and AD-DROP, beginning
    with ``start``; ``cross_tuning="off"`` uses AD-DROP at every step.
    """
    if cross_tuning == "off":
        return True
    length = period * (max(1, steps_per_epoch) if cross_tuning == "epoch" else 1)
    first_phase = (step // length) % 2 == 0
    return first_phase == (start == "addrop")


class ADDropStrategy(TrainingStrategy):
    """Before each training forward: an attribution pass (if AD-DROP is active in this phase) whose
    drops go into that forward; plain forwards in the other phases of cross-tuning."""

    config: ADDropConfig

    @property
    def method(self) -> ADDrop:
        if self.handle is None:
            raise RuntimeError("addrop: the strategy is not attached to a model")
        return self.handle.method  # type: ignore[return-value]

    def start(self, loop: LoopContext) -> None:
        super().start(loop)
        self._noted: int | None = None
        c = self.config
        if c.cross_tuning == "off" or c.start == "addrop":
            return
        length = c.period * (loop.steps_per_epoch if c.cross_tuning == "epoch" else 1)
        if loop.total_steps <= length:
            logger.warning(
                "addrop: with cross_tuning=%s, period=%d and start=finetune, AD-DROP never acts in this run "
                "of %d steps (%d per epoch); use --cross-tuning step with a shorter --period, or --start addrop",
                c.cross_tuning,
                c.period,
                loop.total_steps,
                loop.steps_per_epoch,
            )

    def before_forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor], step: StepInfo
    ) -> dict[str, Any]:
        loop = self.loop
        if loop is None:
            raise RuntimeError("addrop: call strategy.start(LoopContext(...)) before training")
        c = self.config
        active = addrop_active(step.step, loop.steps_per_epoch, c.cross_tuning, c.period, c.start)
        method = self.method
        if self._noted != step.step:  # once per optimizer step, whatever the micro-batches
            method.note_step(active)
            self._noted = step.step
        if not active:
            return method.plain()
        scale = loop.loss_scale() if loop.loss_scale is not None else None
        with loop.autocast():
            return method.prepare(model, batch, loss_scale=scale)


@register_method
@dataclass
class ADDropConfig(MethodConfig):
    name = "addrop"
    summary = "AD-DROP: drop high-attribution attention positions, alternating with plain fine-tuning (002)"

    attribution: str = field(
        default="ga",
        metadata={
            "help": "attribution of the predicted label: ga (gradient), iga (integrated gradients, ig_steps "
            "passes per layer), aa (attention weights), rd (random control)"
        },
    )
    p: float = field(
        default=0.3,
        metadata={
            "help": "candidate discard region: fraction of each row's non-padding keys, by attribution"
        },
    )
    q: float = field(default=0.2, metadata={"help": "drop probability of each candidate position"})
    layers: list[int] | str | None = field(
        default="0",
        metadata={"help": "layers to act on: 'all' or comma-separated indices from 0 (default: first layer)"},
    )
    cross_tuning: str = field(
        default="epoch",
        metadata={
            "help": "alternate plain fine-tuning and AD-DROP by 'epoch' or 'step' (phases of `period` units), "
            "or 'off' (AD-DROP at every step)"
        },
    )
    period: int = field(default=1, metadata={"help": "length of each cross-tuning phase, in epochs or steps"})
    start: str = field(
        default="finetune",
        metadata={"help": "the phase cross-tuning begins with: finetune (as in 002) or addrop"},
    )
    ig_steps: int = field(default=20, metadata={"help": "iga only: integration steps m (m passes per layer)"})
    attribution_dropout: bool = field(
        default=False,
        metadata={
            "help": "keep the model's ordinary dropout on in the attribution pass (the training pass always has it)"
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        choices = [
            ("attribution", self.attribution, ATTRIBUTIONS),
            ("cross_tuning", self.cross_tuning, CROSS_TUNING),
            ("start", self.start, STARTS),
        ]
        for name, value, allowed in choices:
            if value not in allowed:
                raise ValueError(f"{self.name}: {name} must be one of {', '.join(allowed)}, got {value!r}")
        if not 0 < self.p <= 1:
            raise ValueError(f"{self.name}: p must be in (0, 1], got {self.p!r}")
        check_probability(self.name, "q", self.q, allow_one=True)
        for name, value in (("period", self.period), ("ig_steps", self.ig_steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{self.name}: {name} must be an integer of at least 1, got {value!r}")

    def build(self) -> ADDrop:
        return ADDrop(self.layers, self.attribution, self.p, self.q, self.ig_steps, self.attribution_dropout)

    def training_strategy(self) -> ADDropStrategy:
        return ADDropStrategy(self)
