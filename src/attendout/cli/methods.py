"""``attendout methods``: the registered methods, their options and defaults."""

from __future__ import annotations

import argparse
import dataclasses


def main(argv: list[str]) -> int:
    from ..methods import METHODS, MethodConfig, list_methods

    argparse.ArgumentParser(prog="attendout methods", description="List the registered methods.").parse_args(
        argv
    )
    for name in list_methods():
        cls: type[MethodConfig] = METHODS[name]
        options = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(cls))
        print(f"{name:16s} {cls.summary} [{cls.model_dropout} model dropout] ({options})")
    return 0
