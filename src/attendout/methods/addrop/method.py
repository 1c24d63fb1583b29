"""AD-DROP in the hook: :class:`ADDrop`, the guard and the masks of one attribution pass (the method
is described in :mod:`attendout.methods.addrop`)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

from ...attention import AttentionEdit, AttentionMethod, RateMeter, layer_key_valid
from ...contract import ForwardEdits
from ..nexttoken import generation_kind
from .attribution import (
    attribute,
    candidate_region,
    random_drops,
    sample_drops,
)
from .layers import attended_keys, stack_layers
from .settings import AUTHORS_DEFAULTS, ENCODER_LAYERS, TASK_LAYERS, task_layers, task_settings

if TYPE_CHECKING:
    from .config import ADDropConfig

logger = logging.getLogger(__name__)


class ADDrop(AttentionMethod):
    """AD-DROP's part in the hook: a guard, plus the masks and statistics of :meth:`prepare`.

    The drops of one training forward are made by :meth:`prepare` from an attribution pass and travel
    to the hook as that forward's keyword argument (:data:`attendout.contract.EDITS_KWARG`), so no
    state waits on this object between calls. A training forward without them raises: AD-DROP never
    trains plainly because nobody ran its attribution pass.
    """

    name = "addrop"
    without_edits = (
        "addrop: a training forward came without AD-DROP's drops, so it would train plainly. Pass "
        "them: extra = handle.method.prepare(model, batch); model(**batch, **extra) (or "
        "handle.method.plain() in a plain phase), or train through attendout.prepare(...), "
        "attendout.hf.Trainer or `attendout finetune`"
    )

    def __init__(self, config: ADDropConfig):
        #: ``layers="task"`` is settled by :meth:`for_task` (the strategy calls it with the loop's task);
        #: until then the method acts on the first layer, the authors' setting for most tasks
        self.from_task = config.layers == TASK_LAYERS
        self.layers = [0] if self.from_task else config.layers
        self._told_no_task = False
        #: p, q, attribution left unset (None): :meth:`for_task` takes them from the task (the authors'
        #: script for it); until then they are the authors' ``main.py`` defaults (p 0.3, q 0.2, ga)
        self.task_options = {name for name in AUTHORS_DEFAULTS if getattr(config, name) is None}
        for name, default in AUTHORS_DEFAULTS.items():
            setattr(self, name, default if getattr(config, name) is None else getattr(config, name))
        self.config = config  # the options read as given: dropping, rd_sampling, ig_*, rounding
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
        stacks = stack_layers(self.controller_model)
        if stacks is None:
            raise ValueError(
                f"addrop: layers='encoder' (the encoder's self-attention, as the authors' translation code) "
                f"needs an encoder-decoder model (T5); {type(self.controller_model).__name__} has one stack: "
                "pass layers='all' or layer indices"
            )
        self.layers = list(range(stacks[0]))

    def for_task(self, task: str | None, loop: str = "custom", kind: str | None = None) -> None:
        """Settle ``layers="task"`` for the task named ``task`` of ``kind`` (None: the loop named none:
        layer 0, or for a generation model, its kind's layers), and p, q and attribution left unset
        (the task's script, else the authors' defaults: :func:`task_settings`)."""
        if self.task_options:
            settings = task_settings(task)
            for name in sorted(self.task_options):
                setattr(self, name, settings[name])
            if task is not None:
                logger.info(
                    "addrop: %s for task %r (the authors' settings)",
                    ", ".join(f"{name} {getattr(self, name)}" for name in sorted(self.task_options)),
                    task,
                )
            self.task_options = set()
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
        valid = {layer: attended_keys(model, batch, layer) for layer in layers}  # each (B, 1, Lq, Lk)
        heads = self.num_heads or 1
        scores: dict[int, torch.Tensor] | None = None
        if self.attribution == "rd":  # the control needs no pass
            if self.config.rd_sampling == "exact":  # random scores: ceil(p n) random candidates per row
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
                ig_steps=self.config.ig_steps,
                ig_form=self.config.ig_form,
                dropout=self.config.attribution_dropout,
                loss_scale=None if loss_scale is None else min(loss_scale, self.scale_cap),
            )
            if loss_scale is not None and result.loss_scale < min(loss_scale, self.scale_cap):
                self.scale_cap = result.loss_scale
            scores = result.scores
        edits = {}
        for layer in layers:
            seen = layer_key_valid(model, layer, valid[layer])  # causal, a local layer's window too
            if scores is None:  # the random control as the authors draw it: each key with p * q
                candidate, drop = random_drops(seen, heads, self.p, self.q)  # (B, H, Lq, Lk) bool
            else:
                lowest = self.config.dropping == "low"  # the ablation: the lowest-attribution keys
                candidate = candidate_region(
                    scores[layer], seen, self.p, rounding=self.config.rounding, lowest=lowest
                )
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

    def stats(self) -> dict[str, float]:
        return self.meter.pop()
