"""The results root of a grid: finished cells, claims of running cells, and atomic publication.

Layout (``ROOT`` is the results root, e.g. ``results/cpu-small``)::

    ROOT/experiment.json                 the experiment name and file, and the budget overrides
    ROOT/MODEL/TASK/METHOD/seed-N/       a finished cell: cell.json, config.json, log.jsonl,
                                         results.json, predictions/SPLIT.jsonl.gz (model/ if asked)
    ROOT/.work/KEY--HOST-PID-TOKEN/      a cell being trained (the Trainer's output_dir)
    ROOT/.claims/KEY.json                who is training KEY: host, pid, token; touched as a heartbeat
    ROOT/.bench/events.jsonl             start / done / failed / takeover events of every job
    ROOT/.bench/failed/KEY.json          the last failure of a cell (retried on the next run)

A claim file and its primitives are :mod:`.claims`'s; the event log and the failures, :mod:`.joblog`'s.

Guarantees, for any number of jobs on any number of machines sharing ``ROOT``:

* A cell is finished if and only if its folder exists: a job trains in ``.work/`` and publishes
  with one ``rename`` of the whole folder (atomic on POSIX file systems), after ``results.json``
  and ``cell.json`` are written. A job killed at any point (SIGKILL included) leaves at most a
  work folder and a claim, never a half-finished cell folder.
* A claim is created atomically (a fully written temporary file hard-linked to the claim name,
  which fails if the name exists), so two jobs never both believe they own a live claim.
* A claim is stale when its owner is gone: on the same host, its pid is not running (or was
  reused by another process, told by the process start time); from another host, its heartbeat
  (the claim's modification time, refreshed every ``HEARTBEAT_S`` seconds while training) is older
  than ``stale_after`` seconds. A stale claim is moved aside atomically before the cell is claimed
  again; its work folder is removed, unless it holds a training checkpoint (cells checkpoint at
  every validation): then the new owner moves it under its own name and resumes the cell from
  there (:meth:`ResultsStore.adopt_work`), to the numbers an uninterrupted run gives.
* Should two jobs still train one cell (a stale-claim race, or a job paused longer than
  ``stale_after``), only the first ``rename`` publishes; the other result is discarded. A cell is
  therefore never counted twice.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

from ..core.folder import RunDir, portable
from ..core.lock import Owner, process_start_time, this_host
from .claims import (
    STALE_AFTER_S,
    Claim,
    ClaimInfo,
    create_exclusive,
    read_claim,
    remove_aside,
    take_over,
    unreadable_and_old,
)
from .joblog import JobLog
from .spec import Budget, Cell, Experiment, ExperimentError

GITIGNORE = ".work/\n.claims/\n.bench/\nmodel/\n"


def default_results_root(experiment: Experiment, budget: Budget | None = None) -> Path:
    """``results/NAME`` (relative to the working directory; NAME is the file's ``results`` or the
    experiment's name), suffixed by the budget overrides."""
    suffix = budget.suffix() if budget is not None else ""
    return Path("results") / f"{experiment.results_name}{suffix}"


class ResultsStore(JobLog):
    """One results root shared by every job of a grid (see the module docstring); its job log
    (:class:`~attendout.bench.joblog.JobLog`) says what every job did."""

    def __init__(self, root: str | Path, stale_after: float = STALE_AFTER_S):
        self.root = Path(root)
        self.work_root = self.root / ".work"
        self.claims_root = self.root / ".claims"
        self.bench_root = self.root / ".bench"
        self.stale_after = stale_after
        self.host = this_host()
        self.pid = os.getpid()

    # layout -----------------------------------------------------------------------------------
    def cell_dir(self, cell: Cell) -> Path:
        return self.root / cell.key

    def claim_path(self, cell: Cell) -> Path:
        return self.claims_root / f"{cell.flat_key}.json"

    def prepare(self, experiment: Experiment, budget: Budget) -> None:
        """Create the root, its .gitignore, and the manifest (or check it against this job's budget)."""
        for folder in (self.root, self.work_root, self.claims_root, self.bench_root / "failed"):
            folder.mkdir(parents=True, exist_ok=True)
        gitignore = self.root / ".gitignore"
        if not gitignore.exists():
            create_exclusive(gitignore, GITIGNORE)
        # The manifest names the results folder's owner: the experiment itself, or the one whose folder it
        # shares (``results = ...``); cells are told apart by key and configuration fingerprint.
        owner = experiment.results_name
        manifest = {"experiment": owner, "file": portable(str(experiment.path)), "budget": budget.overrides()}
        path = self.root / "experiment.json"
        if not create_exclusive(path, json.dumps(manifest, indent=2) + "\n"):
            existing = self.manifest()
            if existing.get("experiment") != owner or existing.get("budget", {}) != budget.overrides():
                raise ExperimentError(
                    f"results root {self.root} holds experiment {existing.get('experiment')!r} with budget "
                    f"{existing.get('budget', {})}; this job is {experiment.name!r} (results folder {owner!r}) "
                    f"with budget {budget.overrides()}: use another --results folder, or share this one "
                    f"with results = {existing.get('experiment')!r} in the file's [experiment] table"
                )

    def manifest(self) -> dict[str, Any]:
        """The root's experiment.json ({} if there is none yet)."""
        path = self.root / "experiment.json"
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, json.JSONDecodeError) as error:
            raise ExperimentError(f"{path}: unreadable ({error})") from None

    # status -----------------------------------------------------------------------------------
    def record(self, cell: Cell) -> dict[str, Any] | None:
        """The cell.json of a finished cell, or None if the cell has not been published."""
        run = RunDir(self.cell_dir(cell))
        try:
            record = run.read_cell()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except (OSError, json.JSONDecodeError):
            return {"fingerprint": None}
        if not run.finished:
            return None
        return record

    def status(self, cell: Cell) -> tuple[str, str]:
        """(status, detail): done, stale, running, failed, todo or invalid."""
        if cell.invalid is not None:
            return "invalid", cell.invalid
        record = self.record(cell)
        if record is not None:
            if record.get("fingerprint") == cell.fingerprint:
                return "done", ""
            return "stale", f"finished with another configuration (fingerprint {record.get('fingerprint')})"
        claim = read_claim(self.claim_path(cell))
        if claim is not None and not self.claim_is_stale(claim, self.claim_path(cell)):
            return "running", claim.owner()
        failure = self.failure(cell)
        if failure is not None:
            return "failed", failure.get("error", "")
        return "todo", "" if claim is None else f"stale claim of {claim.owner()}"

    # claims -----------------------------------------------------------------------------------
    def claim_is_stale(self, info: ClaimInfo, path: Path) -> bool:
        """Whether the claim's owner is gone (:meth:`attendout.core.lock.Owner.alive`; the claim file's mtime
        is its heartbeat)."""
        heartbeat = None
        if info.host != self.host:
            try:
                heartbeat = path.stat().st_mtime
            except FileNotFoundError:
                return False
        return not Owner(info.host, info.pid, info.pid_start).alive(heartbeat, self.stale_after)

    def try_claim(self, cell: Cell) -> Claim | None:
        """Claim ``cell`` for this process, taking over a stale claim; None if a live job holds it."""
        path = self.claim_path(cell)
        token = secrets.token_hex(4)
        work = self.work_root / f"{cell.flat_key}--{self.host}-{self.pid}-{token}"
        info = ClaimInfo(
            cell=cell.key,
            host=self.host,
            pid=self.pid,
            token=token,
            pid_start=process_start_time(self.pid),
            started=time.time(),
            work_dir=work.name,
        )
        content = json.dumps(info.__dict__, indent=2) + "\n"
        for _ in range(5):
            if create_exclusive(path, content):
                return Claim(path=path, info=info, work_dir=work)
            current = read_claim(path)
            if current is None:
                if unreadable_and_old(path):
                    remove_aside(path, token)
                continue  # vanished or being written: look again
            if not self.claim_is_stale(current, path):
                return None
            if take_over(path, current, token):
                self.event("takeover", cell, previous_owner=current.owner(), previous_work=current.work_dir)
                if not has_checkpoint(self.work_root / current.work_dir):  # else it resumes: adopt_work
                    shutil.rmtree(self.work_root / current.work_dir, ignore_errors=True)
        return None

    def _work_folders(self, cell: Cell) -> list[Path]:
        """The work folders of ``cell`` (any job's), newest first."""
        if not self.work_root.is_dir():
            return []
        found = [f for f in self.work_root.iterdir() if f.name.rsplit("--", 1)[0] == cell.flat_key]
        return sorted(found, key=lambda f: f.stat().st_mtime, reverse=True)

    def resumable(self, cell: Cell) -> tuple[bool, int | None]:
        """Whether a killed job left ``cell`` a checkpoint to resume from, and at which step."""
        for folder in self._work_folders(cell):
            if has_checkpoint(folder):
                return True, checkpoint_step(folder)
        return False, None

    def adopt_work(self, cell: Cell, work: Path) -> int | None:
        """Move the newest resumable work folder of ``cell`` to ``work`` (which we claimed).

        Called with the cell's claim held, so every other work folder of the cell belongs to a job
        that is gone; the others are removed. Returns the step of the adopted checkpoint, or None.
        """
        adopted = None
        for folder in self._work_folders(cell):
            if folder == work:
                continue
            if adopted is None and has_checkpoint(folder):
                shutil.rmtree(work, ignore_errors=True)
                os.rename(folder, work)
                adopted = checkpoint_step(work)
            else:
                shutil.rmtree(folder, ignore_errors=True)
        return adopted

    # publication ------------------------------------------------------------------------------
    def publish(self, cell: Cell, work: Path, replace_stale: bool = False) -> bool:
        """Move a trained work folder to the cell's folder in one rename; False if it already exists.

        With ``replace_stale``, a finished folder whose fingerprint differs from the cell's is first
        moved to ``.bench/replaced/``.
        """
        final = self.cell_dir(cell)
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(RunDir(work).checkpoint_dir, ignore_errors=True)  # the trainer's; never published
        record = self.record(cell)
        if record is not None and replace_stale and record.get("fingerprint") != cell.fingerprint:
            graveyard = self.bench_root / "replaced"
            graveyard.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileNotFoundError):
                os.rename(final, graveyard / f"{cell.flat_key}-{int(time.time())}-{secrets.token_hex(2)}")
        if final.exists():
            return False
        try:
            os.rename(work, final)
        except OSError as error:
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise
        return True

    def sweep(self) -> list[str]:
        """Remove what dead jobs left behind; returns the names removed.

        Stale claims of published cells (a job killed between publishing and releasing) and work
        folders of dead processes of this host that no claim refers to, unless they hold a checkpoint
        of a cell not yet published (the cell's next run resumes from it).
        """
        removed: list[str] = []
        if not self.work_root.is_dir():
            return removed
        claimed = set()
        for claim_file in self.claims_root.glob("*.json"):
            info = read_claim(claim_file)
            if info is None:
                continue
            published = RunDir(self.root / info.cell).finished
            if published and self.claim_is_stale(info, claim_file):
                remove_aside(claim_file, secrets.token_hex(4))
                removed.append(claim_file.name)
            else:
                claimed.add(info.work_dir)
        for folder in self.work_root.iterdir():
            owner = folder.name.rsplit("--", 1)[-1]
            host, _, rest = owner.rpartition("-")  # HOST-PID-TOKEN -> (HOST-PID, TOKEN)
            host, _, pid = host.rpartition("-")
            if folder.name in claimed or host != self.host or not pid.isdigit():
                continue
            if Owner(host, int(pid)).alive(None, self.stale_after):  # the folder's name has no start time
                continue
            cell_key = folder.name.rsplit("--", 1)[0].replace("--", "/")
            if has_checkpoint(folder) and not RunDir(self.root / cell_key).finished:
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder.name)
        return removed


