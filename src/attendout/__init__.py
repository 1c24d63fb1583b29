"""attendout: fine-tune pretrained transformer encoders with regularised self-attention.

``import attendout`` is cheap: the names that need torch and transformers (every name of ``__all__``
but ``__version__``, ``Stopped``, ``LimitError`` and ``check_length``) are imported on first use
(PEP 562), so ``attendout --help`` starts in well under a second. ``attendout.apply`` and
``from attendout import X`` work as before. The first of them imports :mod:`attendout.attention.deberta` and
:mod:`attendout.attention.mpnet` too, which register DeBERTa's and MPNet's attention routes with the hook.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .core.limits import LimitError, check_length
from .run import Stopped
from .version import __version__

#: name -> the submodule that defines it, imported on first use (see ``__getattr__``)
_LAZY = {
    **dict.fromkeys(
        (
            "AttentionCall",
            "AttentionEdit",
            "AttentionMethod",
            "RandomDrops",
            "UnsupportedModelError",
            "install",
            "record_attention",
            "supported_model_types",
            "uninstall",
        ),
        ".attention",
    ),
    **dict.fromkeys(("load_config", "save_config"), ".configfile"),
    **dict.fromkeys(("Distributed", "ForwardEdits", "LoopContext", "StepInfo"), ".contract"),
    **dict.fromkeys(
        (
            "METHODS",
            "CombinedHandle",
            "MethodConfig",
            "MethodHandle",
            "MethodStackError",
            "TrainingStrategy",
            "apply",
            "get_method_config",
            "list_methods",
            "prepare",
            "register_method",
            "unregister_method",
        ),
        ".methods",
    ),
    **dict.fromkeys(
        (
            "SequenceTooLongError",
            "SynthesizerConfig",
            "is_synthesized_checkpoint",
            "load_model",
            "load_synthesized",
            "save_synthesized",
            "synthesize",
        ),
        ".methods.synthesizer",
    ),
    **dict.fromkeys(("Predictions", "Predictor"), ".predict.classification"),
}

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors
    from .attention import (
        AttentionCall,
        AttentionEdit,
        AttentionMethod,
        RandomDrops,
        UnsupportedModelError,
        install,
        record_attention,
        supported_model_types,
        uninstall,
    )
    from .configfile import load_config, save_config
    from .contract import Distributed, ForwardEdits, LoopContext, StepInfo
    from .methods import (
        METHODS,
        CombinedHandle,
        MethodConfig,
        MethodHandle,
        MethodStackError,
        SynthesizerConfig,
        TrainingStrategy,
        apply,
        get_method_config,
        list_methods,
        prepare,
        register_method,
        unregister_method,
    )
    from .methods.synthesizer import (
        SequenceTooLongError,
        is_synthesized_checkpoint,
        load_model,
        load_synthesized,
        save_synthesized,
        synthesize,
    )
    from .predict import Predictions, Predictor


#: the modules of the attention routes other than the registered attention function (DeBERTa's, MPNet's)
_ROUTES = (".attention.deberta", ".attention.mpnet")


def _register_routes() -> None:
    """Import the route modules: each registers its attention route with the hook."""
    for route in _ROUTES:
        importlib.import_module(route, __name__)


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (PEP 562) and keep the name here."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _register_routes()
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def remove(model) -> None:
    """Remove every attendout method and the hook from ``model`` (it is stock again)."""
    from .attention import uninstall

    _register_routes()
    uninstall(model)


__all__ = [
    # what a user calls: a method on a model, in any loop
    "apply",
    "prepare",
    "remove",
    "list_methods",
    "get_method_config",
    "load_config",
    "save_config",
    # a fine-tuned model
    "Predictor",
    "Predictions",
    # Synthesizer attention in a model, and its checkpoints
    "SynthesizerConfig",
    "synthesize",
    "save_synthesized",
    "load_synthesized",
    "load_model",
    "is_synthesized_checkpoint",
    # errors a user meets
    "MethodStackError",
    "SequenceTooLongError",
    "UnsupportedModelError",
    "LimitError",
    "Stopped",
    "check_length",
    "supported_model_types",
    # writing a method of your own, or a loop of your own (the internals page)
    "register_method",
    "unregister_method",
    "METHODS",
    "MethodConfig",
    "MethodHandle",
    "CombinedHandle",
    "TrainingStrategy",
    "LoopContext",
    "StepInfo",
    "Distributed",
    "ForwardEdits",
    "AttentionMethod",
    "AttentionCall",
    "AttentionEdit",
    "RandomDrops",
    "install",
    "uninstall",
    "record_attention",
    "__version__",
]
