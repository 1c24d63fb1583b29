"""A run's configuration: :class:`TrainConfig`, the tasks' own defaults, and the splits it decides.

:class:`TrainConfig` is everything a fine-tuning run depends on (the CLI's ``finetune`` options, an
experiment cell, a config file's ``[training]`` table); :data:`NEUTRAL_OPTIONS` are the fields that are no
part of a run's recipe (and :data:`RESUME_MUST_MATCH` the ones a resume must still share).
:func:`split_for_training` carves a run's validation split and subsamples, as the loop
(:mod:`attendout.run.setup`) and ``attendout predict`` both need them.

The config is plain data: making one checks its values (the validation steps below, in order) and loads
nothing; a run's set-up (:mod:`attendout.run.setup`) reads the data and the model it names.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

from .encoding.truncation import TRUNCATIONS
from .methods import MethodConfig, get_method_config
from .models import ScratchSize
from .tasks import LM, SEQ2SEQ, Examples, TaskData, carve_validation, check_training_splits, subsample
from .tasks.defaults import task_defaults
from .typecheck import AT_LEAST_0, AT_LEAST_1, POSITIVE, Must, check_fields, one_of, option

#: The device names a ``device`` setting may give (besides "auto"): cpu, cuda or mps, with an optional index.
_DEVICE_NAME = re.compile(r"(cpu|cuda|mps)(?::(0|[1-9][0-9]*))?")

#: The TrainConfig fields that are not part of a run's recipe, each with why: they leave its numbers
#: alone, or change them only as running on another machine would (float rounding; with the model's
#: dropout on, micro-batches draw other random masks). The one list: a checkpoint may be resumed with
#: other values of them (:func:`attendout.run.runfolder.checkpoint_config`, less RESUME_MUST_MATCH), and they are left
#: out of an experiment cell's identity (``attendout.bench.spec.FINGERPRINT_EXCLUDE``, all of them).
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


#: label_kind's values and the kinds they name.
_LABEL_KINDS = {
    "classification": "classification",
    "regression": "regression",
    "token": "token_classification",
    "token_classification": "token_classification",
}
#: a 0-based column of a token file
_COLUMN = Must(AT_LEAST_0.holds, "at least 0 (a 0-based column)")


@dataclass
class TrainConfig:
    """Everything a run depends on. Field help texts are the CLI's."""

    # what to train
    task: str = option("rotten-tomatoes", "task name (see `attendout tasks`)")
    model: str = option("minilm", "'minilm' (packaged offline default), a local folder or a hub id")
    ignore_mismatched_head: bool = option(
        False,
        "when the model's classification head has other labels than the task (another count "
        "or other names), start a new head instead of stopping with an error",
    )
    method: str = option("none", "regulariser (see `attendout methods`)")
    method_options: dict[str, Any] = field(default_factory=dict, metadata={"help": "the method's options"})
    # data
    data_dir: str | None = option(None, "local GLUE-format folder (root or task folder)")
    hub: bool = option(False, "load the task from the Hugging Face hub (needs internet)")
    train_file: str | None = option(None, "CSV/TSV/JSONL training file")
    eval_files: dict[str, str] | None = option(None, "evaluation files, split name -> path")
    text_columns: list[str] | None = option(None, "one or two text columns of the files")
    label_column: str | None = option(None, "label column of the files")
    label_kind: str | None = option(
        None,
        "what the files' labels are (task 'file'): classification (default), regression (a "
        "float per row; Pearson, Spearman) or token_classification (CoNLL-style columns)",
        must=one_of(tuple(_LABEL_KINDS), "classification, regression or token (token_classification)"),
    )
    token_column: int | None = option(
        None, "token files: the 0-based column of the words (default 0)", must=_COLUMN
    )
    tag_column: int | None = option(
        None, "token files: the 0-based column of the tags (default: the last)", must=_COLUMN
    )
    drop_bad_rows: bool = option(
        False,
        "leave out rows of the files with an empty text or a blank label (a warning says how "
        "many) instead of stopping with an error",
    )
    max_train_samples: int | None = option(None, "subsample the training set", must=AT_LEAST_1)
    max_eval_samples: int | None = option(None, "subsample every evaluation split", must=AT_LEAST_1)
    validation_split: float = option(
        0.1,
        "fraction of train held out for model selection",
        must=Must(lambda value: 0 < value < 1, "in (0, 1)"),
    )
    data_seed: int = option(
        0, "seed of the validation split, the subsample and the data order", must=AT_LEAST_0
    )
    max_length: int = option(
        128,
        "maximum tokens per example (longer ones are truncated; some tasks set their own: `attendout tasks`)",
        must=Must(lambda value: value >= 8, "at least 8"),
    )
    truncation: str = option(
        "auto",
        "texts longer than max_length: head-tail (keep the first quarter and the last three "
        "quarters of the window; 'auto' = head-tail for single texts, head for pairs), head, or sliding "
        "(windows with --window-stride pieces of overlap; a document's logits are its windows' mean)",
        must=one_of(TRUNCATIONS, " or ".join(TRUNCATIONS)),
    )
    window_stride: int | None = option(
        None, "sliding windows: pieces of overlap between windows (default max_length / 4)"
    )
    # generation tasks (lm, seq2seq)
    block_size: int | None = option(
        None,
        "lm: tokens per block of the packed text stream (default max_length)",
        must=Must(lambda value: value >= 2, "at least 2"),
    )
    source_column: str | None = option(None, "seq2seq files: the source text column (default 'source')")
    target_column: str | None = option(None, "seq2seq files: the target text column (default 'target')")
    metrics: str | None = option(
        None,
        "comma-separated metrics replacing the task's, the first the main one (e.g. "
        "rouge1,rouge2,rougeL for summarization)",
    )
    model_init: str = option(
        "pretrained",
        "generation tasks: 'pretrained' weights of --model, or 'scratch': random weights of the "
        "architecture --model names (gpt2, llama, qwen2, mistral; t5, bart, marian) at --model-layers/--model-hidden/--model-heads, or of "
        "a config.json; the tokenizer is a byte-level BPE of --vocab-size trained on the training split",
        must=one_of(("pretrained", "scratch"), "'pretrained' or 'scratch'"),
    )
    model_layers: int = option(
        2, "--model-init scratch: layers (per stack of an encoder-decoder)", must=AT_LEAST_1
    )
    model_hidden: int = option(128, "--model-init scratch: hidden size (feed-forward 4x)", must=AT_LEAST_1)
    model_heads: int = option(4, "--model-init scratch: attention heads", must=AT_LEAST_1)
    vocab_size: int = option(8000, "--model-init scratch: BPE vocabulary size", must=AT_LEAST_1)
    num_beams: int = option(
        1, "seq2seq: beams of the decoding the metrics score (1 = greedy)", must=AT_LEAST_1
    )
    max_new_tokens: int | None = option(
        None, "seq2seq: longest output decoded (default max_length)", must=AT_LEAST_1
    )
    # optimisation
    epochs: float = option(3.0, "training epochs (ignored when max_steps is set)", must=POSITIVE)
    max_steps: int | None = option(
        None,
        "training steps (overrides epochs); 0 evaluates the model as it is, untrained (a zero-shot floor)",
        must=AT_LEAST_0,
    )
    batch_size: int = option(
        32, "training batch size (some tasks set their own: `attendout tasks`)", must=AT_LEAST_1
    )
    micro_batch_size: int | None = option(
        None,
        "split each training batch into micro-batches of at most N examples and accumulate "
        "their gradients: the update is the whole batch's, the activation memory a micro-batch's",
        must=AT_LEAST_1,
    )
    eval_batch_size: int = option(64, "evaluation batch size", must=AT_LEAST_1)
    learning_rate: float = option(
        5e-5, "peak AdamW learning rate (some tasks set their own: `attendout tasks`)", must=POSITIVE
    )
    weight_decay: float = option(0.01, "AdamW weight decay (not on biases and LayerNorm)", must=AT_LEAST_0)
    warmup_ratio: float = option(
        0.1, "fraction of steps of linear warm-up", must=Must(lambda value: 0 <= value < 1, "in [0, 1)")
    )
    max_grad_norm: float = option(
        1.0, "gradient clipping norm (0 = off)", must=Must(AT_LEAST_0.holds, "at least 0 (0 = no clipping)")
    )
    seed: int = option(42, "model seed: head initialisation, dropout, masks", must=AT_LEAST_0)
    # evaluation, logging, output
    eval_steps: int | None = option(None, "evaluate every N steps (and at each epoch end)", must=AT_LEAST_1)
    early_stopping_patience: int | None = option(
        None,
        "stop when the validation metric has not improved for N evaluations in a row "
        "(the learning-rate schedule still spans the whole budget; default: train the whole budget)",
        must=AT_LEAST_1,
    )
    model_selection: str = option(
        "best",
        "which validated model the run keeps and evaluates: 'best' (the best validation score) or "
        "'last' (the model at the end of the budget, as scripts that report their final epoch do; still "
        "validated, for the curves)",
        must=one_of(("best", "last"), "'best' or 'last'"),
    )
    log_steps: int = option(10, "write a log line every N steps", must=AT_LEAST_1)
    output_dir: str = option("runs/latest", "run directory")
    checkpoint_steps: int | None = option(
        None,
        "save a resumable training state every N steps and after each new best validation "
        "(RUN_DIR/checkpoint, removed when the run finishes)",
        must=AT_LEAST_1,
    )
    resume: bool = option(
        False,
        "continue the unfinished run in output_dir from its checkpoint (afresh if it has none; "
        "an incomplete or corrupt checkpoint is an error)",
    )
    overwrite: bool = option(False, "replace a finished run in output_dir, or an unfinished run's checkpoint")
    save_model: bool = option(True, "save the best model with save_pretrained")
    evaluate: bool = option(
        True,
        "score the evaluation splits with the best model when training ends (off: the run "
        "never encodes or scores them, as advise's search trials)",
    )
    device: str = option("auto", "auto, cpu, cuda, cuda:N or mps")
    precision: str = option(
        "fp32",
        "fp32, bf16 or fp16 (mixed precision, GPU)",
        must=one_of(("fp32", "bf16", "fp16"), "fp32, bf16 or fp16"),
    )
    progress: bool = option(True, "show progress bars")
    #: the method's config made by the caller (the CLI, settling it for the task): kept, not made again
    method_made: InitVar[MethodConfig | None] = None

    def __post_init__(self, method_made: MethodConfig | None = None) -> None:
        check_fields(self)  # every field its declared type (a bool is no number), then its range
        check_device_name(self.device)  # its form; whether this machine has it: pick_device, before any data
        _check_between(self)
        self.label_kind = _LABEL_KINDS.get(self.label_kind)  # by its full name (token: token_classification)
        _keep_made(self, method_made)
        self.method_config()  # a bad method name or option fails now, not after loading data and model

    @classmethod
    def for_task(cls, task: str, **values: Any) -> TrainConfig:
        """A config for ``task`` with its recipe defaults (:func:`~attendout.tasks.defaults.task_defaults`)
        where ``values`` leave them unset."""
        return cls(task=task, **{**task_defaults(task), **values})

    def method_config(self) -> MethodConfig:
        """The config of ``method`` with ``method_options``: made once, the one a run applies and records
        (made again only where either changed since)."""
        made = getattr(self, "_method", None)
        if made is None or made[:2] != (self.method, self.method_options):
            made = self._method = _method_made(self.method, self.method_options)
        return made[2]

    def longest(self, kind: str) -> int:
        """The longest sequence a run of task kind ``kind`` sends through its model: ``max_length``, or
        where longer an lm block (``block_size``) or a decoded seq2seq output (``max_new_tokens``). A
        model from scratch gets as many positions, and Synthesizer's l_max defaults to it."""
        if kind == LM:
            return max(self.max_length, self.block_size or 0)
        if kind == SEQ2SEQ:
            return max(self.max_length, self.max_new_tokens or 0)
        return self.max_length

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["method_options"] = self.method_config().to_dict()
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """The config :meth:`to_dict` wrote (a run's config.json); an unknown field is an error."""
        _check_known(values)
        options = {k: v for k, v in (values.get("method_options") or {}).items() if k != "name"}
        return cls(**{**values, "method_options": options})


