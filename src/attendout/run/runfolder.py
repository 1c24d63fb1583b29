"""A run's folder over the run's life: taken, checked, written, checkpointed, resumed from, finished.

:class:`RunFolder` is the run object the loop (:mod:`attendout.run.loop`) writes through: before
anything loads it refuses a folder that cannot take the run; then it takes the folder's lock, reads the
checkpoint a resume goes on from and clears what an older run left; while the run trains it writes the
config, the log, the checkpoints and the best model so far (RUN_DIR/model, or its weights in memory); at
the end, the predictions and results, and it removes the checkpoint. A write that fails is one line
naming it and what is intact. What a checkpoint holds, and going on from one, is the loop's own business
(:meth:`attendout.run.loop.TrainingLoop.checkpoint_contents`, :meth:`~attendout.run.loop.TrainingLoop.restore`).

What a run leaves in its directory:

    RUN_DIR/config.json            the full configuration, data sizes, versions
    RUN_DIR/log.jsonl              one line per logged step (loss, lr, the method's statistics) and per evaluation
    RUN_DIR/model/                 the best model, saved with save_pretrained (plain `transformers` loads it;
                                   a Synthesizer model is saved in attendout's form: attendout.load_model)
    RUN_DIR/predictions/SPLIT.jsonl per-example predictions of the best model on each evaluation split
                                   (token tasks: the tags of every word, without their probabilities)
    RUN_DIR/results.json           final metrics (written last, atomically: its presence means the run finished)
    RUN_DIR/checkpoint/state.pt    with ``checkpoint_steps``: the training state of an unfinished run
                                   (removed when the run finishes); ``resume`` continues from it. It
                                   holds tensors and plain values only (loaded with weights_only=True);
                                   checkpoint/manifest.json, written last, says the folder is complete
    RUN_DIR/.attendout.lock        while a run writes the folder: a second run on it refuses to start

Before a run trains, :func:`check_run_dir` refuses a folder that holds a finished run, or an
unfinished one with a checkpoint, unless the run's ``overwrite`` or ``resume`` say otherwise;
:func:`read_resumable` reads the checkpoint a resume goes on from and checks it against the run's
settings (:func:`checkpoint_config`) and against the best model kept so far; :func:`prepare_run_dir`
clears what an older run left (:data:`RUN_OUTPUTS`), or on a resume keeps the log up to the
checkpoint. How the checkpoint and every other file are written and read whole is
:mod:`attendout.core.folder`'s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..config import NEUTRAL_OPTIONS, RESUME_MUST_MATCH, TrainConfig
from ..core.folder import (
    CHECKPOINT_DIR,
    CHECKPOINT_FILE,
    LOG_FILE,
    MANIFEST,
    MODEL_DIR,
    PREDICTIONS_DIR,
    RESULTS_FILE,
    RUN_CONFIG_FILE,
    TRACKING_FILE,
    CheckpointError,
    RunDir,
    StorageError,
    check_output_dir,
    describe_os_error,
    os_error_remedy,
    output_dir_failure,
    read_checkpoint,
    recover_folder,
    verify_folder,
    write_checkpoint,
    write_json_atomic,
    write_text_atomic,
)
from ..core.lock import RunBusyError, RunLock
from ..core.optim import TrainingError
from ..core.state import CheckpointStatus

logger = logging.getLogger(__name__)


@dataclass
class TrainState:
    """The loop's counters and best score: what a checkpoint's ``state`` holds (``dataclasses.asdict``)."""

    step: int = 0
    epoch: int = 0
    best_score: float = -math.inf
    best_step: int | None = None
    best_validation: dict[str, float] = field(default_factory=dict)
    validated_at: int | None = None
    evals_since_best: int = 0  # validations in a row without a new best (early stopping)
    validation_due: bool = False  # a stop ended the validation of this step: a resume runs it first


#: The checkpoint folder and the temporary names it has while it is written whole.
CHECKPOINT_FOLDERS = (CHECKPOINT_DIR, f".{CHECKPOINT_DIR}.tmp", f".{CHECKPOINT_DIR}.old")
#: What a run writes in its directory (with the temporary names of its folders written whole), results.json
#: first: removed when a run starts afresh there, so that no older file passes for this run's.
RUN_OUTPUTS = (RESULTS_FILE, RUN_CONFIG_FILE, LOG_FILE, PREDICTIONS_DIR, MODEL_DIR, f".{MODEL_DIR}.tmp")
RUN_OUTPUTS += (f".{MODEL_DIR}.old", TRACKING_FILE, *CHECKPOINT_FOLDERS)


class RunExistsError(FileExistsError):
    """The output directory holds a finished run, or an unfinished one with a checkpoint; pass
    overwrite=True to replace it (or resume=True to continue the unfinished one)."""


@contextlib.contextmanager
def setting_up(out: Path) -> Iterator[None]:
    """A write that fails before training starts is the output directory's fault: a clear error."""
    try:
        yield
    except (RunBusyError, RunExistsError):
        raise
    except OSError as error:
        raise output_dir_failure(out, error) from None


