"""The contract between a method and the loop that trains with it, whichever loop that is.

attendout's own loop (:mod:`attendout.run.loop`), ``transformers.Trainer`` (:mod:`attendout.hf`) and a
hand-written PyTorch loop drive a method the same way, through its
:class:`~attendout.methods.base.TrainingStrategy`:

1. ``strategy = attendout.prepare(model, method)``: the method is applied to the model (the hook is
   installed; Synthesizer adds its layers). Build the optimizer now, from
   ``strategy.param_groups(model, weight_decay)`` (Synthesizer's new weights train at their own rate).
2. ``strategy.start(LoopContext(...))``: everything a method may ask of the loop, typed, once.
3. per optimizer step (``StepInfo``: steps done, epoch), for each forward of the model's training
   pass (one per micro-batch): ``extra = strategy.before_forward(model, batch, step)`` and
   ``model(**batch, **extra)``. ``extra`` carries this forward's attention edits (AD-DROP's drops) as
   the keyword argument :data:`EDITS_KWARG`, which transformers hands to the registered attention
   function; nothing is left on an object between calls.
4. after the loop's optimizer step: ``strategy.after_step(micro_batches, step)`` (AttendOut: the
   Attacker's step on the same batch and, every ``dropout_steps`` steps, a game).
5. ``strategy.eval_model()`` is the model to evaluate and save (AttendOut: the better of D and A);
   ``strategy.stats()`` the method's statistics since the last call.

A method that cannot act without its strategy (AD-DROP, AttendOut) raises at the first training
forward that comes without its edits, instead of training plainly in silence.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch
from torch import nn

#: The forward keyword argument that carries one forward's attention edits to the hook.
EDITS_KWARG = "attendout_edits"


@dataclass(frozen=True)
class ForwardEdits:
    """One forward pass's attention edits, per layer (see :class:`attendout.attention.AttentionEdit`).

    Passed as ``model(**batch, attendout_edits=ForwardEdits(...))``; applied in training mode only.
    An empty one says "this training forward is plain on purpose" (e.g. a cross-tuning phase without
    AD-DROP), which a method that needs its strategy accepts.
    """

    layers: Mapping[int, Any] = field(default_factory=dict)  # layer -> AttentionEdit
    driver: str = ""  # which strategy made them (for error messages)

    def kwargs(self) -> dict[str, ForwardEdits]:
        return {EDITS_KWARG: self}


class EvalSource(Protocol):
    """Labelled examples a method can score (AttendOut's games): indexable batches with labels."""

    def __len__(self) -> int: ...

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        """The examples ``indices`` as one padded batch of model inputs plus ``labels``."""
        ...


#: ``make_optimizer(model) -> (optimizer, scheduler)``: the loop's recipe, for a second model
#: (AttendOut's Attacker) that must train exactly like the first.
MakeOptimizer = Callable[[nn.Module], tuple[torch.optim.Optimizer, Any]]


@dataclass
class Distributed:
    """The process group a loop runs in. One process: rank 0 of 1, every reduction the identity."""

    rank: int = 0
    world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))  # where collectives run

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def all_true(self, flag: bool) -> bool:
        """True on every process if ``flag`` is true on every process (one collective call)."""
        if self.world_size == 1:
            return flag
        value = torch.tensor([1.0 if flag else 0.0], device=self.device)
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MIN)
        return bool(value.item())

    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """The sum of ``value`` over the processes (itself in one process)."""
        if self.world_size == 1:
            return value
        value = value.detach().to(self.device, copy=True)
        torch.distributed.all_reduce(value)
        return value

    def barrier(self) -> None:
        if self.world_size > 1:
            torch.distributed.barrier()

    def mean_(self, tensors: list[torch.Tensor]) -> None:
        """Average ``tensors`` over the processes, in place (a no-op in one process)."""
        if self.world_size == 1:
            return
        for tensor in tensors:
            torch.distributed.all_reduce(tensor)
            tensor.div_(self.world_size)


@dataclass(frozen=True)
class StepInfo:
    """Where one optimizer step stands: ``step`` optimizer steps are done before it (0-based)."""

    step: int
    epoch: int = 0


@dataclass
class LoopContext:
    """What a method may ask of the loop that trains with it, given once to ``strategy.start``.

    Only AttendOut needs most of it (a second model trained with the same recipe, labelled data for
    its games); the other methods read the device, precision and schedule fields.
    """

    device: torch.device
    total_steps: int  # optimizer steps of the whole run
    steps_per_epoch: int
    #: the model's own optimizer and schedule (AttendOut copies the game's winner into them)
    optimizer: torch.optim.Optimizer | None = None
    scheduler: Any = None
    make_optimizer: MakeOptimizer | None = None
    autocast_dtype: torch.dtype | None = None  # None: fp32, no autocast
    max_grad_norm: float = 1.0  # 0: no clipping
    seed: int = 0  # the run's model seed; methods derive their own generators from it
    data_seed: int = 0
    task: Any = None  # attendout.tasks.Task: kind and metrics of the labels
    #: labelled data never reported on (a split carved from train): AttendOut's games and judge
    validation: EvalSource | None = None
    #: other labelled splits a method may be told to use by name (AttendOut's validation_source)
    splits: Mapping[str, EvalSource] = field(default_factory=dict)
    eval_batch_size: int = 64
    #: the current fp16 loss scale (``GradScaler.get_scale``), so a method's own backward passes
    #: (AD-DROP's attribution) are scaled like the training loss; None without fp16
    loss_scale: Callable[[], float] | None = None
    distributed: Distributed = field(default_factory=Distributed)
    #: wraps a second trained model as the loop wraps its own (DDP in several processes); identity in one
    wrap: Callable[[nn.Module], nn.Module] = lambda model: model
    #: what the loop is ("attendout", "transformers.Trainer", "custom"), for error messages
    loop: str = "custom"

    def __post_init__(self) -> None:
        self.device = torch.device(self.device)
        if self.total_steps < 1:
            raise ValueError(f"LoopContext: total_steps must be at least 1, got {self.total_steps!r}")
        if self.steps_per_epoch < 1:
            raise ValueError(f"LoopContext: steps_per_epoch must be at least 1, got {self.steps_per_epoch!r}")

    def autocast(self) -> torch.autocast:
        """The loop's mixed-precision context for a forward pass."""
        return torch.autocast(
            self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None
        )

    def progress(self, step: StepInfo) -> float:
        return min(max(step.step / self.total_steps, 0.0), 1.0)
