"""The one hook into the self-attention of `transformers` encoders, decoders and encoder-decoders.

Every method of attendout that touches attention goes through :func:`attendout_attention`, registered
with ``transformers.AttentionInterface`` under the name ``"attendout"``. Nothing copies a model's
forward: the encoder computes its own query, key and value projections and hands them to us.

Per layer and per forward pass the hook can (paper 001, "Not All Attention Is All You Need", §3.2):

* drop attention **scores** before the softmax (eq. 3: a dropped score becomes ``-inf``);
* multiply the attention **weights** after the softmax by a mask or scale (eq. 2);
* give a row whose every key was dropped **uniform attention** over its non-padding keys (eq. 4),
  which also serves to skip a whole layer's attention (attention LayerDrop);
* **record** the attention probabilities and, on request, keep their gradients.

Padding keys stay masked whatever a method asks, and so do later positions in a causal layer (a decoder's
self-attention: GPT-2, Llama, T5's decoder): eq. 4's uniform attention is uniform over the keys the
query may see, and with a KV cache a query at position t sees keys 0..t. The model's own attention dropout (the ``dropout``
argument the encoder passes) is applied as stock attention applies it, after the softmax, unless an
active method replaces it. With the hook installed and nothing to do, the call goes straight to
``transformers``' SDPA attention, so plain fine-tuning costs the same as stock.

A method is an :class:`AttentionMethod`; the per-model :class:`Controller` holds the active methods
and recorders. Methods usually reach this module through :func:`attendout.apply`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from .contract import EDITS_KWARG, ForwardEdits

HOOK_NAME = "attendout"

__all__ = [
    "HOOK_NAME",
    "AttentionCall",
    "AttentionEdit",
    "AttentionMethod",
    "AttentionRecorder",
    "Controller",
    "RandomDrops",
    "UnsupportedModelError",
    "attendout_attention",
    "get_controller",
    "install",
    "record_attention",
    "supported_model_types",
    "uninstall",
]


class UnsupportedModelError(ValueError):
    """The model's attention cannot be reached by the hook."""


# --------------------------------------------------------------------------------------------------
# Model families
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """Where a family keeps its self-attention modules and its blocks (module-name regexes).

    ``shared`` families (ALBERT) run one attention module for every layer; their layer index is the
    call order within one forward pass instead of the module's position.
    """

    attention: str
    block: str
    shared: bool = False
    #: how the edits reach the attention: "interface" = the registered attention function (every family
    #: whose attention goes through transformers' AttentionInterface); "deberta" = module hooks around
    #: DeBERTa's own disentangled attention (:mod:`attendout.deberta`)
    route: str = "interface"
    #: what a block returns: the hidden states ("tensor"), a (hidden states, attention weights) pair
    #: ("pair", DeBERTa), or T5's (hidden states, self-attention bias, cross-attention bias) ("t5")
    block_output: str = "tensor"
    #: encoder-decoders (T5): the attention regex matches both stacks; layers are numbered through the
    #: encoder first, then the decoder (a 6+6 T5 has layers 0-5 in its encoder and 6-11 in its decoder)
    stacks: bool = False


_BERT_LIKE = Family(
    attention=r"(^|\.)encoder\.layer\.(?P<n>\d+)\.attention\.self$",
    block=r"(^|\.)encoder\.layer\.(?P<n>\d+)$",
)
# Llama-style decoders (and EuroBERT, an encoder on Llama's layout): model.layers.N.self_attn
_LLAMA_LIKE = Family(attention=r"(^|\.)layers\.(?P<n>\d+)\.self_attn$", block=r"(^|\.)layers\.(?P<n>\d+)$")

