"""Where ``advise`` keeps its Optuna studies: an SQLite file, or a server that several workers share.

A plain ``postgresql://`` URL names psycopg2, SQLAlchemy's default driver for it. Where psycopg2 is
missing and psycopg 3 is installed (``pip install 'psycopg[binary]'``, the ``postgres`` extra), the URL is
taken as ``postgresql+psycopg://`` and the search says so. A URL that names its driver is kept as it is.

Workers started at once on a fresh database race to create Optuna's tables (optuna/optuna#1092: on
PostgreSQL the loser gets "duplicate key value violates unique constraint pg_type_typname_nsp_index" or
"relation already exists"); the loser opens the storage again, and then finds the tables made.
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.lock import exclusive

#: URL scheme -> how to install a driver SQLAlchemy finds for it
DRIVERS = {
    "postgresql": "pip install 'psycopg[binary]' (psycopg 3, taken for postgresql:// when psycopg2 is "
    "missing; attendout's postgres extra) or psycopg2-binary",
    "mysql": "pip install pymysql",
}

#: tries to open a storage whose tables another process is creating at the same moment
OPEN_TRIES = 5


def with_driver(url: str) -> str:
    """``url`` as SQLAlchemy will open it: ``postgresql://`` as ``postgresql+psycopg://`` where psycopg2 is
    missing and psycopg 3 is installed; any other URL as it is."""
    if url.startswith("postgresql://") and not _installed("psycopg2") and _installed("psycopg"):
        return "postgresql+psycopg://" + url[len("postgresql://") :]
    return url


def redacted(url: str) -> str:
    """``url`` as messages show it: a password in it (``postgresql://user:secret@host/db``) as ``***``."""
    return re.sub(r"([a-z0-9+]+://[^:/@\s]*):[^@/\s]*@", r"\1:***@", url)


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module blocked in sys.modules
        return False


def open_storage(url: str, echo: Callable[[str], None] | None = None) -> Any:
    """An Optuna RDB storage for ``url`` (an SQLite file's folder is made first); ``echo`` is told when a
    plain ``postgresql://`` goes through psycopg 3."""
    import optuna

    if url.startswith("sqlite:///"):
        path = Path(url[len("sqlite:///") :])
        path.parent.mkdir(parents=True, exist_ok=True)
        damage = _sqlite_damage(path)
        if damage is not None:
            raise ValueError(_damaged(path, damage))
    opened = with_driver(url)
    if opened != url and echo is not None:
        echo(
            "search: --storage postgresql://...: psycopg2 (SQLAlchemy's default driver for it) is not "
            "installed; opened with psycopg 3 (postgresql+psycopg://)"
        )
    try:
        return _rdb_storage(optuna, opened)
    except ImportError as error:  # the database's driver (psycopg2 for postgresql://, pymysql, ...)
        hint = DRIVERS.get(url.split(":", 1)[0].split("+", 1)[0], "install the driver the URL names")
        raise ValueError(
            f"--storage {redacted(url)}: its database driver is not installed ({error}); {hint}"
        ) from None
    except Exception as error:  # SQLAlchemy's: a malformed URL, a server that refuses, ...
        if not type(error).__module__.startswith(("sqlalchemy", "optuna")):
            raise
        said = _first_line(error)
        if url.startswith("sqlite:///") and any(words in said for words in _DAMAGED):
            why = said.removeprefix("(sqlite3.DatabaseError) ")
            raise ValueError(
                _damaged(Path(url[len("sqlite:///") :]), f"SQLite finds it damaged ({why})")
            ) from None
        raise ValueError(f"--storage {redacted(url)}: {type(error).__name__}: {redacted(said)}") from None


#: what SQLite says of a file that is not a database, or one whose pages are damaged
_DAMAGED = ("file is not a database", "database disk image is malformed", "file is encrypted")
_SQLITE_HEADER = b"SQLite format 3\x00"


def _sqlite_damage(path: Path) -> str | None:
    """What is wrong with the SQLite file ``path``, or None (a missing or empty file is a new database; one
    another process holds locked is left to the storage's own wait)."""
    import sqlite3

    try:
        with open(path, "rb") as handle:
            head = handle.read(len(_SQLITE_HEADER))
    except (FileNotFoundError, IsADirectoryError):
        return None
    if not head:
        return None
    if head != _SQLITE_HEADER:
        return "it is not an SQLite database"
    try:
        connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=60)
        try:
            found = [row[0] for row in connection.execute("PRAGMA quick_check")]
        finally:
            connection.close()
    except sqlite3.OperationalError:  # locked, or unreadable: the storage says what it finds
        return None
    except sqlite3.DatabaseError as error:
        return f"SQLite finds it damaged ({error})"
    return None if found == ["ok"] else f"SQLite finds it damaged ({found[0]})"


def _damaged(path: Path, why: str) -> str:
    """One line: the study file ``path`` is not a readable database, and what to do."""
    return (
        f"{path} is the search's study database, but {why}: move it aside to start the search over "
        f"(mv {path} {path}.damaged), or restore it from a backup"
    )


def _first_line(error: BaseException) -> str:
    """SQLAlchemy's message without its "[SQL: ...]" and "(Background on this error at: ...)" lines."""
    lines = [line for line in str(error).splitlines() if line.strip()]
    kept = [line for line in lines if not line.startswith(("[SQL:", "[parameters:", "(Background on this"))]
    return (kept or lines or [type(error).__name__])[0]


def asking(url: str) -> Any:
    """A context around asking a trial of the storage ``url``: for an SQLite file, one process at a time (a
    lock file beside it). SQLite does not lock the row Optuna takes a queued trial from, so two processes
    asking at once could both take the same one; a database server locks it itself."""
    if url.startswith("sqlite:///"):
        return exclusive(Path(url[len("sqlite:///") :] + ".ask.lock"))
    return contextlib.nullcontext(True)


def _rdb_storage(optuna: Any, url: str) -> Any:
    kwargs = {"connect_args": {"timeout": 60}} if "sqlite" in url else None
    for attempt in range(1, OPEN_TRIES + 1):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=kwargs)
        except Exception as error:
            if attempt == OPEN_TRIES or not _lost_the_race(error):
                raise
            time.sleep(0.2 + random.random())  # the other process finishes the tables meanwhile


def _lost_the_race(error: BaseException | None) -> bool:
    """Whether ``error`` is another process creating the same tables, types or rows at the same moment."""
    while error is not None:
        if type(error).__name__ in ("IntegrityError", "ProgrammingError") or "already exists" in str(error):
            return True
        error = error.__cause__
    return False
