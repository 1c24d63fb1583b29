"""The hook's state for one model (:class:`Controller`), and what it says about a model's layers.

:func:`~attendout.attention.hook.install` makes the controller and keeps it on the model
(:func:`get_controller`); every attention call of the model reaches it through its module's slot, and
asks :func:`acting_on` what acts on it, whichever route it takes. :func:`hold_forward_edits` carries a
forward's own edits for the routes whose model does not pass them down.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..contract import EDITS_KWARG, ForwardEdits
from .call import AttentionEdit, AttentionMethod, own_edit, rewrites_scores
from .families import Family, UnsupportedModelError, _distance, is_causal

if TYPE_CHECKING:
    from .recording import AttentionRecorder

__all__ = [
    "Acting",
    "Controller",
    "acting_on",
    "get_controller",
    "hold_forward_edits",
    "layer_key_valid",
    "release_hooks",
]


@dataclass
class _Slot:
    controller: Controller
    layer: int | None  # None = shared module; index from the call counter


@dataclass
class Controller:
    """The hook's state for one model: its attention modules, blocks, methods and recorders."""

    model: nn.Module
    family: Family
    attention_modules: list[nn.Module]
    blocks: list[nn.Module]
    num_layers: int
    previous_implementation: str | None
    methods: list[AttentionMethod] = field(default_factory=list)
    recorders: list[AttentionRecorder] = field(default_factory=list)
    _calls: int = 0
    _block_calls: int = 0
    _pre_hook: object | None = None
    #: handles of module hooks to remove on uninstall (families routed through module hooks)
    _handles: list = field(default_factory=list)
    #: the running forward's own edits, for families whose forward does not pass them to attention
    forward_edits: ForwardEdits | None = None

    def add(self, method: AttentionMethod) -> None:
        if self.family.route == "deberta" and rewrites_scores(method):
            raise UnsupportedModelError(
                f"{method.name} rewrites attention scores, and {type(self.model).__name__} computes and "
                "consumes its scores inside its own forward (DeBERTa's disentangled attention), out of the "
                "hook's reach; use it with a family whose attention goes through transformers' "
                "AttentionInterface (BERT, RoBERTa, ModernBERT, EuroBERT, ...)"
            )
        method.attach(self)
        self.methods.append(method)

    def remove(self, method: AttentionMethod) -> None:
        if method in self.methods:
            self.methods.remove(method)
            method.detach(self)

    def set_progress(self, fraction: float) -> None:
        for method in self.methods:
            method.set_progress(fraction)

    def stats(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for method in self.methods:
            out.update(method.stats())
        return out

    # layer index for shared-module families (ALBERT) ------------------------------------------
    def _reset_counters(self, *_args, **_kwargs) -> None:
        self._calls = 0
        self._block_calls = 0

    def next_layer(self) -> int:
        index = self._calls % self.num_layers
        self._calls += 1
        return index

    def next_block(self) -> int:
        index = self._block_calls % self.num_layers
        self._block_calls += 1
        return index

    def block_index(self, position: int | None) -> int:
        return self.next_block() if position is None else position


@dataclass
class Acting:
    """What acts on one attention call: its layer, the acting methods and recorders, the forward's own edit."""

    layer: int
    methods: list[AttentionMethod]
    recorders: list[AttentionRecorder]
    own: AttentionEdit | None


def acting_on(
    module: nn.Module, edits: ForwardEdits | None, shape: tuple[int, int, int, int]
) -> Acting | None:
    """What acts on this call of the attention ``module`` ((B, H, Lq, Lk) = ``shape``); None when
    nothing does, or the hook is not on it: the call then runs stock attention, bit for bit.

    Every route asks this once per attention call (a shared module's layer, ALBERT's, is counted here).
    """
    slot: _Slot | None = module.__dict__.get("_attendout_slot")
    if slot is None:
        return None
    controller = slot.controller
    layer = controller.next_layer() if slot.layer is None else slot.layer
    training = module.training
    methods = [m for m in controller.methods if m.acts_on(layer, training)]
    recorders = [r for r in controller.recorders if r.wants(layer)]
    own = own_edit(edits, layer, training, shape)
    if not methods and not recorders and own is None:
        return None
    return Acting(layer, methods, recorders, own)


def hold_forward_edits(controller: Controller) -> None:
    """For a route whose model passes no extra keyword argument down to its attention (DeBERTa, MPNet):
    a pre-hook on the model takes a forward's own edits (``model(..., attendout_edits=...)``) off its
    keyword arguments and holds them in ``controller.forward_edits`` for that forward; a hook after it
    (also when it raises) lets them go. Their handles join ``controller._handles``."""

    def take(model: nn.Module, args: tuple, kwargs: dict[str, Any]):
        controller.forward_edits = kwargs.pop(EDITS_KWARG, None)
        return args, kwargs

    def drop(model: nn.Module, args: tuple, output: Any) -> None:
        controller.forward_edits = None

    model = controller.model
    controller._handles.append(model.register_forward_pre_hook(take, with_kwargs=True))
    controller._handles.append(model.register_forward_hook(drop, always_call=True))


def release_hooks(controller: Controller) -> None:
    """Remove every module hook a route put in ``controller._handles``, and any edits still held."""
    for handle in controller._handles:
        handle.remove()
    controller._handles.clear()
    controller.forward_edits = None


def get_controller(model: nn.Module) -> Controller | None:
    """The controller of a model on which the hook is installed, else None."""
    return model.__dict__.get("_attendout_controller")


def layer_key_valid(model: nn.Module, layer: int, key_valid: torch.Tensor) -> torch.Tensor:
    """(B, 1, Lq, Lk) bool: the keys ``layer`` lets each query see, from the padding mask ``key_valid``.

    The non-padding keys; in a causal layer (a decoder's) only those at or before the query; and on the
    local layers of windowed models (``layer_types`` entry ``"sliding_attention"``) only those within
    ``config.sliding_window`` positions, as transformers builds those masks: inclusive on both sides in
    a bidirectional encoder (ModernBERT), the last ``sliding_window`` positions in a causal decoder.
    Methods that choose positions before the forward (AD-DROP's candidates) use it, so that they choose
    among keys the layer can see.
    """
    controller = get_controller(model)
    modules = controller.attention_modules if controller is not None else []
    # a family on its own route (DeBERTa, MPNet: encoders) is never causal; AttentionInterface modules say
    causal = (
        bool(modules)
        and controller.family.route == "interface"
        and is_causal(modules[0 if controller.family.shared else layer])
    )
    config = getattr(model, "config", None)
    types = getattr(config, "layer_types", None)
    window = getattr(config, "sliding_window", None)
    # a window on the layers that layer_types marks local (ModernBERT, Qwen2), or on every layer (Mistral)
    windowed = bool(window) and (
        types[layer] == "sliding_attention" if types else hasattr(config, "sliding_window")
    )
    if not (causal or windowed):
        return key_valid
    distance = _distance(key_valid.shape[-2], key_valid.shape[-1], key_valid.device)
    if not causal:  # a bidirectional window, inclusive on both sides
        return key_valid & (distance.abs() <= config.sliding_window)
    seen = distance >= 0
    if windowed:  # the last sliding_window positions
        seen = seen & (distance < config.sliding_window)
    return key_valid & seen  # (B, 1, Lq, Lk)