def find_checkpoint(out: Path) -> tuple[Path, CheckpointStatus]:
    """The checkpoint folder of the run directory ``out`` (``.checkpoint.old`` while a kill between two
    renames left it there) and what it holds, by sizes (cheap; :func:`~attendout.core.folder.read_checkpoint`
    reads every byte): :meth:`attendout.core.folder.RunDir.find_checkpoint`, which the run's state reads too."""
    return RunDir(out).find_checkpoint()


def check_run_dir(out: Path, overwrite: bool, resume: bool, busy: bool = True) -> None:
    """Refuse, before anything is loaded or written, an output directory that cannot take this run: with
    ``busy``, first one a live run is writing (naming its process), whatever else the folder holds (the
    other processes of a distributed run leave that to the main one, which takes the folder's lock)."""
    check_output_dir(out)
    if busy:
        RunLock(out).check_free()
    if RunDir(out).finished and not overwrite:
        raise RunExistsError(
            f"{out} holds a finished run ({RESULTS_FILE}); choose another --output-dir or pass --overwrite"
        )
    folder, found = find_checkpoint(out)
    if found.kind == "none" or (overwrite and not resume):
        return
    if not resume:
        at = f" of step {found.step}" if found.step is not None else ""
        raise RunExistsError(
            f"{out} holds an unfinished run with a checkpoint{at} ({folder}); continue it with "
            "--resume, or pass --overwrite to start afresh (discarding it)"
        )
    if found.kind == "broken":
        raise CheckpointError.broken(folder, found.problem or "")


def prepare_run_dir(out: Path, overwrite: bool, resumed_at: int | None = None) -> None:
    """Make ``out`` ready for the run: afresh (``resumed_at`` None), nothing of an older run stays; resumed
    at a step, the log keeps its lines up to that step."""
    run = RunDir(out)
    out.mkdir(parents=True, exist_ok=True)
    if overwrite:
        run.results.unlink(missing_ok=True)
    log = run.log
    if resumed_at is None:  # afresh: nothing of an older run stays beside this one's files
        for name in RUN_OUTPUTS:
            path = out / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        write_text_atomic(log, "")
        return
    recover_folder(run.model_dir)  # a kill between the two renames of a model save
    # Keep the log up to the checkpoint: what a killed run wrote after it is done again (a last line
    # cut short by the kill included).
    kept = []
    for line in log.read_text().splitlines() if log.is_file() else []:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            break
        if record.get("step", 0) <= resumed_at:
            kept.append(line)
    write_text_atomic(log, "".join(line + "\n" for line in kept))


def checkpoint_config(config: TrainConfig) -> dict[str, Any]:
    """The settings a checkpoint must agree with to be resumed: the recipe and RESUME_MUST_MATCH.

    Free: the other NEUTRAL_OPTIONS (paths, progress bars, what fits a run to a machine): a run
    resumed on other hardware goes on with the same updates, though not bit for bit.
    """
    free = NEUTRAL_OPTIONS.keys() - RESUME_MUST_MATCH.keys()
    return {k: v for k, v in config.to_dict().items() if k not in free}


def read_resumable(
    out: Path, config: TrainConfig, device: torch.device, is_main: bool
) -> dict[str, Any] | None:
    """The checkpoint of the run directory ``out`` that ``config`` resumes from (None: there is none).

    Raises :class:`CheckpointError` when it belongs to a run with other settings, or when the best
    model kept so far in RUN_DIR/model is incomplete or corrupt. Only the main process (``is_main``)
    finishes the renames a kill interrupted.
    """
    run = RunDir(out)
    folder = run.checkpoint_dir
    if is_main:
        recover_folder(folder)  # a kill between the two renames of a checkpoint save
    found = read_checkpoint(find_checkpoint(out)[0], map_location=device)
    if found is None:
        if run.log.is_file():
            logger.warning("%s has no checkpoint to resume from: the run starts afresh", out)
        return None
    checkpoint, status = found
    path = folder / CHECKPOINT_FILE
    ours, theirs = checkpoint_config(config), checkpoint["config"]
    differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    if differ:
        shown = ", ".join(f"{k} {theirs.get(k)!r} -> {ours.get(k)!r}" for k in differ[:4])
        raise CheckpointError(
            f"{path} belongs to a run with other settings ({shown}); resume with the same settings, "
            "or start afresh with --overwrite instead of --resume"
        )
    if status.kind == "unchecked":
        logger.warning(
            "%s was written by an older attendout, without %s: its files cannot be checked for "
            "corruption; its state.pt loaded whole (step %s), resuming from it%s",
            folder,
            MANIFEST,
            status.step,
            f" ({status.problem})" if status.problem else "",
        )
    best = checkpoint["state"].get("best_step")
    model = run.model_dir
    if config.save_model and best is not None:  # the best model so far is kept in RUN_DIR/model
        if is_main:
            recover_folder(model)
        problem = verify_folder(model, unchecked_ok=True)  # no manifest: saved before manifests
        if problem is not None:
            raise CheckpointError(
                f"cannot resume from {folder}: the best model so far (step {best}) in {model} is "
                f"incomplete or corrupt ({problem}); start afresh with --overwrite instead of --resume"
            )
    return checkpoint


