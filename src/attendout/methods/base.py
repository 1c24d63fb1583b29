"""Methods on a model: :func:`apply` / ``remove``, :func:`prepare`, and the :class:`TrainingStrategy`.

A method is a config (:class:`~attendout.methods.config.MethodConfig`: its options, as data)
registered by name with the parts that act (:func:`~attendout.methods.registry.register_method`): the
:class:`~attendout.attention.AttentionMethod` that acts through the hook, and the training strategy.

>>> handle = attendout.apply(model, ScoresDropoutConfig(p=0.1))
>>> ...  # any PyTorch loop; call handle.set_progress(step / total) if the method has a schedule
>>> handle.remove()

**Where the methods act.** Every method acts on the self-attention the hook reaches
(:mod:`attendout.attention.families`): an encoder's, a decoder-only model's (GPT-2, Llama, Mistral,
Qwen2; the hook keeps every drop causal), and both stacks of an encoder-decoder (T5: layers 0..n-1
are the encoder's, n.. the decoder's). An encoder-decoder's **cross-attention is never touched**:
the hook does not register it, so its calls run stock attention whatever method is applied, and no
option asks for it. (``layerdrop`` skips whole blocks, so a skipped decoder block skips its
cross-attention and feed-forward sub-layers along with its self-attention, as LayerDrop does.)
Synthesizer refuses cross-attention outright (paper 003's caveat); AD-DROP and AttendOut say in their
modules which self-attention they act on in generation models.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..attention import AttentionMethod, Controller, install, uninstall
from ..attention.deberta import install_hooks as _deberta  # noqa: F401  (registers DeBERTa's attention route)
from ..attention.mpnet import install_hooks as _mpnet  # noqa: F401  (registers MPNet's attention route)
from ..contract import LoopContext, StepInfo
from .config import MethodConfig
from .registry import get_method_config, method_parts


class MethodHandle:
    """What :func:`apply` returns: the live method, its progress, its statistics, and `remove()`."""

    def __init__(
        self, model: nn.Module, controller: Controller, config: MethodConfig, method: AttentionMethod
    ):
        self.model = model
        self.controller = controller
        self.config = config
        self.method = method

    def set_progress(self, fraction: float) -> None:
        """Tell scheduled methods how far training is, in [0, 1]."""
        self.method.set_progress(min(max(float(fraction), 0.0), 1.0))

    def stats(self) -> dict[str, float]:
        """The method's statistics since the last call (e.g. realised drop rate per layer)."""
        return self.method.stats()

    def remove(self) -> None:
        self.controller.remove(self.method)

    def __repr__(self) -> str:
        return f"MethodHandle({self.config!r})"