# --------------------------------------------------------------------------------------------------
# File primitives


#: What a published cell keeps of each prediction: what the metrics, paired tests and bootstrap read.
#: A run directory of ``attendout finetune`` keeps the class probabilities too ("score").
#: What a published cell keeps of each prediction row: the source text too where the run stored one
#: (seq2seq), which the copy-the-source floor of ``advise`` and ``attendout table`` reads.
COMPACT_FIELDS = ("index", "prediction", "label", "source")


def compact_predictions(folder: Path) -> int:
    """Rewrite ``folder/predictions/SPLIT.jsonl`` as ``SPLIT.jsonl.gz`` with :data:`COMPACT_FIELDS` only.

    A cell of a 5-seed grid is committed to git: per-example probabilities would multiply the size of
    results/ by seeds x methods while no report reads them. The gzip stream carries no time stamp, so
    the same predictions give the same bytes. Returns the bytes written.
    """
    written = 0
    for path in sorted(RunDir(folder).predictions_dir.glob("*.jsonl")):
        rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
        text = "".join(json.dumps({k: row[k] for k in COMPACT_FIELDS if k in row}) + "\n" for row in rows)
        target = path.with_name(path.name + ".gz")
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(gzip.compress(text.encode(), mtime=0))
        os.replace(tmp, target)
        path.unlink()
        written += target.stat().st_size
    return written


