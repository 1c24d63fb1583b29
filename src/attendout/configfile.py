"""Method config files: one method, its options and (optionally) the training budget, as TOML.

``attendout advise`` writes its answer as such a file; ``attendout finetune --config FILE`` and
``attendout.apply(model, attendout.load_config(FILE))`` take it as it is::

    # written by attendout advise ...
    [method]
    name = "scores-dropout"
    p = 0.15

    [training]                # optional: TrainConfig fields (the budget advise chose)
    epochs = 7

:func:`load_config` returns the :class:`~attendout.methods.MethodConfig`; :func:`load_config_file`
also the ``[training]`` table, checked against :class:`~attendout.config.TrainConfig`'s fields. An
unknown method, option, table or training field is a ``ValueError`` naming the file and the key, and a
value of the wrong type (``p = true``, a list where a number goes, ``"no"`` for a flag) one naming the
file, the table, the field, the type it needs and the value given (:mod:`attendout.typecheck`).
:func:`dumps_toml` is the small TOML writer both this module and ``advise`` use (Python reads TOML
but does not write it).
"""

from __future__ import annotations

import dataclasses
import math
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .methods import MethodConfig, get_method_config
from .typecheck import check_values

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _string(key)


def _string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return f'"{escaped}"'


def _value(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{where}: TOML cannot hold {value!r}")
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v, where) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(v, where)}" for k, v in value.items()) + " }"
    raise ValueError(f"{where}: TOML cannot hold {type(value).__name__} {value!r}")


def dumps_toml(data: Mapping[str, Any], header: str = "") -> str:
    """``data`` as TOML: scalars first, then ``[tables]`` and ``[[arrays of tables]]``; None is left out.

    ``header`` is written first as ``#`` comment lines. Dicts below a table are written inline.
    """
    lines = [f"# {line}".rstrip() for line in header.splitlines()]

    def scalars(table: Mapping[str, Any], where: str, top: bool) -> list[str]:
        return [
            f"{_key(k)} = {_value(v, f'{where}{k}')}"
            for k, v in table.items()
            if v is not None and not (top and (_is_table(v) or _is_table_array(v)))
        ]

    first = scalars(data, "", top=True)
    if first:
        lines += [*([""] if lines else []), *first]
    for name, value in data.items():
        if _is_table(value):
            lines += ["", f"[{_key(name)}]", *scalars(value, f"[{name}] ", top=False)]
        elif _is_table_array(value):
            for entry in value:
                lines += ["", f"[[{_key(name)}]]", *scalars(entry, f"[[{name}]] ", top=False)]
    return "\n".join(lines).lstrip("\n") + "\n"


def _is_table(value: Any) -> bool:
    return isinstance(value, Mapping)


def _is_table_array(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and bool(value) and all(isinstance(v, Mapping) for v in value)


def save_config(
    path: str | Path, config: MethodConfig, training: Mapping[str, Any] | None = None, header: str = ""
) -> Path:
    """Write ``config`` (and training fields) as a file :func:`load_config_file` reads; atomically."""
    from .core.folder import write_text_atomic

    method = {k: v for k, v in config.to_dict().items() if v is not None}
    data: dict[str, Any] = {"method": method}
    if training:
        data["training"] = {k: v for k, v in training.items() if v is not None}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, dumps_toml(data, header))
    load_config_file(path)  # what was written reads back: a value TOML mangles fails here, not later
    return path


def load_config_file(path: str | Path) -> tuple[MethodConfig, dict[str, Any]]:
    """(the method's config, the ``[training]`` fields) of a config file; ValueError naming what is wrong."""
    from .config import TrainConfig

    path = Path(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise ValueError(f"config file {path} does not exist") from None
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not valid TOML: {error}") from None
    unknown = sorted(set(data) - {"method", "training"})
    if unknown:
        raise ValueError(
            f"{path}: unknown table or key {unknown[0]!r}; a config file has [method] and [training]"
        )
    method = data.get("method")
    if not isinstance(method, dict) or not isinstance(method.get("name"), str):
        raise ValueError(f'{path}: needs a [method] table with name = "..." (see `attendout methods`)')
    options = {k: v for k, v in method.items() if k != "name"}
    try:
        config = get_method_config(method["name"], **options)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: [method]: {error}") from None
    training = data.get("training", {})
    if not isinstance(training, dict):
        raise ValueError(f"{path}: training must be a table")
    fields = {f.name for f in dataclasses.fields(TrainConfig)} - {"method", "method_options"}
    bad = sorted(set(training) - fields)
    if bad:
        raise ValueError(f"{path}: [training] has no field {bad[0]!r}; fields: {', '.join(sorted(fields))}")
    check_values(TrainConfig, training, f"{path}: [training]")  # each its declared type; ranges: TrainConfig
    return config, dict(training)


def load_config(path: str | Path) -> MethodConfig:
    """The method config of a config file (what ``attendout advise`` writes as its answer)."""
    return load_config_file(path)[0]
