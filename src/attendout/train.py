"""The fine-tuning loop: one readable loop for every method.

``finetune(TrainConfig(...))`` loads a task and a model, applies a method through the attention hook,
trains with AdamW and a linear warm-up/decay schedule, selects the best checkpoint on a validation
split carved from train (dev is only for reporting), and writes a run directory:

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

The loop is a small :class:`Trainer` whose state (step, epoch, best score, optimizer, scheduler, the
method's own state, the random generators) is held in one place, so a run killed midway resumes from
its last checkpoint to the very numbers it would have reached uninterrupted (on CPU; on GPUs
nondeterministic kernels may make the continuation differ slightly).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import platform
import random
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from . import methods as methods_mod
from .contract import Distributed, LoopContext, StepInfo
from .encoding import TRUNCATIONS, Encoded, encode, head_tail_sizes, predict_batches
from .models import load_for_task
from .optim import TrainingError, adamw, autocast_dtype, linear_schedule, update
from .rundir import (
    CHECKPOINT_DIR,
    CHECKPOINT_FILE,
    CHECKPOINT_FORMAT,
    MANIFEST,
    CheckpointError,
    CheckpointStatus,
    RunBusyError,
    RunLock,
    StorageError,
    check_output_dir,
    checkpoint_status,
    describe_os_error,
    os_error_remedy,
    output_dir_failure,
    read_checkpoint,
    recover_folder,
    rng_state,
    set_rng_state,
    verify_folder,
    write_checkpoint,
    write_json_atomic,
    write_text_atomic,
)
from .tasks import Examples, Task, TaskData, carve_validation, compute_metrics, load_task_data, subsample
from .tasks.checks import check_training_splits

logger = logging.getLogger(__name__)

__all__ = [
    "NEUTRAL_OPTIONS",
    "RESUME_MUST_MATCH",
    "CheckpointError",
    "RunExistsError",
    "StorageError",
    "TrainConfig",
    "Trainer",
    "TrainingError",
    "finetune",
]


#: What a run writes in its directory (with the temporary names of its folders written whole), results.json
#: first: removed when a run starts afresh there, so that no older file passes for this run's.
RUN_OUTPUTS = ("results.json", "config.json", "log.jsonl", "predictions", "model", ".model.tmp", ".model.old")
RUN_OUTPUTS += (CHECKPOINT_DIR, f".{CHECKPOINT_DIR}.tmp", f".{CHECKPOINT_DIR}.old")


class RunExistsError(FileExistsError):
    """The output directory holds a finished run, or an unfinished one with a checkpoint; pass
    overwrite=True to replace it (or resume=True to continue the unfinished one)."""


#: The TrainConfig fields that are not part of a run's recipe, each with why: they leave its numbers
#: alone, or change them only as running on another machine would (float rounding; with the model's
#: dropout on, micro-batches draw other random masks). The one list: a checkpoint may be resumed with
#: other values of them (:meth:`Trainer._checkpoint_config`, less RESUME_MUST_MATCH), and they are left
#: out of an experiment cell's identity (``attendout.experiments.spec.FINGERPRINT_EXCLUDE``, all of them).
NEUTRAL_OPTIONS: dict[str, str] = {
    "output_dir": "where the run is written",
    "overwrite": "whether a finished run may be replaced",
    "progress": "whether progress bars are shown",
    "resume": "whether a killed run goes on from its checkpoint (to the numbers it would have reached)",
    "checkpoint_steps": "how often the training state is saved; saving draws no random number",
    "data_dir": "where the data is read from, not what it is",
    "save_model": "whether the best model is written to RUN_DIR/model or only kept in memory",
    "evaluate": "whether the evaluation splits are scored after training: training and model selection "
    "never read them",
    "device": "fits the run to a machine: the same updates up to float rounding",
    "micro_batch_size": "fits the run to a machine's memory: the whole batch's update up to float rounding",
    "eval_batch_size": "fits evaluation to a machine's memory: the same predictions up to float rounding",
    "ignore_mismatched_head": "acts only where a run without it stops at once (a checkpoint's head with "
    "other labels than the task): no two finished runs differ by it",
    "drop_bad_rows": "acts only where a run without it stops at once (a data row with an empty text or a "
    "blank label): no two finished runs differ by it",
}
#: Neutral options that a resumed run must still share with its checkpoint, and why.
RESUME_MUST_MATCH: dict[str, str] = {
    "save_model": "it decides where the best model so far is kept (RUN_DIR/model, or inside the "
    "checkpoint): a run resumed with the other value would not find it",
}


#: Recipe defaults of the tasks whose sizes the global defaults do not fit, applied to the options a user
#: leaves unset (by ``attendout finetune`` and :meth:`TrainConfig.for_task`; an experiment file sets its
#: own). Token and multiple-choice tasks: batch 8 at lr 1e-4 (measured with the offline MiniLM, 500
#: CoNLL-2003 sentences x 1 epoch: batch 32 at 5e-5, 16 steps, left entity F1 at 0.00; batch 8 at 1e-4,
#: 63 steps, reached dev F1 0.35). Long documents: the model's whole 512-piece window.
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "conll2003": {"batch_size": 8, "learning_rate": 1e-4},
    "ptb-pos": {"batch_size": 8, "learning_rate": 1e-4},
    "arc-easy": {"batch_size": 8, "learning_rate": 1e-4},
    "arc-challenge": {"batch_size": 8, "learning_rate": 1e-4},
    "swag": {"batch_size": 16, "learning_rate": 5e-5},
    "movie-reviews": {"max_length": 512, "batch_size": 8},
    "imdb": {"max_length": 512, "batch_size": 8},
}


@dataclass
class TrainConfig:
    """Everything a run depends on. Field help texts are the CLI's."""

    # what to train
    task: str = field(default="rotten-tomatoes", metadata={"help": "task name (see `attendout tasks`)"})
    model: str = field(
        default="minilm", metadata={"help": "'minilm' (packaged offline default), a local folder or a hub id"}
    )
    ignore_mismatched_head: bool = field(
        default=False,
        metadata={
            "help": "when the model's classification head has other labels than the task (another count "
            "or other names), start a new head instead of stopping with an error"
        },
    )
    method: str = field(default="none", metadata={"help": "regulariser (see `attendout methods`)"})
    method_options: dict[str, Any] = field(default_factory=dict, metadata={"help": "the method's options"})
    # data
    data_dir: str | None = field(
        default=None, metadata={"help": "local GLUE-format folder (root or task folder)"}
    )
    hub: bool = field(
        default=False, metadata={"help": "load the task from the Hugging Face hub (needs internet)"}
    )
    train_file: str | None = field(default=None, metadata={"help": "CSV/TSV/JSONL training file"})
    eval_files: dict[str, str] | None = field(
        default=None, metadata={"help": "evaluation files, split name -> path"}
    )
    text_columns: list[str] | None = field(
        default=None, metadata={"help": "one or two text columns of the files"}
    )
    label_column: str | None = field(default=None, metadata={"help": "label column of the files"})
    label_kind: str | None = field(
        default=None,
        metadata={
            "help": "what the files' labels are (task 'file'): classification (default), regression (a "
            "float per row; Pearson, Spearman) or token_classification (CoNLL-style columns)"
        },
    )
    token_column: int | None = field(
        default=None,
        metadata={"help": "token files: the 0-based column of the words (default 0)"},
    )
    tag_column: int | None = field(
        default=None,
        metadata={"help": "token files: the 0-based column of the tags (default: the last)"},
    )
    drop_bad_rows: bool = field(
        default=False,
        metadata={
            "help": "leave out rows of the files with an empty text or a blank label (a warning says how "
            "many) instead of stopping with an error"
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "subsample the training set"})
    max_eval_samples: int | None = field(default=None, metadata={"help": "subsample every evaluation split"})
    validation_split: float = field(
        default=0.1, metadata={"help": "fraction of train held out for model selection"}
    )
    data_seed: int = field(
        default=0, metadata={"help": "seed of the validation split, the subsample and the data order"}
    )
    max_length: int = field(
        default=128,
        metadata={
            "help": "maximum tokens per example (longer ones are truncated; some tasks set their own: "
            "`attendout tasks`)"
        },
    )
    truncation: str = field(
        default="auto",
        metadata={
            "help": "texts longer than max_length: head-tail (keep the first quarter and the last three "
            "quarters of the window; 'auto' = head-tail for single texts, head for pairs), head, or sliding "
            "(windows with --window-stride pieces of overlap; a document's logits are its windows' mean)"
        },
    )
    window_stride: int | None = field(
        default=None,
        metadata={"help": "sliding windows: pieces of overlap between windows (default max_length / 4)"},
    )
    # optimisation
    epochs: float = field(default=3.0, metadata={"help": "training epochs (ignored when max_steps is set)"})
    max_steps: int | None = field(default=None, metadata={"help": "training steps (overrides epochs)"})
    batch_size: int = field(
        default=32, metadata={"help": "training batch size (some tasks set their own: `attendout tasks`)"}
    )
    micro_batch_size: int | None = field(
        default=None,
        metadata={
            "help": "split each training batch into micro-batches of at most N examples and accumulate "
            "their gradients: the update is the whole batch's, the activation memory a micro-batch's"
        },
    )
    eval_batch_size: int = field(default=64, metadata={"help": "evaluation batch size"})
    learning_rate: float = field(
        default=5e-5,
        metadata={"help": "peak AdamW learning rate (some tasks set their own: `attendout tasks`)"},
    )
    weight_decay: float = field(
        default=0.01, metadata={"help": "AdamW weight decay (not on biases and LayerNorm)"}
    )
    warmup_ratio: float = field(default=0.1, metadata={"help": "fraction of steps of linear warm-up"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm (0 = off)"})
    seed: int = field(default=42, metadata={"help": "model seed: head initialisation, dropout, masks"})
    # evaluation, logging, output
    eval_steps: int | None = field(
        default=None, metadata={"help": "evaluate every N steps (and at each epoch end)"}
    )
    early_stopping_patience: int | None = field(
        default=None,
        metadata={
            "help": "stop when the validation metric has not improved for N evaluations in a row "
            "(the learning-rate schedule still spans the whole budget; default: train the whole budget)"
        },
    )
    log_steps: int = field(default=10, metadata={"help": "write a log line every N steps"})
    output_dir: str = field(default="runs/latest", metadata={"help": "run directory"})
    checkpoint_steps: int | None = field(
        default=None,
        metadata={
            "help": "save a resumable training state every N steps and after each new best validation "
            "(RUN_DIR/checkpoint, removed when the run finishes)"
        },
    )
    resume: bool = field(
        default=False,
        metadata={
            "help": "continue the unfinished run in output_dir from its checkpoint (afresh if it has none; "
            "an incomplete or corrupt checkpoint is an error)"
        },
    )
    overwrite: bool = field(
        default=False,
        metadata={"help": "replace a finished run in output_dir, or an unfinished run's checkpoint"},
    )
    save_model: bool = field(default=True, metadata={"help": "save the best model with save_pretrained"})
    evaluate: bool = field(
        default=True,
        metadata={
            "help": "score the evaluation splits with the best model when training ends (off: the run "
            "never encodes or scores them, as advise's search trials)"
        },
    )
    device: str = field(default="auto", metadata={"help": "auto, cpu, cuda, cuda:N or mps"})
    precision: str = field(default="fp32", metadata={"help": "fp32, bf16 or fp16 (mixed precision, GPU)"})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})

    def __post_init__(self) -> None:
        checks = [
            (self.batch_size >= 1, "batch_size", self.batch_size, "at least 1"),
            (
                self.micro_batch_size is None or self.micro_batch_size >= 1,
                "micro_batch_size",
                self.micro_batch_size,
                "at least 1",
            ),
            (self.eval_batch_size >= 1, "eval_batch_size", self.eval_batch_size, "at least 1"),
            (self.learning_rate > 0, "learning_rate", self.learning_rate, "positive"),
            (self.epochs > 0, "epochs", self.epochs, "positive"),
            (self.max_steps is None or self.max_steps >= 1, "max_steps", self.max_steps, "at least 1"),
            (0 <= self.warmup_ratio < 1, "warmup_ratio", self.warmup_ratio, "in [0, 1)"),
            (0 < self.validation_split < 1, "validation_split", self.validation_split, "in (0, 1)"),
            (self.max_length >= 8, "max_length", self.max_length, "at least 8"),
            (self.log_steps >= 1, "log_steps", self.log_steps, "at least 1"),
            (self.eval_steps is None or self.eval_steps >= 1, "eval_steps", self.eval_steps, "at least 1"),
            (
                self.early_stopping_patience is None or self.early_stopping_patience >= 1,
                "early_stopping_patience",
                self.early_stopping_patience,
                "at least 1",
            ),
            (
                self.checkpoint_steps is None or self.checkpoint_steps >= 1,
                "checkpoint_steps",
                self.checkpoint_steps,
                "at least 1",
            ),
            (self.precision in ("fp32", "bf16", "fp16"), "precision", self.precision, "fp32, bf16 or fp16"),
            (self.truncation in TRUNCATIONS, "truncation", self.truncation, " or ".join(TRUNCATIONS)),
            (
                self.window_stride is None or self.truncation == "sliding",
                "window_stride",
                self.window_stride,
                "left out unless truncation is 'sliding'",
            ),
        ]
        for ok, name, value, rule in checks:
            if not ok:
                raise ValueError(f"{name} must be {rule}, got {value!r}")
        kinds = {"classification": "classification", "regression": "regression"}
        kinds.update(token="token_classification", token_classification="token_classification")
        if self.label_kind is not None:
            if self.label_kind not in kinds:
                raise ValueError(
                    f"label_kind must be classification, regression or token (token_classification), "
                    f"got {self.label_kind!r}"
                )
            self.label_kind = kinds[self.label_kind]
        # Fail on a bad method name or option now, not after loading data and model.
        self.method_config()

    @classmethod
    def for_task(cls, task: str, **values: Any) -> TrainConfig:
        """A config for ``task`` with its :data:`TASK_DEFAULTS` where ``values`` leave them unset."""
        return cls(task=task, **{**task_defaults(task), **values})

    def method_config(self) -> methods_mod.MethodConfig:
        return methods_mod.get_method_config(self.method, **self.method_options)

    def load_data(self) -> tuple[Task, TaskData]:
        """The task and its data, from the sources this config names."""
        token_files = {"token_column": self.token_column, "tag_column": self.tag_column}
        return load_task_data(
            self.task,
            data_dir=self.data_dir,
            hub=self.hub,
            train_file=self.train_file,
            eval_files=self.eval_files,
            text_columns=self.text_columns,
            label_column=self.label_column,
            kind=self.label_kind,
            drop_bad_rows=self.drop_bad_rows,
            **{k: v for k, v in token_files.items() if v is not None},
        )

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["method_options"] = self.method_config().to_dict()
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """The config :meth:`to_dict` wrote (a run's config.json); an unknown field is an error."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(
                f"unknown training option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        options = {k: v for k, v in (values.get("method_options") or {}).items() if k != "name"}
        return cls(**{**values, "method_options": options})


# --------------------------------------------------------------------------------------------------
# Small utilities
# --------------------------------------------------------------------------------------------------


def task_defaults(task: str | None) -> dict[str, Any]:
    """The recipe defaults of ``task`` (:data:`TASK_DEFAULTS`; names as :func:`get_task` resolves them)."""
    from .tasks import DataError, get_task

    if task is None:
        return {}
    try:
        name = get_task(task).name
    except DataError:
        return {}
    return dict(TASK_DEFAULTS.get(name, {}))


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def pick_device(name: str) -> torch.device:
    if name != "auto":
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


# --------------------------------------------------------------------------------------------------
# The trainer
# --------------------------------------------------------------------------------------------------


def process_group(device: str) -> tuple[Distributed, torch.device]:
    """The process group this run is part of (torchrun / accelerate launch set WORLD_SIZE), and the device.

    Several processes: the group is joined through accelerate (gloo on CPU, NCCL on GPUs) and each
    process takes its local GPU; one process: no group, the ``device`` setting as given.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Distributed(), pick_device(device)
    from accelerate import PartialState

    on_cpu = pick_device(device).type == "cpu"
    state = PartialState(cpu=on_cpu)  # without cpu=True accelerate sees no group on a machine with no GPU
    if state.num_processes <= 1:
        raise RuntimeError(f"WORLD_SIZE is {os.environ['WORLD_SIZE']} but accelerate found no process group")
    chosen = torch.device("cpu") if on_cpu else state.device
    return Distributed(state.process_index, state.num_processes, chosen), chosen


