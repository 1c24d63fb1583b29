"""The method registry, the peft way: a name bound to its config, its method and its training strategy.

>>> register_method("my-dropout", MyDropoutConfig, MyDropout)              # a strategy of its own: strategy=
>>> attendout.apply(model, "my-dropout", p=0.2)

* ``config``: the options (a :class:`~attendout.methods.config.MethodConfig` dataclass), pure data.
* ``method``: makes the :class:`~attendout.attention.AttentionMethod` that acts through the hook from a
  config: a class taking the config, or any function of it.
* ``strategy``: makes the method's side of the loop contract from a config (default:
  :class:`~attendout.methods.base.TrainingStrategy`, one plain step per batch).

``method`` and ``strategy`` may also be given as ``"module:attribute"`` and are then imported when first
built: the built-in methods register so, which keeps listing them free of torch.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

from .config import MethodConfig

#: name -> the method's config class (its options); the other parts are in :data:`_PARTS`
METHODS: dict[str, type[MethodConfig]] = {}


#: name -> (method, strategy) as registered: callables, or "module:attribute" to import when first made
_PARTS: dict[str, tuple[Callable[[Any], Any] | str, Callable[[Any], Any] | str | None]] = {}


def register_method(
    name: str,
    config: type[MethodConfig],
    method: Callable[[Any], Any] | str,
    strategy: Callable[[Any], Any] | str | None = None,
) -> type[MethodConfig]:
    """Make method ``name`` known: ``attendout.apply(model, name)``, ``--method name``, config files.

    ``config`` is the options dataclass (its class attribute ``name`` is set to ``name``); ``method`` and
    ``strategy`` make the attention method and the training strategy from a config (see the module).
    A name taken by another config is refused; registering the same config again replaces its parts.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a method name must be a non-empty string, got {name!r}")
    if not (
        isinstance(config, type) and issubclass(config, MethodConfig) and dataclasses.is_dataclass(config)
    ):
        raise TypeError(f"register_method({name!r}): config must be a MethodConfig dataclass, got {config!r}")
    if config.__dict__.get("name") not in (None, "", name):
        raise ValueError(f"{config.__name__}.name is {config.name!r}; it cannot be registered as {name!r}")
    if name in METHODS and METHODS[name] is not config:
        raise ValueError(f"method name {name!r} is already registered by {METHODS[name].__name__}")
    for part, value in (("method", method), ("strategy", strategy)):
        if value is not None and not (callable(value) or (isinstance(value, str) and ":" in value)):
            raise TypeError(
                f"register_method({name!r}): {part} must be callable or 'module:attribute', got {value!r}"
            )
    config.name = name
    METHODS[name] = config
    _PARTS[name] = (method, strategy)
    return config


def unregister_method(name: str) -> None:
    """Forget method ``name`` (a method registered in a notebook, to register it again changed)."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(list_methods())}")
    del METHODS[name], _PARTS[name]


def list_methods() -> list[str]:
    return sorted(METHODS)


def get_method_config(name: str, **options: Any) -> MethodConfig:
    """Make the config of method ``name`` from keyword options (unknown name or option: ValueError)."""
    if name not in METHODS:
        raise ValueError(f"unknown method {name!r}; known methods: {', '.join(list_methods())}")
    cls = METHODS[name]
    check_options(name, options, {f.name for f in dataclasses.fields(cls)})
    return cls(**options)


def check_options(name: str, options: Mapping[str, Any], known: set[str]) -> None:
    """Refuse an option of method ``name`` that is not one of its ``known`` ones (a ValueError)."""
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"method {name!r} has no option {unknown[0]!r}; its options: {', '.join(sorted(known))}"
        )


def _resolve(part: Callable[[Any], Any] | str) -> Callable[[Any], Any]:
    if not isinstance(part, str):
        return part
    module, _, attribute = part.partition(":")
    found: Any = importlib.import_module(module)
    for name in attribute.split("."):
        found = getattr(found, name)
    return found


def method_parts(config: MethodConfig) -> tuple[Callable[[Any], Any], Callable[[Any], Any] | None]:
    """The parts registered for ``config``'s method, imported: ``(method, strategy)``; ``method(config)``
    makes the attention method and ``strategy(config)`` the training strategy (None: registered without
    one, the default fits). The caller makes them from the config: the registry finds them by name and
    never holds the config's values (:func:`~attendout.methods.base.prepare`)."""
    parts = _PARTS.get(config.name)
    if parts is None or METHODS.get(config.name) is not type(config):
        raise ValueError(
            f"{type(config).__name__} (method {config.name!r}) is not registered: "
            f"register_method({config.name!r}, {type(config).__name__}, ...) first"
        )
    method, strategy = parts
    return _resolve(method), None if strategy is None else _resolve(strategy)


def settle_for_task(method: str, options: Mapping[str, Any], task: str | None) -> dict[str, Any]:
    """``options`` of ``method`` with the options that depend on the task written out for ``task``.

    A run's config made from the result records what the run used (AD-DROP's layers for the task)
    instead of "decided later". Options that do not make a config come back unchanged: the run's
    own checks report them.
    """
    try:
        config = get_method_config(method, **options)
    except (ValueError, TypeError):
        return dict(options)
    settled = config.for_task(task)
    if settled is config:
        return dict(options)
    before, after = config.to_dict(), settled.to_dict()
    return {**options, **{k: v for k, v in after.items() if k != "name" and before.get(k) != v}}
