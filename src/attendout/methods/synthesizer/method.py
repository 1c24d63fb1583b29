"""Synthesizer attention through the attendout hook: :func:`synthesize`, the method behind it, and
:func:`save_synthesized`, which writes a synthesized model in the form :mod:`.checkpoint` reads back.

The method keeps each layer's value and output projections and replaces (or, for '+dot' mixtures,
joins) the query-key scores through :meth:`AttentionMethod.transform_scores`; the hook then masks
padding keys, applies the softmax, the model's attention dropout and the values, in training and in
eval mode alike (Tay et al., "Synthesizer: Rethinking Self-Attention in Transformer Models").

The new parameters live in one submodule of the model, ``model.attendout_synthesizer`` (a
``ModuleDict`` keyed by layer index), so ``model.parameters()``, ``state_dict()``, ``.to()`` and any
optimizer see them.

**Where the dense variants get X.** A dense synthesizer maps each token's layer input X_i to its
logits, but the hook receives only the projected queries, keys and values. Recovering X from them
would need an invertible projection (and the pretrained Q/K/V were not trained for that), and
feeding Q instead of X would change the paper's function class and tie it to the query weights. So
a forward pre-hook on each hooked attention module keeps the ``hidden_states`` it is called with
(its first argument in every family we hook), and the scores transform takes it back for that
module's call. No copy of any forward; the reference is dropped as soon as it is used.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import save_model as save_safetensors_model
from torch import nn

from ...attention import AttentionCall, AttentionMethod, Controller, get_controller
from ...version import __version__
from ..base import apply
from ..registry import get_method_config
from .layer import SynthesizerLayer
from .variants import CROSS_ATTENTION_CAVEAT, is_mixture

if TYPE_CHECKING:
    from .config import SynthesizerConfig


#: The attribute of the model that holds the synthesizer parameters.
MODULE_NAME = "attendout_synthesizer"


class SequenceTooLongError(ValueError):
    """A sequence is longer than the synthesizer's l_max (its logits have no row for it)."""


def _save_pretrained(model: nn.Module, save_directory: str | Path, **kwargs: Any) -> None:
    """``save_pretrained`` of a synthesized model: writes attendout's synthesized form, never a plain
    checkpoint that `transformers` would load without the synthesizer."""
    if kwargs:
        raise ValueError(
            f"a synthesized model is saved in attendout's form (attendout.save_synthesized); "
            f"save_pretrained options {sorted(kwargs)} are not supported"
        )
    save_synthesized(model, save_directory)


