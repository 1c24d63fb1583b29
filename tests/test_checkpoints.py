"""Checkpoints carry no code (issue 21): plain data, read with weights_only=True; format 1 (written
before manifests, issue 30) still resumes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attendout.core.folder import (
    CHECKPOINT_DIR,
    CHECKPOINT_FILE,
    CHECKPOINT_FORMAT,
    MANIFEST,
    load_checkpoint,
)
from attendout.run.loop import TrainingLoop, finetune
from test_resume import KILL_AT, Killed, kill_at, run_config


def test_a_checkpoint_is_plain_data_and_a_format_1_checkpoint_still_resumes_exactly(tiny_run):
    whole = finetune(run_config(tiny_run, "whole", "none", {}))
    with pytest.raises(Killed):
        TrainingLoop(run_config(tiny_run, "old", "none", {}), on_log=kill_at(KILL_AT)).fit()
    path = tiny_run["tmp"] / "old" / CHECKPOINT_DIR / CHECKPOINT_FILE
    state = torch.load(path, weights_only=True)  # no allow-list needed: tensors and plain values only
    assert state["format"] == CHECKPOINT_FORMAT == 3
    # Rewrite it as attendout wrote format 1: random.getstate()'s tuple, numpy's state with an array,
    # and no manifest (state.json without a format).
    version, internal, gauss = state["rng"]["python"]
    name, keys, pos, has_gauss, cached = state["rng"]["numpy"]
    state["rng"]["python"] = (version, tuple(internal), gauss)
    state["rng"]["numpy"] = (name, keys.numpy().astype(np.uint32), pos, has_gauss, cached)
    state["format"] = 1
    torch.save(state, path)
    (path.parent / MANIFEST).unlink()
    summary = path.parent / "state.json"
    summary.write_text(
        json.dumps({k: v for k, v in json.loads(summary.read_text()).items() if k != "format"})
    )
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(path, weights_only=True)  # numpy's array is a global ...
    assert load_checkpoint(path)["format"] == 1  # ... which load_checkpoint allows, and nothing else
    resumed = TrainingLoop(run_config(tiny_run, "old", "none", {}, resume=True))
    assert resumed.state.step == 4
    results = resumed.fit()
    assert results["eval"] == whole["eval"] and results["validation"] == whole["validation"]
