"""Method configs, their registry, and `apply` / `remove`.

A method is a ``@dataclass`` config registered by name with :func:`register_method`. Its fields are
its options (each with ``metadata={"help": ...}``; the CLI turns them into ``--flags``), its checks
live in ``__post_init__`` and raise ``ValueError`` naming the field and value, and ``build()`` makes
the :class:`~attendout.attention.AttentionMethod` that acts through the hook.

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from ..attention import AttentionMethod, Controller, install
from ..attention.families import stack_sizes
from ..contract import LoopContext, StepInfo
from ..limits import LimitError
from ..typecheck import check_fields

METHODS: dict[str, type[MethodConfig]] = {}


def register_method(cls: type[MethodConfig]) -> type[MethodConfig]:
    """Class decorator: make a config available by its ``name``."""
    if not getattr(cls, "name", None):
        raise ValueError(f"{cls.__name__} has no name")
    if cls.name in METHODS and METHODS[cls.name] is not cls:
        raise ValueError(f"method name {cls.name!r} is already registered by {METHODS[cls.name].__name__}")
    METHODS[cls.name] = cls
    return cls


def list_methods() -> list[str]:
    return sorted(METHODS)


def get_method_config(name: str, **options: Any) -> MethodConfig:
    """Make the config of method ``name`` from keyword options (unknown name or option: ValueError)."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(list_methods())}")
    cls = METHODS[name]
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"method {name!r} has no option {unknown[0]!r}; its options: {', '.join(sorted(known))}"
        )
    return cls(**options)


def parse_layers(value: Any) -> list[int] | None:
    """``None``/"all" -> None; "0,2,5" or [0, 2, 5] -> [0, 2, 5]."""
    if value is None or value == "all":
        return None
    if isinstance(value, str):
        try:
            value = [int(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"layers must be 'all' or comma-separated integers, got {value!r}") from None
    layers = [int(v) for v in value]
    if not layers:
        raise ValueError("layers is empty; use 'all' or a list of layer indices")
    return layers


def check_probability(owner: str, name: str, value: float, *, allow_one: bool = False) -> None:
    upper_ok = value <= 1 if allow_one else value < 1
    if not (0 <= value and upper_ok):
        bound = "[0, 1]" if allow_one else "[0, 1)"
        raise ValueError(f"{owner}: {name} must be in {bound}, got {value!r}")


@dataclass
class MethodConfig:
    """Base of every method config."""

    name: ClassVar[str] = ""
    #: One line for `attendout methods` and `--help`.
    summary: ClassVar[str] = ""
    #: How the method relates to the model's own attention dropout: "keeps" or "replaces".
    model_dropout: ClassVar[str] = "keeps"
    #: Why a training forward may leave some parameters without a gradient (a skipped block, unused
    #: query/key projections), or "" if it never does. DDP must then look for unused parameters
    #: (``find_unused_parameters=True``), which attendout's loop sets, saying why.
    unused_parameters: ClassVar[str] = ""
    #: An architectural change (Synthesizer) rather than a regulariser: it may carry a regulariser on
    #: top (see :func:`apply`), and counts as none for the rule that refuses two stacked regularisers.
    architectural: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.check_types()
        if hasattr(self, "layers"):
            self.layers = parse_layers(self.layers)

    def check_types(self) -> None:
        """Every option against the type its field declares (:mod:`attendout.typecheck`): a bool is no
        number, an int is a float; raises :class:`~attendout.typecheck.OptionTypeError` naming the option."""
        check_fields(self, self.name)

    def build(self) -> AttentionMethod:
        raise NotImplementedError

    def check_limits(self, max_length: int, model_config: Any, *, setting: str = "--max-length") -> None:
        """Raise a ValueError (:class:`attendout.limits.LimitError`) if this method cannot act on inputs
        of ``max_length`` tokens of the model ``model_config`` describes. Default: its ``layers`` must
        exist. Called before training (:func:`attendout.limits.check_length`)."""
        layers = getattr(self, "layers", None)
        count = getattr(model_config, "num_hidden_layers", None)
        stacks = ""
        sizes = stack_sizes(model_config)
        if sizes is not None:
            # T5, BART: num_hidden_layers counts the encoder only; the hook numbers the decoder's after it
            encoder, decoder = sizes
            count = encoder + decoder
            stacks = (
                f" self-attention layers: 0..{encoder - 1} in the encoder, {encoder}..{count - 1} in the "
                "decoder; cross-attention layers are not numbered: no method acts on them"
            )
        if isinstance(layers, list | tuple) and layers and isinstance(count, int) and max(layers) >= count:
            missing = [layer for layer in layers if layer >= count]
            raise LimitError(
                f"{self.name}: layers {missing} do not exist; the model has {count} layers "
                f"(0..{count - 1}){stacks and ':' + stacks}"
            )

    def training_strategy(self) -> TrainingStrategy:
        """How the fine-tuning loop trains with this method (default: one plain step per batch)."""
        return TrainingStrategy(self)

    def for_task(self, task: str | None) -> MethodConfig:
        """This config with its task-dependent defaults settled for the task named ``task``.

        Default: the config itself (no option depends on the task). AD-DROP's ``layers="task"`` becomes
        the layers its authors use on that task.
        """
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **dataclasses.asdict(self)}


