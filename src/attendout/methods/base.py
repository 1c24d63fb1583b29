"""Method configs, their registry, and `apply` / `remove`.

A method is a ``@dataclass`` config registered by name with :func:`register_method`. Its fields are
its options (each with ``metadata={"help": ...}``; the CLI turns them into ``--flags``), its checks
live in ``__post_init__`` and raise ``ValueError`` naming the field and value, and ``build()`` makes
the :class:`~attendout.attention.AttentionMethod` that acts through the hook.

>>> handle = attendout.apply(model, ScoresDropoutConfig(p=0.1))
>>> ...  # any PyTorch loop; call handle.set_progress(step / total) if the method has a schedule
>>> handle.remove()
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from torch import nn

from ..attention import AttentionMethod, Controller, install

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

    def __post_init__(self) -> None:
        if hasattr(self, "layers"):
            self.layers = parse_layers(self.layers)

    def build(self) -> AttentionMethod:
        raise NotImplementedError

    def training_strategy(self) -> TrainingStrategy:
        """How the fine-tuning loop trains with this method (default: one plain step per batch)."""
        return TrainingStrategy()

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **dataclasses.asdict(self)}


def layers_field() -> Any:
    return field(
        default=None,
        metadata={"help": "layers to act on: 'all' or comma-separated indices from 0 (default: all)"},
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
    """How the fine-tuning loop (:class:`attendout.train.Trainer`) trains with a method.

    The default applies the method to ``trainer.model`` and runs one optimizer step per batch through
    ``trainer.train_on`` (which accumulates over micro-batches when ``micro_batch_size`` is set: a
    strategy gives it the loss of a micro-batch and the rows of the batch it holds). Methods that need more subclass it and return it from
    ``MethodConfig.training_strategy()``: AttendOut trains a Defender and an Attacker, AD-DROP runs an
    attribution pass before the training pass. The loop calls, in order: ``setup`` once (after the
    model is loaded and the optimizer built), then per batch ``set_progress`` and ``step``, ``stats``
    at each log line, ``eval_model`` whenever it evaluates or saves, ``save_model`` to keep the best
    checkpoint and ``load_best`` to restore it at the end. A strategy with state beyond the trainer's
    model, optimizer and random generators (AttendOut's Attacker and Generator) returns it from
    ``state_dict`` and takes it back in ``load_state_dict``, so a run resumes exactly.
    """

    handle: MethodHandle | None = None

    def setup(self, trainer: Any) -> None:
        self.handle = apply(trainer.model, trainer.method_config)

    def step(self, trainer: Any, batch: dict[str, Any]) -> Any:
        """Train on one batch; return the detached loss."""
        trainer.model.train()
        return trainer.train_on(trainer.model, batch)

    def set_progress(self, fraction: float) -> None:
        if self.handle is not None:
            self.handle.set_progress(fraction)

    def stats(self) -> dict[str, float]:
        return self.handle.stats() if self.handle is not None else {}

    def eval_model(self, trainer: Any) -> nn.Module:
        """The model to evaluate and save."""
        return trainer.model

    def state_dict(self, trainer: Any) -> dict[str, Any]:
        """What a resumed run needs besides the trainer's own state (default: nothing)."""
        return {}

    def load_state_dict(self, trainer: Any, state: dict[str, Any]) -> None:
        """Take back what :meth:`state_dict` returned (after ``setup``)."""
        if state:
            raise ValueError(f"{type(self).__name__} keeps no state, but a checkpoint holds {sorted(state)}")

    def save_model(self, trainer: Any, path: Path) -> None:
        """Save ``eval_model`` as the run's best checkpoint in the folder ``path`` (with the tokenizer).

        Default: ``save_pretrained``, atomically, a plain `transformers` checkpoint. Methods that change
        the architecture (Synthesizer) save their own documented form and load it in :meth:`load_best`.
        """
        from ..train import save_model_atomic

        save_model_atomic(self.eval_model(trainer), trainer.tokenizer, path)

    def load_best(self, trainer: Any, path: Path) -> None:
        """Load the checkpoint that :meth:`save_model` wrote in ``path`` back into ``eval_model``."""
        from transformers import AutoModelForSequenceClassification

        best = AutoModelForSequenceClassification.from_pretrained(path)
        self.eval_model(trainer).load_state_dict(best.state_dict())


def apply(model: nn.Module, config: MethodConfig | str, **options: Any) -> MethodHandle:
    """Install the hook on ``model`` if needed and add the method ``config`` (or its name + options)."""
    if isinstance(config, str):
        config = get_method_config(config, **options)
    elif options:
        raise TypeError("pass options either in the config or as keywords with a method name, not both")
    controller = install(model)
    method = config.build()
    controller.add(method)
    return MethodHandle(model, controller, config, method)
