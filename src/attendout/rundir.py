"""The run directory: atomic writes, the saved model, the resumable checkpoint's format.

Every file a run leaves is written whole or not at all (a temporary file or folder, then a rename),
so a run killed at any moment leaves the previous version of each file intact.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
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
    "rng_state",
    "save_model_atomic",
    "set_rng_state",
    "write_json_atomic",
]

CHECKPOINT_DIR = "checkpoint"
CHECKPOINT_FILE = "state.pt"
CHECKPOINT_SUMMARY = "state.json"  # the step of state.pt, readable without loading it
CHECKPOINT_FORMAT = 1


def rng_state(device: torch.device) -> dict[str, Any]:
    """Every random generator a training step may draw from (dropout, masks, the methods' samples)."""
    state = {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    torch.set_rng_state(state["torch"].cpu())
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    if device.type == "cuda" and "cuda" in state:
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader never sees half a file (temp file + rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        json.dump(data, tmp, indent=2, sort_keys=False, default=str)
        tmp.write("\n")
    os.replace(tmp.name, path)


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