def _hidden_states(args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.Tensor | None:
    if args and isinstance(args[0], torch.Tensor):
        return args[0]
    return kwargs.get("hidden_states")


class Synthesizer(AttentionMethod):
    """The attention method behind :func:`synthesize` and ``--method synthesizer``."""

    name = "synthesizer"
    acts_in_eval = True

    def __init__(self, config: SynthesizerConfig) -> None:
        self.config = config
        self.layers = config.layers
        self.l_max: int | None = config.l_max
        self.modules: nn.ModuleDict | None = None
        self._inputs: dict[int, torch.Tensor] = {}  # id(attention module) -> its latest input (B, L, d)
        self._hooks: list[torch.utils.hooks.RemovableHandle] = []

    # lifecycle -----------------------------------------------------------------------------
    def attach(self, controller: Controller) -> None:
        model = controller.model
        layers = range(controller.num_layers) if self.layers is None else self.layers  # checked first
        beyond = [layer for layer in layers if not 0 <= layer < controller.num_layers]
        if beyond:
            where = f"{type(model).__name__} has {controller.num_layers} self-attention layers"
            if controller.family.stacks:  # a layer past both stacks could only mean a cross-attention
                raise ValueError(
                    f"{self.name}: layers {beyond} are not self-attention layers: {where} (the encoder's, "
                    f"then the decoder's); cross-attention layers are never synthesized. {CROSS_ATTENTION_CAVEAT}"
                )
            raise ValueError(f"{self.name}: layers {beyond} do not exist: {where}")
        super().attach(controller)
        if MODULE_NAME in model._modules:
            raise ValueError(
                f"{type(model).__name__} is already synthesized ({MODULE_NAME} exists); "
                f"a model takes one synthesizer"
            )
        config = model.config
        if self.l_max is None and getattr(config, "rope_parameters", None) is not None:
            # Every variant fits a rotary-position model (ModernBERT, EuroBERT): the synthesized logits
            # are indexed by position as in the paper's encoders, and the +dot variants keep RoPE in their
            # dot-product part. But such a model has no fixed length: max_position_embeddings (8,192) would
            # give the random variants H * 8192^2 weights per layer.
            raise ValueError(
                f"{self.name}: {type(model).__name__} has rotary positions and no fixed length "
                f"(max_position_embeddings {config.max_position_embeddings}); give l_max, the longest "
                "sequence you will fine-tune on (attendout.synthesize(model, variant, max_length=N); "
                "attendout finetune sets it from --max-length)"
            )
        if self.l_max is None and getattr(config, "max_position_embeddings", None) is None:
            # T5: relative positions, no longest sequence in the config
            raise ValueError(
                f"{self.name}: {type(model).__name__} has relative positions and no fixed length; give "
                "l_max, the longest sequence (prompt plus generated tokens, in a decoder) the synthesized "
                "layers will see (attendout.synthesize(model, variant, max_length=N))"
            )
        if self.l_max is None:
            self.l_max = int(config.max_position_embeddings)
        self.resolved_config()  # the config's own checks at this l_max (a factorized rank beyond it)
        reference = next(model.parameters())
        self.modules = nn.ModuleDict(
            {
                str(layer): SynthesizerLayer(
                    self.config.variant,
                    hidden_size=int(config.hidden_size),
                    heads=int(config.num_attention_heads),
                    l_max=self.l_max,
                    rank=self.config.rank,
                    fixed=self.config.fixed,
                    shared_heads=self.config.shared_heads,
                    init=self.config.init,
                    init_std=float(getattr(config, "initializer_range", 0.02)),
                    mixing=self.config.mixing,
                    random_init=self.config.random_init,
                )
                for layer in layers
            }
        ).to(device=reference.device, dtype=reference.dtype)
        model.add_module(MODULE_NAME, self.modules)
        model.__dict__["save_pretrained"] = functools.partial(_save_pretrained, model)
        if next(iter(self.modules.values())).needs_input:
            for module in controller.attention_modules:
                self._hooks.append(module.register_forward_pre_hook(self._keep_input, with_kwargs=True))

    def detach(self, controller: Controller) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
        self._inputs.clear()
        controller.model._modules.pop(MODULE_NAME, None)
        controller.model.__dict__.pop("save_pretrained", None)
        self.modules = None

    def _keep_input(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        hidden = _hidden_states(args, kwargs)
        if hidden is not None:
            self._inputs[id(module)] = hidden  # (B, L, d)

    # the scores --------------------------------------------------------------------------------
    def transform_scores(self, call: AttentionCall, scores: torch.Tensor) -> torch.Tensor:
        """Synthesized logits (or the mixture with ``scores``), (B, H, L, L)."""
        if self.modules is None or self.l_max is None:
            raise RuntimeError(f"{self.name}: the method is not attached to a model")
        layer = self.modules[str(call.layer)]
        b, h, lq, lk = call.shape
        if lq > lk:
            raise ValueError(f"{self.name}: self-attention expected, got {lq} queries and {lk} keys")
        if lk > self.l_max:
            cached = f", {lk - lq} of them from the KV cache" if lq < lk else ""
            raise SequenceTooLongError(
                f"{self.name}: sequence length {lk}{cached} exceeds the synthesizer's l_max {self.l_max} "
                f"(layer {call.layer}); truncate inputs to at most {self.l_max} tokens (--max-length), "
                f"generate at most {self.l_max} positions in all, or synthesize with a larger l_max"
            )
        if lq < lk and call.key_valid is not None:
            _check_positions(call, self.name)
        x = None
        if layer.needs_input:
            x = self._inputs.pop(id(call.module), None)
            if x is None or x.shape[:2] != (b, lq):
                raise RuntimeError(
                    f"{self.name}: the input of layer {call.layer}'s attention was not captured "
                    f"(got {None if x is None else tuple(x.shape)} for {b} sequences of {lq} tokens)"
                )
        return layer(scores, x)  # (B, H, L, L)

    # reporting -------------------------------------------------------------------------------
    def resolved_config(self) -> SynthesizerConfig:
        """The config with l_max as built (what a checkpoint must record to be rebuilt)."""
        return dataclasses.replace(self.config, l_max=self.l_max)

    def stats(self) -> dict[str, float]:
        """Mixing weight of the synthetic logits per layer (mixtures with a weight: the sigmoid of
        ``layer``, the mean over heads of ``head``)."""
        if self.modules is None or not is_mixture(self.config.variant):
            return {}
        with torch.no_grad():
            weights = {k: m.weight() for k, m in self.modules.items()}
            return {f"{self.name}/mix/L{k}": float(w.mean()) for k, w in weights.items() if w is not None}


def _check_positions(call: AttentionCall, name: str) -> None:
    """With a KV cache, query i must sit at position Lk - Lq + i (the row its logits are read from).

    A dynamic cache holds exactly the earlier positions, so the last key a query sees is itself. A
    static cache is longer than the sequence so far (its free slots masked): its rows would be misread,
    so it is refused rather than giving other logits than the same model without a cache.
    """
    b, _, lq, lk = call.shape
    keys = torch.arange(1, lk + 1, device=call.query.device)
    last = (call.key_valid * keys).amax(dim=-1) - 1  # (B, 1, Lq): the last key each query sees
    expected = torch.arange(lk - lq, lk, device=call.query.device)
    if bool(((last != expected) & (last >= 0)).any()):
        raise ValueError(
            f"{name}: layer {call.layer}'s {lq} queries over {lk} cached keys do not sit at the cache's last "
            "positions (a static or sliding cache?); synthesized attention reads its logits by position and "
            "supports dynamic KV caches only (the default of generate)"
        )


def get_synthesizer(model: nn.Module) -> Synthesizer | None:
    """The synthesizer of ``model``, or None if it is not synthesized."""
    controller = get_controller(model)
    if controller is None:
        return None
    return next((m for m in controller.methods if isinstance(m, Synthesizer)), None)


def synthesize(
    model: nn.Module,
    variant: str = "random+dot",
    *,
    layers: list[int] | str | None = None,
    max_length: int | None = None,
    init: str | None = None,
    rank: int = 16,
    fixed: bool = False,
    shared_heads: bool = False,
    mixing: str | None = None,
    random_init: str | None = None,
) -> nn.Module:
    """Give ``model`` Synthesizer attention in ``layers`` (all by default), in place; returns ``model``.

    Tay et al., "Synthesizer: Rethinking Self-Attention in Transformer Models" (ICML 2021). The value
    and output projections stay; the query-key scores are replaced ('dense', 'random',
    'factorized-dense', 'factorized-random') or mixed with synthetic ones ('random+dot', ...).

    ``max_length`` is l_max, the longest sequence accepted (default: the model's
    ``max_position_embeddings``; random variants cost H * l_max^2 parameters per layer, so pass your
    data's length). Rotary-position models (ModernBERT, EuroBERT) have no fixed length: for them it is
    required. A mixture's weight is by default the official code's (``mixing='layer'``: one sigmoid
    weight per layer, starting at 1/2); ``mixing='head'`` (one raw weight per head) starts it at 0
    (``init='exact'``, its default): the model then computes exactly what it computed before. The
    random matrices start as the official code's (``random_init='glorot'``; ``'normal'``: N(0, 1)). Save with :func:`attendout.save_synthesized`
    (``model.save_pretrained(path)`` is redirected to it, so no save writes a plain checkpoint that
    `transformers` would load without the synthesizer); load with :func:`attendout.load_synthesized`.

    >>> model = attendout.synthesize(model, "dense+dot", layers=[4, 5], max_length=128)
    """
    config = get_method_config(
        "synthesizer",
        variant=variant,
        layers=layers,
        l_max=max_length,
        init=init,
        rank=rank,
        fixed=fixed,
        shared_heads=shared_heads,
        mixing=mixing,
        random_init=random_init,
    )
    apply(model, config)
    return model


# the saved form (read back by :mod:`.checkpoint`) ------------------------------------------------

MODEL_TYPE = "attendout-synthesizer"
ARCHITECTURE = "AttendoutSynthesizedModel"
WEIGHTS_NAME = "synthesized.safetensors"
FORMAT_VERSION = 1
_NOTE = (
    "Saved by attendout: a transformers model whose self-attention was replaced or mixed with "
    "Synthesizer attention. Load it with attendout.load_synthesized(path) (or attendout.load_model); "
    "plain transformers cannot run it."
)


def save_synthesized(model: nn.Module, path: str | os.PathLike, tokenizer: Any = None) -> Path:
    """Save a synthesized ``model`` (and ``tokenizer``) in the folder ``path``; returns the path."""
    synthesizer = get_synthesizer(model)
    if synthesizer is None:
        raise ValueError(
            f"{type(model).__name__} is not synthesized; save it with save_pretrained (a plain checkpoint)"
        )
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    save_safetensors_model(model, str(path / WEIGHTS_NAME), metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    base_config = model.config.to_dict()
    for private in [k for k in base_config if k.startswith("_attn_implementation")]:
        base_config.pop(private)
    config = {
        "model_type": MODEL_TYPE,
        "architectures": [ARCHITECTURE],
        "attendout_format": FORMAT_VERSION,
        "note": _NOTE,
        "attendout_version": __version__,
        "synthesizer": synthesizer.resolved_config().to_dict(),
        "base_class": type(model).__name__,
        "base_config": base_config,
    }
    from transformers.utils import CONFIG_NAME  # the model folder's config.json, as transformers names it

    (path / CONFIG_NAME).write_text(json.dumps(config, indent=2, sort_keys=False) + "\n")
    return path
