"""``addrop``: attribution-driven attention dropout with cross-tuning (paper 002, AD-DROP).

Per training batch AD-DROP (002 §2, Figure 1):

1. runs an **attribution pass** without any dropping and scores every attention position of the
   chosen layers for the *predicted* label ``c = argmax F(x)`` (for regression: the gold loss):

   * ``ga``  gradient attribution, ``B_h = dF_c(A) / dA_h`` (002 eq. 3): the plain gradient of the
     label's logit with respect to the attention weights, *not* multiplied by the weights, as in the
     paper. Gradient x weights is exactly ``iga`` with ``ig_steps=1``, so it stays one option away.
   * ``iga`` integrated gradients over ``m = ig_steps`` points ``alpha_k = k / m`` (002 eq. 4, after
     Hao et al.'s self-attention attribution): the weights of one layer are scaled by ``alpha`` through
     the hook (``AttentionEdit.scale_weights``) while every other layer runs normally; each layer costs
     ``m`` forward+backward passes. Two forms (``ig_form``):

     - ``authors`` (default), as the public code computes it (``compute_integrated_gradient`` in
       TaoYang225/AD-DROP): the head output is scaled by ``alpha``, the gradient is taken with respect
       to the *unscaled* weights, ``B_h = A_h * (1/m) sum_k dF_{c_k}(alpha_k A) / dA_h``, which is
       ``alpha_k`` times the textbook integrand, and the label ``c_k`` is predicted again at every
       ``alpha_k``;
     - ``textbook``: ``B_h = A_h * (1/m) sum_k dF_c / d(alpha_k A_h)``, the Riemann sum of eq. 4 as
       written, with the label ``c`` predicted once at ``alpha = 1``; its attributions sum to
       ``F_c(A) - F_c(0)`` as ``m`` grows (completeness), the authors' do not.

     The default is the authors' form because every other default of this method (p, q, layers,
     attribution, cross-tuning) is their public code's, so that ``--attribution iga`` runs what produced
     their numbers. How much the two differ depends on how far from linear the model is along the path:
     on tiny random BERTs (layer 0, m 20, p 0.3) they choose different candidates in 0.1-0.5% of the
     rows with a gradient at initializer range 0.02, and in 80-86% at range 0.3.
   * ``aa``  the attention weights themselves (one forward pass, no backward).
   * ``rd``  random scores, the control (no attribution pass at all).

2. builds **masks**: in every query row of every head, the candidate discard region is the
   ``ceil(p * n)`` non-padding keys of highest attribution (``n`` = non-padding keys of the row), as in
   the public code (it keeps the keys ranked at or above position ``floor((1 - p) * n)`` from the
   bottom: ``ceil(p * n)`` of them), and each candidate is dropped with probability ``q``. Masks are
   booleans. Ties: the public code keeps every key tied with the threshold (an all-zero row becomes
   all candidates); here ties are broken at random for exactly ``ceil(p * n)`` keys. That only matters
   in rows whose attributions tie, such as rows of zero gradient (padding queries, or every query but
   ``[CLS]`` in the last layer), and those rows do not reach the logits, so the training signal is
   the same. ``rounding="round"`` takes ``floor(p * n + 1/2)`` keys instead: attendout's rule until
   the candidate count was checked against the public code (issue 20), kept so that the layer-0
   ``cpu-small`` cells run with it can be reproduced. It takes one key fewer at about 40% of lengths
   (51-53 of the lengths 1..128 at every p but 0.5): mean candidate fraction at p 0.3 0.301 against
   0.321, at p 0.1 0.0995 against 0.1245.

3. runs the **training pass** with the model's ordinary dropout on; the dropped positions get a
   ``-inf`` score (002 eq. 1, 001 eq. 3; a row with every key dropped attends uniformly, 001 eq. 4).
   Its loss is the one that trains.

**Cross-tuning** (002 §2.4) alternates plain fine-tuning and AD-DROP with a period in epochs or steps.

**Layers.** ``layers="task"`` (the default) takes the layers the authors' search scripts use for the
task (``*/run_addrop.sh`` in TaoYang225/AD-DROP, ``MASK_LAYERS``): every layer for CoLA, MRPC and RTE,
the first layer for SST-2, STS-B, QNLI, QQP and MNLI (and, as their ``--mask_layers`` default, for any
other task; for a model with fewer layers, "every layer" is all of its own). It is settled when the
method meets a task: ``attendout finetune`` and ``attendout bench`` write the layers into the run's
options before the run starts (:meth:`ADDropConfig.for_task`, through
:func:`attendout.methods.settle_for_task`), so ``config.json`` records them (``null`` = every layer);
the strategy settles it from ``LoopContext.task`` in any loop that gives one (attendout's own loop
does, so a ``TrainConfig`` made in Python records ``"task"`` beside the task's name, and the log says
which layers it took); a loop that names no task (``transformers.Trainer``, ``attendout.hf.Trainer``
without ``task=``, a hand-written loop) gets the first layer, and a warning says so. Pass ``layers`` to
choose.

**Generation** (``lm`` and ``seq2seq``). The authors' OPUS-MT runs (``translation/main_en_ro_mt_cut.py``
of TaoYang225/AD-DROP and the ``compute_loss`` of its ``self_transformers/trainer.py``) run the model
once with teacher forcing, take each target position's predicted token (the argmax of its logits, not
the gold token), and attribute the cross-entropy of those predicted tokens by its gradient with respect
to the attention weights of **every layer of the encoder's self-attention** (gradient attribution,
``-grad``: high = supports the predicted tokens). The masks drop in the encoder's self-attention only
(p 0.2, keep rate 0.8, i.e. q 0.2, in their script); the decoder's self-attention and the
cross-attention stay stock, and cross-tuning alternates by epoch, plain first. Here, likewise:

* the target is the mean log-probability of the predicted next token over the positions the loss
  trains (:func:`attendout.methods.nexttoken.predicted_token_target`); every ``attribution`` works
  with it (``iga`` predicts the tokens again at each ``alpha``, as for labels);
* ``layers="task"`` is ``"encoder"`` on a ``seq2seq`` task (every encoder self-attention layer, as
  theirs) and every layer on an ``lm`` task: the authors have no language-model run, and a causal LM's
  one stack plays the part of their encoder (our choice); a loop that names no task gets the same from
  the model's head. Explicit ``layers`` may name decoder self-attention layers too (T5 numbers the
  encoder's layers first, then the decoder's); the drops there stay causal. Cross-attention is never
  attributed or dropped: the hook does not reach it.

Departures: their cross-entropy averages over every target position, padding included (labels -100
turned into predicted tokens); ours leaves padding out, as the loss does. Their attribution pass is
the training mode forward (dropout on) whose outputs they discard when masks apply; ours runs with
dropout off (see below). Their ``p`` for translation is 0.2; our default stays 0.3 (pass ``p=0.2``).

The attribution pass runs with the model's ordinary dropout **off** by default (``attribution_dropout``):
the attribution then describes the model being trained, not one random sub-network, so ``ga`` is not
blurred towards ``rd`` by dropout noise and its predicted label is the evaluation-time prediction.
Every module's ``training`` flag is restored exactly afterwards, so the training pass always runs in
the mode it was given. (The public implementation leaves the model in eval mode after its integrated
gradients, so with ``iga`` standard dropout is off for the rest of that epoch, training passes
included, until its loop calls ``model.train()`` at the next epoch's start; its ``ga`` pass runs in
train mode, with dropout.)

In any loop, :class:`ADDropStrategy` (``attendout.prepare(model, "addrop")``) runs the pass and cross-tuning
in ``before_forward``; by hand, one forward at a time::

    handle = attendout.apply(model, "addrop", attribution="ga")
    model.train()
    extra = handle.method.prepare(model, batch)  # attribution pass; train mode is restored afterwards
    loss = model(**batch, **extra).loss          # this forward drops; the drops go nowhere else

A training forward of the model without ``extra`` raises instead of training plainly.

This module holds the method (:class:`ADDrop`), cross-tuning and the strategy (:class:`ADDropStrategy`),
and the config (:class:`ADDropConfig`); the attribution pass and the masks are pure functions in
:mod:`attendout.methods.addrop_attribution`, importable from here too.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..attention import (
    AttentionCall,
    AttentionEdit,
    AttentionMethod,
    RateMeter,
    layer_key_valid,
)
from ..contract import ForwardEdits, LoopContext, StepInfo
from .addrop_attribution import ATTRIBUTIONS as ATTRIBUTIONS
from .addrop_attribution import IG_FORMS as IG_FORMS
from .addrop_attribution import ROUNDINGS as ROUNDINGS
from .addrop_attribution import (
    Attribution,
    attribute,
    candidate_count,
    candidate_region,
    modes_restored,
    sample_drops,
)
from .addrop_layers import (
    ALL_LAYER_TASKS,
    ENCODER_LAYERS,
    TASK_LAYERS,
    _key_valid,
    _stacks,
    task_layers,
)
from .base import MethodConfig, TrainingStrategy, check_probability, register_method
from .nexttoken import generation_kind

logger = logging.getLogger(__name__)

CROSS_TUNING = ("epoch", "step", "off")
STARTS = ("finetune", "addrop")

__all__ = [
    "ALL_LAYER_TASKS",
    "ENCODER_LAYERS",
    "ATTRIBUTIONS",
    "ADDrop",
    "ADDropConfig",
    "ADDropStrategy",
    "Attribution",
    "addrop_active",
    "attribute",
    "candidate_count",
    "candidate_region",
    "modes_restored",
    "sample_drops",
    "task_layers",
]


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
        layers: Sequence[int] | str | None,
        attribution: str,
        p: float,
        q: float,
        ig_steps: int,
        attribution_dropout: bool,
        rounding: str = "ceil",
        ig_form: str = "authors",
    ):
        #: ``layers="task"`` is settled by :meth:`for_task` (the strategy calls it with the loop's task);
        #: until then the method acts on the first layer, the authors' setting for most tasks
        self.from_task = layers == TASK_LAYERS
        self.layers = [0] if self.from_task else layers
        self._told_no_task = False
        self.attribution = attribution
        self.p, self.q = p, q
        self.ig_steps = ig_steps
        self.ig_form = ig_form
        self.rounding = rounding
        self.attribution_dropout = attribution_dropout
        self.num_layers: int | None = None
        self.num_heads: int | None = None
        self.controller_model: nn.Module | None = None
        self.meter = RateMeter()
        #: keep the masks of the last :meth:`prepare` in ``last_masks`` (for inspection and tests)
        self.keep_masks = False
        self.last_masks: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        #: the largest attribution loss scale that did not overflow (fp16), so later passes start there
        self.scale_cap = math.inf

    def attach(self, controller) -> None:
        self.num_layers = controller.num_layers
        self.num_heads = getattr(controller.model.config, "num_attention_heads", None)
        self.controller_model = controller.model
        kind = generation_kind(controller.model)
        if self.from_task and kind is not None:  # a generation model says its kind without a task
            self.for_task(None, kind=kind)
        self._settle_encoder()
        super().attach(controller)  # checks that the layers exist

    def _settle_encoder(self) -> None:
        """``layers="encoder"`` -> the encoder's layer indices (0..n-1 in T5's numbering), once attached."""
        if self.layers != ENCODER_LAYERS or self.controller_model is None:
            return
        stacks = _stacks(self.controller_model)
        if stacks is None:
            raise ValueError(
                f"addrop: layers='encoder' (the encoder's self-attention, as the authors' translation code) "
                f"needs an encoder-decoder model (T5); {type(self.controller_model).__name__} has one stack: "
                "pass layers='all' or layer indices"
            )
        self.layers = list(range(stacks[0]))

    def for_task(self, task: str | None, loop: str = "custom", kind: str | None = None) -> None:
        """Settle ``layers="task"`` for the task named ``task`` of ``kind`` (None: the loop named none:
        layer 0, or for a generation model, its kind's layers)."""
        if not self.from_task:
            return
        self.from_task = False
        model_kind = generation_kind(self.controller_model) if self.controller_model is not None else None
        if task is None and model_kind is None:
            self._warn_no_task(f"the {loop} loop named no task")
            return
        self.layers = task_layers(task, kind or model_kind)
        self._settle_encoder()
        logger.info("addrop: layers for task %r: %s (the authors' scripts)", task, self.layers or "all")

    def _warn_no_task(self, why: str) -> None:
        if not self._told_no_task:
            self._told_no_task = True
            logger.warning(
                "addrop: layers='task' but %s, so AD-DROP acts on layer 0 (the authors' setting for every "
                "task but CoLA, MRPC and RTE, where they use all layers); pass layers= to choose",
                why,
            )

    def chosen_layers(self) -> list[int]:
        if self.from_task:  # applied by hand, and no loop ever said which task this is
            self._warn_no_task("no task was given (handle.method.for_task(name) gives one)")
        if self.layers == ENCODER_LAYERS:
            raise RuntimeError("addrop: layers='encoder' is settled when the method is attached to a model")
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
        valid = {layer: _key_valid(model, batch, layer) for layer in layers}  # each (B, 1, Lq, Lk)
        if self.attribution == "rd":  # the control needs no pass: random scores
            heads = self.num_heads or 1
            scores = {}
            for layer, seen in valid.items():
                b, _, lq, lk = seen.shape
                scores[layer] = torch.rand(b, heads, lq, lk, device=seen.device)
        else:
            result = attribute(
                model,
                batch,
                layers,
                self.attribution,
                ig_steps=self.ig_steps,
                ig_form=self.ig_form,
                dropout=self.attribution_dropout,
                loss_scale=None if loss_scale is None else min(loss_scale, self.scale_cap),
            )
            if loss_scale is not None and result.loss_scale < min(loss_scale, self.scale_cap):
                self.scale_cap = result.loss_scale
            scores = result.scores
        edits = {}
        for layer, layer_scores in scores.items():
            seen = layer_key_valid(model, layer, valid[layer])  # causal, a local layer's window too
            candidate = candidate_region(layer_scores, seen, self.p, rounding=self.rounding)  # bool
            drop = sample_drops(candidate, self.q)  # (B, H, Lq, Lk) bool
            # count_nonzero: a bool sum() would first copy each (B, H, L, L) mask to int64
            n_candidate = candidate.count_nonzero()
            self.meter.add(
                "addrop/candidate_fraction", n_candidate, seen.count_nonzero() * candidate.shape[1]
            )
            self.meter.add("addrop/drop_rate_in_candidates", drop.count_nonzero(), n_candidate)
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
        self.method.for_task(getattr(loop.task, "name", None), loop.loop, getattr(loop.task, "kind", None))
        self._noted: int | None = None
        c = self.config
        if c.cross_tuning == "off" or c.start == "addrop":
            return
        length = c.period * (loop.steps_per_epoch if c.cross_tuning == "epoch" else 1)
        last = loop.total_steps - 1
        if loop.total_steps > length and addrop_active(
            last, loop.steps_per_epoch, c.cross_tuning, c.period, c.start
        ):
            # The authors alternate by epoch until early stopping and keep the best validation epoch; a
            # fixed budget that stops inside an AD-DROP phase leaves its last weights mid-perturbation.
            logger.warning(
                "addrop: this run of %d steps ends inside an AD-DROP phase of cross-tuning (phases of %d "
                "steps, plain first); model selection keeps the best validation, but to end on a plain "
                "phase give an odd number of phases (e.g. an odd number of epochs with --period 1)",
                loop.total_steps,
                length,
            )
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
        default=TASK_LAYERS,
        metadata={
            "help": "layers to act on: 'task' = the authors' choice for the task (every layer for CoLA, MRPC "
            "and RTE, the first layer for other classification tasks or when the loop names none; seq2seq: "
            "'encoder'; lm: all), 'encoder' = every encoder self-attention layer of an encoder-decoder, "
            "'all', or comma-separated indices from 0 (T5: the encoder's first, then the decoder's)"
        },
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
    ig_form: str = field(
        default="authors",
        metadata={
            "help": "iga only: authors (as their code: head output scaled by alpha, gradient with respect to "
            "the unscaled weights, label predicted again at every alpha) or textbook (integrated gradients "
            "of eq. 4: gradient at alpha*A, label predicted once at alpha 1)"
        },
    )
    rounding: str = field(
        default="ceil",
        metadata={
            "help": "candidates per row of n keys: ceil = ceil(p*n), as the authors' code; round = "
            "floor(p*n + 1/2), attendout's rule before issue 20 (to reproduce runs made with it)"
        },
    )
    attribution_dropout: bool = field(
        default=False,
        metadata={
            "help": "keep the model's ordinary dropout on in the attribution pass (the training pass always has it)"
        },
    )

    def __post_init__(self) -> None:
        if self.layers in (TASK_LAYERS, ENCODER_LAYERS):  # settled by for_task / at attach
            self.check_types()
        else:
            super().__post_init__()
        choices = [
            ("attribution", self.attribution, ATTRIBUTIONS),
            ("cross_tuning", self.cross_tuning, CROSS_TUNING),
            ("start", self.start, STARTS),
            ("ig_form", self.ig_form, IG_FORMS),
            ("rounding", self.rounding, ROUNDINGS),
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

    def for_task(self, task: str | None) -> ADDropConfig:
        """This config with ``layers="task"`` settled for the task named ``task`` (see :func:`task_layers`).

        ``attendout finetune`` and ``attendout bench`` call it before the run starts, so the run's
        config records the layers used; explicit layers are kept as they are.
        """
        if self.layers != TASK_LAYERS:
            return self
        return dataclasses.replace(self, layers=task_layers(task))

    def build(self) -> ADDrop:
        return ADDrop(
            self.layers,
            self.attribution,
            self.p,
            self.q,
            self.ig_steps,
            self.attribution_dropout,
            rounding=self.rounding,
            ig_form=self.ig_form,
        )

    def training_strategy(self) -> ADDropStrategy:
        return ADDropStrategy(self)
