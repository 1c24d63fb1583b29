"""`none`: plain fine-tuning. The hook is installed but does nothing: stock SDPA attention runs."""

from ..registry import register_method
from .config import NoneConfig

__all__ = ["NoneConfig"]

register_method("none", NoneConfig, "attendout.methods.none.method:PlainFineTuning")
