"""attendout: fine-tune pretrained transformer encoders with regularised self-attention."""

from . import deberta  # noqa: F401  (registers DeBERTa's attention route with the hook)
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
from .interrupt import Stopped
from .limits import LimitError, check_length
from .methods import (
    METHODS,
    CombinedHandle,
    MethodConfig,
    MethodHandle,
    MethodStackError,
    TrainingStrategy,
    apply,
    get_method_config,
    list_methods,
    prepare,
    register_method,
)
from .methods.synthesizer import (
    SequenceTooLongError,
    SynthesizerConfig,
    is_synthesized_checkpoint,
    load_model,
    load_synthesized,
    save_synthesized,
    synthesize,
)
from .predict import Predictions, Predictor
from .version import __version__


def remove(model) -> None:
    """Remove every attendout method and the hook from ``model`` (it is stock again)."""
    uninstall(model)


__all__ = [
    "METHODS",
    "AttentionCall",
    "AttentionEdit",
    "AttentionMethod",
    "CombinedHandle",
    "Distributed",
    "ForwardEdits",
    "LimitError",
    "LoopContext",
    "MethodConfig",
    "MethodHandle",
    "MethodStackError",
    "Predictions",
    "Predictor",
    "RandomDrops",
    "SequenceTooLongError",
    "StepInfo",
    "Stopped",
    "SynthesizerConfig",
    "TrainingStrategy",
    "UnsupportedModelError",
    "__version__",
    "apply",
    "check_length",
    "get_method_config",
    "install",
    "is_synthesized_checkpoint",
    "list_methods",
    "load_config",
    "load_model",
    "load_synthesized",
    "prepare",
    "record_attention",
    "register_method",
    "remove",
    "save_config",
    "save_synthesized",
    "supported_model_types",
    "synthesize",
    "uninstall",
]
