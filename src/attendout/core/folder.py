"""The run directory: its files' names, atomic writes, the saved model, the resumable checkpoint's format.

:class:`RunDir` names every file of a run directory (``results.json``, ``config.json``, ``log.jsonl``,
a bench cell's ``cell.json``, ``predictions/``, ``model/``, ``checkpoint/``) and reads those files the way
every reader needs them: the names live here and nowhere else.

Every file a run leaves is written whole or not at all (a temporary file or folder, then a rename),
so a run killed at any moment leaves the previous version of each file intact (tests/test_faults.py
kills runs at such moments). A folder written whole (the checkpoint, the saved model) is filled under
a temporary name, closed by ``manifest.json`` (the size and sha256 of every file, written last) and
renamed into place: a folder is complete if and only if its manifest agrees with its files
(:func:`verify_folder`), and a resume trusts nothing else (:func:`checkpoint_status`,
:func:`read_checkpoint`). A write that fails (disk full, permissions) leaves no temporary file behind.
The checkpoint holds plain data only and loads with ``weights_only=True``. One run writes a folder at a
time (:class:`attendout.core.lock.RunLock`). Where a run stands has one reader: :meth:`RunDir.state`.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import pickle
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from torch import nn

from ..version import __version__
from .lock import LOCK_FILE
from .optim import TrainingError
from .state import CheckpointStatus, RunState, read_state

# The files of a run directory (:class:`RunDir` names them in a folder)
RESULTS_FILE = "results.json"  # the final metrics, written last: its presence means the run finished
RUN_CONFIG_FILE = "config.json"  # the run's settings, task, data sizes, versions (not a model's config.json)
LOG_FILE = "log.jsonl"  # one JSON record a line: logged steps, validations, the final evaluation
TRACKING_FILE = "tracking.json"  # --report-to: the trackers' run ids, how many records they were given
CELL_FILE = "cell.json"  # a bench cell's record (attendout.bench): fingerprint, cell key, wall time
PREDICTIONS_DIR = "predictions"  # SPLIT.jsonl per evaluation split (SPLIT.jsonl.gz in a published cell)
MODEL_DIR = "model"  # the best model, saved whole (save_model_atomic)
CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "state.pt"
CHECKPOINT_SUMMARY = "state.json"  # the step of state.pt, readable without loading it
MANIFEST = "manifest.json"  # written last into a folder written whole: each file's size and sha256
#: 3: the checkpoint folder is complete only with a manifest that agrees with its files.
#: 2: everything in state.pt loads with ``torch.load(..., weights_only=True)`` (tensors, numbers,
#: strings, lists, dicts): a checkpoint carries no code. Format 1 held numpy's random state as an
#: array: it is still read, with numpy's array constructors allowed (:func:`load_checkpoint`).
#: Formats 1 and 2 had no manifest: such a checkpoint resumes when its state.pt loads whole (their
#: writer renamed it into place whole), with a warning that it cannot be checked for corruption.
CHECKPOINT_FORMAT = 3
READABLE_FORMATS = (1, 2, 3)
UNCHECKED_FORMATS = (1, 2)  # written before manifests


class OutputDirError(ValueError):
    """The output directory cannot hold a run: it is a file, under a file, or cannot be written."""


class StorageError(TrainingError):
    """A write into the run directory failed midway (disk full, permissions); what was whole stays whole."""


class CheckpointError(TrainingError):
    """The checkpoint to resume from cannot be used: incomplete, corrupt, another format, or other settings."""

    @classmethod
    def broken(cls, folder: Path, problem: str) -> CheckpointError:
        return cls(
            f"cannot resume from {folder}: {problem}; the checkpoint is incomplete or corrupt and nothing in "
            "it is used (start afresh with --overwrite instead of --resume, which discards it, or put back a "
            "whole copy of the folder)"
        )


def load_checkpoint(path: Path, map_location: Any = None) -> Any:
    """``torch.load(path, weights_only=True)``: tensors and plain values only, never code.

    numpy's array constructors are allowed too (numeric arrays only: an array of objects still meets
    the restricted unpickler), so that a format-1 checkpoint, whose numpy random state is an array,
    resumes. Anything else pickled raises ``pickle.UnpicklingError``.
    """
    numpy_arrays = [np._core.multiarray._reconstruct, np.ndarray, np.dtype]
    numpy_arrays += [type(np.dtype(np.uint32))]
    with torch.serialization.safe_globals(numpy_arrays):
        return torch.load(path, map_location=map_location, weights_only=True)


def describe_os_error(error: OSError) -> str:
    """A short phrase for a failed write: 'no space left on device', 'permission denied', ..."""
    known = {
        errno.ENOSPC: "no space left on device",
        getattr(errno, "EDQUOT", errno.ENOSPC): "disk quota exceeded",
        errno.EACCES: "permission denied",
        errno.EPERM: "operation not permitted",
        errno.EROFS: "read-only file system",
        errno.ENOTDIR: "a part of the path is a file, not a folder",
        errno.EISDIR: "a folder stands where a file should be",
    }
    said = known.get(error.errno) or error.strerror or str(error) or type(error).__name__
    where = f": {error.filename}" if error.filename else ""
    return f"{type(error).__name__}: {said}{where}"


def os_error_remedy(error: OSError) -> str:
    """What to do about a failed write, in a few words."""
    if error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
        return "free some space"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "make the folder writable"
    return "fix the cause"


def check_output_dir(path: Path, option: str = "--output-dir") -> None:
    """Raise :class:`OutputDirError` unless ``path`` is, or can be made, a writable folder (nothing written)."""
    path = Path(path)
    if os.path.lexists(path) and not path.is_dir():
        what = "a broken link" if path.is_symlink() and not path.exists() else "a file"
        raise OutputDirError(
            f"{option} {path} is {what}, not a folder; choose another {option}, or move it out of the way"
        )
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise OutputDirError(
            f"{option} {path} cannot be created: {existing} is a file, not a folder; choose another {option}"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        read_only = hasattr(os, "statvfs") and os.statvfs(existing).f_flag & getattr(os, "ST_RDONLY", 1)
        why = "a read-only file system" if read_only else "permission denied"
        raise OutputDirError(
            f"{option} {path} cannot be written ({existing}: {why}); choose a folder you can write as "
            f"{option}, or change its permissions"
        )


def output_dir_failure(path: Path, error: OSError, option: str = "--output-dir") -> OutputDirError:
    """The :class:`OutputDirError` of a write that failed while a run set up its folder."""
    return OutputDirError(
        f"cannot write the run directory {path} ({describe_os_error(error)}); {os_error_remedy(error)}, or choose "
        f"another {option}"
    )


def _write_atomic(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """``write(file)`` into a temporary file beside ``path``, then rename it to ``path``.

    A failure (a full disk) removes the temporary file and leaves ``path`` as it was.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as file:
            write(file)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def portable(text: str, data: bool = False) -> str:
    """``text`` (a path, or a line that names paths) as a published file records it, naming no machine
    (issue 69): an absolute path below the working folder relative to it; with ``data`` (a line that says
    where data came from), one below the data root (``$ATTENDOUT_DATA``) relative to that first, the root
    itself ``.``. Relative paths, other absolute ones and any other text are left as they are."""
    roots = [os.environ.get("ATTENDOUT_DATA") if data else None, os.getcwd()]
    for root in [os.path.abspath(r) for r in roots if r]:
        if root != os.sep:
            text = re.sub(
                r"(?<![\w.~/-])" + re.escape(root) + r"""(/|(?=[\s,;:)'"]|$))""",
                lambda m: "" if m[1] else ".",
                text,
            )
    return text


