"""A data file that is not UTF-8: where it goes wrong (line and column, not a byte offset) and what to do.

Every reader of :mod:`attendout.tasks` decodes its files as UTF-8 (a BOM allowed). A stream decoder's
:class:`UnicodeDecodeError` gives an offset into the chunk it was decoding, not into the file, so
:func:`not_utf8` reads the file's bytes again (decompressed, for a ``.gz`` or ``.bz2`` file) and finds
the first byte that is not UTF-8 itself. A file that reads as Windows-1252 (of which Latin-1's printable
characters are a part) is most often one: the message gives the command that converts it.
"""

from __future__ import annotations

import bz2
import gzip
import zlib
from pathlib import Path

from .base import DataError

#: how a compressed data file is opened, by its suffix (every reader of attendout.tasks reads these)
COMPRESSED = {".gz": gzip.open, ".bz2": bz2.open}


def not_utf8(path: str | Path) -> DataError:
    """The error for file ``path``, which does not decode as UTF-8 (raise it ``from None``)."""
    path = Path(path)
    opener = COMPRESSED.get(path.suffix.lower(), open)
    chunks: list[bytes] = []
    try:
        with opener(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                chunks.append(chunk)
    except (OSError, EOFError, zlib.error):  # a damaged archive: the bytes it gave before
        pass
    return not_utf8_bytes(str(path), b"".join(chunks), convert=path)


def not_utf8_bytes(where: str, data: bytes, convert: Path | None = None) -> DataError:
    """The error for ``data`` (the bytes of ``where``: a file, or a member of an archive), which does not
    decode as UTF-8; ``convert``: the file an ``iconv`` command in the message converts."""
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        offset = error.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        reason = error.reason
    else:  # decodes whole: the reader's error was elsewhere (cannot happen with the same bytes)
        return DataError(f"{where}: not UTF-8 text")
    line = data.count(b"\n", 0, offset) + 1
    start = data.rfind(b"\n", 0, offset) + 1
    column = len(data[start:offset].decode("utf-8-sig")) + 1  # in characters: all UTF-8 before it
    text = f"{where} line {line}, column {column}: not UTF-8 text (byte 0x{data[offset]:02x}: {reason})"
    try:
        data.decode("cp1252")
    except UnicodeDecodeError:
        return DataError(f"{text}; save the file as UTF-8")
    if convert is None:
        return DataError(f"{text}; it reads as Latin-1 or Windows-1252: save it as UTF-8")
    target = convert.with_name(convert.name + ".utf8")
    return DataError(
        f"{text}; it reads as Latin-1 or Windows-1252: save it as UTF-8, e.g. "
        f"iconv -f cp1252 -t utf-8 {convert} > {target}"
    )
