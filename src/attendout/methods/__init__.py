"""Attention regularisers: each a config (its options, as data) registered by name with the parts that
act on a model (:mod:`.registry`, the peft way).

Every method is a package of the same layout: ``config.py`` (the options; no torch), ``method.py`` (its
part in the attention hook) and, where the training loop must do more than a plain step, ``strategy.py``
(AD-DROP, AttendOut, Synthesizer); its ``__init__`` registers the three. Other modules hold what one
method needs beyond them (AD-DROP's attribution, AttendOut's Generator and game).
Importing this package imports the configs only: :func:`apply`, :func:`prepare` and the handles (which
need torch) are imported on first use.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_names
from .addrop import ADDropConfig
from .attendout import AttendOutConfig
from .config import MethodConfig
from .drophead import DropHeadConfig
from .dropout import AttnDropoutConfig, ScoresDropoutConfig
from .layerdrop import AttnLayerDropConfig, LayerDropConfig
from .none import NoneConfig
from .registry import (
    METHODS,
    get_method_config,
    list_methods,
    register_method,
    settle_for_task,
    unregister_method,
)
from .scheduled import ScheduledConfig
from .synthesizer import SynthesizerConfig

if TYPE_CHECKING:  # the lazy names, for type checkers and the API reference
    from .base import CombinedHandle, MethodHandle, MethodStackError, TrainingStrategy, apply, prepare

__getattr__ = lazy_names(
    __name__,
    dict.fromkeys(
        ("CombinedHandle", "MethodHandle", "MethodStackError", "TrainingStrategy", "apply", "prepare"),
        ".base",
    ),
)

__all__ = [
    # the configs, one per method (their fields are the options)
    "NoneConfig",
    "AttnDropoutConfig",
    "ScoresDropoutConfig",
    "ScheduledConfig",
    "DropHeadConfig",
    "LayerDropConfig",
    "AttnLayerDropConfig",
    "ADDropConfig",
    "AttendOutConfig",
    "SynthesizerConfig",
    # a method on a model
    "apply",
    "prepare",
    "get_method_config",
    "list_methods",
    "settle_for_task",
    "MethodStackError",
    # the registry and the parts of a method of your own
    "register_method",
    "unregister_method",
    "METHODS",
    "MethodConfig",
    "MethodHandle",
    "CombinedHandle",
    "TrainingStrategy",
]