class TrainingStrategy:
    """A method's side of the contract with any training loop (see :mod:`attendout.contract`).

    The default fits every method that acts through the hook alone (the dropouts, DropHead, both
    LayerDrops, scheduled dropout): :meth:`attach` applies it, :meth:`set_progress` drives its
    schedule, and the loop trains the model as it would without it. Methods that need more subclass
    it and are registered with their config (:func:`~attendout.methods.registry.register_method`): AD-DROP runs an attribution pass in
    :meth:`before_forward`, AttendOut trains an Attacker and plays its games in :meth:`after_step`,
    Synthesizer gives its new weights their own learning rate in :meth:`param_groups`.

    Calls, in order: ``attach`` (before the optimizer is built), ``param_groups``, ``start`` (with
    the :class:`~attendout.contract.LoopContext`, after the optimizer is built), then per optimizer
    step ``set_progress``, ``before_forward`` for each training forward (one per micro-batch),
    ``after_step`` after the optimizer step; ``stats`` at each log line; ``eval_model`` whenever the
    loop evaluates or saves. A strategy with state beyond the model, its optimizer and the random
    generators (AttendOut's Attacker and Generator) returns it from ``state_dict`` and takes it back in
    ``load_state_dict`` (after ``start``), so a run resumes exactly.
    """

    #: What the strategy needs from the loop beyond the defaults, by LoopContext field name; ``start``
    #: raises a clear error naming the loop when one is missing.
    needs: tuple[str, ...] = ()

    def __init__(self, config: MethodConfig) -> None:
        self.config = config
        self.handle: MethodHandle | None = None
        self.model: nn.Module | None = None
        self.loop: LoopContext | None = None

    # before the optimizer --------------------------------------------------------------------
    def attach(self, model: nn.Module, *, max_length: int | None = None) -> None:
        """Apply the method to ``model`` (``max_length``: the loop's longest input, if it knows it)."""
        self.model = model
        self.handle = apply(model, self.config)

    def param_groups(self, model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
        """The optimizer's parameter groups (default: decay on matrices, not on biases and LayerNorm).

        A group with its own ``lr`` keeps it; the others get the loop's learning rate.
        """
        from ..core.optim import param_groups

        return param_groups(model, weight_decay)

    # training --------------------------------------------------------------------------------
    def start(self, loop: LoopContext) -> None:
        """Take the loop's context, once, after the optimizer is built and before the first step."""
        missing = [name for name in self.needs if getattr(loop, name) in (None, {})]
        if missing:
            raise ValueError(
                f"{self.config.name} needs {', '.join(missing)} from the training loop, and the "
                f"{loop.loop} loop gave none; see attendout.contract.LoopContext"
            )
        self.loop = loop

    def started(self) -> LoopContext:
        """The loop's context taken by :meth:`start` (raises before it)."""
        if self.loop is None:
            raise RuntimeError(f"{self.config.name}: call strategy.start(LoopContext(...)) before training")
        return self.loop

    def set_progress(self, fraction: float) -> None:
        """Training progress in [0, 1] (for methods with schedules)."""
        if self.handle is not None:
            self.handle.set_progress(fraction)

    def before_forward(
        self, model: nn.Module, batch: dict[str, torch.Tensor], step: StepInfo
    ) -> dict[str, Any]:
        """Extra keyword arguments of the next training forward of ``model`` on ``batch``."""
        return {}

    def after_step(self, micro_batches: list[dict[str, torch.Tensor]], step: StepInfo) -> None:
        """Called after the loop's optimizer step on the batch ``micro_batches`` (in order)."""

    def stats(self) -> dict[str, float]:
        """The method's statistics since the last call."""
        return self.handle.stats() if self.handle is not None else {}

    def eval_model(self) -> nn.Module:
        """The model to evaluate and save."""
        if self.model is None:
            raise RuntimeError(f"{self.config.name}: the strategy is not attached to a model")
        return self.model

    # resuming ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs besides the model, its optimizer and schedule (default: nothing)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Take back what :meth:`state_dict` returned (after ``start``)."""
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state, but a checkpoint holds {sorted(state)}")

    # saving -------------------------------------------------------------------------------------
    def save_model(self, path: Path, tokenizer: Any) -> None:
        """Save ``eval_model`` in the folder ``path`` (with the tokenizer), atomically.

        Default: ``save_pretrained``, a plain `transformers` checkpoint. Methods that change the
        architecture (Synthesizer) save their own documented form and load it in :meth:`load_best`.
        """
        from ..core.folder import save_model_atomic

        save_model_atomic(self.eval_model(), tokenizer, path)

    def load_best(self, path: Path) -> None:
        """Load the checkpoint that :meth:`save_model` wrote in ``path`` back into ``eval_model``."""
        model = self.eval_model()
        best = type(model).from_pretrained(path)  # the model's own head class (any task kind)
        model.load_state_dict(best.state_dict())


def prepare(
    model: nn.Module | None, config: MethodConfig | str, *, max_length: int | None = None, **options: Any
) -> TrainingStrategy:
    """The method's training strategy, attached to ``model``: the one way to make one, for any loop (this
    package's own and ``attendout.hf.Trainer`` included). ``max_length``: the loop's longest input, if
    it knows it (Synthesizer's default ``l_max``). ``model`` None: attached to no model yet (``attach``
    later).

    >>> strategy = attendout.prepare(model, "addrop")
    >>> optimizer = torch.optim.AdamW(strategy.param_groups(model, 0.01), lr=5e-5)
    >>> strategy.start(attendout.LoopContext(device="cpu", total_steps=100, steps_per_epoch=100))
    """
    config = _config_of(config, options)
    strategy = (method_parts(config)[1] or TrainingStrategy)(config)
    if model is not None:
        strategy.attach(model, max_length=max_length)
    return strategy


def _config_of(config: MethodConfig | str, options: dict[str, Any]) -> MethodConfig:
    """``config``, or the config of the method it names with ``options``."""
    if isinstance(config, str):
        return get_method_config(config, **options)
    if options:
        raise TypeError("pass options either in the config or as keywords with a method name, not both")
    return config


class MethodStackError(ValueError):
    """``apply`` on a model that already carries a regulariser: two would act at once (see :func:`apply`)."""


def _regularises(config: MethodConfig) -> bool:
    return not config.architectural and config.name != "none"


def _describe(config: MethodConfig) -> str:
    fields = [f for f in dataclasses.fields(config) if f.init]
    changed = [
        f"{f.name}={getattr(config, f.name)!r}" for f in fields if getattr(config, f.name) != f.default
    ]
    return f"{config.name!r}" + (f" ({', '.join(changed)})" if changed else "")


def _refuse_stacking(model: nn.Module, configs: list[MethodConfig]) -> None:
    from ..attention import get_controller

    controller = get_controller(model)
    attached = [
        m.applied_config
        for m in (controller.methods if controller is not None else [])
        if getattr(m, "applied_config", None) is not None and _regularises(m.applied_config)
    ]
    adding = [c for c in configs if _regularises(c)]
    if attached and adding:
        raise MethodStackError(
            f"{type(model).__name__} already carries attendout method {_describe(attached[0])}; applying "
            f"{_describe(adding[0])} would stack a second regulariser on it (a notebook cell run twice "
            "doubles the regularisation). Remove the first (handle.remove() or attendout.remove(model)) "
            "before applying another, or combine them on purpose in one call: "
            f"attendout.apply(model, [{attached[0].name!r}, {adding[0].name!r}])"
        )


def apply(
    model: nn.Module, config: MethodConfig | str | list[MethodConfig | str], **options: Any
) -> MethodHandle | CombinedHandle:
    """Install the hook on ``model`` if needed and add the method ``config`` (or its name + options).

    One regulariser at a time: on a model that already carries one (from an earlier ``apply``), this
    raises :class:`MethodStackError` naming it, instead of adding a second on top. To combine methods
    on purpose, pass them in one call as a list of configs or names: ``attendout.apply(model,
    [LayerDropConfig(p=0.2), "scores-dropout"])`` returns a :class:`CombinedHandle` whose statistics
    keep each method's name (two of the same method are refused: their statistics would collide).
    An architectural method (Synthesizer) may carry one regulariser (or a combination) on top.
    """
    if isinstance(config, (list, tuple)):
        if options:
            raise TypeError("pass each method's options in its config when combining methods")
        configs = [get_method_config(c) if isinstance(c, str) else c for c in config]
        names = [c.name for c in configs]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if not configs or repeated:
            raise ValueError(
                f"a combination needs distinct methods; got {names} (each method's statistics are named by "
                "the method: two of one would collide)"
            )
        _refuse_stacking(model, configs)
        return CombinedHandle([_attach(model, c) for c in configs])
    config = _config_of(config, options)
    _refuse_stacking(model, [config])
    return _attach(model, config)


def remove(model: nn.Module) -> None:
    """Remove every attendout method and the hook from ``model`` (it is stock again)."""
    uninstall(model)


def _attach(model: nn.Module, config: MethodConfig) -> MethodHandle:
    controller = install(model)
    method = method_parts(config)[0](config)
    controller.add(method)
    method.applied_config = config  # what _refuse_stacking reads; leaves the controller with the method
    return MethodHandle(model, controller, config, method)


class CombinedHandle:
    """What :func:`apply` returns for several methods combined on purpose: each handle, driven together."""

    def __init__(self, handles: list[MethodHandle]):
        self.handles = handles
        self.configs = [h.config for h in handles]

    def set_progress(self, fraction: float) -> None:
        for handle in self.handles:
            handle.set_progress(fraction)

    def stats(self) -> dict[str, float]:
        """Every method's statistics, each under its own method's name."""
        return {key: value for handle in self.handles for key, value in handle.stats().items()}

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def __repr__(self) -> str:
        return f"CombinedHandle({self.configs!r})"
