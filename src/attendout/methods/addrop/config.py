"""AD-DROP's options: :class:`ADDropConfig`, registered as ``addrop``, settled per task (:meth:`ADDropConfig.for_task`)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Any

from ...typecheck import Must, one_of, option
from ..config import INTEGER_AT_LEAST_1, PROBABILITY_OR_ONE, MethodConfig
from . import settings

logger = logging.getLogger(__name__)


@dataclass
class ADDropConfig(MethodConfig):
    summary = "AD-DROP: drop high-attribution attention positions, alternating with plain fine-tuning (002)"

    attribution: str | None = option(
        None,
        "attribution of the predicted label: ga (gradient), iga (integrated gradients, ig_steps "
        "passes per layer), aa (attention weights), rd (random control); default: the task's as the "
        "authors run it (iga on MRPC), else ga",
        must=one_of(settings.ATTRIBUTIONS),
    )
    p: float | None = option(
        None,
        "candidate discard region: fraction of each row's non-padding keys, by attribution; "
        "default: the task's as the authors run it (CoNLL-2003 0.8, WMT16 en-ro 0.2), else 0.3",
        must=Must(lambda value: 0 < value <= 1, "in (0, 1]"),
    )
    q: float | None = option(
        None,
        "drop probability of each candidate position; default: the task's as the authors run "
        "it (CoNLL-2003 0.1), else 0.2",
        must=PROBABILITY_OR_ONE,
    )
    layers: list[int] | str | None = option(
        settings.TASK_LAYERS,
        "layers to act on: 'task' = the authors' choice for the task (every layer for CoLA, MRPC "
        "and RTE, the first layer for other classification tasks or when the loop names none; seq2seq: "
        "'encoder'; lm: all), 'encoder' = every encoder self-attention layer of an encoder-decoder, "
        "'all', or comma-separated indices from 0 (T5: the encoder's first, then the decoder's)",
    )
    cross_tuning: str = option(
        "epoch",
        "alternate plain fine-tuning and AD-DROP by 'epoch' or 'step' (phases of `period` units), "
        "or 'off' (AD-DROP at every step)",
        must=one_of(settings.CROSS_TUNING),
    )
    period: int = option(1, "length of each cross-tuning phase, in epochs or steps", must=INTEGER_AT_LEAST_1)
    start: str = option(
        "finetune",
        "the phase cross-tuning begins with: finetune (as in 002) or addrop",
        must=one_of(settings.STARTS),
    )
    ig_steps: int = option(20, "iga only: integration steps m (m passes per layer)", must=INTEGER_AT_LEAST_1)
    ig_form: str = option(
        "authors",
        "iga only: authors (as their code: head output scaled by alpha, gradient with respect to "
        "the unscaled weights, label predicted again at every alpha) or textbook (integrated gradients "
        "of eq. 4: gradient at alpha*A, label predicted once at alpha 1)",
        must=one_of(settings.IG_FORMS),
    )
    rounding: str = option(
        "ceil",
        "candidates per row of n keys: ceil = ceil(p*n), as the authors' code; round = "
        "floor(p*n + 1/2), attendout's rule before issue 20 (to reproduce runs made with it)",
        must=one_of(settings.ROUNDINGS),
    )
    attribution_dropout: bool = option(
        False,
        "keep the model's ordinary dropout on in the attribution pass (the training pass always has it)",
    )
    dropping: str = option(
        "high",
        "high = the candidates are the keys of highest attribution (AD-DROP); low = of lowest, "
        "floor(p*n) of them (the authors' --dropping_method low, the ablation)",
        must=one_of(settings.DROPPINGS),
    )
    rd_sampling: str | None = option(
        None,
        "rd only: authors (default) = each key dropped with probability p*q, as their "
        "generate_mask_random; exact = ceil(p*n) random candidates per row, each dropped with "
        "probability q (attendout's form before issue 50)",
        must=one_of(settings.RD_SAMPLINGS),
    )

    def __post_init__(self) -> None:
        if self.layers in (settings.TASK_LAYERS, settings.ENCODER_LAYERS):  # settled by for_task / at attach
            self.check_types()
        else:
            super().__post_init__()
        if self.attribution == "rd" and self.dropping == "low":
            raise ValueError(
                f"{self.name}: dropping 'low' drops the lowest attributions; attribution 'rd' has none "
                "(the authors' code ignores --dropping_method for RD): use ga, iga or aa"
            )
        if self.attribution == "rd" and self.rd_sampling is None:
            self.rd_sampling = "authors"

    def acts_after(self, steps_per_epoch: int, total_steps: int) -> int | None:
        """Cross-tuning that starts plain leaves AD-DROP out of its first phase (``period`` epochs or
        steps): the steps before it acts; None if the run ends within that phase."""
        if self.cross_tuning == "off" or self.start == "addrop":
            return 0
        length = self.period * (max(1, steps_per_epoch) if self.cross_tuning == "epoch" else 1)
        return length if length < total_steps else None

    def for_task(self, task: str | None) -> ADDropConfig:
        """This config with ``layers="task"`` settled for the task named ``task`` (see :func:`task_layers`),
        and p, q and attribution left unset (None) taken from it (see :func:`task_settings`: the task's
        script, else the authors' ``main.py`` defaults).

        ``attendout finetune`` and ``attendout bench`` call it before the run starts, so the run's
        config records what the run uses; options given explicitly are kept as they are.
        """
        changes: dict[str, Any] = {}
        if self.layers == settings.TASK_LAYERS:
            changes["layers"] = settings.task_layers(task)
        authors = settings.task_settings(task)
        for name in ("p", "q", "attribution"):
            if getattr(self, name) is None:
                changes[name] = authors[name]
        if not changes:
            return self
        return dataclasses.replace(self, **changes)