def _method_made(method: str, options: dict[str, Any]) -> tuple[str, dict[str, Any], MethodConfig]:
    """(method, a copy of its options, its config made of them): what :meth:`TrainConfig.method_config` keeps."""
    return method, copy.deepcopy(options), get_method_config(method, **options)


def _keep_made(config: TrainConfig, made: MethodConfig | None) -> None:
    """Keep the method's config the caller made (``method_made``) as the one :meth:`TrainConfig.method_config`
    returns, where it is the config of ``config.method`` with every one of ``config.method_options``."""
    if made is None:
        return
    given = made.to_dict() if isinstance(made, MethodConfig) else {}
    wrong = [k for k, v in config.method_options.items() if k not in given or given[k] != v]
    if given.get("name") != config.method or wrong:
        raise ValueError(
            f"method_made ({made!r}) is not the config of method {config.method!r} with options "
            f"{config.method_options!r}" + (f" (it differs in {', '.join(wrong)})" if wrong else "")
        )
    config._method = (config.method, copy.deepcopy(config.method_options), made)


def _check_known(values: dict[str, Any]) -> None:
    """Refuse a field a TrainConfig does not have (a config.json of another version, a typo)."""
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"unknown training option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )


# validation: TrainConfig.__post_init__'s steps, in order; the first broken rule is the error ----------


