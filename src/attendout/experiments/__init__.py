"""A moved import path, kept for one release: ``attendout.experiments`` is now :mod:`attendout.bench`.

``from attendout.experiments import load_experiment`` (and the package's other names) still works, with a
:class:`DeprecationWarning`; write ``from attendout.bench import ...``. To be removed on 2027-03-01.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from ..bench import __all__ as __all__


def __getattr__(name: str) -> Any:
    """A moved name, from :mod:`attendout.bench`."""
    if name in __all__:
        return getattr(importlib.import_module("attendout.bench"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


warnings.warn(
    "attendout.experiments moved to attendout.bench; the old path goes on 2027-03-01",
    DeprecationWarning,
    stacklevel=2,
)