def settle_for_task(method: str, options: Mapping[str, Any], task: str | None) -> dict[str, Any]:
    """``options`` of ``method`` with the options that depend on the task written out for ``task``.

    A run's config made from the result records what the run used (AD-DROP's layers for the task)
    instead of "decided later". Options that do not make a config come back unchanged: the run's
    own checks report them.
    """
    try:
        config = get_method_config(method, **options)
    except (ValueError, TypeError):
        return dict(options)
    settled = config.for_task(task)
    if settled is config:
        return dict(options)
    before, after = config.to_dict(), settled.to_dict()
    return {**options, **{k: v for k, v in after.items() if k != "name" and before.get(k) != v}}


def layers_field() -> Any:
    return field(
        default=None,
        metadata={
            "help": "layers to act on: 'all' or comma-separated indices from 0 (default: all)",
            "from_text": True,
        },
    )


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
    it and return it from ``MethodConfig.training_strategy()``: AD-DROP runs an attribution pass in
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
        from ..optim import param_groups

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
        from ..rundir import save_model_atomic

        save_model_atomic(self.eval_model(), tokenizer, path)

    def load_best(self, path: Path) -> None:
        """Load the checkpoint that :meth:`save_model` wrote in ``path`` back into ``eval_model``."""
        model = self.eval_model()
        best = type(model).from_pretrained(path)  # the model's own head class (any task kind)
        model.load_state_dict(best.state_dict())


def prepare(model: nn.Module, config: MethodConfig | str, **options: Any) -> TrainingStrategy:
    """The method's training strategy, attached to ``model``: the entry point for any loop.

    >>> strategy = attendout.prepare(model, "addrop")
    >>> optimizer = torch.optim.AdamW(strategy.param_groups(model, 0.01), lr=5e-5)
    >>> strategy.start(attendout.LoopContext(device="cpu", total_steps=100, steps_per_epoch=100))
    """
    if isinstance(config, str):
        config = get_method_config(config, **options)
    elif options:
        raise TypeError("pass options either in the config or as keywords with a method name, not both")
    strategy = config.training_strategy()
    strategy.attach(model)
    return strategy


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
    if isinstance(config, str):
        config = get_method_config(config, **options)
    elif options:
        raise TypeError("pass options either in the config or as keywords with a method name, not both")
    _refuse_stacking(model, [config])
    return _attach(model, config)


def _attach(model: nn.Module, config: MethodConfig) -> MethodHandle:
    controller = install(model)
    method = config.build()
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
        out: dict[str, float] = {}
        for handle in self.handles:
            out.update(handle.stats())
        return out

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def __repr__(self) -> str:
        return f"CombinedHandle({self.configs!r})"