def remove_checkpoint(out: Path) -> None:
    """Remove the checkpoint of a finished run (and any temporary name of it): nothing to resume."""
    for name in CHECKPOINT_FOLDERS:
        shutil.rmtree(out / name, ignore_errors=True)


def write_split_predictions(
    path: Path, preds: Any, scores: Any, labels: Any, kind: str = "classification", sources: Any = None
) -> None:
    """RUN_DIR/predictions/SPLIT.jsonl: per example its index, prediction, label and score.

    Token tasks leave the score out (a probability per word would triple the file; ``attendout predict``
    gives them); seq2seq has none (its prediction is the decoded text, its label the reference), and keeps
    each example's ``source`` text where given (the copy-the-source floor of ``advise`` reads it).
    """
    with_scores = kind not in ("token_classification", "seq2seq")
    scores = [None] * len(preds) if scores is None else _as_list(scores)
    lines = []
    for i, (p, s, y) in enumerate(zip(_as_list(preds), scores, _as_list(labels), strict=True)):
        row = {"index": i, "prediction": p, "label": y, **({"score": s} if with_scores else {})}
        if sources is not None:
            row["source"] = sources[i]
        lines.append(json.dumps(row) + "\n")
    write_text_atomic(path, "".join(lines))


def _as_list(values: Any) -> list[Any]:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def single_class(split: str, preds: Any, label_names: Any = None, warn: bool = True) -> dict[str, str]:
    """``{split: label}`` if a classifier predicted one label for every example of ``split`` (two or
    more; its scores there are then the majority baseline's, MCC 0), warned of once; else ``{}``."""
    values = {int(p) for p in _as_list(preds)}
    if len(_as_list(preds)) < 2 or len(values) != 1:
        return {}
    (label,) = values
    name = str(label_names[label]) if label_names and 0 <= label < len(label_names) else str(label)
    if warn:
        logger.warning(
            "the model predicts one class (%s) for every example of %s: its scores are the majority "
            "baseline's",
            name,
            split,
        )
    return {split: name}


