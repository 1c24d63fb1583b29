"""Filesystem faults around the run directory and the model folder (issue 30, part B).

Each fault is injected, and each test asserts what the run directory holds afterwards: either the last
complete state or nothing, never a checkpoint that looks whole and is not. A folder written whole (the
checkpoint, the saved model) is complete when its manifest.json, written last, agrees with its files;
``--resume`` trusts nothing else. Tests run as root here, so an unwritable folder is simulated (the
write raises ``PermissionError``), and a full disk is a file that takes some bytes, then raises
``ENOSPC`` as a real one does.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import attendout.core.folder as rundir
import attendout.core.lock as runlock
import attendout.run.runfolder as run_folder
import attendout.run.setup as run_setup
from attendout.cli import main
from attendout.config import TrainConfig
from attendout.core.folder import (
    CHECKPOINT_DIR,
    CHECKPOINT_FILE,
    CHECKPOINT_SUMMARY,
    MANIFEST,
    StorageError,
    checkpoint_status,
    verify_folder,
    write_checkpoint,
)
from attendout.run.loop import TrainingLoop, finetune
from conftest import log_numbers, save_tiny_model_dir, snapshot, toy_train_config, write_sentiment_csv

# --------------------------------------------------------------------------------------------------
# Shared toy data, one tiny model folder, one uninterrupted run and one killed run (module scope)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    root = tmp_path_factory.mktemp("storage")
    toy = {
        "root": root,
        "model": save_tiny_model_dir(root / "model"),  # the model's dropout on: the generators matter
        "train": write_sentiment_csv(root / "train.csv", 96, seed=0),
        "dev": write_sentiment_csv(root / "dev.csv", 24, seed=1),
    }
    toy["whole"] = finetune(config(toy, root / "whole"))
    return toy


def config(toy, out: Path, method: str = "none", options: dict | None = None, **overrides) -> TrainConfig:
    """9 steps, a validation every 3 and a checkpoint every 2 (and after each new best)."""
    return toy_train_config(
        toy,
        method=method,
        method_options=options or {},
        max_steps=9,
        eval_steps=3,
        log_steps=1,
        checkpoint_steps=2,
        output_dir=str(out),
        **overrides,
    )


def cli_args(toy, out: Path, *extra: str, model: str | None = None) -> list[str]:
    """The `attendout finetune` command of :func:`config`."""
    return [
        "finetune", "--task", "file", "--train-file", toy["train"], "--eval-file", f"dev={toy['dev']}",
        "--text-columns", "text", "--label-column", "label", "--model", str(model or toy["model"]),
        "--batch-size", "16", "--max-length", "16", "--max-steps", "9", "--eval-steps", "3",
        "--log-steps", "1", "--checkpoint-steps", "2", "--no-progress", "--output-dir", str(out), *extra,
    ]  # fmt: skip


class Killed(Exception):
    pass


def killed_run(toy, out: Path, method: str = "none", options: dict | None = None, at: int = 5) -> Path:
    """A run stopped after step ``at`` (as a kill would: nothing cleaned up); its checkpoint is of step 4."""

    def on_log(record: dict) -> None:
        if record.get("step") == at and "loss" in record:
            raise Killed

    with pytest.raises(Killed):
        TrainingLoop(config(toy, out, method, options), on_log=on_log).fit()
    return out


@pytest.fixture(scope="module")
def killed(toy):
    """A killed run of `none` to copy (each test corrupts its own copy)."""
    return killed_run(toy, toy["root"] / "killed")


def copy_of(folder: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(folder, out)
    return out


def refused(capsys, args: list[str], out: Path, code: int, *needles: str) -> str:
    """Run the CLI: exit ``code``, one message line naming every needle, no traceback, ``out`` unchanged."""
    before = snapshot(out)
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == code, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("attendout: ")]
    assert len(lines) == 1 and ("error" in lines[0] or "failed" in lines[0]), err
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert snapshot(out) == before
    return lines[0]


def no_temporaries(out: Path) -> None:
    """Nothing half-written is left: no temporary file or folder, no lock."""
    left = [str(p.relative_to(out)) for p in out.rglob(".*")]
    assert left == [], left


def same_numbers(results: dict, whole: dict) -> None:
    for key in ("eval", "validation", "best_step", "total_steps"):
        assert results[key] == whole[key], key


# --------------------------------------------------------------------------------------------------
# The output path


def test_an_output_dir_that_is_a_file_is_refused(toy, tmp_path, capsys):
    out = tmp_path / "runs"
    out.write_text("my notes\n")
    refused(capsys, cli_args(toy, out), out.parent, 2, f"--output-dir {out} is a file, not a folder")
    assert out.read_text() == "my notes\n"


def test_an_output_dir_under_a_file_is_refused(toy, tmp_path, capsys):
    (tmp_path / "runs").write_text("")
    out = tmp_path / "runs" / "cola"
    refused(capsys, cli_args(toy, out), tmp_path, 2, f"{tmp_path / 'runs'} is a file, not a folder")


def test_an_unwritable_output_dir_is_refused_before_anything_is_loaded(toy, tmp_path, capsys, monkeypatch):
    (tmp_path / "ro").mkdir()
    out = tmp_path / "ro" / "run"
    access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != out.parent and access(p, mode, **kw))
    monkeypatch.setattr(run_setup, "load_for_task", lambda *a, **kw: pytest.fail("the model was loaded"))
    refused(
        capsys, cli_args(toy, out), tmp_path, 2, f"--output-dir {out} cannot be written", "permission denied"
    )


@pytest.mark.parametrize("fails", ["the lock", "log.jsonl", "config.json"])
def test_a_permission_error_at_the_first_writes_leaves_a_finished_run_as_it_was(
    toy, tmp_path, capsys, monkeypatch, fails
):
    """The folder cannot be written (as root, simulated: each open of a new file under it fails):
    with --overwrite on a finished run, the run is refused with one line and stays whole."""
    out = copy_of(toy["root"] / "whole", tmp_path)
    opened = os.open

    def denied(path, flags, *args, **kwargs):
        name = Path(path).name
        hit = {"the lock": name == runlock.LOCK_FILE, "log.jsonl": name.startswith(".log.jsonl.")}
        hit["config.json"] = name.startswith(".config.json.")
        if Path(path).parent == out and flags & os.O_CREAT and hit[fails]:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return opened(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    before = snapshot(out)
    rc = main(cli_args(toy, out, "--overwrite"))
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert (
        f"attendout: error: cannot write the run directory {out} (PermissionError: permission denied" in err
    )
    assert "make the folder writable, or choose another --output-dir" in err
    after = snapshot(out)
    if fails == "the lock":  # the first write: nothing changed at all
        assert after == before
    else:  # --overwrite had begun: nothing of the finished run is left, nothing of the new one but its log
        empty = hashlib.sha256(b"").hexdigest()
        assert after == ({} if fails == "log.jsonl" else {"log.jsonl": empty})
    no_temporaries(out)


# --------------------------------------------------------------------------------------------------
# The disk fills mid-run


class FullDisk:
    """A file that takes ``room`` more bytes, then fails as a full disk does (or with another ``code``)."""

    code = errno.ENOSPC

    def __init__(self, file, room: int) -> None:
        self.file, self.room = file, room

    def write(self, data) -> int:
        if len(data) > self.room:
            self.file.write(data[: self.room])
            self.room = 0
            raise OSError(self.code, os.strerror(self.code))
        self.room -= len(data)
        return self.file.write(data)

    def flush(self) -> None:
        self.file.flush()

    def __enter__(self) -> FullDisk:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def fill_disk_at(monkeypatch, point: str, call: int) -> None:
    """Make the ``call``-th write at ``point`` meet a full disk, after part of its bytes are written."""
    calls = {"n": 0}

    def due() -> bool:
        calls["n"] += 1
        return calls["n"] == call

    if point in ("model.safetensors", "log.jsonl"):
        if point == "model.safetensors":  # inside save_pretrained: half the weights written, then ENOSPC
            from safetensors import SafetensorError
            from transformers import PreTrainedModel

            save = PreTrainedModel.save_pretrained

            def half_save(self, folder, *args, **kwargs):
                save(self, folder, *args, **kwargs)
                if due():
                    weights = Path(folder) / "model.safetensors"
                    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
                    # what safetensors raises on a full disk (its own error, the errno in the text)
                    raise SafetensorError(
                        "Error while serializing: I/O error: No space left on device (os error 28)"
                    )

            monkeypatch.setattr(PreTrainedModel, "save_pretrained", half_save)
        else:  # an appended log line cut short

            def log_open(path, mode="r", *args, **kwargs):
                file = open(path, mode, *args, **kwargs)
                return FullDisk(file, 10) if Path(path).name == "log.jsonl" and due() else file

            monkeypatch.setattr(run_folder, "open", log_open, raising=False)
        return
    folder, _, name = point.rpartition("/")
    write_atomic = rundir._write_atomic

    def filling(path: Path, write) -> None:
        if path.name == name and (not folder or path.parent.name == folder) and due():
            return write_atomic(path, lambda file: write(FullDisk(file, 1000 if name == "state.pt" else 20)))
        return write_atomic(path, write)

    monkeypatch.setattr(rundir, "_write_atomic", filling)


# (where, which call, the step of the checkpoint left intact). Checkpoints: steps 2, 3 (a new best), 4, 6,
# 8; the best model is saved at step 3 (the later validations are no better); log lines: steps 1, 2, 3,
# validation 3, steps 4, 5, 6, ...
DISK_FULL = [
    ("state.pt", 3, 3),  # inside torch.save of step 4's state
    ("state.json", 2, 2),  # step 3's summary
    (f".{CHECKPOINT_DIR}.tmp/{MANIFEST}", 4, 4),  # step 6's manifest, written last
    ("model.safetensors", 1, 2),  # the best model of step 3, half its weights written
    (f".model.tmp/{MANIFEST}", 1, 2),  # that model's manifest
    ("log.jsonl", 7, 4),  # the line of step 6 cut short
    ("dev.jsonl", 1, 8),  # the final predictions
    ("results.json", 1, 8),  # the very last write
]


@pytest.mark.parametrize("point,call,intact", DISK_FULL, ids=[p for p, _, _ in DISK_FULL])
def test_a_full_disk_mid_run_leaves_the_last_complete_checkpoint_and_a_resume_ends_as_the_whole_run(
    toy, tmp_path, monkeypatch, point, call, intact
):
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        fill_disk_at(patch, point, call)
        with pytest.raises(StorageError) as caught:
            finetune(config(toy, out))
    message = str(caught.value)
    assert "\n" not in message and "(OSError: no space left on device" in message, message
    assert f"the checkpoint of step {intact} in {out / CHECKPOINT_DIR} is intact" in message
    assert message.endswith("free some space, then run the same command with --resume")
    # What the folder holds: the checkpoint of that step, whole by its manifest; the best model whole;
    # no temporary file or folder; no results.
    no_temporaries(out)
    status = checkpoint_status(out / CHECKPOINT_DIR, hashes=True)
    assert (status.kind, status.step) == ("complete", intact)
    if (out / "model").exists():
        assert verify_folder(out / "model") is None
    assert not (out / "results.json").exists()
    resumed = finetune(config(toy, out, resume=True))
    assert resumed["resumed"]["step"] == intact
    same_numbers(resumed, toy["whole"])
    assert log_numbers(out) == log_numbers(toy["root"] / "whole")
    assert not (out / CHECKPOINT_DIR).exists()


def test_a_folder_made_unwritable_mid_run_says_so_and_keeps_the_last_checkpoint(toy, tmp_path, monkeypatch):
    out = tmp_path / "run"
    with monkeypatch.context() as patch:
        patch.setattr(FullDisk, "code", errno.EACCES)
        fill_disk_at(patch, CHECKPOINT_FILE, 4)  # step 6's state
        with pytest.raises(
            StorageError, match=r"\(PermissionError: .* step 4 .* intact; make the folder writable"
        ):
            finetune(config(toy, out))
    no_temporaries(out)
    assert checkpoint_status(out / CHECKPOINT_DIR, hashes=True).step == 4
    assert finetune(config(toy, out, resume=True))["resumed"]["step"] == 4


def test_a_full_disk_is_one_line_at_the_cli_with_exit_code_1(toy, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    fill_disk_at(monkeypatch, "results.json", 1)
    assert main(cli_args(toy, out)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [line for line in err.splitlines() if line.startswith("attendout: ")]
    assert line.startswith(f"attendout: training failed: could not write {out / 'results.json'} (OSError: ")
    no_temporaries(out)


def test_a_failed_checkpoint_write_leaves_no_temporary_folder_and_the_old_checkpoint(tmp_path, monkeypatch):
    """write_checkpoint itself, at every write it makes: the previous checkpoint stays, whole."""
    folder = tmp_path / CHECKPOINT_DIR
    write_checkpoint(folder, {"format": 3, "state": {"step": 2}}, {"step": 2})
    before = snapshot(folder)
    for point in (CHECKPOINT_FILE, CHECKPOINT_SUMMARY, MANIFEST):
        with monkeypatch.context() as patch:
            fill_disk_at(patch, point, 1)
            with pytest.raises(OSError) as caught:
                write_checkpoint(
                    folder, {"format": 3, "state": {"step": 4}, "x": torch.ones(999)}, {"step": 4}
                )
        assert caught.value.errno == errno.ENOSPC  # not torch's RuntimeError that hides it
        assert snapshot(folder) == before and sorted(p.name for p in tmp_path.iterdir()) == [CHECKPOINT_DIR]
    write_checkpoint(folder, {"format": 3, "state": {"step": 4}}, {"step": 4})
    assert checkpoint_status(folder, hashes=True).step == 4


def test_a_failed_model_save_leaves_the_previous_model_whole(tmp_path, monkeypatch):
    """save_model_atomic at each of its writes (the weights, the tokenizer, the manifest): the best model
    saved before stays, whole by its manifest, and no temporary folder is left."""
    from conftest import tiny_model

    class Tokenizer:
        def save_pretrained(self, folder):
            rundir.write_json_atomic(Path(folder) / "tokenizer.json", {"vocab": [f"w{i}" for i in range(99)]})

    target = tmp_path / "model"
    rundir.save_model_atomic(tiny_model(), Tokenizer(), target)
    before = snapshot(target)
    for point in ("model.safetensors", "tokenizer.json", f".model.tmp/{MANIFEST}"):
        with monkeypatch.context() as patch:
            fill_disk_at(patch, point, 1)
            with pytest.raises(OSError) as caught:
                rundir.save_model_atomic(tiny_model(seed=1), Tokenizer(), target)
        assert caught.value.errno == errno.ENOSPC, point
        assert snapshot(target) == before and verify_folder(target) is None, point
        assert sorted(p.name for p in tmp_path.iterdir()) == ["model"], point


# --------------------------------------------------------------------------------------------------
# A checkpoint left by a killed run, or damaged since


def flip_byte(path: Path, at: float = 0.5) -> None:
    """One bit changed, at a fraction ``at`` of the file (or at byte ``at`` when it is an int)."""
    data = bytearray(path.read_bytes())
    data[at if isinstance(at, int) else int(len(data) * at)] ^= 0x01
    path.write_bytes(bytes(data))


def rewrite_summary(folder: Path, **values) -> None:
    summary = folder / CHECKPOINT_SUMMARY
    summary.write_text(json.dumps({**json.loads(summary.read_text()), **values}))


def set_manifest_step(folder: Path) -> None:
    manifest = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**manifest, "step": 6}))


def fake_state_pt(folder: Path) -> None:
    """state.pt replaced by another, whole, of another step; the manifest updated to it (its sizes and
    hashes agree) but for its step: the manifest's step must be state.pt's."""
    path = folder / CHECKPOINT_FILE
    state = torch.load(path, weights_only=True)
    state["state"]["step"] = 2
    torch.save(state, path)
    manifest = json.loads((folder / MANIFEST).read_text())
    manifest["files"][CHECKPOINT_FILE] = {
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    (folder / MANIFEST).write_text(json.dumps(manifest))


BROKEN = {
    "state.pt truncated": (
        lambda c: (c / CHECKPOINT_FILE).write_bytes((c / CHECKPOINT_FILE).read_bytes()[:5000]),
        ["state.pt has 5000 bytes", "(truncated)"],
    ),
    "state.pt one byte changed": (
        lambda c: flip_byte(c / CHECKPOINT_FILE),
        ["state.pt has other bytes than when it was written"],
    ),
    "state.json missing": (lambda c: (c / CHECKPOINT_SUMMARY).unlink(), ["state.json is missing"]),
    "state.json at another step": (
        lambda c: rewrite_summary(c, step=6),
        ["state.json has"],
    ),
    "manifest missing": (lambda c: (c / MANIFEST).unlink(), ["it has no manifest.json", "did not finish"]),
    "manifest not JSON": (
        lambda c: (c / MANIFEST).write_text('{"files": {'),
        ["manifest.json is not valid JSON"],
    ),
    "manifest at another step": (
        lambda c: set_manifest_step(c),
        ["state.pt holds step 4, manifest.json says 6"],
    ),
    "state.pt of another step": (lambda c: fake_state_pt(c), ["state.pt holds step 2, manifest.json says 4"]),
}


@pytest.mark.parametrize("damage", list(BROKEN), ids=list(BROKEN))
def test_resume_refuses_an_incomplete_or_corrupt_checkpoint_and_changes_nothing(
    toy, killed, tmp_path, capsys, damage
):
    out = copy_of(killed, tmp_path)
    hurt, needles = BROKEN[damage]
    hurt(out / CHECKPOINT_DIR)
    line = refused(
        capsys, cli_args(toy, out, "--resume"), out, 1, f"cannot resume from {out / CHECKPOINT_DIR}", *needles
    )
    assert "--overwrite instead of --resume" in line
    # Without --resume the run is not silently started afresh over it either ...
    refused(
        capsys,
        cli_args(toy, out),
        out,
        2,
        "holds an unfinished run with a checkpoint",
        "--resume",
        "--overwrite",
    )
    # ... and --overwrite is the flag that says so.
    results = finetune(config(toy, out, overwrite=True))
    assert "resumed" not in results and not (out / CHECKPOINT_DIR).exists()
    same_numbers(results, toy["whole"])


def test_resume_refuses_a_checkpoint_whose_best_model_is_corrupt(toy, killed, tmp_path, capsys):
    out = copy_of(killed, tmp_path)
    flip_byte(out / "model" / "model.safetensors", at=0.9)
    refused(
        capsys,
        cli_args(toy, out, "--resume"),
        out,
        1,
        "the best model so far (step 3)",
        "model.safetensors has other bytes",
    )


def test_the_checkpoint_folder_left_between_two_renames_or_a_half_written_one_beside_it_resumes(
    toy, killed, tmp_path
):
    out = copy_of(killed, tmp_path)
    os.replace(out / CHECKPOINT_DIR, out / f".{CHECKPOINT_DIR}.old")  # killed between the swap's renames
    (out / f".{CHECKPOINT_DIR}.tmp").mkdir()  # and a next save killed midway
    (out / f".{CHECKPOINT_DIR}.tmp" / CHECKPOINT_FILE).write_bytes(b"PK\x03\x04 half")
    results = finetune(config(toy, out, resume=True))
    assert results["resumed"]["step"] == 4
    same_numbers(results, toy["whole"])
    no_temporaries(out)


def as_written_before_manifests(folder: Path) -> None:
    """The checkpoint as attendout 0.x wrote it (format 2): state.pt and state.json, no manifest."""
    path = folder / CHECKPOINT_FILE
    state = torch.load(path, weights_only=True)
    torch.save({**state, "format": 2}, path)
    (folder / MANIFEST).unlink()
    summary = json.loads((folder / CHECKPOINT_SUMMARY).read_text())
    (folder / CHECKPOINT_SUMMARY).write_text(json.dumps({k: v for k, v in summary.items() if k != "format"}))


@pytest.mark.parametrize("summary", ["agrees", "missing", "older"])
def test_a_checkpoint_written_before_manifests_resumes_with_a_warning(toy, killed, tmp_path, caplog, summary):
    """Its writer renamed state.pt into place whole (state.json after it: a kill between the two leaves
    it older or missing), so a state.pt that loads is the last whole state; nothing can check its bytes,
    and the warning says so."""
    out = copy_of(killed, tmp_path)
    as_written_before_manifests(out / CHECKPOINT_DIR)
    if summary == "missing":
        (out / CHECKPOINT_DIR / CHECKPOINT_SUMMARY).unlink()
    if summary == "older":  # killed between state.pt's rename and state.json's
        rewrite_summary(out / CHECKPOINT_DIR, step=3)
    assert checkpoint_status(out / CHECKPOINT_DIR).kind == "unchecked"
    results = finetune(config(toy, out, resume=True))
    assert "written by an older attendout, without manifest.json: its files cannot be checked" in caplog.text
    assert "loaded whole (step 4)" in caplog.text
    said = {"agrees": None, "missing": "state.json is missing", "older": "state.json says step 3"}[summary]
    assert said is None or f"(its {said}: a kill came between the two writes" in caplog.text
    assert results["resumed"]["step"] == 4
    same_numbers(results, toy["whole"])


def test_a_truncated_checkpoint_written_before_manifests_is_refused(toy, killed, tmp_path, capsys):
    out = copy_of(killed, tmp_path)
    as_written_before_manifests(out / CHECKPOINT_DIR)
    state = out / CHECKPOINT_DIR / CHECKPOINT_FILE
    state.write_bytes(state.read_bytes()[:5000])
    refused(capsys, cli_args(toy, out, "--resume"), out, 1, f"cannot read the checkpoint {state}")


# Methods whose own training state goes into the checkpoint (AttendOut's Attacker and Generator), whose
# architecture does (Synthesizer's new weights and their optimizer group), or whose rate and phase follow
# the step (scheduled, AD-DROP, DropHead's draws from the generators).
METHODS = [
    ("attendout", {"dropout_steps": 3, "eval_samples": 8}),
    ("addrop", {"cross_tuning": "off", "start": "addrop"}),
    ("synthesizer", {"variant": "random+dot", "synthesizer_lr": 0.01}),
    ("scheduled", {"start": 0.6, "slopes": "-0.5,-0.2"}),
    ("drophead", {"p": 0.3}),
]


@pytest.mark.parametrize("method,options", METHODS, ids=[m for m, _ in METHODS])
def test_every_methods_checkpoint_is_refused_corrupt_and_resumes_intact(
    toy, tmp_path, capsys, method, options
):
    out = killed_run(toy, tmp_path / "run", method, options)
    folder = out / CHECKPOINT_DIR
    state = torch.load(folder / CHECKPOINT_FILE, weights_only=True)
    assert state["state"]["step"] == 4 and state["config"]["method"] == method
    intact = (folder / CHECKPOINT_FILE).read_bytes()
    flip_byte(folder / CHECKPOINT_FILE, at=0.7)
    flags = ["--method", method, *(f"--{k.replace('_', '-')}={v}" for k, v in options.items()), "--resume"]
    refused(capsys, cli_args(toy, out, *flags), out, 1, "state.pt has other bytes than when it was written")
    (folder / CHECKPOINT_FILE).write_bytes(intact)
    resumed = TrainingLoop(config(toy, out, method, options, resume=True))
    assert resumed.state.step == 4
    results = resumed.fit()
    assert results["resumed"]["step"] == 4 and not folder.exists()
    assert verify_folder(out / "model") is None  # the best model, whole by its manifest
    no_temporaries(out)


# --------------------------------------------------------------------------------------------------
# The model folder given as --model


def damaged_model(toy, tmp_path: Path, damage) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(toy["model"], folder)
    damage(folder)
    return folder


def nan_weights(folder: Path) -> None:
    """Bytes inside the tensors set to 0xFF: float32 NaNs, with the header intact."""
    path = folder / "model.safetensors"
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = b"\xff" * 64
    path.write_bytes(bytes(data))


MODEL_DAMAGE = {
    "weights truncated": (
        lambda f: (f / "model.safetensors").write_bytes((f / "model.safetensors").read_bytes()[:3000]),
        ["model.safetensors is truncated or corrupt"],
    ),
    "weights header garbled": (
        lambda f: flip_byte(f / "model.safetensors", at=8),
        ["model.safetensors is truncated or corrupt"],
    ),
    "weights empty": (
        lambda f: (f / "model.safetensors").write_bytes(b""),
        ["model.safetensors is truncated or corrupt"],
    ),
    "weights NaN": (nan_weights, ["holds NaN or infinite values", "weights file is corrupt"]),
    "config.json missing": (lambda f: (f / "config.json").unlink(), ["has no config.json"]),
    "config.json not JSON": (
        lambda f: (f / "config.json").write_text('{"model_type": "be'),
        ["config.json is not valid JSON"],
    ),
}


@pytest.mark.parametrize("damage", list(MODEL_DAMAGE), ids=list(MODEL_DAMAGE))
def test_a_damaged_model_folder_is_one_clear_line_naming_the_file(toy, tmp_path, capsys, damage):
    hurt, needles = MODEL_DAMAGE[damage]
    model = damaged_model(toy, tmp_path, hurt)
    out = tmp_path / "out"
    line = refused(capsys, cli_args(toy, out, model=str(model)), out, 2, str(model), *needles)
    assert "copy the model folder again" in line or "save_pretrained" in line


def test_a_model_folder_attendout_saved_is_checked_byte_for_byte(toy, tmp_path, capsys):
    """A run's model/ as --model: one changed bit inside a weight (finite, invisible otherwise) is caught
    by its manifest; so is `attendout predict` on the run."""
    run = copy_of(toy["root"] / "whole", tmp_path)
    weights = run / "model" / "model.safetensors"
    flip_byte(weights, at=0.6)
    out = tmp_path / "out"
    refused(
        capsys,
        cli_args(toy, out, model=str(run / "model")),
        out,
        2,
        f"model folder {run / 'model'} does not match the manifest.json",
        "model.safetensors has other bytes",
        "delete manifest.json",
    )
    refused(capsys, ["predict", str(run), "--split", "dev"], run, 2, "model.safetensors has other bytes")


@pytest.mark.parametrize("damage", ["weights truncated", "weights NaN"])
def test_the_python_api_checks_a_run_model_folder_as_the_cli_does(toy, tmp_path, damage):
    """attendout.load_model: the same ModelFileError as --model, not a safetensors traceback or NaN logits."""
    import attendout
    from attendout.models.loading import ModelFileError

    run = copy_of(toy["root"] / "whole", tmp_path)
    assert attendout.load_model(run / "model") is not None  # whole: loads
    hurt, needles = MODEL_DAMAGE[damage]
    hurt(run / "model")
    with pytest.raises(ModelFileError) as error:
        attendout.load_model(run / "model")
    assert str(run / "model") in str(error.value)


def test_any_other_file_that_cannot_be_written_is_one_line_at_the_cli(toy, tmp_path, capsys):
    (tmp_path / "notes").write_text("")
    out = tmp_path / "notes" / "dev.csv"
    rc = main(["predict", str(toy["root"] / "whole"), "--split", "dev", "--output", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1].startswith("attendout: error: ") and str(tmp_path / "notes") in err


# --------------------------------------------------------------------------------------------------
# `attendout bench`: the same completeness rule


def test_bench_adopts_only_a_complete_checkpoint(tmp_path):
    from attendout.bench import Budget, ResultsStore, load_experiment
    from attendout.bench.store import checkpoint_step, has_checkpoint
    from test_bench import write_experiment

    tiny = {"tmp": tmp_path, "model": "unused", "train": "unused.csv", "dev": "unused.csv"}
    experiment = load_experiment(write_experiment(tiny, seeds=(1,)))
    cell = experiment.cells()[0]
    store = ResultsStore(tmp_path / "results")
    store.prepare(experiment, Budget())
    works = {}
    for age, name in enumerate(["complete", "broken", "half"]):  # the newest last
        works[name] = store.work_root / f"{cell.flat_key}--host-1-{name}"
        write_checkpoint(
            works[name] / CHECKPOINT_DIR, {"format": 3, "state": {"step": 4 + age}}, {"step": 4 + age}
        )
        os.utime(works[name], (1000 + age, 1000 + age))
    state = works["broken"] / CHECKPOINT_DIR / CHECKPOINT_FILE
    state.write_bytes(state.read_bytes()[:100])  # cut short after its manifest was written
    (works["half"] / CHECKPOINT_DIR / MANIFEST).unlink()  # a save that did not finish
    assert [has_checkpoint(w) for w in works.values()] == [True, False, False]
    assert store.resumable(cell) == (True, 4)
    ours = store.work_root / f"{cell.flat_key}--host-2-ours"
    assert store.adopt_work(cell, ours) == 4 and checkpoint_step(ours) == 4
    assert sorted(p.name for p in store.work_root.iterdir()) == [ours.name]


def test_one_liveness_rule_for_every_owner_on_this_host_and_on_others(monkeypatch):
    """runlock.Owner.alive, which grid claims and advise trials share: on this host the process itself
    (and the same process: a reused pid has another start time); elsewhere the heartbeat's age."""
    import subprocess
    import sys
    import time

    me = runlock.Owner.this_process()
    assert me.alive(None, stale_after=1.0)  # no heartbeat needed for a process this host can see
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = runlock.Owner(me.host, int(gone.stdout), None)
    assert not dead.alive(time.time(), stale_after=900.0)  # a fresh heartbeat does not revive a dead pid
    if me.pid_start is not None:  # Linux: a pid reused by another process
        assert not runlock.Owner(me.host, me.pid, "1").alive(time.time(), stale_after=900.0)
    elsewhere = runlock.Owner(me.host + "-other", me.pid, me.pid_start)
    assert elsewhere.alive(time.time() - 10, stale_after=60.0)
    assert not elsewhere.alive(time.time() - 120, stale_after=60.0)
    assert not elsewhere.alive(None, stale_after=60.0)
