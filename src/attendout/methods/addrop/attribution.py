"""AD-DROP's pure parts (:mod:`attendout.methods.addrop` describes the method): the attribution pass
that scores every attention position of the chosen layers for the predicted label (:func:`attribute`:
``ga``, ``iga`` in two forms, ``aa``, ``rd``), and the masks built from its scores, the candidate
discard region (:func:`candidate_region`) and the drops sampled in it (:func:`sample_drops`).

Nothing here trains or keeps state between batches; :class:`~attendout.methods.addrop.ADDrop` calls
these per training batch, and ``attendout inspect`` calls them on one example.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from ...attention import (
    AttentionCall,
    AttentionEdit,
    AttentionMethod,
    install,
    record_attention,
)
from ...attention.masks import bernoulli_drop
from ...contract import ForwardEdits
from ..nexttoken import generation_kind, predicted_token_target
from .settings import ATTRIBUTIONS, IG_FORMS, ROUNDINGS

# --------------------------------------------------------------------------------------------------
# Masks: pure functions
# --------------------------------------------------------------------------------------------------


def candidate_count(n: torch.Tensor, p: float, rounding: str = "ceil", lowest: bool = False) -> torch.Tensor:
    """Candidates in a row of ``n`` non-padding keys: ``ceil(p * n)`` (the public code) or, with
    ``rounding="round"``, ``floor(p * n + 1/2)``.

    ``lowest`` (the drop-low ablation): ``floor(p * n)`` with ``rounding="ceil"``, as the public code's
    ``generate_mask_low`` counts them (the keys strictly below the value ranked ``floor(p * n)`` from
    the bottom); ``rounding="round"`` counts as for the highest.

    ``p * n`` is taken as the decimal product: a float product that lands a hair above a whole number
    (``0.7 * 10`` is 7.000000000000001) is not rounded up to the next one.
    """
    if rounding not in ROUNDINGS:
        raise ValueError(f"addrop: rounding must be one of {', '.join(ROUNDINGS)}, got {rounding!r}")
    product = n.double() * p
    if rounding == "round":
        return torch.floor(product + 0.5).long()
    if lowest:
        return torch.floor(product + 1e-9).long()
    return torch.ceil(product - 1e-9).long()


def candidate_region(
    scores: torch.Tensor,
    valid: torch.Tensor,
    p: float,
    generator: torch.Generator | None = None,
    rounding: str = "ceil",
    lowest: bool = False,
) -> torch.Tensor:
    """The candidate discard region: per query row, the top-p fraction of the non-padding keys
    (``lowest``: the bottom ``floor(p * n)`` of them, the drop-low ablation; see :func:`candidate_count`).

    ``scores`` (B, H, Lq, Lk) attributions; ``valid`` bool, broadcastable to it, True = non-padding key.
    Returns a bool (B, H, Lq, Lk) mask with exactly ``ceil(p * n)`` True entries per row (the public
    code's count; ``rounding="round"``: ``floor(p * n + 1/2)``), all on non-padding keys (``n`` = the
    row's non-padding keys): 4 of 11 keys at p 0.3. Ties are broken at random, for exactly that many
    keys (the public code keeps every tied key instead; see :mod:`attendout.methods.addrop`): rows of equal
    scores, e.g. zero gradients, get random candidates instead of the first positions.
    """
    b, h, lq, lk = scores.shape
    n = valid.sum(-1, keepdim=True).expand(b, h, lq, 1)  # (B, H, Lq, 1), counted once per head-less row
    valid = valid.expand(b, h, lq, lk)
    k = candidate_count(n, p, rounding, lowest)  # (B, H, Lq, 1)
    kmax = int(k.max()) if k.numel() else 0
    candidate = torch.zeros(b, h, lq, lk, dtype=torch.bool, device=scores.device)
    if kmax == 0:
        return candidate
    ranked = -scores.float() if lowest else scores.float()
    ranked = ranked.masked_fill(~valid, float("-inf"))  # padding ranks last
    order = torch.randperm(lk, generator=generator, device=scores.device)  # random tie-break
    top = ranked[..., order].topk(kmax, dim=-1).indices  # (B, H, Lq, kmax), in shuffled coordinates
    chosen = torch.arange(kmax, device=scores.device) < k  # (B, H, Lq, kmax)
    return candidate.scatter_(-1, order[top], chosen)


def sample_drops(candidate: torch.Tensor, q: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """Drop each candidate position with probability ``q``: bool (B, H, Lq, Lk), True = dropped."""
    if q <= 0:
        return torch.zeros_like(candidate)
    return candidate & bernoulli_drop(candidate.shape, q, candidate.device, generator)  # (B, H, Lq, Lk)


def random_drops(
    valid: torch.Tensor,
    heads: int,
    p: float,
    q: float,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The random control as the public code draws it (``generate_mask_random`` in ``<task>/utils.py``
    of TaoYang225/AD-DROP, lines 51-61 of ``cola/utils.py``): every non-padding key is kept if either of
    two independent draws keeps it, Bernoulli(1 - p) and Bernoulli(1 - q), so it is dropped with
    probability p * q, independently of every other key. A row of n keys drops Binomial(n, p q) of them.

    ``valid`` (B, 1, Lq, Lk) bool, True = a key the row sees. Returns ``(candidate, drop)``, bool
    (B, heads, Lq, Lk): ``candidate`` the keys of the first draw (each with probability p), ``drop``
    those of them that the second draw drops too.
    """
    b, _, lq, lk = valid.shape
    shape = (b, heads, lq, lk)
    candidate = valid.expand(shape) & bernoulli_drop(shape, p, valid.device, generator)
    return candidate, sample_drops(candidate, q, generator)


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
    predicted: (B,) predicted labels whose logit was attributed ((B, L) tags for token classification,
               (B, T) next tokens for generation; None for regression, aa and rd).
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


def _model_inputs(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The forward's inputs: the batch without its labels, but for a generation model, whose decoder
    reads the (shifted) target labels as its input (seq2seq), the whole batch."""
    if generation_kind(model) is not None:
        return dict(batch)
    return {k: v for k, v in batch.items() if k != "labels"}


def _head_kind(model: nn.Module, logits: torch.Tensor) -> str:
    """What the model's output is: ``token`` (B, L, T) tags, ``choice`` (B, C) option scores,
    ``regression`` (one output), or ``classification``."""
    if logits.dim() == 3:
        return "token"
    if type(model).__name__.endswith("ForMultipleChoice"):
        return "choice"
    config = model.config
    if getattr(config, "problem_type", None) == "regression" or getattr(config, "num_labels", 2) == 1:
        return "regression"
    return "classification"


def _target(model: nn.Module, logits: torch.Tensor, batch: Mapping[str, torch.Tensor], label):
    """(scalar to attribute, predicted labels) for the model's kind of output.

    * classification and multiple choice: the summed logit of each example's predicted label (option);
      summing over the batch keeps every example's attribution its own (an example's logit depends on
      its own attention only);
    * token classification, as the authors' NER code (``ner/self_transformers/trainer.py`` of
      TaoYang225/AD-DROP): minus the mean cross-entropy of every real (non-padding) token's predicted
      tag, so that a high attribution means "supports the predicted tags";
    * regression: minus the squared error to the gold value, so a high attribution means "helps fit
      the label", as a high logit attribution means "supports it";
    * generation (a causal LM or an encoder-decoder), as the authors' translation code
      (``translation/self_transformers/trainer.py``): the mean log-probability of the predicted next
      token at every target position (:func:`attendout.methods.nexttoken.predicted_token_target`).
    """
    generation = generation_kind(model)
    if generation is not None:
        return predicted_token_target(logits, batch, generation, label)
    kind = _head_kind(model, logits)
    if kind == "regression":
        if "labels" not in batch:
            raise ValueError("addrop: attribution of a regression model needs the gold 'labels' in the batch")
        gold = batch["labels"].to(logits.dtype).view_as(logits.squeeze(-1))
        return -((logits.squeeze(-1) - gold) ** 2).sum(), None
    predicted = logits.detach().argmax(-1) if label is None else label  # (B,) or (B, L)
    if kind == "token":
        mask = batch.get("attention_mask")
        real = torch.ones_like(predicted, dtype=torch.bool) if mask is None else mask.bool()
        cross_entropy = torch.nn.functional.cross_entropy(logits.transpose(1, 2), predicted, reduction="none")
        return -(cross_entropy * real).sum() / real.sum().clamp(min=1), predicted
    return logits.gather(-1, predicted[:, None]).sum(), predicted


def attribute(
    model: nn.Module,
    batch: Mapping[str, torch.Tensor],
    layers: Sequence[int],
    method: str = "ga",
    *,
    ig_steps: int = 20,
    ig_form: str = "authors",
    dropout: bool = False,
    loss_scale: float | None = None,
) -> Attribution:
    """Attribution of every attention position of ``layers`` for the predicted label (002 eq. 3-4).

    ``batch`` holds the model's inputs (and ``labels`` for regression); ``method`` is one of
    ``ga``, ``iga``, ``aa``, ``rd``; ``ig_form`` (``iga`` only) ``authors`` or ``textbook`` (see
    :mod:`attendout.methods.addrop`). Runs in eval mode unless ``dropout`` and restores every module's
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
    if ig_form not in IG_FORMS:
        raise ValueError(f"addrop: ig_form must be one of {', '.join(IG_FORMS)}, got {ig_form!r}")
    layers = list(layers)
    inputs = {**_model_inputs(model, batch), **ForwardEdits(driver="addrop attribution").kwargs()}
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
        scale = float(loss_scale) if loss_scale else 1.0
        while True:
            if method == "ga":
                result = _gradient(model, batch, inputs, layers, scale)
            else:
                result = _integrated_gradients(model, batch, inputs, layers, ig_steps, scale, ig_form)
            result.loss_scale = scale
            if scale <= 1.0 or all(torch.isfinite(s).all() for s in result.scores.values()):
                return result
            scale /= 2  # overflow: as a GradScaler does, halve and try again