def split_for_training(
    data: TaskData, c: TrainConfig, label_names: Sequence[str] | None = None
) -> tuple[Examples, Examples, dict[str, Examples]]:
    """(train, validation, evaluation splits): validation carved from train, then the subsamples; all by data_seed.

    ``label_names`` (the task's) only make the checks' messages name a class instead of its index.
    """
    train, validation = carve_validation(data.train, c.validation_split, c.data_seed)
    train = subsample(train, c.max_train_samples, c.data_seed)
    if c.max_eval_samples is not None:
        validation = subsample(validation, c.max_eval_samples, c.data_seed)
    evals = {
        name: subsample(ex, c.max_eval_samples, c.data_seed)
        for name, ex in (data.eval_splits.items() if c.evaluate else ())
    }
    check_training_splits(data, train, evals, label_names)  # unseen eval classes refused; overlap warned of
    return train, validation, evals


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    best_score: float = -math.inf
    best_step: int | None = None
    best_validation: dict[str, float] = field(default_factory=dict)
    validated_at: int | None = None
    evals_since_best: int = 0  # validations in a row without a new best (early stopping)


class Trainer:
    """Owns the model, optimizer, schedule, data and run directory of one run."""

    def __init__(self, config: TrainConfig, on_log: Callable[[dict[str, Any]], None] | None = None):
        self.config = config
        self.on_log = on_log  # sees every log.jsonl record
        self.out = Path(config.output_dir)
        self._check_output_dir()
        self.distributed, self.device = process_group(config.device)
        self.is_main = self.distributed.is_main  # only the main process writes the run directory

        task, data = config.load_data()
        self.task: Task = task
        self.data_source = data.source
        self.train_examples, self.validation_examples, self.eval_examples = split_for_training(
            data, config, task.label_names
        )

        set_seed(config.seed)  # the head's initialisation depends on the model seed only
        self.model, self.tokenizer, self.model_description = load_for_task(
            config.model, task, ignore_mismatched_head=config.ignore_mismatched_head
        )
        self.model.to(self.device)
        self.method_config = config.method_config()

        self.train_set = self.encode(self.train_examples)
        self.validation_set = self.encode(self.validation_examples)
        self.eval_sets = {name: self.encode(ex) for name, ex in self.eval_examples.items()}

        self.steps_per_epoch = math.ceil(len(self.train_set) / config.batch_size)
        self.total_steps = config.max_steps or max(1, math.ceil(config.epochs * self.steps_per_epoch))
        self._check_batches_fit_processes()
        self.strategy = self.method_config.training_strategy()
        self.strategy.attach(self.model, max_length=config.max_length)
        self.train_model = self.wrap(self.model)  # DDP over several processes; the model itself in one
        self.optimizer, self.scheduler = self.make_optimizer(self.model)
        self.autocast_dtype = autocast_dtype(config.precision)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=config.precision == "fp16")
        self.state = TrainState()
        self.loop = self.loop_context()
        self.strategy.start(self.loop)
        self._running: list[float] = []  # losses since the last log line
        self._elapsed = 0.0  # training seconds before a resume
        self._started: float | None = None  # when fit() began
        self._checkpointed_at: int | None = None
        self._resumed_at: int | None = None
        # Only now, with data and model loaded and the method applied, touch the run directory: one
        # writer at a time (the main process's lock, released at the end of fit).
        self._lock = RunLock(self.out)
        try:
            with self._setting_up():
                if self.is_main:
                    self._lock.acquire()
                checkpoint = self._read_checkpoint() if config.resume else None
                self.distributed.barrier()  # every process has read the checkpoint before the main one moves on
                self._prepare_output_dir(
                    resumed_at=None if checkpoint is None else checkpoint["state"]["step"]
                )
                if checkpoint is not None:
                    self._restore(checkpoint)
                self._write_config()
        except BaseException:
            self._lock.release()
            raise

    # setup ----------------------------------------------------------------------------------
    def encode(self, examples: Examples) -> Encoded:
        """``examples`` tokenised for the task's kind with this run's length and truncation."""
        c = self.config
        return encode(examples, self.task, self.tokenizer, c.max_length, c.truncation, c.window_stride)

    def sizes(self) -> dict[str, int]:
        """Examples per split (documents, not windows; sentences, not words)."""
        sets = {"train": self.train_set, "validation": self.validation_set, **self.eval_sets}
        return {name: data.examples_count() for name, data in sets.items()}

    def truncation_summary(self) -> dict[str, Any]:
        """How texts longer than max_length were cut, and how many were, per split (the run's config)."""
        sets = {"train": self.train_set, "validation": self.validation_set, **self.eval_sets}
        summary: dict[str, Any] = {
            "strategy": self.train_set.truncation,
            "max_length": self.config.max_length,
        }
        if self.train_set.truncation == "head-tail":
            summary["head"], summary["tail"] = head_tail_sizes(self.config.max_length)
        if self.train_set.truncation == "sliding":
            summary["stride"] = self.train_set.stride
            summary["windows"] = {name: len(data) for name, data in sets.items()}
        summary["cut"] = {name: data.cut for name, data in sets.items()}
        if self.task.kind == "token_classification":  # the words past the cut get the first tag
            summary["cut_words_tagged"] = self.task.label_names[0]
        return summary

    @contextlib.contextmanager
    def _setting_up(self) -> Iterator[None]:
        """A write that fails before training starts is the output directory's fault: a clear error."""
        try:
            yield
        except (RunBusyError, RunExistsError):
            raise
        except OSError as error:
            raise output_dir_failure(self.out, error) from None

    @contextlib.contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """A write that fails during training (a full disk): one line naming it and what is intact."""
        try:
            yield
        except OSError as error:
            raise StorageError(
                f"could not write {what} ({describe_os_error(error)}); {self._kept()}; {os_error_remedy(error)}, then "
                f"{self._again()}"
            ) from None

    def _checkpoint_found(self) -> tuple[Path, CheckpointStatus]:
        """The checkpoint folder (``.checkpoint.old`` while a kill between two renames left it there) and
        what it holds, by sizes (cheap; :func:`read_checkpoint` reads every byte)."""
        folder = self.out / CHECKPOINT_DIR
        old = folder.with_name(f".{folder.name}.old")
        if not os.path.lexists(folder) and old.is_dir():
            folder = old
        return folder, checkpoint_status(folder)

    def _check_output_dir(self) -> None:
        """Refuse, before anything is loaded or written, an output directory that cannot take this run."""
        check_output_dir(self.out)
        if (self.out / "results.json").exists() and not self.config.overwrite:
            raise RunExistsError(
                f"{self.out} holds a finished run (results.json); choose another --output-dir or pass --overwrite"
            )
        folder, found = self._checkpoint_found()
        if found.kind == "none" or (self.config.overwrite and not self.config.resume):
            return
        if not self.config.resume:
            at = f" of step {found.step}" if found.step is not None else ""
            raise RunExistsError(
                f"{self.out} holds an unfinished run with a checkpoint{at} ({folder}); continue it with "
                "--resume, or pass --overwrite to start afresh (discarding it)"
            )
        if found.kind == "broken":
            raise CheckpointError.broken(folder, found.problem or "")

    def _prepare_output_dir(self, resumed_at: int | None = None) -> None:
        self._check_output_dir()
        if not self.is_main:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        if self.config.overwrite:
            (self.out / "results.json").unlink(missing_ok=True)
        log = self.out / "log.jsonl"
        if resumed_at is None:  # afresh: nothing of an older run stays beside this one's files
            for name in RUN_OUTPUTS:
                path = self.out / name
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink(missing_ok=True)
            write_text_atomic(log, "")
            return
        recover_folder(self.out / "model")  # a kill between the two renames of a model save
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

    def _write_config(self) -> None:
        if not self.is_main:
            return
        sizes = self.sizes()
        write_json_atomic(
            self.out / "config.json",
            {
                "config": self.config.to_dict(),
                "task": dataclasses.asdict(self.task),
                "data_source": self.data_source,
                "sizes": sizes,
                "model_description": self.model_description,
                "truncation": self.truncation_summary(),
                "model_dropout": self.config.method_config().model_dropout,
                "total_steps": self.total_steps,
                "steps_per_epoch": self.steps_per_epoch,
                "device": str(self.device),
                "processes": self.distributed.world_size,
                "versions": {
                    "attendout": _version(),
                    "torch": torch.__version__,
                    "transformers": _transformers_version(),
                    "python": platform.python_version(),
                },
                "hardware": {
                    "machine": platform.machine(),
                    "cpus": os.cpu_count(),
                    "threads": torch.get_num_threads(),
                },
            },
        )

    def make_optimizer(self, model: nn.Module) -> tuple[torch.optim.Optimizer, Any]:
        """AdamW over the method's parameter groups of ``model``, with the warm-up/decay schedule."""
        c = self.config
        optimizer = adamw(self.strategy.param_groups(model, c.weight_decay), lr=c.learning_rate)
        scheduler = linear_schedule(optimizer, int(c.warmup_ratio * self.total_steps), self.total_steps)
        return optimizer, scheduler

    def wrap(self, model: nn.Module) -> nn.Module:
        """``model`` as this loop trains it: in DistributedDataParallel over several processes."""
        if self.distributed.world_size == 1:
            return model
        unused = self.method_config.unused_parameters
        if unused and self.is_main and model is self.model:
            logger.info("DDP looks for unused parameters (find_unused_parameters=True): %s", unused)
        device_ids = [self.device.index] if self.device.type == "cuda" else None
        return nn.parallel.DistributedDataParallel(
            model, device_ids=device_ids, find_unused_parameters=bool(unused)
        )

    def _check_batches_fit_processes(self) -> None:
        world, size = self.distributed.world_size, self.config.batch_size
        last = len(self.train_set) % size
        if world > 1 and (size < world or 0 < last < world):
            raise ValueError(
                f"batch_size {size} over {world} processes: every batch is shared out among the processes, "
                f"and {'a batch' if size < world else f'the last batch of each epoch ({last} examples)'} has "
                "fewer examples than processes; choose another --batch-size or --max-train-samples"
            )

    def shard(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """This process's consecutive rows of ``batch`` (all of it in one process)."""
        world = self.distributed.world_size
        if world == 1:
            return batch
        rows = len(next(iter(batch.values())))
        bounds = [rows * r // world for r in range(world + 1)]
        start, stop = bounds[self.distributed.rank], bounds[self.distributed.rank + 1]
        return {k: v[start:stop] for k, v in batch.items()}

    def loop_context(self) -> LoopContext:
        """What this loop gives a method (see :mod:`attendout.contract`)."""
        c = self.config
        return LoopContext(
            device=self.device,
            total_steps=self.total_steps,
            steps_per_epoch=self.steps_per_epoch,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            make_optimizer=self.make_optimizer,
            autocast_dtype=self.autocast_dtype,
            max_grad_norm=c.max_grad_norm,
            seed=c.seed,
            data_seed=c.data_seed,
            task=self.task,
            validation=self.validation_set,
            splits=self.eval_sets,
            eval_batch_size=c.eval_batch_size,
            loss_scale=self.scaler.get_scale if self.scaler.is_enabled() else None,
            distributed=self.distributed,
            wrap=self.wrap,
            loop="attendout",
        )

    # checkpoints ----------------------------------------------------------------------------
    def _checkpoint_config(self) -> dict[str, Any]:
        """The settings a checkpoint must agree with to be resumed: the recipe and RESUME_MUST_MATCH.

        Free: the other NEUTRAL_OPTIONS (paths, progress bars, what fits a run to a machine): a run
        resumed on other hardware goes on with the same updates, though not bit for bit.
        """
        free = NEUTRAL_OPTIONS.keys() - RESUME_MUST_MATCH.keys()
        return {k: v for k, v in self.config.to_dict().items() if k not in free}

    def save_checkpoint(self) -> None:
        """Write the whole training state to RUN_DIR/checkpoint (state.pt, state.json, then manifest.json),
        swapped in whole (main process): a failed or killed save leaves the previous checkpoint."""
        if not self.is_main:
            self._checkpointed_at = self.state.step
            return
        state = {
            "format": CHECKPOINT_FORMAT,
            "config": self._checkpoint_config(),
            "state": dataclasses.asdict(self.state),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "strategy": self.strategy.state_dict(),
            "best_state": getattr(self, "_best_state", None),
            "running": [float(x) for x in self._running],
            "elapsed": self._elapsed + (0.0 if self._started is None else time.time() - self._started),
            "rng": rng_state(self.device),
        }
        summary = {
            "step": self.state.step,
            "total_steps": self.total_steps,
            "best_step": self.state.best_step,
        }
        folder = self.out / CHECKPOINT_DIR
        with self._writing(f"the checkpoint of step {self.state.step} to {folder}"):
            write_checkpoint(folder, state, summary)
        self._checkpointed_at = self.state.step

    def _read_checkpoint(self) -> dict[str, Any] | None:
        folder = self.out / CHECKPOINT_DIR
        if self.is_main:
            recover_folder(folder)  # a kill between the two renames of a checkpoint save
        found = read_checkpoint(self._checkpoint_found()[0], map_location=self.device)
        if found is None:
            if (self.out / "log.jsonl").is_file():
                logger.warning("%s has no checkpoint to resume from: the run starts afresh", self.out)
            return None
        checkpoint, status = found
        path = folder / CHECKPOINT_FILE
        ours, theirs = self._checkpoint_config(), checkpoint["config"]
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
        model = self.out / "model"
        if self.config.save_model and best is not None:  # the best model so far is kept in RUN_DIR/model
            if self.is_main:
                recover_folder(model)
            problem = verify_folder(model, unchecked_ok=True)  # no manifest: saved before manifests
            if problem is not None:
                raise CheckpointError(
                    f"cannot resume from {folder}: the best model so far (step {best}) in {model} is "
                    f"incomplete or corrupt ({problem}); start afresh with --overwrite instead of --resume"
                )
        return checkpoint

    def _restore(self, checkpoint: dict[str, Any]) -> None:
        self.state = TrainState(**checkpoint["state"])
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        self.scaler.load_state_dict(checkpoint["scaler"])
        self.strategy.load_state_dict(checkpoint["strategy"])
        if checkpoint["best_state"] is not None:
            self._best_state = checkpoint["best_state"]
        self._running = [torch.tensor(x) for x in checkpoint["running"]]
        self._elapsed = float(checkpoint["elapsed"])
        self._resumed_at = self.state.step
        set_rng_state(checkpoint["rng"], self.device)
        logger.info("resuming %s at step %d of %d", self.out, self.state.step, self.total_steps)

    # logging --------------------------------------------------------------------------------
    def log(self, record: dict[str, Any]) -> None:
        if not self.is_main:
            return
        with self._writing(f"a line of {self.out / 'log.jsonl'}"), open(self.out / "log.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.on_log is not None:
            self.on_log(record)

    # training -------------------------------------------------------------------------------
    @property
    def epoch_progress(self) -> float:
        """Epochs done, fractional."""
        return round(self.state.step / self.steps_per_epoch, 4)

    def micro_batches(self, batch: dict[str, torch.Tensor]) -> list[tuple[slice, dict[str, torch.Tensor]]]:
        """``batch`` cut into consecutive micro-batches of at most ``micro_batch_size`` rows.

        Each comes with its rows of the batch (a slice). The padded length stays the batch's, so
        every example is computed exactly as in the whole batch. Without ``micro_batch_size``: the
        batch itself.
        """
        size = len(next(iter(batch.values())))
        step = self.config.micro_batch_size or size
        if step >= size:
            return [(slice(0, size), batch)]
        parts = []
        for start in range(0, size, step):
            rows = slice(start, min(start + step, size))
            parts.append((rows, {k: v[rows] for k, v in batch.items()}))
        return parts

    def train_step(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One optimizer step on ``batch`` with the method: its edits in each forward, then its after-step."""
        step = StepInfo(self.state.step, self.state.epoch)
        batch_rows = len(next(iter(batch.values())))
        parts = [part for _, part in self.micro_batches(self.shard(batch))]
        self.model.train()
        loss = update(
            self.train_model,
            parts,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            scaler=self.scaler,
            loop=self.loop,
            forward_kwargs=lambda part, rows: self.strategy.before_forward(self.model, part, step),
            failure=self._failure,
            batch_rows=batch_rows,
        )
        self.strategy.after_step(parts, step)
        if self.distributed.world_size == 1:
            return loss
        local_rows = sum(len(next(iter(part.values()))) for part in parts)
        return self.distributed.sum(loss * (local_rows / batch_rows))  # the whole batch's mean loss

    def _saved_at(self) -> int | None:
        """The step of the last whole checkpoint (this run's, or the one it resumed from)."""
        return self._checkpointed_at if self._checkpointed_at is not None else self._resumed_at

    def _kept(self) -> str:
        saved = self._saved_at()
        if saved is not None:
            return f"the checkpoint of step {saved} in {self.out / CHECKPOINT_DIR} is intact"
        return "no checkpoint had been written (--checkpoint-steps)"

    def _again(self) -> str:
        """What to run after a failure that left the run directory as it was."""
        if self._saved_at() is not None:
            return "run the same command with --resume"
        return "run the same command again"

    def _failure(self, loss: torch.Tensor) -> str:
        return (
            f"loss is {loss.item()} at step {self.state.step + 1} (learning rate "
            f"{self.scheduler.get_last_lr()[0]:.3g}); training stopped before the step was applied; "
            f"{self._kept()}"
        )

    def fit(self) -> dict[str, Any]:
        try:
            return self._fit()
        finally:
            self._lock.release()  # finished, failed or interrupted: the folder is free again

    def _fit(self) -> dict[str, Any]:
        c = self.config
        self._started = time.time()
        bar = tqdm(
            total=self.total_steps,
            initial=self.state.step,
            desc=f"{c.task} {c.method}",
            disable=not c.progress or not self.is_main,
            dynamic_ncols=True,
        )
        running = self._running
        while self.state.step < self.total_steps and not self.stopped_early:
            order = torch.Generator().manual_seed(c.data_seed * 100_003 + self.state.epoch)
            done = self.state.step - self.state.epoch * self.steps_per_epoch  # batches of this epoch (resume)
            for batch in self.train_set.batches(c.batch_size, order, skip=done):
                self.strategy.set_progress(self.state.step / self.total_steps)
                lr = self.scheduler.get_last_lr()[0]
                running.append(self.train_step(batch))
                self.state.step += 1
                bar.update(1)
                if self.state.step % c.log_steps == 0 or self.state.step == self.total_steps:
                    loss = torch.stack(running).mean().item()
                    running.clear()
                    bar.set_postfix(loss=f"{loss:.4f}")
                    self.log(
                        {
                            "step": self.state.step,
                            "epoch": self.epoch_progress,
                            "loss": loss,
                            "lr": lr,
                            **self.strategy.stats(),
                        }
                    )
                if c.eval_steps and self.state.step % c.eval_steps == 0:
                    self.validate()
                if (
                    c.checkpoint_steps
                    and self.state.step % c.checkpoint_steps == 0
                    and self._checkpointed_at != self.state.step
                ):
                    self.save_checkpoint()
                if self.state.step >= self.total_steps or self.stopped_early:
                    break
            else:  # a full pass over the training set
                self.state.epoch += 1
                if self.state.validated_at != self.state.step:  # not just validated by eval_steps
                    self.validate()
        bar.close()
        if self.state.validated_at != self.state.step:
            self.validate()  # the end of a partial epoch
        train_time = self._elapsed + time.time() - self._started
        return self.finish(train_time)

    # evaluation -----------------------------------------------------------------------------
    def predict(self, data: Encoded) -> tuple[Any, Any, float | None]:
        """(predictions, scores, mean loss) as :func:`~attendout.encoding.predict_batches` gives them."""
        model = self.strategy.eval_model()
        return predict_batches(model, data, self.config.eval_batch_size, self.device, self.autocast_dtype)

    def evaluate(self, data: Encoded) -> tuple[dict[str, float], Any, Any]:
        preds, scores, loss = self.predict(data)
        metrics = compute_metrics(self.task, preds, data.gold)
        return {**metrics, "loss": loss}, preds, scores

    def validate(self) -> dict[str, float]:
        """Score the validation split; keep the model if it is the best so far."""
        metrics, _, _ = self.evaluate(self.validation_set)
        self.state.validated_at = self.state.step
        main = self.task.metrics[0]
        improved = metrics[main] > self.state.best_score
        self.state.evals_since_best = 0 if improved else self.state.evals_since_best + 1
        if improved:
            self.state.best_score = metrics[main]
            self.state.best_step = self.state.step
            self.state.best_validation = metrics
            if self.config.save_model:
                if self.is_main:
                    target = self.out / "model"
                    with self._writing(f"the best model (step {self.state.step}) to {target}"):
                        self.strategy.save_model(target, self.tokenizer)
            else:
                self._best_state = {
                    k: v.detach().to("cpu", copy=True)
                    for k, v in self.strategy.eval_model().state_dict().items()
                }
        record = {
            "step": self.state.step,
            "epoch": self.epoch_progress,
            "validation": metrics,
            "best": improved,
        }
        if self.stopped_early:
            record["stopped_early"] = True
        self.log(record)
        if improved and self.config.checkpoint_steps:
            self.save_checkpoint()  # the kept best model is never newer than the state that resumes
        return metrics

    @property
    def stopped_early(self) -> bool:
        """Early stopping's verdict: the patience ran out before the budget did."""
        patience = self.config.early_stopping_patience
        return (
            patience is not None
            and self.state.evals_since_best >= patience
            and self.state.step < self.total_steps
        )

    def _restore_best(self) -> None:
        self.distributed.barrier()  # the main process has written the best model
        if self.config.save_model:
            model = self.out / "model"
            problem = verify_folder(model, unchecked_ok=True)
            if problem is not None:
                raise TrainingError(
                    f"the best model (step {self.state.best_step}) in {model} is incomplete or corrupt "
                    f"({problem}): it changed after it was saved; {self._kept()}"
                )
            self.strategy.load_best(model)
        else:
            self.strategy.eval_model().load_state_dict(self._best_state)

    def finish(self, train_time: float) -> dict[str, Any]:
        """Evaluate the best model on every evaluation split, write predictions and results.json."""
        if self.state.best_step != self.state.step:
            self._restore_best()
        evaluations = {}
        for name, data in self.eval_sets.items():
            metrics, preds, scores = self.evaluate(data)
            evaluations[name] = metrics
            self._write_predictions(name, preds, scores, data.gold)
        results = {
            "task": self.task.name,
            "method": self.config.method,
            "method_options": self.config.method_config().to_dict(),
            "model": self.config.model,
            "model_description": self.model_description,
            "data_source": self.data_source,
            "seed": self.config.seed,
            "data_seed": self.config.data_seed,
            "main_metric": self.task.metrics[0],
            "truncation": self.truncation_summary(),
            "best_step": self.state.best_step,
            "total_steps": self.total_steps,
            "validation": self.state.best_validation,
            "eval": evaluations,
            "sizes": self.sizes(),
            "train_time_s": round(train_time, 2),
        }
        if self.stopped_early:
            results["stopped_early"] = {
                "step": self.state.step,
                "patience": self.config.early_stopping_patience,
            }
        if self._resumed_at is not None:  # the time before the resume is in train_time_s too
            results["resumed"] = {"step": self._resumed_at, "train_time_before_s": round(self._elapsed, 2)}
        self.log({"step": self.state.step, "eval": evaluations, "best_step": self.state.best_step})
        if self.is_main:
            with self._writing(f"{self.out / 'results.json'}"):
                write_json_atomic(self.out / "results.json", results)
            for name in (CHECKPOINT_DIR, f".{CHECKPOINT_DIR}.tmp", f".{CHECKPOINT_DIR}.old"):
                shutil.rmtree(self.out / name, ignore_errors=True)  # finished: nothing to resume
        self.distributed.barrier()  # no process returns before the run is complete on disk
        return results

    def _write_predictions(self, split: str, preds: Any, scores: Any, labels: Any) -> None:
        if not self.is_main:
            return
        path = self.out / "predictions" / f"{split}.jsonl"
        rows = (_as_list(preds), _as_list(scores), _as_list(labels))
        lines = []
        for i, (p, s, y) in enumerate(zip(*rows, strict=True)):
            row = {"index": i, "prediction": p, "label": y, "score": s}
            if self.task.kind == "token_classification":
                del row[
                    "score"
                ]  # a probability per word would triple the file; `attendout predict` gives them
            lines.append(json.dumps(row) + "\n")
        with self._writing(str(path)):
            write_text_atomic(path, "".join(lines))


def finetune(config: TrainConfig, on_log: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run one fine-tuning job described by ``config``; return the results (also in results.json).

    ``on_log`` is called with every record written to log.jsonl (training steps, validations, the
    final evaluation): ``attendout bench`` prints its progress from the validation records.
    """
    return Trainer(config, on_log).fit()


def format_truncation(results: dict[str, Any]) -> str | None:
    """One line on how many examples were longer than max_length and how they were cut (None if none)."""
    summary = results.get("truncation") or {}
    cut = summary.get("cut") or {}
    if not any(cut.values()):
        return None
    sizes = results.get("sizes") or {}
    how = {
        "head-tail": f"kept the first {summary.get('head')} and the last {summary.get('tail')} pieces",
        "head": "kept the first pieces",
        "sliding": f"windows with {summary.get('stride')} pieces of overlap, logits averaged",
    }.get(summary.get("strategy"), summary.get("strategy"))
    counts = ", ".join(
        f"{n}{f' of {sizes[split]}' if split in sizes else ''} {split}" for split, n in cut.items()
    )
    tagged = summary.get("cut_words_tagged")
    words = f"; the words past the cut are tagged {tagged}" if tagged else ""
    return (
        f"longer than {summary.get('max_length')} pieces: {counts} ({summary.get('strategy')}: {how}{words})"
    )


def format_results(results: dict[str, Any]) -> str:
    """A small Markdown table of the validation and evaluation metrics of a run."""
    rows = [("validation (model selection)", results["validation"])] + list(results["eval"].items())
    stop = results.get("stopped_early")
    note = (
        f"stopped early at step {stop['step']} of {results['total_steps']} (no better validation in "
        f"{stop['patience']} evaluations); best step {results['best_step']}\n\n"
        if stop
        else ""
    )
    names = [m for m in next(iter(results["eval"].values()), results["validation"]) if m != "loss"]
    header = "| split | " + " | ".join(names) + " |"
    lines = [header, "|" + "---|" * (len(names) + 1)]
    for split, metrics in rows:
        lines.append(
            f"| {split} | " + " | ".join(f"{metrics.get(n, float('nan')):.4f}" for n in names) + " |"
        )
    return note + "\n".join(lines)


def _as_list(values: Any) -> list[Any]:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _version() -> str:
    from . import __version__

    return __version__


def _transformers_version() -> str:
    import transformers

    return transformers.__version__
