"""The run directory: atomic writes, the saved model, the resumable checkpoint's format, its lock.

Every file a run leaves is written whole or not at all (a temporary file or folder, then a rename),
so a run killed at any moment leaves the previous version of each file intact (tests/test_faults.py
kills runs at such moments). The checkpoint holds plain data only and loads with ``weights_only=True``.
One run writes a folder at a time (:class:`RunLock`).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = [
    "CHECKPOINT_DIR",
    "CHECKPOINT_FILE",
    "CHECKPOINT_FORMAT",
    "CHECKPOINT_SUMMARY",
    "LOCK_FILE",
    "READABLE_FORMATS",
    "RunBusyError",
    "RunLock",
    "load_checkpoint",
    "recover_folder",
    "rng_state",
    "save_model_atomic",
    "set_rng_state",
    "write_json_atomic",
    "write_text_atomic",
]

CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "state.pt"
CHECKPOINT_SUMMARY = "state.json"  # the step of state.pt, readable without loading it
#: 2: everything in state.pt loads with ``torch.load(..., weights_only=True)`` (tensors, numbers,
#: strings, lists, dicts): a checkpoint carries no code. Format 1 held numpy's random state as an
#: array: it is still read, with numpy's array constructors allowed (:func:`load_checkpoint`).
CHECKPOINT_FORMAT = 2
READABLE_FORMATS = (1, 2)


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every random generator a training step may draw from (dropout, masks, the methods' samples).

    Plain data only (tensors, ints, floats, strings, lists), so that it loads with ``weights_only=True``.
    """
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": [version, list(internal), gauss],
        "numpy": [
            str(name),
            torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            int(pos),
            int(has_gauss),
            float(cached),
        ],
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"].cpu())
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    keys = np.asarray(keys.cpu().numpy() if isinstance(keys, torch.Tensor) else keys, dtype=np.uint32)
    np.random.set_state((name, keys, pos, has_gauss, cached))
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


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


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader never sees half a file (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        json.dump(data, tmp, indent=2, sort_keys=False, default=str)
        tmp.write("\n")
    os.replace(tmp.name, path)


def write_text_atomic(path: Path, text: str) -> None:
    """Write text so that a reader never sees half a file (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


def recover_folder(target: Path) -> None:
    """Finish what a kill interrupted in :func:`save_model_atomic`: between its two renames the folder
    is at ``.NAME.old`` only; put it back."""
    old = target.with_name(f".{target.name}.old")
    if not target.exists() and old.is_dir():
        os.replace(old, target)


def save_model_atomic(
    model: nn.Module,
    tokenizer,
    target: Path,
    save: Callable[[nn.Module, Path], Any] | None = None,
) -> None:
    """Save into a temporary folder, then swap it in: the old checkpoint survives any failure.

    ``save(model, folder)`` writes the model (default: ``model.save_pretrained(folder)``).
    """
    tmp = target.with_name(f".{target.name}.tmp")
    old = target.with_name(f".{target.name}.old")
    recover_folder(target)
    shutil.rmtree(tmp, ignore_errors=True)
    if save is None:
        model.save_pretrained(tmp)
    else:
        save(model, tmp)
    tokenizer.save_pretrained(tmp)
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    os.replace(tmp, target)
    shutil.rmtree(old, ignore_errors=True)


# --------------------------------------------------------------------------------------------------
# One writer per run directory

LOCK_FILE = ".attendout.lock"
_HELD: dict[str, int] = {}  # lock files this process holds: real path -> open descriptor


class RunBusyError(FileExistsError):
    """Another run (a live process) is writing the same run directory."""


class RunLock:
    """An exclusive lock on a run directory: ``RUN_DIR/.attendout.lock``, held with ``flock``.

    The file names the holder (pid, host, start time). The kernel drops a ``flock`` when its process
    dies, so the lock of a killed run is stale at once and the next run takes it over; a lock held by
    a live process is a :class:`RunBusyError`. Within one process the lock is shared (a second
    ``Trainer`` on the same folder takes over from one that was never run). :meth:`release` removes
    the file. Without ``fcntl`` (Windows) there is no lock.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path = self.folder / LOCK_FILE

    def acquire(self) -> None:
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not POSIX
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        key = os.path.realpath(self.path)
        if key in _HELD:
            return
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                holder = os.read(fd, 200).decode(errors="replace").strip() or "a process"
                os.close(fd)
                raise RunBusyError(
                    f"{self.folder} is in use by another run ({holder}; lock file {self.path}); wait for it "
                    "to end or choose another --output-dir"
                ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:  # its holder removed it between our open and lock: again
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        started = time.strftime("%Y-%m-%d %H:%M:%S")
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {started}\n".encode())
        _HELD[key] = fd

    def release(self) -> None:
        fd = _HELD.pop(os.path.realpath(self.path), None)
        if fd is None:
            return
        self.path.unlink(missing_ok=True)
        os.close(fd)  # closing drops the flock