def _gradient(model, batch, inputs, layers, scale: float) -> Attribution:
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


def _integrated_gradients(
    model, batch, inputs, layers, steps: int, scale: float, form: str = "authors"
) -> Attribution:
    """``iga``, alpha_k = k/m, one layer scaled at a time.

    The hook records the unscaled weights P and scales them to ``alpha P``; the recorded gradient is
    dF/dP = alpha * dF/d(alpha P). ``textbook``: A * (1/m) sum_k dF_c(alpha_k A)/d(alpha_k A), hence the
    division by alpha, with the label predicted once, at alpha = 1. ``authors``: A * (1/m) sum_k
    dF_{c_k}(alpha_k A)/dA, the recorded gradient as it is, with the label c_k predicted again at every
    alpha (scaling the weights by alpha scales the head output by alpha, as their hook does).
    """
    authors = form == "authors"
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
                    target, label = _target(model, logits, batch, None if authors else predicted)
                    p = rec.probs[layer]  # (B, H, L, L), unscaled
                    (grad,) = torch.autograd.grad(target.float() * scale, [p], allow_unused=True)
            finally:
                controller.remove(probe)
            if k == steps:
                weights = p.detach()
                if predicted is None:
                    predicted, logits_out = label, logits.detach()
            grad = torch.zeros_like(p) if grad is None else grad.detach().float() / scale
            step = grad if authors else grad / alpha
            total = step if total is None else total + step
        scores[layer] = weights.float() * total / steps  # (B, H, L, L)
        probs_out[layer] = weights
    return Attribution(scores, probs_out, predicted, logits_out)