FAMILIES: dict[str, Family] = {
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "xlm-roberta": _BERT_LIKE,
    "electra": _BERT_LIKE,
    "distilbert": Family(
        attention=r"(^|\.)transformer\.layer\.(?P<n>\d+)\.attention$",
        block=r"(^|\.)transformer\.layer\.(?P<n>\d+)$",
    ),
    "albert": Family(
        attention=r"(^|\.)albert_layer_groups\.\d+\.albert_layers\.\d+\.attention$",
        block=r"(^|\.)albert_layer_groups\.\d+$",
        shared=True,
    ),
    # RoPE encoders: rotary positions are applied to query and key before the attention function, and
    # ModernBERT's local layers arrive with the sliding window already in the boolean mask (built through
    # AttentionMaskInterface, as for every family), so every edit stays inside the window.
    "modernbert": Family(attention=r"(^|\.)layers\.(?P<n>\d+)\.attn$", block=r"(^|\.)layers\.(?P<n>\d+)$"),
    "eurobert": _LLAMA_LIKE,
    # DeBERTa-v2 and v3 (model_type deberta-v2): disentangled attention in the module's own code
    "deberta-v2": Family(
        attention=r"(^|\.)encoder\.layer\.(?P<n>\d+)\.attention\.self$",
        block=r"(^|\.)encoder\.layer\.(?P<n>\d+)$",
        route="deberta",
        block_output="pair",
    ),
    # Decoders. Their attention modules are causal (``is_causal``): the hook keeps every edit causal.
    "gpt2": Family(attention=r"(^|\.)h\.(?P<n>\d+)\.attn$", block=r"(^|\.)h\.(?P<n>\d+)$"),
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    # Encoder-decoders: the self-attention of both stacks (the decoder's is causal); the decoder's
    # cross-attention (layer.1.EncDecAttention) is left to stock attention. T5's relative position
    # bias arrives with each call and is added to the scores on every path.
    "t5": Family(
        attention=r"(^|\.)(?P<stack>encoder|decoder)\.block\.(?P<n>\d+)\.layer\.0\.SelfAttention$",
        block=r"(^|\.)(?P<stack>encoder|decoder)\.block\.(?P<n>\d+)$",
        block_output="t5",
        stacks=True,
    ),
}
FAMILIES["mt5"] = FAMILIES["t5"]

# Families whose attention does not go through AttentionInterface in transformers 5.x.
_WHY_NOT = {
    "mpnet": "MPNet adds a relative position bias inside its own attention code, outside AttentionInterface",
    "deberta": "DeBERTa (v1) computes disentangled attention in its own code, outside AttentionInterface "
    "(DeBERTa-v2 and v3, model_type deberta-v2, are supported)",
}


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
    # DeBERTa's own attention has no is_causal (and is never causal); AttentionInterface modules have it
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


def is_causal(module: nn.Module) -> bool:
    """Whether an attention module is causal, as transformers' SDPA attention reads it (default True)."""
    return bool(getattr(module, "is_causal", True))


def _distance(lq: int, lk: int, device: torch.device) -> torch.Tensor:
    """(Lq, Lk): query position minus key position; query i sits at Lk - Lq + i (after a KV cache)."""
    return torch.arange(lk - lq, lk, device=device)[:, None] - torch.arange(lk, device=device)


def causal_mask(lq: int, lk: int, device: torch.device) -> torch.Tensor:
    """(1, 1, Lq, Lk) bool: query i (at absolute position Lk - Lq + i, after a KV cache) sees keys 0..that."""
    return (_distance(lq, lk, device) >= 0).view(1, 1, lq, lk)


def supported_model_types() -> list[str]:
    return sorted(FAMILIES)


def _family_of(model: nn.Module) -> Family:
    config = getattr(model, "config", None)
    model_type = getattr(config, "model_type", None)
    if model_type not in FAMILIES:
        why = _WHY_NOT.get(model_type, "its attention layout is not one attendout knows")
        raise UnsupportedModelError(
            f"attendout cannot hook {type(model).__name__} (model_type {model_type!r}): {why}; "
            f"supported model types: {', '.join(supported_model_types())}"
        )
    return FAMILIES[model_type]


# --------------------------------------------------------------------------------------------------
# What a method sees and says
# --------------------------------------------------------------------------------------------------