def relative_here(path: str) -> str:
    """``path`` relative to the working folder where it is absolute: how a published file records a
    folder that is read back from there (a run's ``data_dir``), naming no machine (issue 69)."""
    return os.path.relpath(path) if os.path.isabs(path) else path


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader never sees half a file (temp file + rename)."""
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    """Write text so that a reader never sees half a file (temp file + rename)."""
    _write_atomic(path, lambda file: file.write(text.encode()))


# --------------------------------------------------------------------------------------------------
# The files of one run directory


class _InRun:
    """A file or folder of a run directory, by name: ``RunDir(path).results`` is ``path / RESULTS_FILE``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, run: RunDir | None, owner: type | None = None) -> Any:
        return self if run is None else run.path / self.name


@dataclass(frozen=True)
class RunDir:
    """A run directory (``attendout finetune --output-dir``, a bench cell's folder): its files by name,
    and their readers. Nothing is read until asked; the paths exist or not (:attr:`finished`)."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    results = _InRun(RESULTS_FILE)
    config = _InRun(RUN_CONFIG_FILE)
    log = _InRun(LOG_FILE)
    cell = _InRun(CELL_FILE)
    predictions_dir = _InRun(PREDICTIONS_DIR)
    model_dir = _InRun(MODEL_DIR)
    checkpoint_dir = _InRun(CHECKPOINT_DIR)
    lock = _InRun(LOCK_FILE)

    def prediction(self, split: str, compressed: bool = False) -> Path:
        """``predictions/SPLIT.jsonl`` (``.jsonl.gz`` with ``compressed``: a published bench cell's)."""
        return self.predictions_dir / f"{split}.jsonl{'.gz' if compressed else ''}"

    @property
    def finished(self) -> bool:
        """Whether the run finished: its results file, written last, is there (:meth:`state`)."""
        return self.state().finished

    def find_checkpoint(self) -> tuple[Path, CheckpointStatus]:
        """The checkpoint folder a resume reads (``.checkpoint.old`` after a kill between renames), its status."""
        folder, old = self.checkpoint_dir, self.path / f".{CHECKPOINT_DIR}.old"
        folder = old if not os.path.lexists(folder) and old.is_dir() else folder
        return folder, checkpoint_status(folder)

    def state(self) -> RunState:
        """Where the run stands: the one reader of it (:func:`~attendout.core.state.read_state`)."""
        folder, checkpoint = self.find_checkpoint()
        return read_state(self, checkpoint, folder / CHECKPOINT_SUMMARY)

    def read_results(self) -> dict[str, Any]:
        return json.loads(self.results.read_text())

    def read_config(self) -> dict[str, Any]:
        return json.loads(self.config.read_text())

    def read_cell(self) -> dict[str, Any]:
        return json.loads(self.cell.read_text())

    def log_records(self) -> list[dict[str, Any]]:
        """The records of the log, one a line (blank lines skipped); FileNotFoundError without a log."""
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def validations(self) -> list[dict[str, Any]]:
        """The log's validation records (those with a ``validation``), in the order written."""
        return [record for record in self.log_records() if "validation" in record]

    def write_cell(self, record: dict[str, Any]) -> None:
        """The bench cell's record, written whole. (results.json and config.json have one writer, the
        run folder: :class:`attendout.run.runfolder.RunFolder` writes them with :func:`write_json_atomic` at these paths.)"""
        write_json_atomic(self.cell, record)


# --------------------------------------------------------------------------------------------------
# Folders written whole: a temporary folder, its manifest last, two renames


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: Path, **extra: Any) -> None:
    """``folder/manifest.json``: the size and sha256 of every file in ``folder`` (written last)."""
    files = {
        path.relative_to(folder).as_posix(): {"bytes": path.stat().st_size, "sha256": sha256_of(path)}
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST
    }
    write_json_atomic(folder / MANIFEST, {**extra, "written_by": f"attendout {__version__}", "files": files})


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """The manifest of ``folder`` (None: it has none); :class:`ValueError` if it is not one."""
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{MANIFEST} is not valid JSON ({error})") from None
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("bytes"), int) and isinstance(v.get("sha256"), str)
        for v in files.values()
    ):
        raise ValueError(f"{MANIFEST} lists no files with their sizes and sha256")
    return manifest


