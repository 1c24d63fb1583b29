"""What every method config is: options as data, checked when made (:class:`MethodConfig`).

Imports neither torch nor transformers, so that listing the methods and their options
(``attendout methods``, ``--help``) and reading a config file cost no model code. The parts that act
on a model are bound to a config by :func:`attendout.methods.registry.register_method`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.limits import LimitError
from ..typecheck import Must, check_fields, option


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


#: A drop probability: in [0, 1) (one would drop every position), or in [0, 1] where dropping all is a
#: case the method handles (a skipped layer, a uniform row).
PROBABILITY = Must(lambda value: 0 <= value < 1, "in [0, 1)")
PROBABILITY_OR_ONE = Must(lambda value: 0 <= value <= 1, "in [0, 1]")
#: A count of steps, samples, units: an int (its type checked first) of at least 1.
INTEGER_AT_LEAST_1 = Must(lambda value: value >= 1, "an integer of at least 1")


def check_probability(owner: str, name: str, value: float, *, allow_one: bool = False) -> None:
    must = PROBABILITY_OR_ONE if allow_one else PROBABILITY
    if not must.holds(value):
        raise ValueError(f"{owner}: {name} must be {must.words}, got {value!r}")


def layers_field() -> Any:
    return option(
        None, "layers to act on: 'all' or comma-separated indices from 0 (default: all)", from_text=True
    )


@dataclass
class MethodConfig:
    """Base of every method config: the method's options as plain data.

    A subclass is a ``@dataclass`` whose fields are the options, each with ``metadata={"help": ...}``
    (the CLI makes them ``--flags``); its ``__post_init__`` checks them and raises ``ValueError`` naming
    the field and value. It builds nothing: :func:`~attendout.methods.registry.register_method` binds it
    to the method and training strategy that act on a model.
    """

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

    def check_limits(self, max_length: int, model_config: Any, *, setting: str = "--max-length") -> None:
        """Raise a ValueError (:class:`attendout.core.limits.LimitError`) if this method cannot act on inputs
        of ``max_length`` tokens of the model ``model_config`` describes. Default: its ``layers`` must
        exist. Called before training (:func:`attendout.core.limits.check_length`)."""
        from ..attention.families import stack_sizes  # torch: only where a model is at hand

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

    def acts_after(self, steps_per_epoch: int, total_steps: int) -> int | None:
        """How many optimizer steps of a run pass before the method first changes one: 0 when it acts from
        the first step (the default), None when it never acts within ``total_steps``. A model kept at or
        before that step (the best validation of an early epoch) is plain fine-tuning's, whatever the
        method's options (:func:`attendout.run.record.kept_before_acting`)."""
        return 0

    def for_task(self, task: str | None) -> MethodConfig:
        """This config with its task-dependent defaults settled for the task named ``task``.

        Default: the config itself (no option depends on the task). AD-DROP's ``layers="task"`` becomes
        the layers its authors use on that task.
        """
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **dataclasses.asdict(self)}