@dataclass
class AttentionCall:
    """One attention call of one layer, as methods see it."""

    layer: int
    module: nn.Module
    query: torch.Tensor  # (B, H, Lq, d)
    key: torch.Tensor  # (B, H_kv, Lk, d): grouped-query models have fewer key/value heads
    value: torch.Tensor  # (B, H_kv, Lk, d)
    key_valid: torch.Tensor | None  # (B, 1, Lq, Lk) bool, True = a real (non-padding) key; None = no padding
    training: bool
    #: this forward's edits, passed as ``model(..., attendout_edits=...)`` (None: the forward brought none)
    edits: ForwardEdits | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(B, H, Lq, Lk) of the attention matrix."""
        b, h, lq, _ = self.query.shape
        return b, h, lq, self.key.shape[2]

    def valid(self) -> torch.Tensor:
        """(B, 1, Lq, Lk) bool mask of non-padding keys (all True without padding)."""
        if self.key_valid is not None:
            return self.key_valid
        b, _, lq, lk = self.shape
        return torch.ones(b, 1, lq, lk, dtype=torch.bool, device=self.query.device)

    def block_shape(self, rows: slice) -> tuple[int, int, int, int]:
        """(B, H, number of query rows in ``rows``, Lk): the shape of a block of this call's scores."""
        b, h, lq, lk = self.shape
        return b, h, len(range(lq)[rows]), lk

    def dropped_fraction(
        self, dropped: torch.Tensor, rows: slice = slice(None)
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(number of dropped non-padding positions, number of non-padding positions), as tensors.

        ``dropped`` is a bool mask broadcastable to (B, H, Lq, Lk), or to (B, H, rows, Lk) for the query
        rows ``rows``. Returned as tensors so that a caller can sum over many steps without a device
        sync per call.
        """
        b, h, lq, lk = self.block_shape(rows)
        size, valid = b * h * lq * lk, query_rows(self.key_valid, rows)
        # count_nonzero: a bool .sum() would first copy the mask to int64. A mask broadcast over heads
        # (or rows) is counted once and multiplied by its copies.
        dropped = dropped if valid is None else dropped & valid
        total = (
            torch.tensor(size, device=dropped.device)
            if valid is None
            else valid.count_nonzero() * (size // valid.numel())
        )
        return dropped.count_nonzero() * (size // dropped.numel()), total


@dataclass
class AttentionEdit:
    """What one method asks of one attention call. All fields optional; they combine across methods.

    drop_scores:   bool, broadcastable to (B, H, Lq, Lk); True = that score becomes -inf (eq. 3).
                   A row with every key dropped gets uniform attention over its non-padding keys (eq. 4).
    random_drops:  scores dropped independently at random (:class:`RandomDrops`), as ``drop_scores``
                   but drawn by the attention path where it needs them, block by block of query rows
                   where it can, so that no whole (B, H, Lq, Lk) mask need exist.
    scale_weights: float or bool, broadcastable to (B, H, Lq, Lk); multiplies the weights after the
                   softmax (eq. 2). Rescaling (1/(1-p)) is the method's choice and goes in the values.
    skip:          the whole layer attends uniformly to its non-padding keys (eq. 4).
    dropout:       replaces the model's own attention-dropout probability for this call.
    """

    drop_scores: torch.Tensor | None = None
    random_drops: RandomDrops | None = None
    scale_weights: torch.Tensor | None = None
    skip: bool = False
    dropout: float | None = None


@dataclass(frozen=True)
class RandomDrops:
    """Each score dropped with probability ``p``, independently (a Bernoulli mask of eq. 3).

    ``count`` (optional) receives, for every draw, the number of dropped non-padding positions and the
    number of non-padding positions (tensors: no host sync), e.g. a :class:`RateMeter`'s ``add``.
    """

    p: float
    count: Callable[[torch.Tensor, torch.Tensor], None] | None = None

    def draw(self, call: AttentionCall, rows: slice = slice(None)) -> torch.Tensor:
        """The mask of query rows ``rows``: bool (B, H, rows, Lk), True = dropped."""
        from .methods.masks import bernoulli_drop  # here: attendout.methods imports this module

        drop = bernoulli_drop(call.block_shape(rows), self.p, call.query.device)
        if self.count is not None:
            self.count(*call.dropped_fraction(drop, rows))
        return drop


class AttentionMethod:
    """Base of everything that acts on attention through the hook.

    Subclasses override :meth:`edit` (and, for architectural changes, :meth:`transform_scores` with
    ``acts_in_eval = True``). Regularisers act only in training mode: the hook never asks them in
    eval mode, so an eval-mode model is the unmodified model.
    """

    name: str = "method"
    #: Architectural changes (Synthesizer) act in eval mode too; regularisers do not.
    acts_in_eval: bool = False
    #: Layers this method acts on; None = all.
    layers: Sequence[int] | None = None

    def acts_on(self, layer: int, training: bool) -> bool:
        if not (training or self.acts_in_eval):
            return False
        return self.layers is None or layer in self.layers

    def edit(self, call: AttentionCall) -> AttentionEdit | None:
        return None

    def transform_scores(self, call: AttentionCall, scores: torch.Tensor) -> torch.Tensor | None:
        """Replace or modify the scaled scores (B, H, Lq, Lk); None = leave them."""
        return None

    # lifecycle -------------------------------------------------------------------------------
    def attach(self, controller: Controller) -> None:
        """Called once when the method is added to a model (validate layers, wrap blocks...)."""
        if self.layers is not None:
            bad = [i for i in self.layers if not 0 <= i < controller.num_layers]
            if bad:
                raise ValueError(
                    f"{self.name}: layers {bad} do not exist; the model has {controller.num_layers} layers "
                    f"(0..{controller.num_layers - 1})"
                )

    def detach(self, controller: Controller) -> None:
        """Undo :meth:`attach`."""

    def set_progress(self, fraction: float) -> None:
        """Training progress in [0, 1], for methods with schedules."""

    # statistics ------------------------------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """Statistics accumulated since the last call, then reset (e.g. realised drop rate per layer)."""
        return {}


class RateMeter:
    """Accumulates (dropped, total) counts per key without a device sync per update."""

    def __init__(self) -> None:
        self._sums: dict[str, list[torch.Tensor]] = {}

    def add(self, key: str, dropped: torch.Tensor, total: torch.Tensor) -> None:
        pair = self._sums.get(key)
        if pair is None:
            self._sums[key] = [dropped.detach().float(), total.detach().float()]
        else:
            pair[0] = pair[0] + dropped.detach()
            pair[1] = pair[1] + total.detach()

    def pop(self) -> dict[str, float]:
        out = {k: (d / t.clamp(min=1)).item() for k, (d, t) in self._sums.items()}
        self._sums = {}
        return dict(sorted(out.items()))


# --------------------------------------------------------------------------------------------------
# Recording
# --------------------------------------------------------------------------------------------------


class AttentionRecorder:
    """Keeps each layer's attention probabilities (B, H, Lq, Lk) of the latest forward pass.

    The probabilities are the softmax output, before any weights mask and before attention dropout.
    With ``grads=True`` they stay in the autograd graph and keep their gradient after ``backward()``
    (``recorder.probs[layer].grad``), which attribution methods need. Works in train and eval mode.
    """

    def __init__(self, layers: Sequence[int] | None = None, grads: bool = False) -> None:
        self.layers = None if layers is None else set(layers)
        self.grads = grads
        self.probs: dict[int, torch.Tensor] = {}

    def wants(self, layer: int) -> bool:
        return self.layers is None or layer in self.layers

    def record(self, layer: int, probs: torch.Tensor) -> None:
        if self.grads and probs.requires_grad:
            probs.retain_grad()
            self.probs[layer] = probs
        else:
            self.probs[layer] = probs.detach()

    def clear(self) -> None:
        self.probs = {}


# --------------------------------------------------------------------------------------------------
# The controller: per-model state
# --------------------------------------------------------------------------------------------------


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


def rewrites_scores(method: AttentionMethod) -> bool:
    """Whether the method replaces or modifies the scores themselves (Synthesizer), not only masks them."""
    return type(method).transform_scores is not AttentionMethod.transform_scores


def get_controller(model: nn.Module) -> Controller | None:
    """The controller of a model on which the hook is installed, else None."""
    return model.__dict__.get("_attendout_controller")


_STACK_ORDER = {None: 0, "encoder": 0, "decoder": 1}


def _numbered(model: nn.Module, pattern: str, shared: bool) -> list[nn.Module]:
    regex = re.compile(pattern)
    found = [(regex.search(name), module) for name, module in model.named_modules() if regex.search(name)]
    if shared:
        return [module for _, module in found]
    # by stack (encoder, then decoder), then by the layer number ("10" sorts after "2")
    return [
        module
        for _, module in sorted(
            found, key=lambda item: (_STACK_ORDER[item[0].groupdict().get("stack")], int(item[0]["n"]))
        )
    ]


def _expected_layers(model: nn.Module, family: Family, found: int) -> int:
    config = model.config
    if family.stacks:  # T5, T5EncoderModel: both stacks, or the encoder's alone
        encoder = int(config.num_layers)
        decoder = int(getattr(config, "num_decoder_layers", None) or encoder)
        return encoder + decoder if found > encoder else encoder
    return int(getattr(config, "num_hidden_layers", 0) or getattr(config, "n_layers", 0))


def install(model: nn.Module) -> Controller:
    """Install the hook on ``model`` (idempotent) and return its controller.

    Switches the model's attention implementation to ``"attendout"``; :func:`uninstall` restores the
    previous one. Raises :class:`UnsupportedModelError` naming the model's class for families the
    hook cannot reach.
    """
    controller = get_controller(model)
    if controller is not None:
        return controller
    family = _family_of(model)
    attention = _numbered(model, family.attention, family.shared)
    blocks = _numbered(model, family.block, family.shared)
    num_layers = _expected_layers(model, family, len(attention))
    if not attention or (not family.shared and len(attention) != num_layers):
        raise UnsupportedModelError(
            f"attendout cannot hook {type(model).__name__}: found {len(attention)} self-attention modules "
            f"for {num_layers} layers"
        )
    _register()
    previous = getattr(model.config, "_attn_implementation", None)
    controller = Controller(
        model=model,
        family=family,
        attention_modules=attention,
        blocks=blocks,
        num_layers=num_layers,
        previous_implementation=previous,
    )
    for index, module in enumerate(attention):
        module._attendout_slot = _Slot(controller, None if family.shared else index)
    if family.shared:
        controller._pre_hook = model.register_forward_pre_hook(controller._reset_counters)
    if family.route == "deberta":
        from .deberta import install_hooks

        install_hooks(controller)
    else:
        model.set_attn_implementation(HOOK_NAME)
    model._attendout_controller = controller
    return controller


def uninstall(model: nn.Module) -> None:
    """Remove every method, recorder and the hook itself; the model is stock again."""
    controller = get_controller(model)
    if controller is None:
        return
    for method in list(controller.methods):
        controller.remove(method)
    controller.recorders.clear()
    for module in controller.attention_modules:
        module.__dict__.pop("_attendout_slot", None)
    if controller._pre_hook is not None:
        controller._pre_hook.remove()
    if controller.family.route == "deberta":
        from .deberta import remove_hooks

        remove_hooks(controller)
    else:
        model.set_attn_implementation(controller.previous_implementation or "sdpa")
    del model._attendout_controller


@contextmanager
def record_attention(
    model: nn.Module, layers: Sequence[int] | None = None, grads: bool = False
) -> Iterator[AttentionRecorder]:
    """Record attention probabilities of ``model`` while the context is open.

    >>> with record_attention(model, layers=[0], grads=True) as rec:
    ...     model(**batch).logits[:, 1].sum().backward()
    >>> rec.probs[0].grad  # (B, H, L, L)
    """
    controller = install(model)
    recorder = AttentionRecorder(layers, grads)
    controller.recorders.append(recorder)
    try:
        yield recorder
    finally:
        controller.recorders.remove(recorder)


# --------------------------------------------------------------------------------------------------
# The attention function
# --------------------------------------------------------------------------------------------------


def attendout_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The registered attention function. Shapes: query/key/value (B, H, L, d); returns (B, L, H, d).

    A forward's own edits arrive as the keyword argument ``attendout_edits`` (a
    :class:`~attendout.contract.ForwardEdits`) and act in training mode, with the methods' edits.
    """
    edits: ForwardEdits | None = kwargs.pop(EDITS_KWARG, None)
    slot: _Slot | None = module.__dict__.get("_attendout_slot")
    if slot is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    controller = slot.controller
    layer = controller.next_layer() if slot.layer is None else slot.layer
    training = module.training
    methods = [m for m in controller.methods if m.acts_on(layer, training)]
    recorders = [r for r in controller.recorders if r.wants(layer)]
    own = own_edit(edits, layer, training, (query.shape[0], query.shape[1], query.shape[2], key.shape[2]))
    if not methods and not recorders and own is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )

    if attention_mask is not None and attention_mask.dtype != torch.bool:
        raise TypeError(f"attendout expects a boolean attention mask, got {attention_mask.dtype}")
    valid = attention_mask
    if valid is None and is_causal(module) and kwargs.get("is_causal", True) is not False:
        # transformers leaves an unpadded causal batch's mask to SDPA's is_causal; every edit below
        # needs it explicit (with a KV cache, the Lq queries are the last of Lk positions)
        b, lq, lk = query.shape[0], query.shape[2], key.shape[2]
        valid = causal_mask(lq, lk, query.device).expand(b, 1, lq, lk)
    call = AttentionCall(layer, module, query, key, value, valid, training, edits)
    combined = combine_edits(call, methods, own, dropout)
    scale, dropout = combined.scale, combined.dropout
    transforms = any(rewrites_scores(m) for m in methods)
    if not combined.drops_any and scale is None and not recorders and not transforms:
        # Only the dropout probability changed: stock SDPA can still do the work.
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
        )
    if not recorders and not transforms and (scale is None or _per_head(scale)):
        if combined.drops_any and _fills_in_place(call, dropout):
            return _filled_softmax(call, combined, scaling, kwargs.get("position_bias"))
        # Dropped scores and per-head scales fit SDPA too: the drops join the padding mask, a scale
        # of whole rows of weights scales the output. About 1.4x faster than the softmax below on CPU.
        return _masked_sdpa(call, attention_mask, combined.drops(call), scale, scaling, dropout, **kwargs)

    bias = kwargs.get("position_bias")  # T5's relative position bias, (1|B, H, Lq, Lk)
    probs = _attention_probs(call, methods, scaling, combined.drops(call), bias)  # (B, H, Lq, Lk)
    for recorder in recorders:
        recorder.record(layer, probs)
    weights = probs if scale is None else probs * scale.to(probs.dtype)  # eq. 2
    weights = nn.functional.dropout(weights, p=dropout, training=training)  # the model's own, as stock
    output = torch.matmul(weights, _per_query_head(call, call.value))  # (B, H, Lq, d)
    return output.transpose(1, 2).contiguous(), weights