class RunFolder:
    """The run folder of one run (``config.output_dir``) over the run's life; only the main process of
    ``distributed`` writes it. Made before anything is loaded: it refuses a folder that cannot take the run."""

    def __init__(
        self,
        config: TrainConfig,
        distributed: Any,
        on_log: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.config = config
        self.dir = RunDir(config.output_dir)  # the run folder's files by name
        self.path = self.dir.path
        self.distributed = distributed
        self.is_main = distributed.is_main  # only the main process writes the run folder
        self.on_log = on_log  # sees every log.jsonl record
        self.lock = RunLock(self.path)
        self.resumed_at: int | None = None  # the step of the checkpoint this run resumed from
        self.checkpointed_at: int | None = None  # the step of this run's last whole checkpoint
        self.best_state: dict[str, Any] | None = None  # the best model's weights, without save_model
        check_run_dir(self.path, config.overwrite, config.resume, busy=self.is_main)  # before any load

    @contextlib.contextmanager
    def taking(self) -> Iterator[None]:
        """Around taking the folder (:meth:`take`) and what the run does before it trains: a failed write
        is the folder's fault (a clear error), and any failure gives the folder back."""
        try:
            with setting_up(self.path):
                yield
        except BaseException:
            self.lock.release()
            raise

    def take(self, device: Any) -> dict[str, Any] | None:
        """One writer at a time (the main process's lock, until :meth:`release`); on a resume, the
        checkpoint the run goes on from (None: it starts afresh); the folder made ready for the run."""
        c = self.config
        if self.is_main:
            self.lock.acquire()
        checkpoint = read_resumable(self.path, c, device, self.is_main) if c.resume else None
        self.distributed.barrier()  # every process has read the checkpoint before the main one moves on
        check_run_dir(self.path, c.overwrite, c.resume, busy=False)  # the main process holds it
        if checkpoint is not None:
            self.resumed_at = checkpoint["state"]["step"]
        if self.is_main:
            prepare_run_dir(self.path, c.overwrite, self.resumed_at)
        return checkpoint

    def release(self) -> None:
        """Give the folder back: the run finished, failed or was interrupted."""
        self.lock.release()

    def write_config(self, record: Callable[[], dict[str, Any]]) -> None:
        """RUN_DIR/config.json: ``record()`` (built by the main process only)."""
        if self.is_main:
            write_json_atomic(self.dir.config, record())

    @contextlib.contextmanager
    def writing(self, what: str) -> Iterator[None]:
        """A write that fails during training (a full disk): one line naming it and what is intact."""
        try:
            yield
        except OSError as error:
            raise StorageError(
                f"could not write {what} ({describe_os_error(error)}); {self.kept()}; {os_error_remedy(error)}, "
                f"then {self.again()}"
            ) from None

    def saved_at(self) -> int | None:
        """The step of the last whole checkpoint (this run's, or the one it resumed from)."""
        return self.checkpointed_at if self.checkpointed_at is not None else self.resumed_at

    def kept(self) -> str:
        """What a failure leaves intact: the checkpoint of a step, or none."""
        saved = self.saved_at()
        if saved is not None:
            return f"the checkpoint of step {saved} in {self.path / CHECKPOINT_DIR} is intact"
        return "no checkpoint had been written (--checkpoint-steps)"

    def again(self) -> str:
        """What to run after a failure that left the run folder as it was."""
        if self.saved_at() is not None:
            return "run the same command with --resume"
        return "run the same command again"

    def log(self, record: dict[str, Any]) -> None:
        """A line of RUN_DIR/log.jsonl (main process), shown to ``on_log``."""
        if not self.is_main:
            return
        with self.writing(f"a line of {self.dir.log}"), open(self.dir.log, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.on_log is not None:
            self.on_log(record)

    def save_checkpoint(
        self, contents: Callable[[], dict[str, Any]], step: int, summary: dict[str, Any]
    ) -> None:
        """The training state of ``step`` (``contents()``, built by the main process only) to
        RUN_DIR/checkpoint (state.pt, state.json, then manifest.json), swapped in whole: a failed or killed
        save leaves the previous checkpoint."""
        if self.is_main:
            folder = self.dir.checkpoint_dir
            with self.writing(f"the checkpoint of step {step} to {folder}"):
                write_checkpoint(folder, contents(), summary)
        self.checkpointed_at = step

    def keep_best(self, step: int, strategy: Any, tokenizer: Any) -> None:
        """The model of ``strategy`` now (of ``step``) is the best so far: saved to RUN_DIR/model by the
        main process (``save_model``), else its weights kept in memory (and in each checkpoint)."""
        if not self.config.save_model:
            weights = strategy.eval_model().state_dict().items()
            self.best_state = {k: v.detach().to("cpu", copy=True) for k, v in weights}
        elif self.is_main:
            target = self.dir.model_dir
            with self.writing(f"the best model (step {step}) to {target}"):
                strategy.save_model(target, tokenizer)

    def restore_best(self, step: int | None, strategy: Any) -> None:
        """The best model (of ``step``) back in ``strategy``'s model: RUN_DIR/model, checked whole, or
        the weights kept in memory."""
        self.distributed.barrier()  # the main process has written the best model
        if not self.config.save_model:
            strategy.eval_model().load_state_dict(self.best_state)
            return
        model = self.dir.model_dir
        problem = verify_folder(model, unchecked_ok=True)
        if problem is not None:
            raise TrainingError(
                f"the best model (step {step}) in {model} is incomplete or corrupt "
                f"({problem}): it changed after it was saved; {self.kept()}"
            )
        strategy.load_best(model)

    def write_predictions(
        self, split: str, preds: Any, scores: Any, labels: Any, kind: str, sources: Any
    ) -> None:
        """RUN_DIR/predictions/SPLIT.jsonl (main process; :func:`write_split_predictions`)."""
        if self.is_main:
            path = self.dir.prediction(split)
            with self.writing(str(path)):
                write_split_predictions(path, preds, scores, labels, kind, sources)

    def finish(self, results: dict[str, Any]) -> None:
        """RUN_DIR/results.json, written last (main process): the run is finished, its checkpoint removed."""
        if self.is_main:
            with self.writing(f"{self.dir.results}"):
                write_json_atomic(self.dir.results, results)
            remove_checkpoint(self.path)  # finished: nothing to resume
