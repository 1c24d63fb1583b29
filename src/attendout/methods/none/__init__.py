"""`none`: plain fine-tuning. The hook is installed but does nothing: stock SDPA attention runs."""

import lazy_loader

from ..registry import register_method
from .config import NoneConfig

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

register_method("none", NoneConfig, "attendout.methods.none.method:PlainFineTuning")