def check_device_name(name: str) -> None:
    """Refuse a ``device`` setting that names no device: "auto", "cpu", "cuda", "cuda:N" or "mps".

    Only its form (as ``torch.device`` reads it): whether this machine has it is
    :func:`attendout.run.devices.pick_device`'s check (a run's config.json made on a GPU machine must
    still be readable on one without).
    """
    if name == "auto":
        return
    match = _DEVICE_NAME.fullmatch(name) if isinstance(name, str) else None
    if match is None or (match.group(2) is not None and int(match.group(2)) >= 2**31):
        raise ValueError(f"device must be auto, cpu, cuda, cuda:N or mps, got {name!r}")


def _check_between(c: TrainConfig) -> None:
    """The rules between fields, in order: sliding windows' stride (only with truncation 'sliding', and
    inside a window), which model the run keeps and whether a zero-shot run's method can act, a model from
    scratch's size (:class:`~attendout.models.size.ScratchSize`'s own checks), and a seq2seq file's two
    text columns (together, and not with ``text_columns``)."""
    if c.window_stride is not None and c.truncation != "sliding":
        raise ValueError(
            f"window_stride must be left out unless truncation is 'sliding', got {c.window_stride!r}"
        )
    if c.window_stride is not None and not 0 <= c.window_stride < c.max_length - 2:
        raise ValueError(
            f"window_stride must be in [0, max_length - 2) = [0, {c.max_length - 2}) (a window holds two "
            f"special pieces), got {c.window_stride!r}"
        )
    if c.model_selection == "last" and c.early_stopping_patience is not None:
        raise ValueError(
            "early_stopping_patience stops at the best validation, which model_selection 'last' does not keep: "
            "use one or the other"
        )
    if c.max_steps == 0 and c.method != "none":
        raise ValueError(
            f"max_steps 0 evaluates the model as it is, untrained, where method {c.method!r} cannot act: "
            "use method 'none' for a zero-shot floor"
        )
    if c.model_init == "scratch":
        scratch_size(c)
    if (c.source_column is None) != (c.target_column is None):
        raise ValueError("source_column and target_column go together (a seq2seq file's two text columns)")
    if c.source_column is not None and c.text_columns:
        raise ValueError("give either text_columns or source_column/target_column, not both")


