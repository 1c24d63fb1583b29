"""The hook's state for one model (:class:`Controller`), the routes that act on it, and its layers.

:func:`~attendout.attention.hook.install` makes the controller and keeps it on the model
(:func:`get_controller`); every attention call of the model reaches it through its module's slot, and
asks :func:`acting_on` what acts on it, whichever route it takes. :func:`hold_forward_edits` carries a
forward's own edits for the routes whose model does not pass them down. A family not routed through
the registered attention function registers its :class:`Route` here (:func:`register_route`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..contract import EDITS_KWARG, ForwardEdits
from .call import AttentionEdit, AttentionMethod, AttentionRecorder, own_edit, rewrites_scores
from .families import Family, UnsupportedModelError, is_causal, query_key_distance


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
    handles: list = field(default_factory=list)
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
        return {key: value for method in self.methods for key, value in method.stats().items()}

    def mark_modules(self) -> None:
        """Give each attention module its slot (read by :func:`acting_on`): this controller and its layer
        (for a shared module, ALBERT's, the layer is counted per call, from zero at each forward)."""
        for index, module in enumerate(self.attention_modules):
            module._attendout_slot = _Slot(self, None if self.family.shared else index)
        if self.family.shared:
            self._pre_hook = self.model.register_forward_pre_hook(self._reset_counters)

    def unmark_modules(self) -> None:
        """Undo :meth:`mark_modules`."""
        for module in self.attention_modules:
            module.__dict__.pop("_attendout_slot", None)
        if self._pre_hook is not None:
            self._pre_hook.remove()
            self._pre_hook = None

    # layer index for shared-module families (ALBERT) ------------------------------------------
    def _reset_counters(self, *_args, **_kwargs) -> None:
        self._calls = 0
        self._block_calls = 0

    def next_layer(self) -> int:
        index = self._calls % self.num_layers
        self._calls += 1
        return index

    def block_index(self, position: int | None) -> int:
        """``position``, or for a shared block (ALBERT's) the next of this forward's calls."""
        if position is not None:
            return position
        index = self._block_calls % self.num_layers
        self._block_calls += 1
        return index


@dataclass(frozen=True)
class Route:
    """How the edits reach the attention of a family that is not routed through the registered
    attention function: ``install(controller)`` puts its module hooks in place (keeping their
    handles in ``controller.handles``), ``remove(controller)`` takes them away."""

    install: Callable[[Controller], None]
    remove: Callable[[Controller], None]


#: The routes other than ``"interface"``, by the name a :class:`Family` gives as its ``route``.
ROUTES: dict[str, Route] = {}


def register_route(
    name: str, install: Callable[[Controller], None], remove: Callable[[Controller], None]
) -> None:
    """Register the route ``name`` (a family's ``route``): the module that implements it calls this."""
    ROUTES[name] = Route(install, remove)


def route_of(family: Family) -> Route | None:
    """The registered route of ``family``; None for the registered attention function ("interface")."""
    if family.route == "interface":
        return None
    route = ROUTES.get(family.route)
    if route is None:
        raise UnsupportedModelError(
            f"attendout: the {family.route!r} attention route is not registered (the module that "
            "implements it registers it when imported: import attendout.attention.deberta or "
            "attendout.attention.mpnet, or attendout.methods)"
        )
    return route


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
    (also when it raises) lets them go. Their handles join ``controller.handles``."""

    def take(model: nn.Module, args: tuple, kwargs: dict[str, Any]):
        controller.forward_edits = kwargs.pop(EDITS_KWARG, None)
        return args, kwargs

    def drop(model: nn.Module, args: tuple, output: Any) -> None:
        controller.forward_edits = None

    model = controller.model
    controller.handles.append(model.register_forward_pre_hook(take, with_kwargs=True))
    controller.handles.append(model.register_forward_hook(drop, always_call=True))


def release_hooks(controller: Controller) -> None:
    """Remove every module hook a route put in ``controller.handles``, and any edits still held."""
    for handle in controller.handles:
        handle.remove()
    controller.handles.clear()
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
    distance = query_key_distance(key_valid.shape[-2], key_valid.shape[-1], key_valid.device)
    if not causal:  # a bidirectional window, inclusive on both sides
        return key_valid & (distance.abs() <= config.sliding_window)
    seen = distance >= 0
    if windowed:  # the last sliding_window positions
        seen = seen & (distance < config.sliding_window)
    return key_valid & seen  # (B, 1, Lq, Lk)
