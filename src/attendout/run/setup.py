"""A run's set-up: its data read, split and encoded, its model loaded, and the pieces it trains with.

:func:`set_up` does it all, in order, for the loop (:mod:`attendout.run.loop`), before the run folder is
touched: :func:`~attendout.run.data.load_data` reads the task's data from the sources a config names, :func:`load_model` loads
the model (pretrained, or for the generation kinds from scratch), and the model's and the method's
limits are checked before anything is encoded. What it gives is :class:`RunInputs`. The loop then makes
its training pieces here: the budget in steps (:func:`budget`), AdamW with its schedule
(:func:`make_optimizer`) and the model in DDP over several processes (:func:`wrap_model`).
"""

from __future__ import annotations

import logging
import math
import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..config import TrainConfig, scratch_size, split_for_training
from ..core.limits import check_lengths
from ..core.optim import adamw, linear_schedule
from ..encoding import Encoded, GenerationOptions, encode, score_unigram_floor, truncation_summary
from ..methods import MethodConfig
from ..models import load_for_generation, load_for_task
from ..tasks import Examples, Task, is_generation
from .data import load_data
from .devices import data_parallel, set_seed

logger = logging.getLogger(__name__)


def load_model(config: TrainConfig, task: Task, train: Examples) -> tuple[Any, Any, str]:
    """(model, tokenizer, description) for ``task``: a pretrained encoder with the task's head, or for the
    generation kinds a pretrained or from-scratch decoder or encoder-decoder (``train``: the split a
    scratch tokenizer is trained on)."""
    c = config
    if is_generation(task.kind):
        return load_for_generation(
            c.model,
            task,
            init=c.model_init,
            size=scratch_size(c),
            positions=c.longest(task.kind),
            train=train,
        )
    if c.model_init != "pretrained":
        raise ValueError(
            f"model_init {c.model_init!r} is for the generation tasks (lm, seq2seq); task {task.name!r} "
            f"is {task.kind}: fine-tune a pretrained encoder"
        )
    return load_for_task(c.model, task, ignore_mismatched_head=c.ignore_mismatched_head)


def encode_examples(config: TrainConfig, task: Task, tokenizer: Any, examples: Examples) -> Encoded:
    """``examples`` tokenised for the task's kind with the run's length and truncation."""
    c = config
    generation = GenerationOptions(c.num_beams, c.max_new_tokens or c.max_length)
    return encode(
        examples, task, tokenizer, c.max_length, c.truncation, c.window_stride,
        block_size=c.block_size, generation=generation,
    )  # fmt: skip


@dataclass
class RunInputs:
    """What a run trains and evaluates: the task, its splits (as read and as encoded), the model, its
    tokenizer, and the method's config (made once, by the run's config)."""

    task: Task
    data_source: Any
    train_examples: Examples
    validation_examples: Examples
    eval_examples: dict[str, Examples]
    model: Any
    tokenizer: Any
    model_description: str
    method: MethodConfig
    train_set: Encoded
    validation_set: Encoded
    eval_sets: dict[str, Encoded]

    def encoded(self) -> dict[str, Encoded]:
        """Every encoded split by name: train, validation and the evaluation splits."""
        return {"train": self.train_set, "validation": self.validation_set, **self.eval_sets}

    def sizes(self) -> dict[str, int]:
        """Examples per split (documents, not windows; sentences, not words)."""
        return {name: data.examples_count() for name, data in self.encoded().items()}

    def truncation_summary(self, max_length: int) -> dict[str, Any]:
        """How texts longer than ``max_length`` were cut, and how many were, per split."""
        return truncation_summary(self.encoded(), self.task, max_length)


def say(config: TrainConfig, is_main: bool, what: str) -> None:
    """A line on a terminal's stderr while the set-up works, before the first bar (with ``progress``)."""
    if config.progress and is_main and sys.stderr.isatty():  # logs keep one-line errors
        print(f"attendout: {what} ...", file=sys.stderr, flush=True)


def set_up(config: TrainConfig, device: torch.device, is_main: bool = True) -> RunInputs:
    """Read, split and encode the data, load the model onto ``device`` and check its and the method's
    limits, for the run ``config`` describes (``is_main``: the process that says what it does)."""
    c = config
    say(c, is_main, f"reading the data ({c.train_file or c.task})")
    task, data = load_data(c)
    train, validation, evals = split_for_training(data, c, task.label_names)
    set_seed(c.seed)  # the head's initialisation depends on the model seed only
    say(c, is_main, f"loading the model {c.model}")
    model, tokenizer, description = load_model(c, task, train)
    model.to(device)
    method = c.method_config()
    # the model's and the method's limits, for every length the run sends through the model, before
    # anything is encoded or trained
    check_lengths(
        task.kind, model.config, max_length=c.max_length, block_size=c.block_size,
        max_new_tokens=c.max_new_tokens, tokenizer=tokenizer, method=method, model=c.model,
    )  # fmt: skip
    say(c, is_main, f"encoding {len(train)} training examples and the evaluation splits")
    train_set = encode_examples(c, task, tokenizer, train)
    validation_set = encode_examples(c, task, tokenizer, validation)
    eval_sets = {name: encode_examples(c, task, tokenizer, ex) for name, ex in evals.items()}
    score_unigram_floor(train_set, validation_set, *eval_sets.values())  # lm: perplexity's floor
    return RunInputs(
        task, data.source, train, validation, evals, model, tokenizer, description, method,
        train_set, validation_set, eval_sets,
    )  # fmt: skip


# the training pieces --------------------------------------------------------------------------------


def budget(config: TrainConfig, train_rows: int) -> tuple[int, int]:
    """(steps per epoch, total steps) of a run over ``train_rows`` training rows: ``max_steps``, or
    ``epochs`` passes (0 steps: the model is evaluated as it is, a zero-shot floor)."""
    steps_per_epoch = math.ceil(train_rows / config.batch_size)
    if config.max_steps is not None:
        return steps_per_epoch, config.max_steps
    return steps_per_epoch, max(1, math.ceil(config.epochs * steps_per_epoch))


def make_optimizer(
    config: TrainConfig, strategy: Any, total_steps: int, model: nn.Module
) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW over the method's (``strategy``'s) parameter groups of ``model``, with the warm-up/decay schedule."""
    optimizer = adamw(strategy.param_groups(model, config.weight_decay), lr=config.learning_rate)
    scheduler = linear_schedule(optimizer, int(config.warmup_ratio * total_steps), total_steps)
    return optimizer, scheduler


def wrap_model(
    distributed: Any, device: torch.device, method: MethodConfig, trained: nn.Module, model: nn.Module
) -> nn.Module:
    """``model`` as the loop trains it: in DistributedDataParallel over several processes (``trained``:
    the run's own model, whose unused parameters the main process names once)."""
    if distributed.world_size == 1:
        return model
    unused = method.unused_parameters
    if unused and distributed.is_main and model is trained:
        logger.info("DDP looks for unused parameters (find_unused_parameters=True): %s", unused)
    return data_parallel(model, device, find_unused=bool(unused))