def own_edit(
    edits: ForwardEdits | None, layer: int, training: bool, shape: tuple[int, int, int, int]
) -> AttentionEdit | None:
    """The forward's own edit of ``layer`` (training only), its drops checked against (B, H, Lq, Lk)."""
    own = edits.layers.get(layer) if edits is not None and training else None
    if own is not None and own.drop_scores is not None:
        given = tuple(own.drop_scores.shape)
        if len(given) != 4 or any(n not in (1, m) for n, m in zip(given, shape, strict=True)):
            raise ValueError(
                f"attendout: the drops given to layer {layer} ({edits.driver or 'attendout_edits'}) have shape "
                f"{given}, which does not fit this forward's attention {shape}; make them from the "
                "batch this forward runs on"
            )
    return own


@dataclass
class CombinedEdits:
    """Every acting method's edit of one call and the forward's own, combined.

    ``drop`` (given masks, OR-ed) and ``random`` (random drops, drawn on demand) together are the
    dropped scores; ``skip`` drops every score of the layer (eq. 4 for the whole layer). ``scale``
    is the product of the scales; ``dropout`` the model's attention-dropout probability, or the one a
    method put in its place.
    """

    drop: torch.Tensor | None
    random: list[RandomDrops]
    scale: torch.Tensor | None
    skip: bool
    dropout: float

    @property
    def drops_any(self) -> bool:
        return self.skip or self.drop is not None or bool(self.random)

    def drops(self, call: AttentionCall, rows: slice = slice(None)) -> torch.Tensor | None:
        """Every dropped score of the query rows ``rows``: bool, broadcastable to (B, H, rows, Lk); None = none.

        Random drops are drawn here, once per call of this function: a path asks once for each block.
        """
        if self.skip:
            return torch.ones(1, 1, 1, 1, dtype=torch.bool, device=call.query.device)
        drop = query_rows(self.drop, rows)
        for random in self.random:
            drawn = random.draw(call, rows)
            drop = drawn if drop is None else drop | drawn
        return drop