def read_predictions(folder: Path, split: str) -> list[dict[str, Any]] | None:
    """The prediction rows of ``split`` in a cell or run folder (``.jsonl.gz`` or ``.jsonl``), or None."""
    run = RunDir(folder)
    for path, opener in ((run.prediction(split, compressed=True), gzip.open), (run.prediction(split), open)):
        if path.is_file():
            with opener(path, "rt", encoding="utf-8") as f:
                return [json.loads(line) for line in f if line.strip()]
    return None


def has_checkpoint(work: Path) -> bool:
    """Whether the work folder ``work`` holds a training checkpoint to resume from.

    The rule of ``finetune --resume``, as the run's state reads it (:meth:`attendout.core.folder.RunDir.state`,
    its ``checkpoint``: :func:`attendout.core.folder.checkpoint_status`): a checkpoint whose manifest lists
    every file at its size (or one written before manifests, with its state.pt). An incomplete one is
    not a checkpoint: the cell trains afresh. The bytes themselves are checked by the resume, which
    refuses a corrupt checkpoint (the runner then trains the cell afresh).
    """
    return RunDir(work).state().checkpoint.resumable


def checkpoint_step(work: Path) -> int | None:
    """The training step of the checkpoint in ``work`` (None if it has none, or does not say)."""
    return RunDir(work).state().checkpoint.step
