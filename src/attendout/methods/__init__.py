"""Attention regularisers, each a config dataclass registered by name (see :mod:`.base`)."""

from ..attention.deberta import install_hooks as _deberta  # noqa: F401  (registers DeBERTa's attention route)
from . import addrop, drophead, dropout, layerdrop, none, scheduled  # noqa: F401  (registers the methods)
from .addrop import ADDropConfig
from .attendout import AttendOutConfig
from .base import (
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
    settle_for_task,
)
from .drophead import DropHeadConfig
from .dropout import AttnDropoutConfig, ScoresDropoutConfig
from .layerdrop import AttnLayerDropConfig, LayerDropConfig
from .none import NoneConfig
from .scheduled import ScheduledConfig
from .synthesizer import SynthesizerConfig

__all__ = [
    "METHODS",
    "ADDropConfig",
    "AttendOutConfig",
    "AttnDropoutConfig",
    "AttnLayerDropConfig",
    "CombinedHandle",
    "DropHeadConfig",
    "LayerDropConfig",
    "MethodConfig",
    "MethodHandle",
    "MethodStackError",
    "NoneConfig",
    "ScheduledConfig",
    "ScoresDropoutConfig",
    "SynthesizerConfig",
    "TrainingStrategy",
    "apply",
    "get_method_config",
    "list_methods",
    "prepare",
    "register_method",
    "settle_for_task",
]
