"""Types at the boundary: a config dataclass's values checked against the types its fields declare.

Each field's type is declared once, on the dataclass (:class:`~attendout.config.TrainConfig`, every
method config); :func:`check_fields` checks an instance against them (their ``__post_init__`` calls it,
so TOML files, CLI flags and keyword arguments to :func:`attendout.apply` all pass through it) and
:func:`check_values` checks a mapping of field values before any instance is made (a config file's
``[training]`` table, an experiment file). One rule for numbers:

* a bool never stands for a number (``p = true`` is refused for a probability), and a string never
  for a bool (``"no"`` is refused for a flag);
* an integer is accepted where a float goes (``epochs = 3``); a float must be finite;
* ``X | None``, ``list[X]``, ``dict[K, V]``, ``Literal[...]`` and ``Any`` are understood;
* a ``list[...]`` field whose metadata says ``"from_text": True`` also takes a string (the CLI's
  comma-separated form), which the config's own checks then parse.

The error is an :class:`OptionTypeError` (a ``ValueError`` and a ``TypeError``) of one line naming
where the value came from, the field, the expected type and the value given.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any


class OptionTypeError(ValueError, TypeError):
    """A value of the wrong type for a config field (the message names where, the field, the type, the value)."""


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def matches(value: Any, annotation: Any) -> bool:
    """Whether ``value`` is of the type ``annotation`` by the rule above (no ``from_text``)."""
    if annotation is Any or annotation is object:
        return True
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(matches(value, a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return _is_number(value) and isinstance(value, numbers.Integral)
    if annotation is float:
        return _is_number(value) and math.isfinite(value)
    if annotation is str:
        return isinstance(value, str)
    if origin in (list, tuple) or annotation in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        args = typing.get_args(annotation)
        if not args:
            return True
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return len(value) == len(args) and all(matches(v, a) for v, a in zip(value, args, strict=True))
        return all(matches(v, args[0]) for v in value)
    if origin is dict or annotation is dict:
        if not isinstance(value, Mapping):
            return False
        args = typing.get_args(annotation) or (Any, Any)
        return all(matches(k, args[0]) and matches(v, args[1]) for k, v in value.items())
    if isinstance(annotation, type):
        return isinstance(value, annotation)
    return True  # a type this checker does not know: left to the config's own checks


def expected_type(annotation: Any) -> str:
    """``annotation`` in words: ``int | None`` -> "an integer or None"."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(expected_type(a) for a in typing.get_args(annotation))
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if annotation is type(None):
        return "None"
    names = {bool: "true or false (a bool)", int: "an integer", float: "a number", str: "a string"}
    if annotation in names:
        return names[annotation]
    if origin in (list, tuple) or annotation in (list, tuple):
        args = typing.get_args(annotation)
        return f"a list of {_plural(args[0])}" if args else "a list"
    if origin is dict or annotation is dict:
        args = typing.get_args(annotation)
        if args and args[1] is not Any:
            return f"a table of {_plural(args[1])}"
        return "a table"
    return getattr(annotation, "__name__", str(annotation))


def _plural(annotation: Any) -> str:
    words = {int: "integers", float: "numbers", str: "strings", bool: "bools"}
    return words.get(annotation, expected_type(annotation))


def _given(value: Any) -> str:
    kind = "bool" if isinstance(value, bool) else type(value).__name__
    return f"{kind} {value!r}"


def _check(owner: str, name: str, value: Any, annotation: Any, from_text: bool) -> None:
    if matches(value, annotation) or (from_text and isinstance(value, str)):
        return
    wanted = expected_type(annotation)
    if from_text:
        wanted += " (or its comma-separated text)"
    if (
        isinstance(value, float)
        and _is_number(value)
        and not math.isfinite(value)
        and matches(1.0, annotation)
    ):
        wanted = "a finite number"
    prefix = f"{owner}: " if owner else ""
    raise OptionTypeError(f"{prefix}{name} must be {wanted}, got {_given(value)}")


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


@dataclasses.dataclass(frozen=True)
class Must:
    """What a field's value must be beyond its type (its metadata ``"must"``, checked by
    :func:`check_fields` once every type is right): ``holds(value)``, said in ``words``. An unset
    value (None) is left to the config's own checks."""

    holds: Callable[[Any], bool]
    words: str


AT_LEAST_0 = Must(lambda value: value >= 0, "at least 0")
AT_LEAST_1 = Must(lambda value: value >= 1, "at least 1")
POSITIVE = Must(lambda value: value > 0, "positive")


def one_of(choices: Sequence[str], words: str | None = None) -> Must:
    """A value among ``choices`` (said "one of a, b, c" unless ``words``)."""
    return Must(lambda value: value in choices, words or "one of " + ", ".join(choices))


def option(default: Any, help: str, must: Must | None = None, **metadata: Any) -> Any:
    """A config field: its ``default``, its ``help`` (the CLI's), what its value ``must`` be beyond its
    type, and any other ``metadata`` (``from_text``...)."""
    if must is not None:
        metadata["must"] = must
    return dataclasses.field(default=default, metadata={"help": help, **metadata})


def check_fields(obj: Any, owner: str = "") -> None:
    """Check every init field of the dataclass instance ``obj`` against its declared type, then against
    what it must be (:class:`Must`, in the field's metadata).

    ``owner`` prefixes the message (a method's name, ``"[training]"``); raises :class:`OptionTypeError`
    for a type, a ``ValueError`` ("OWNER: NAME must be WORDS, got VALUE") for a rule.
    """
    hints = _hints(type(obj))
    fields = [f for f in dataclasses.fields(obj) if f.init]
    for f in fields:
        if f.name in hints:
            _check(owner, f.name, getattr(obj, f.name), hints[f.name], bool(f.metadata.get("from_text")))
    check_rules(obj, owner)


def check_rules(obj: Any, owner: str = "") -> None:
    """Check every init field of the dataclass instance ``obj`` against what it must be (:class:`Must`),
    its type aside: a ``ValueError`` ("OWNER: NAME must be WORDS, got VALUE")."""
    for f in dataclasses.fields(obj):
        must, value = f.metadata.get("must"), getattr(obj, f.name)
        if f.init and must is not None and value is not None and not must.holds(value):
            raise ValueError(f"{owner + ': ' if owner else ''}{f.name} must be {must.words}, got {value!r}")


def check_values(cls: type, values: Mapping[str, Any], owner: str = "") -> None:
    """Check the ``values`` given for fields of the dataclass ``cls`` (unknown keys are left to the caller)."""
    hints = _hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, value in values.items():
        if name in fields and name in hints:
            _check(owner, name, value, hints[name], bool(fields[name].metadata.get("from_text")))