def verify_folder(folder: Path, hashes: bool = True, unchecked_ok: bool = False) -> str | None:
    """What is wrong with ``folder`` by its manifest (None: every file it lists is there, whole).

    Sizes always; the sha256 of each file with ``hashes`` (reads every byte). A folder without a
    manifest is a problem unless ``unchecked_ok`` (one written before manifests existed).
    """
    if not folder.is_dir():
        return "it is missing"
    try:
        manifest = read_manifest(folder)
    except ValueError as error:
        return str(error)
    if manifest is None:
        return None if unchecked_ok else f"it has no {MANIFEST}"
    for name, expected in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing (listed in {MANIFEST})"
        size = path.stat().st_size
        if size != expected["bytes"]:
            cut = " (truncated)" if size < expected["bytes"] else ""
            return f"{name} has {size} bytes, {MANIFEST} says {expected['bytes']}{cut}"
        if hashes and sha256_of(path) != expected["sha256"]:
            return f"{name} has other bytes than when it was written (its sha256 differs from {MANIFEST})"
    return None


def recover_folder(target: Path) -> None:
    """Finish what a kill interrupted in :func:`write_folder_atomic`: between its two renames the
    folder is at ``.NAME.old`` only; put it back."""
    old = target.with_name(f".{target.name}.old")
    if not target.exists() and old.is_dir():
        os.replace(old, target)