def combine_edits(
    call: AttentionCall, methods: list[AttentionMethod], own: AttentionEdit | None, dropout: float
) -> CombinedEdits:
    """Every acting method's edit and the forward's own, combined.

    Drops are OR-ed, scales multiplied, a skip wins; a method's dropout replaces the model's own.
    """
    drop: torch.Tensor | None = None
    random: list[RandomDrops] = []
    scale: torch.Tensor | None = None
    skip = False
    for edit in [method.edit(call) for method in methods] + [own]:
        if edit is None:
            continue
        if edit.drop_scores is not None:
            drop = edit.drop_scores if drop is None else drop | edit.drop_scores
        if edit.random_drops is not None:
            random.append(edit.random_drops)
        if edit.scale_weights is not None:
            scale = edit.scale_weights if scale is None else scale * edit.scale_weights
        skip = skip or edit.skip
        if edit.dropout is not None:
            dropout = edit.dropout if call.training else 0.0
    return CombinedEdits(drop, random, scale, skip, dropout)


def query_rows(mask: torch.Tensor | None, rows: slice) -> torch.Tensor | None:
    """The query rows ``rows`` of a (B|1, H|1, Lq|1, Lk|1) tensor (a row broadcast over Lq stays)."""
    if mask is None or mask.shape[-2] == 1 or rows == slice(None):
        return mask
    return mask[:, :, rows]


