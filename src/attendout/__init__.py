"""attendout: fine-tune pretrained transformer encoders with regularised self-attention.

``import attendout`` is cheap: the names that need torch and transformers (every name of ``__all__``
but ``__version__``, ``Stopped``, ``LimitError`` and ``check_length``) are imported on first use
(PEP 562, through ``lazy_loader`` and the names of ``__init__.pyi``), so ``attendout --help`` starts in
well under a second. ``attendout.apply`` and ``from attendout import X`` work as before. The first of them
imports :mod:`attendout.attention.deberta` and :mod:`attendout.attention.mpnet` too, which register
DeBERTa's and MPNet's attention routes with the hook.
"""

from __future__ import annotations

import importlib
from typing import Any

import lazy_loader

from .core.limits import LimitError as LimitError
from .core.limits import check_length as check_length
from .run import Stopped as Stopped
from .version import __version__ as __version__

_attached, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

#: the modules of the attention routes other than the registered attention function (DeBERTa's, MPNet's)
_ROUTES = (".attention.deberta", ".attention.mpnet")


def __getattr__(name: str) -> Any:
    """Import a public name's module on first use (``lazy_loader``), the attention routes first."""
    if name not in __all__:  # Python's own words, as for any module
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for route in _ROUTES:  # each registers its attention route with the hook
        importlib.import_module(route, __name__)
    return _attached(name)
