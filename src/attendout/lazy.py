"""Names of a package imported from its submodules on first use (PEP 562), so that importing the package
costs only what its light names need (``attendout methods`` and ``--help`` import no torch)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, names: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of ``package`` that imports each name of ``names`` (name -> the
    submodule defining it, relative like ``".method"``) when first asked for, and caches it."""

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(names[name], package), name)
        importlib.import_module(package).__dict__[name] = value
        return value

    return __getattr__
