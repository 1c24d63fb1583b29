"""AD-DROP in a training loop: cross-tuning (:func:`addrop_active`) and :class:`ADDropStrategy`, which
runs the attribution pass before each training forward of an AD-DROP phase."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ...contract import LoopContext, StepInfo
from ..base import TrainingStrategy
from .method import ADDrop

if TYPE_CHECKING:
    from .config import ADDropConfig

logger = logging.getLogger(__name__)


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
                "phase give an odd number of phases (e.g. an odd number of epochs with %s)",
                loop.total_steps,
                length,
                _option(loop, "period", "1"),
            )
        if c.acts_after(loop.steps_per_epoch, loop.total_steps) is None:
            logger.warning(
                "addrop: with cross_tuning=%s, period=%d and start=finetune, AD-DROP never acts in this run "
                "of %d steps (%d per epoch); use %s with a shorter %s, or %s",
                c.cross_tuning,
                c.period,
                loop.total_steps,
                loop.steps_per_epoch,
                _option(loop, "cross_tuning", "step"),
                _option(loop, "period"),
                _option(loop, "start", "addrop"),
            )

    def before_forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor], step: StepInfo
    ) -> dict[str, Any]:
        loop = self.started()
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


def _option(loop: LoopContext, name: str, value: str | None = None) -> str:
    """An option as the user of this loop sets it: a flag for attendout's own command line (``--period 1``),
    a keyword elsewhere (``period=1`` to ``attendout.prepare``, ``hf.Trainer`` or the config)."""
    if loop.loop == "attendout":
        flag = "--" + name.replace("_", "-")
        return flag if value is None else f"{flag} {value}"
    return name if value is None else f"{name}={value!r}" if not value.isdigit() else f"{name}={value}"
