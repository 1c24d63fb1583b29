"""The models a run trains: finding and loading pretrained ones, the offline set, and models from scratch.

* :mod:`.loading`: the packaged MiniLM, local folders and the hub; a checkpoint's head made to meet the task.
* :mod:`.offline`: the pretrained models that set up offline (``make models``).
* :mod:`.generation`: decoders and encoder-decoders of the generation kinds, pretrained or from scratch.
* :mod:`.size`: the size of a model from scratch, plain data a run's config checks.
* :mod:`.tokenizer`: the byte-level BPE a model from scratch reads, trained on the task's own text.

The names below are imported from their modules on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

#: name -> the module that defines it
_NAMES = {
    "AUTO_CLASSES": ".generation",
    "INITS": ".generation",
    "MODELS_VARIABLE": ".offline",
    "ModelNotFoundError": ".loading",
    "OFFLINE_MODELS": ".offline",
    "OfflineModel": ".offline",
    "OfflineModelError": ".offline",
    "Part": ".offline",
    "SCRATCH_ARCHITECTURES": ".generation",
    "SPECIAL_TOKENS": ".tokenizer",
    "ScratchSize": ".size",
    "end_of_sequence": ".generation",
    "load_for_generation": ".generation",
    "load_for_task": ".loading",
    "model_folder": ".offline",
    "models_home": ".offline",
    "not_set_up": ".offline",
    "offline_model": ".offline",
    "packaged_model_path": ".loading",
    "repair_hint": ".offline",
    "resolve_model": ".loading",
    "scratch_config": ".generation",
    "setup_model": ".offline",
    "train_tokenizer": ".tokenizer",
}

if TYPE_CHECKING:  # the lazy names, for type checkers and the API reference
    from .generation import (
        AUTO_CLASSES,
        INITS,
        SCRATCH_ARCHITECTURES,
        end_of_sequence,
        load_for_generation,
        scratch_config,
    )
    from .loading import ModelNotFoundError, load_for_task, packaged_model_path, resolve_model
    from .offline import (
        MODELS_VARIABLE,
        OFFLINE_MODELS,
        OfflineModel,
        OfflineModelError,
        Part,
        model_folder,
        models_home,
        not_set_up,
        offline_model,
        repair_hint,
        setup_model,
    )
    from .size import ScratchSize
    from .tokenizer import SPECIAL_TOKENS, train_tokenizer

__all__ = [
    "AUTO_CLASSES",
    "INITS",
    "MODELS_VARIABLE",
    "ModelNotFoundError",
    "OFFLINE_MODELS",
    "OfflineModel",
    "OfflineModelError",
    "Part",
    "SCRATCH_ARCHITECTURES",
    "SPECIAL_TOKENS",
    "ScratchSize",
    "end_of_sequence",
    "load_for_generation",
    "load_for_task",
    "model_folder",
    "models_home",
    "not_set_up",
    "offline_model",
    "packaged_model_path",
    "repair_hint",
    "resolve_model",
    "scratch_config",
    "setup_model",
    "train_tokenizer",
]
__getattr__ = lazy_names(__name__, _NAMES)