def write_folder_atomic(target: Path, fill: Callable[[Path], Any], **manifest: Any) -> None:
    """``fill(folder)`` a temporary folder, write its manifest last, then swap it in for ``target``.

    The previous ``target`` survives any failure: a failed fill (a full disk) removes the temporary
    folder; a kill between the two renames leaves the old folder at ``.NAME.old``, which
    :func:`recover_folder` puts back. ``manifest``: extra fields of the manifest (a checkpoint's step).
    """
    tmp = target.with_name(f".{target.name}.tmp")
    old = target.with_name(f".{target.name}.old")
    recover_folder(target)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        fill(tmp)
        write_manifest(tmp, **manifest)
    except BaseException:  # a failure or a stop at once: no half-written folder is left beside the whole one
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    try:
        os.replace(tmp, target)
    except Exception:
        recover_folder(target)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)


def save_model_atomic(
    model: nn.Module,
    tokenizer,
    target: Path,
    save: Callable[[nn.Module, Path], Any] | None = None,
) -> None:
    """Save into a temporary folder with its manifest, then swap it in: the old model survives any failure.

    ``save(model, folder)`` writes the model (default: ``model.save_pretrained(folder)``).
    """

    def fill(folder: Path) -> None:
        try:
            if save is None:
                model.save_pretrained(folder)
            else:
                save(model, folder)
        except Exception as error:  # safetensors reports a failed write as its own error: the OSError back
            found = re.search(r"\(os error (\d+)\)", str(error))
            if found is None or isinstance(error, OSError):
                raise
            code = int(found.group(1))
            raise OSError(code, os.strerror(code)) from error
        tokenizer.save_pretrained(folder)

    write_folder_atomic(target, fill)


# --------------------------------------------------------------------------------------------------
# The checkpoint folder: state.pt, state.json, manifest.json


class _Sink:
    """A binary file for ``torch.save`` that keeps the ``OSError`` of a failed write (which torch
    turns into a ``RuntimeError`` that no longer says what happened). A stop raised inside a write
    (Ctrl-C twice) torch turns into a ``RuntimeError`` too: :func:`_torch_save` raises the stop again."""

    def __init__(self, file: IO[bytes]) -> None:
        self.file = file
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        return self._keeping_error(self.file.write, data)

    def flush(self) -> None:
        self._keeping_error(self.file.flush)

    def _keeping_error(self, act: Callable[..., Any], *args: Any) -> Any:
        try:
            return act(*args)
        except OSError as error:
            self.error = error
            raise


def _torch_save(state: Any, file: IO[bytes]) -> None:
    sink = _Sink(file)
    try:
        torch.save(state, sink)
    except RuntimeError as error:
        if sink.error is not None:
            raise sink.error from None
        if isinstance(error.__context__, KeyboardInterrupt):  # a stop at once (a second Ctrl-C) in a write
            raise error.__context__ from None
        raise


def write_checkpoint(folder: Path, state: dict[str, Any], summary: dict[str, Any]) -> None:
    """Write a checkpoint folder whole: state.pt, state.json (``summary``), then its manifest.

    The folder is swapped in only once all three are written (:func:`write_folder_atomic`): a run
    killed, or stopped by a full disk, at any point leaves the previous checkpoint whole.
    """

    def fill(tmp: Path) -> None:
        _write_atomic(tmp / CHECKPOINT_FILE, lambda file: _torch_save(state, file))
        write_json_atomic(tmp / CHECKPOINT_SUMMARY, {**summary, "format": CHECKPOINT_FORMAT})

    write_folder_atomic(folder, fill, step=summary["step"])


def _summary_step(folder: Path) -> tuple[int | None, int | None]:
    """(step, format) that state.json names; None for what it does not say (or an unreadable file)."""
    try:
        summary = json.loads((folder / CHECKPOINT_SUMMARY).read_text())
        return int(summary["step"]), summary.get("format")
    except (OSError, ValueError, KeyError, TypeError):
        return None, None