def _per_query_head(call: AttentionCall, states: torch.Tensor) -> torch.Tensor:
    """Grouped-query key or value heads repeated to one per query head (the explicit softmax needs them)."""
    return repeat_kv(states, getattr(call.module, "num_key_value_groups", 1))


def _per_head(scale: torch.Tensor) -> bool:
    """A scale that is constant along each row of weights: (B|1, H|1, 1, 1) or a scalar."""
    return scale.dim() == 0 or (scale.dim() == 4 and scale.shape[-2:] == (1, 1))


def allowed_keys(call: AttentionCall, drop: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys each query may attend to after ``drop`` (eq. 3), and the rows where none is left.

    Returns ``allowed`` (B, H|1, Lq, Lk) bool, where an emptied row falls back to its non-padding
    keys, and ``empty`` (B, H|1, Lq, 1) bool: the rows that eq. 4 makes uniform.
    """
    valid = call.key_valid
    allowed = ~drop if valid is None else valid > drop  # valid and not dropped, in one pass over bools
    empty = _no_key_left(allowed)
    if valid is None:
        return allowed | empty, empty
    return torch.where(empty, valid, allowed), empty


def uniform_weights(call: AttentionCall) -> torch.Tensor:
    """(B, 1, Lq, Lk) uniform weights over each row's non-padding keys (eq. 4)."""
    uniform = call.valid().to(call.query.dtype)
    return uniform / uniform.sum(-1, keepdim=True).clamp(min=1)


def _masked_sdpa(
    call: AttentionCall,
    attention_mask: torch.Tensor | None,
    drop: torch.Tensor | None,
    scale: torch.Tensor | None,
    scaling: float | None,
    dropout: float,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """Eq. 3 and 4 (and a per-head eq. 2) through SDPA; the same result as the explicit softmax path.

    Eq. 4 needs no branch on the data (no host sync, no graph break under ``torch.compile``): an emptied
    row's mask falls back to its non-padding keys (``allowed_keys``), and its query is zeroed, so every score
    of that row is 0 and SDPA's softmax is uniform over those keys, with the model's dropout applied
    inside SDPA as on every other row. The zeroed query also cuts that row's query and key gradients,
    as the explicit path's zeroed scores do. Grouped-query key/value heads go to SDPA as they came (it
    repeats them itself). A relative position bias (T5) in ``kwargs`` is zeroed
    on eq. 4 rows too, so that they stay uniform, as on the explicit path. Without drops the model's own
    ``attention_mask`` goes to SDPA as it came (None for an unpadded causal batch: SDPA's ``is_causal``).
    """
    query, mask = call.query, attention_mask
    if drop is not None:
        mask, empty = allowed_keys(call, drop)  # empty: (B, H|1, Lq, 1)
        query = query.masked_fill(empty, 0.0)  # eq. 4 rows: all scores 0, uniform softmax
        if kwargs.get("position_bias") is not None:
            kwargs["position_bias"] = kwargs["position_bias"].masked_fill(empty, 0.0)
    output, _ = sdpa_attention_forward(
        call.module, query, call.key, call.value, mask, scaling=scaling, dropout=dropout, **kwargs
    )  # (B, Lq, H, d)
    if scale is not None:
        output = output * (scale if scale.dim() == 0 else scale.transpose(1, 2)).to(output.dtype)
    return output, None


def _fills_in_place(call: AttentionCall, dropout: float) -> bool:
    """Whether dropped scores are cheaper filled in place (:func:`_filled_softmax`) than given to SDPA.

    On a CPU, SDPA's fused kernel takes no dropout: with the model's attention dropout on (BERT's 0.1)
    it runs its math path, which materialises the whole (B, H, Lq, Lk) scores anyway, first turns a
    boolean mask into a float one of that size, and adds it. The filled path skips the conversion and
    the addition and works a block of rows at a time. Eager mode only: under ``torch.compile`` the
    compiler fuses the masked SDPA call itself, and an in-place write outside autograd is not what it
    should trace.
    """
    return (
        call.query.device.type == "cpu"
        and dropout > 0
        and call.query.is_floating_point()
        and not torch.compiler.is_compiling()
    )


def empty_rows(valid: torch.Tensor | None, drop: torch.Tensor) -> torch.Tensor:
    """(B, H|1, Lq, 1) bool: the rows whose every key the query may see (``valid``) was dropped (eq. 4).

    Without ``valid``, a min over bytes (every key dropped), with no negated copy of the mask.
    """
    if valid is None:
        return drop.view(torch.uint8).amin(dim=-1, keepdim=True) == 1
    return _no_key_left(valid > drop)


def _no_key_left(allowed: torch.Tensor) -> torch.Tensor:
    """(..., 1) bool: the rows of a bool ``allowed`` with no True left.

    A max over bytes (a row's largest entry is 0): many times faster than ``any()`` over bools.
    """
    return allowed.view(torch.uint8).amax(dim=-1, keepdim=True) == 0


#: The largest (B, H, rows, Lk) block of scores the filled path makes at once. Below glibc's largest
#: threshold for serving an allocation by a fresh mapping (32 MiB), so blocks reuse heap memory instead
#: of having new pages mapped and zeroed on every call, and a block's passes stay closer to the caches:
#: with it, scores dropout's step at 8,192 tokens is 0.65x of stock SDPA's (RESULTS.md, *By sequence
#: length*); unblocked, the same path's attention layer measured about 1.15x of SDPA's at 8,192.
BLOCK_BYTES = 16 << 20


def _filled_softmax(
    call: AttentionCall, combined: CombinedEdits, scaling: float | None, bias: torch.Tensor | None
) -> tuple[torch.Tensor, None]:
    """Eq. 3 and 4 (and a per-head eq. 2) with dropped scores filled in place: the explicit path's result.

    The scores are made a block of query rows at a time (at most :data:`BLOCK_BYTES`), with each
    block's random drops drawn for it alone, so that neither the whole (B, H, Lq, Lk) mask nor the whole
    scores exist at once; autograd keeps what stock attention's math path keeps (the weights, the
    dropout mask, the dropped weights), a block at a time. See :func:`_filled_block` for one block.
    """
    b, h, lq, lk = call.shape
    factor = scaling if scaling is not None else call.query.shape[-1] ** -0.5
    query = call.query * factor
    keys = _per_query_head(call, call.key).transpose(-1, -2)
    values = _per_query_head(call, call.value)
    step = max(16, BLOCK_BYTES // max(1, b * h * lk * call.query.element_size()))
    outputs = []
    for start in range(0, lq, step):
        rows = slice(start, start + step)
        outputs.append(
            _filled_block(
                query[:, :, rows],
                keys,
                values,
                combined.drops(call, rows),
                query_rows(call.key_valid, rows),
                query_rows(bias, rows),
                combined.dropout,
            )
        )
    output = outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=2)  # (B, H, Lq, d)
    if combined.scale is not None:
        output = output * combined.scale.to(output.dtype)
    return output.transpose(1, 2).contiguous(), None


def _filled_block(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    drop: torch.Tensor,
    valid: torch.Tensor | None,
    bias: torch.Tensor | None,
    dropout: float,
) -> torch.Tensor:
    """One block of query rows of :func:`_filled_softmax`: (B, H, rows, d) from the scaled queries.

    A dropped score becomes a very negative number (half the dtype's lowest) and a padding or unseen
    key the lowest, both written into the scores outside autograd. A row with a real score left gives
    the dropped ones exactly zero weight, and so, through the softmax's backward, exactly zero gradient:
    the same values and gradients as ``-inf``. In a row with every seen key dropped, those keys tie
    above the unseen ones, so the softmax is uniform over them (eq. 4); its query (and T5's position
    bias) is zeroed before the product, which cuts that row's query and key gradients, as on the other
    paths. The model's attention dropout is ``torch.nn.functional.dropout``, the draw that the explicit
    path and SDPA's math path make.
    """
    empty = empty_rows(valid, drop)
    scores = torch.matmul(query.masked_fill(empty, 0.0), keys)  # (B, H, rows, Lk)
    if bias is not None:  # T5's relative position bias
        scores = scores + bias.masked_fill(empty, 0.0)
    # Outside autograd: the product's backward does not need its output, and the softmax saves only
    # its own, so nothing saved is overwritten (and no mask is kept for the backward pass).
    filled = scores.detach()
    lowest = torch.finfo(scores.dtype).min
    filled.masked_fill_(drop, lowest / 2)
    if valid is not None:
        filled.masked_fill_(~valid, lowest)
    probs = torch.softmax(scores, dim=-1)
    if valid is not None:
        keyless = ~valid.any(dim=-1, keepdim=True)  # a padding query that sees no real key
        if keyless.any():  # a host check, cheap on a CPU: most batches have no such row
            probs = probs.masked_fill(keyless, 0.0)
    probs = nn.functional.dropout(probs, p=dropout, training=True)  # the model's own, as stock
    return torch.matmul(probs, values)


def _attention_probs(
    call: AttentionCall,
    methods: list[AttentionMethod],
    scaling: float | None,
    drop: torch.Tensor | None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Softmax attention with eq. 3 (dropped scores = -inf) and eq. 4 (all dropped = uniform).

    ``bias`` (T5's relative position bias) is added after the methods' score transforms: a synthesizer
    replaces the token-token scores, and the position bias stays, as BERT's position embeddings do.
    """
    query, key = call.query, _per_query_head(call, call.key)
    b, h, lq, lk = call.shape
    valid = call.key_valid  # (B, 1, Lq, Lk) or None
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scale  # (B, H, Lq, Lk)
    for method in methods:
        changed = method.transform_scores(call, scores)
        if changed is not None:
            scores = changed
    if bias is not None:
        scores = scores + bias
    lowest = torch.finfo(scores.dtype).min
    if drop is None:
        if valid is not None:
            scores = scores.masked_fill(~valid, lowest)
        return no_key_rows_zero(torch.softmax(scores, dim=-1), valid)

    allowed, empty = allowed_keys(call, drop)  # rows with every real key dropped: eq. 4
    scores = scores.masked_fill(empty, 0.0).masked_fill(~allowed, lowest)
    return no_key_rows_zero(torch.softmax(scores, dim=-1), valid)


def no_key_rows_zero(probs: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """Rows with no real key at all attend to nothing, as SDPA's fully masked rows do (zeros).

    Only a padding query can have such a row (e.g. in ModernBERT's local layers, a padding position
    whose window holds only padding); without this its softmax would spread over the padding keys.
    """
    return probs if valid is None else probs * valid.any(dim=-1, keepdim=True).to(probs.dtype)


_REGISTERED = False


def _register() -> None:
    global _REGISTERED
    if not _REGISTERED:
        AttentionInterface.register(HOOK_NAME, attendout_attention)
        AttentionMaskInterface.register(HOOK_NAME, sdpa_mask)  # boolean masks, True = attend
        _REGISTERED = True


_register()