def scratch_size(c: TrainConfig) -> ScratchSize:
    """The size of the model from scratch that ``c`` describes."""
    return ScratchSize(c.model_layers, c.model_hidden, c.model_heads, c.vocab_size)


# the splits ---------------------------------------------------------------------------------------


def split_for_training(
    data: TaskData, c: TrainConfig, label_names: Sequence[str] | None = None
) -> tuple[Examples, Examples, dict[str, Examples]]:
    """(train, validation, evaluation splits): validation carved from train, then the subsamples; all by data_seed.

    ``label_names`` (the task's) only make the checks' messages name a class instead of its index.
    """
    where = getattr(c, "train_file", None) or f"the training split of task {getattr(c, 'task', '?')!r}"
    train, validation = carve_validation(
        data.train, c.validation_split, c.data_seed, what=str(where), option="--validation-split"
    )
    train = subsample(train, c.max_train_samples, c.data_seed)
    if c.max_eval_samples is not None:
        validation = subsample(validation, c.max_eval_samples, c.data_seed)
    evals = {
        name: subsample(ex, c.max_eval_samples, c.data_seed)
        for name, ex in (data.eval_splits.items() if c.evaluate else ())
    }
    check_training_splits(data, train, evals, label_names)  # unseen eval classes refused; overlap warned of
    return train, validation, evals