def checkpoint_status(folder: Path, hashes: bool = False) -> CheckpointStatus:
    """What the checkpoint folder ``folder`` holds, by its manifest (sizes; sha256 too with ``hashes``).

    A folder without state.pt and without a manifest holds nothing to resume from (a first save killed
    early). A folder with state.pt and no manifest is ``unchecked`` when state.json does not name a
    format with manifests (``broken`` when it does: the manifest is written last, so the save did not
    finish).
    """
    if os.path.lexists(folder) and not folder.is_dir():
        return CheckpointStatus("broken", problem=f"{folder} is a file, not a folder")
    if not folder.is_dir():
        return CheckpointStatus("none")
    step, written_format = _summary_step(folder)
    try:
        manifest = read_manifest(folder)
    except ValueError as error:
        return CheckpointStatus("broken", step, str(error))
    if manifest is None:
        if not (folder / CHECKPOINT_FILE).is_file():
            return CheckpointStatus("none")
        if written_format not in (None, *UNCHECKED_FORMATS):
            return CheckpointStatus(
                "broken", step, f"it has no {MANIFEST} (written last: the save did not finish)"
            )
        return CheckpointStatus("unchecked", step)
    step = manifest.get("step")
    missing = [name for name in (CHECKPOINT_FILE, CHECKPOINT_SUMMARY) if name not in manifest["files"]]
    if missing or not isinstance(step, int):
        return CheckpointStatus(
            "broken", problem=f"{MANIFEST} is not a checkpoint's (no {', '.join(missing) or 'step'})"
        )
    problem = verify_folder(folder, hashes=hashes)
    return CheckpointStatus("broken" if problem else "complete", step, problem)


def read_checkpoint(folder: Path, map_location: Any = None) -> tuple[dict[str, Any], CheckpointStatus] | None:
    """The checkpoint in ``folder`` checked whole against its manifest (None: there is none).

    Raises :class:`CheckpointError` naming what is wrong: a file missing, cut short or changed since
    the manifest was written; a pickled object; another format; state.pt's step other than the
    manifest's. A checkpoint of a format before manifests is read when its state.pt loads whole.
    """
    status = checkpoint_status(folder, hashes=True)
    if status.kind == "none":
        return None
    if status.kind == "broken":
        raise CheckpointError.broken(folder, status.problem or "")
    path = folder / CHECKPOINT_FILE
    try:  # weights_only: tensors and plain values only; a pickled object (code) is refused
        checkpoint = load_checkpoint(path, map_location=map_location)
    except pickle.UnpicklingError as error:
        found = re.search(r"Unsupported global: GLOBAL (\S+)|Unsupported operand \d+", str(error))
        what = found.group(1) or found.group(0) if found else str(error).splitlines()[0]
        raise CheckpointError(
            f"refusing the checkpoint {path}: it holds a pickled Python object ({what}), and loading it "
            "could run code; attendout's checkpoints hold tensors and plain values only (start afresh "
            "with --overwrite instead of --resume)"
        ) from None
    except Exception as error:  # a truncated or foreign file
        first = str(error).splitlines()[0] if str(error) else ""
        raise CheckpointError(
            f"cannot read the checkpoint {path} ({type(error).__name__}: {first}); start afresh with "
            "--overwrite instead of --resume"
        ) from None
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"{path} is not an attendout checkpoint (a {type(checkpoint).__name__})")
    found_format = checkpoint.get("format")
    if found_format not in READABLE_FORMATS:
        raise CheckpointError(f"{path} has checkpoint format {found_format!r}, not one of {READABLE_FORMATS}")
    saved_step = (checkpoint.get("state") or {}).get("step")
    if status.kind == "unchecked" and found_format not in UNCHECKED_FORMATS:
        problem = f"it has no {MANIFEST}, which a checkpoint of format {found_format} writes last (the save did not finish)"
        raise CheckpointError.broken(folder, problem)
    if status.kind == "complete" and saved_step != status.step:
        raise CheckpointError.broken(
            folder, f"state.pt holds step {saved_step}, {MANIFEST} says {status.step}"
        )
    problem = None
    if status.kind == "unchecked" and status.step != saved_step:  # its writer wrote state.json second
        said = "is missing" if status.step is None else f"says step {status.step}"
        problem = (
            f"its {CHECKPOINT_SUMMARY} {said}: a kill came between the two writes, state.pt is the newer"
        )
    return checkpoint, CheckpointStatus(status.kind, saved_step, problem)
