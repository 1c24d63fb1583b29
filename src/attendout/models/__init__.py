"""The models a run trains: finding and loading pretrained ones, the offline set, and models from scratch.

* :mod:`.loading`: the packaged MiniLM, local folders and the hub; a checkpoint's head made to meet the task.
* :mod:`.offline`: the pretrained models that set up offline (``make models``).
* :mod:`.generation`: decoders and encoder-decoders of the generation kinds, pretrained or from scratch.
* :mod:`.size`: the size of a model from scratch, plain data a run's config checks.
* :mod:`.tokenizer`: the byte-level BPE a model from scratch reads, trained on the task's own text.

The names below are imported from their modules on first use.
"""

from __future__ import annotations

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

__all__ = sorted(_NAMES)
__getattr__ = lazy_names(__name__, _NAMES)
