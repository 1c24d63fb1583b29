"""Loading synthesized models: a documented form that attendout loads back and plain ``transformers``
refuses. It is written by :func:`~attendout.methods.synthesizer.method.save_synthesized`, which lives
beside the method (a synthesized model's ``save_pretrained`` is redirected to it) and is importable
from here too.

A synthesized model has parameters a stock architecture does not know; ``from_pretrained`` would
warn about "unused weights" and silently return the model without its synthesizer. So a synthesized
checkpoint is a folder with:

``config.json``
    ``{"model_type": "attendout-synthesizer", "architectures": ["AttendoutSynthesizedModel"],
    "attendout_format": 1, "synthesizer": {...SynthesizerConfig...}, "base_class":
    "BertForSequenceClassification", "base_config": {...the model's own config...}, ...}``.
    ``AutoConfig``/``AutoModel*.from_pretrained`` stop at the unknown ``model_type``.
``synthesized.safetensors``
    every tensor of the model's ``state_dict`` (base weights, synthesizer parameters, fixed random
    matrices). There is no ``model.safetensors``, so ``BertForSequenceClassification.from_pretrained``
    stops too.
tokenizer files
    as ``tokenizer.save_pretrained`` writes them (``AutoTokenizer.from_pretrained(path)`` works).

:func:`load_synthesized` rebuilds the base model from ``base_config``, synthesizes it with the
recorded options and loads every tensor strictly (a missing or unexpected key is an error).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import transformers
from safetensors.torch import load_model as load_safetensors_model
from torch import nn
from transformers.utils import CONFIG_NAME

from ..base import apply
from ..registry import get_method_config
from .method import (
    FORMAT_VERSION,
    MODEL_TYPE,
    WEIGHTS_NAME,
    get_synthesizer,
)

if TYPE_CHECKING:
    from .config import SynthesizerConfig


def is_synthesized_checkpoint(path: str | os.PathLike) -> bool:
    """Whether the folder ``path`` holds a checkpoint written by :func:`save_synthesized`."""
    file = Path(path) / CONFIG_NAME
    return file.is_file() and json.loads(file.read_text()).get("model_type") == MODEL_TYPE


def _checked_config(path: Path) -> dict[str, Any]:
    file = path / CONFIG_NAME
    if not file.is_file():
        raise FileNotFoundError(f"{path} has no {CONFIG_NAME}")
    config = json.loads(file.read_text())
    if config.get("model_type") != MODEL_TYPE:
        raise ValueError(
            f"{path} is not a synthesized checkpoint (model_type {config.get('model_type')!r}, expected "
            f"{MODEL_TYPE!r}); load it with transformers or attendout.load_model"
        )
    version = config.get("attendout_format")
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{path} has attendout_format {version!r}; this attendout reads format {FORMAT_VERSION}"
        )
    return config


def _synthesizer_config(config: dict[str, Any]) -> SynthesizerConfig:
    options = {k: v for k, v in config["synthesizer"].items() if k != "name"}
    # saved before issue 50 (no 'mixing' or 'random_init' recorded): the forms of then, one raw mixing
    # weight per head and N(0, 1) random matrices
    variant = str(options.get("variant", ""))
    if variant.endswith("+dot"):
        options.setdefault("mixing", "head")
    if "random" in variant:
        options.setdefault("random_init", "normal")
    return get_method_config("synthesizer", **options)


def load_synthesized(path: str | os.PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """Load a model saved by :func:`save_synthesized` (in eval mode, on ``device``).

    The tokenizer loads as usual: ``AutoTokenizer.from_pretrained(path)``.
    """
    path = Path(path)
    config = _checked_config(path)
    base_class = getattr(transformers, config["base_class"], None)
    if not (isinstance(base_class, type) and issubclass(base_class, transformers.PreTrainedModel)):
        raise ValueError(f"{path}: base_class {config['base_class']!r} is not a transformers model class")
    base = dict(config["base_config"])
    base_config = transformers.AutoConfig.for_model(base.pop("model_type"), **base)
    model = base_class(base_config)
    apply(model, _synthesizer_config(config))  # as synthesize() would, with the options recorded
    _load_weights(model, path)
    return model.to(device).eval()


def load_synthesized_weights(model: nn.Module, path: str | os.PathLike) -> None:
    """Load the tensors of a synthesized checkpoint into a model synthesized the same way (strict)."""
    path = Path(path)
    config = _checked_config(path)
    synthesizer = get_synthesizer(model)
    if synthesizer is None:
        raise ValueError(f"{type(model).__name__} is not synthesized; it cannot take the weights in {path}")
    saved, ours = _synthesizer_config(config), synthesizer.resolved_config()
    if saved != ours:
        raise ValueError(f"{path} was synthesized with {saved}, the model with {ours}")
    _load_weights(model, path)


def _load_weights(model: nn.Module, path: Path) -> None:
    missing, unexpected = load_safetensors_model(model, str(path / WEIGHTS_NAME), strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{path / WEIGHTS_NAME} does not match the model: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )


def load_model(path: str | os.PathLike, device: str | torch.device = "cpu") -> nn.Module:
    """Load a fine-tuned model from a run's ``model/`` folder, synthesized or plain (eval mode).

    The folder is checked first, as ``--model`` folders are (its manifest, whole safetensors files,
    finite weights): a damaged folder raises :class:`~attendout.models.loading.ModelFileError` naming the file.
    """
    from ...models.loading import check_finite, check_model_folder, head_class

    check_model_folder(path)
    if is_synthesized_checkpoint(path):
        model = load_synthesized(path, device)
    else:
        model = head_class(transformers.AutoConfig.from_pretrained(path)).from_pretrained(path)
    check_finite(model, str(path))
    return model.to(device).eval()
