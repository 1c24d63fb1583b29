"""The fine-tuning loop: one readable loop for every method.

``finetune(TrainConfig(...))`` loads a task and a model, applies a method through the attention hook,
trains with AdamW and a linear warm-up/decay schedule, selects the best checkpoint on a validation
split carved from train (dev is only for reporting), and writes a run directory (its files:
:mod:`attendout.run.checkpoints`).

The loop is a small :class:`Trainer` whose state (step, epoch, best score, optimizer, scheduler, the
method's own state, the random generators) is held in one place, so a run killed midway resumes from
its last checkpoint to the very numbers it would have reached uninterrupted (on CPU; on GPUs
nondeterministic kernels may make the continuation differ slightly).

The loop's parts live beside it: the configuration in :mod:`attendout.config`, the device, process
group and precision in :mod:`attendout.run.devices`, the run directory's checks and the checkpoint a
resume reads in :mod:`attendout.run.checkpoints`, the files written whole in :mod:`attendout.run.folder`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import torch
from torch import nn
from tqdm.auto import tqdm

from ..config import TrainConfig, split_for_training
from ..contract import LoopContext, StepInfo
from ..encoding.classification import Encoded, encode, predict_batches, truncation_summary
from ..encoding.generation import GenerationOptions, score_unigram_floor
from ..methods.registry import build_strategy
from ..tasks import CLASSIFICATION, LM, Examples, Task, better, compute_metrics
from .checkpoints import (
    TrainState,
    check_run_dir,
    checkpoint_config,
    prepare_run_dir,
    read_resumable,
    remove_checkpoint,
    setting_up,
    single_class,
    write_split_predictions,
)
from .devices import (
    check_batches_fit_processes,
    data_parallel,
    mixed_precision,
    process_group,
    rng_state,
    set_rng_state,
    set_seed,
    shard,
)
from .evalstop import EvaluationStopped
from .folder import (
    CHECKPOINT_DIR,
    CHECKPOINT_FORMAT,
    RunDir,
    StorageError,
    describe_os_error,
    os_error_remedy,
    verify_folder,
    write_checkpoint,
    write_json_atomic,
)
from .interrupt import Stopped, agreed, deferred
from .limits import check_lengths
from .lock import RunLock
from .optim import TrainingError, adamw, linear_schedule, micro_batches, update
from .record import config_record, results_record

logger = logging.getLogger(__name__)

__all__ = [
    "Trainer",
    "finetune",
]


class Trainer:
    """Owns the model, optimizer, schedule, data and run directory of one run."""

    def __init__(self, config: TrainConfig, on_log: Callable[[dict[str, Any]], None] | None = None):
        self.config = config
        self.on_log = on_log  # sees every log.jsonl record
        self.run = RunDir(config.output_dir)  # the run directory's files by name
        self.out = self.run.path
        self.distributed, self.device = process_group(config.device)
        self.is_main = self.distributed.is_main  # only the main process writes the run directory
        check_run_dir(
            self.out, config.overwrite, config.resume, busy=self.is_main
        )  # before any load or write

        self._say(f"reading the data ({config.train_file or config.task})")
        task, data = config.load_data()
        self.task: Task = task
        self.data_source = data.source
        self.train_examples, self.validation_examples, self.eval_examples = split_for_training(
            data, config, task.label_names
        )

        set_seed(config.seed)  # the head's initialisation depends on the model seed only
        self._say(f"loading the model {config.model}")
        self.model, self.tokenizer, self.model_description = config.load_model(task, self.train_examples)
        self.model.to(self.device)
        self.method_config = config.method_config()
        # the model's and the method's limits, for every length the run sends through the model, before
        # anything is encoded or trained
        c = config
        check_lengths(
            task.kind, self.model.config, max_length=c.max_length, block_size=c.block_size,
            max_new_tokens=c.max_new_tokens, tokenizer=self.tokenizer, method=self.method_config, model=c.model,
        )  # fmt: skip

        self._say(f"encoding {len(self.train_examples)} training examples and the evaluation splits")
        self.train_set = self.encode(self.train_examples)
        self.validation_set = self.encode(self.validation_examples)
        self.eval_sets = {name: self.encode(ex) for name, ex in self.eval_examples.items()}
        score_unigram_floor(
            self.train_set, self.validation_set, *self.eval_sets.values()
        )  # lm: perplexity's floor

        self.steps_per_epoch = math.ceil(len(self.train_set) / config.batch_size)
        self.total_steps = (
            config.max_steps
            if config.max_steps is not None  # 0: the model is evaluated as it is (a zero-shot floor)
            else max(1, math.ceil(config.epochs * self.steps_per_epoch))
        )
        check_batches_fit_processes(len(self.train_set), config.batch_size, self.distributed.world_size)
        self.strategy = build_strategy(self.method_config)
        self.strategy.attach(self.model, max_length=config.longest(task.kind))  # Synthesizer's default l_max
        self.train_model = self.wrap(self.model)  # DDP over several processes; the model itself in one
        self.optimizer, self.scheduler = self.make_optimizer(self.model)
        self.autocast_dtype, self.scaler = mixed_precision(config.precision, self.device)
        self.state = TrainState()
        self.loop = self.loop_context()
        self.strategy.start(self.loop)
        self._running: list[float] = []  # losses since the last log line
        self.elapsed_before = 0.0  # training seconds before a resume
        self._started: float | None = None  # when fit() began
        self._checkpointed_at: int | None = None
        self.resumed_at: int | None = None
        # Only now, with data and model loaded and the method applied, touch the run directory: one
        # writer at a time (the main process's lock, released at the end of fit).
        self._lock = RunLock(self.out)
        try:
            with setting_up(self.out):
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
    def _say(self, what: str) -> None:
        """A line on a terminal's stderr while the set-up works, before the first bar (with ``progress``)."""
        if self.config.progress and self.is_main and sys.stderr.isatty():  # logs keep one-line errors
            print(f"attendout: {what} ...", file=sys.stderr, flush=True)

    def encode(self, examples: Examples) -> Encoded:
        """``examples`` tokenised for the task's kind with this run's length and truncation."""
        c = self.config
        generation = GenerationOptions(c.num_beams, c.max_new_tokens or c.max_length)
        return encode(
            examples,
            self.task,
            self.tokenizer,
            c.max_length,
            c.truncation,
            c.window_stride,
            block_size=c.block_size,
            generation=generation,
        )

    def sizes(self) -> dict[str, int]:
        """Examples per split (documents, not windows; sentences, not words)."""
        sets = {"train": self.train_set, "validation": self.validation_set, **self.eval_sets}
        return {name: data.examples_count() for name, data in sets.items()}

    def truncation_summary(self) -> dict[str, Any]:
        """How texts longer than max_length were cut, and how many were, per split (the run's config)."""
        sets = {"train": self.train_set, "validation": self.validation_set, **self.eval_sets}
        return truncation_summary(sets, self.task, self.config.max_length)

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

    def _prepare_output_dir(self, resumed_at: int | None = None) -> None:
        check_run_dir(self.out, self.config.overwrite, self.config.resume, busy=False)  # the main holds it
        if self.is_main:
            prepare_run_dir(self.out, self.config.overwrite, resumed_at)

    def _write_config(self) -> None:
        if not self.is_main:
            return
        write_json_atomic(self.run.config, config_record(self))

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
        return data_parallel(model, self.device, find_unused=bool(unused))

    def shard(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """This process's consecutive rows of ``batch`` (all of it in one process)."""
        return shard(batch, self.distributed)

    def loop_context(self) -> LoopContext:
        """What this loop gives a method (see :mod:`attendout.contract`)."""
        c = self.config
        return LoopContext(
            device=self.device,
            total_steps=max(1, self.total_steps),  # 0 (a zero-shot evaluation): no step is taken
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
    def save_checkpoint(self, rng: dict[str, Any] | None = None) -> None:
        """Write the whole training state to RUN_DIR/checkpoint (state.pt, state.json, then manifest.json),
        swapped in whole (main process): a failed or killed save leaves the previous checkpoint. ``rng``:
        the random generators' state to record (default: as they are now)."""
        if not self.is_main:
            self._checkpointed_at = self.state.step
            return
        state = {
            "format": CHECKPOINT_FORMAT,
            "config": checkpoint_config(self.config),
            "state": dataclasses.asdict(self.state),
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "strategy": self.strategy.state_dict(),
            "best_state": getattr(self, "_best_state", None),
            "running": [float(x) for x in self._running],
            "elapsed": self.elapsed_before + (0.0 if self._started is None else time.time() - self._started),
            "rng": rng if rng is not None else rng_state(self.device),
        }
        summary = {
            "step": self.state.step,
            "total_steps": self.total_steps,
            "best_step": self.state.best_step,
        }
        folder = self.run.checkpoint_dir
        with self._writing(f"the checkpoint of step {self.state.step} to {folder}"):
            write_checkpoint(folder, state, summary)
        self._checkpointed_at = self.state.step

    def _read_checkpoint(self) -> dict[str, Any] | None:
        return read_resumable(self.out, self.config, self.device, self.is_main)

    def _restore(self, checkpoint: dict[str, Any]) -> None:
        self.state = TrainState(**checkpoint["state"])
        self.model.load_state_dict(checkpoint["model"])
        self.optimizer.load_state_dict(checkpoint["optimizer"])
        self.scheduler.load_state_dict(checkpoint["scheduler"])
        self.scaler.load_state_dict(checkpoint["scaler"])
        self.strategy.load_state_dict(checkpoint["strategy"])
        if checkpoint["best_state"] is not None:
            self._best_state = checkpoint["best_state"]
        self._running = [
            torch.tensor(x, device=self.device) for x in checkpoint["running"]
        ]  # beside new losses
        self.elapsed_before = float(checkpoint["elapsed"])
        self.resumed_at = self.state.step
        set_rng_state(checkpoint["rng"], self.device)
        logger.info("resuming %s at step %d of %d", self.out, self.state.step, self.total_steps)

    # logging --------------------------------------------------------------------------------
    def log(self, record: dict[str, Any]) -> None:
        if not self.is_main:
            return
        with self._writing(f"a line of {self.run.log}"), open(self.run.log, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.on_log is not None:
            self.on_log(record)

    # training -------------------------------------------------------------------------------
    @property
    def epoch_progress(self) -> float:
        """Epochs done, fractional."""
        return round(self.state.step / self.steps_per_epoch, 4)

    def micro_batches(self, batch: dict[str, torch.Tensor]) -> list[tuple[slice, dict[str, torch.Tensor]]]:
        """``batch`` cut into micro-batches of at most ``micro_batch_size`` rows (:func:`~attendout.run.optim.micro_batches`)."""
        return micro_batches(batch, self.config.micro_batch_size)

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
        return self._checkpointed_at if self._checkpointed_at is not None else self.resumed_at

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
            with deferred():  # Ctrl-C, SIGTERM: stop at the next whole step (:mod:`attendout.run.interrupt`)
                return self._fit()
        finally:
            self._lock.release()  # finished, failed or interrupted: the folder is free again

    def stop_if_requested(self) -> None:
        """At a whole step: if a stop was requested (on any process), checkpoint and raise :class:`Stopped`."""
        signum = agreed(self.distributed)
        if signum is None:
            return
        if self._checkpointed_at != self.state.step:
            self.save_checkpoint()
        self.distributed.barrier()  # the main process has written it
        raise Stopped(signum, self.out / CHECKPOINT_DIR, self.state.step, self.total_steps)

    def stop_between_batches(self) -> None:
        """Before each batch of an evaluation: a stop requested (on any process) ends it here."""
        signum = agreed(self.distributed)
        if signum is not None:
            raise EvaluationStopped(signum)

    def _stopped_evaluating(self, stop: Stopped, during: str, rng: dict[str, Any] | None = None) -> NoReturn:
        """Checkpoint the state from before the evaluation ``during`` (``rng``: the generators then) and
        raise :class:`EvaluationStopped` naming it: a resume runs that evaluation again."""
        self.save_checkpoint(rng=rng)
        self.distributed.barrier()  # the main process has written it
        raise EvaluationStopped(
            stop.signum, self.out / CHECKPOINT_DIR, self.state.step, self.total_steps, during
        )

    def _fit(self) -> dict[str, Any]:
        c = self.config
        self._started = time.time()
        if self.state.validation_due:  # resumed from a stop during this step's validation: run it again
            self.validate()
        with tqdm(  # closed before a stop's line or an error is printed
            total=self.total_steps,
            initial=self.state.step,
            desc=f"{c.task} {c.method}",
            disable=not c.progress or not self.is_main,
            dynamic_ncols=True,
        ) as bar:
            running = self._running
            while self.state.step < self.total_steps and not self.stopped_early:
                order = torch.Generator().manual_seed(c.data_seed * 100_003 + self.state.epoch)
                done = self.state.step - self.state.epoch * self.steps_per_epoch  # this epoch's (resume)
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
                    self.stop_if_requested()
                else:  # a full pass over the training set
                    self.state.epoch += 1
                    if self.state.validated_at != self.state.step:  # not just validated by eval_steps
                        self.validate()
                self.stop_if_requested()
        if self.state.validated_at != self.state.step:
            self.validate()  # the end of a partial epoch
        self.stop_if_requested()
        train_time = self.elapsed_before + time.time() - self._started
        return self.finish(train_time)

    # evaluation -----------------------------------------------------------------------------
    def predict(self, data: Encoded) -> tuple[Any, Any, float | None]:
        """(predictions, scores, mean loss) as :func:`~attendout.encoding.classification.predict_batches` gives them."""
        model = self.strategy.eval_model()
        return predict_batches(
            model, data, self.config.eval_batch_size, self.device, self.autocast_dtype,
            between=self.stop_between_batches,
        )  # fmt: skip

    def evaluate(self, data: Encoded) -> tuple[dict[str, float], Any, Any]:
        preds, scores, loss = self.predict(data)
        metrics = compute_metrics(self.task, preds, data.gold)
        counts = data.counts() if hasattr(data, "counts") else {}  # what a generation metric is over
        return {**metrics, "loss": loss, **counts}, preds, scores

    def validate(self) -> dict[str, float]:
        """Score the validation split; keep the model if it is the best so far. A stop requested during
        it ends it at the next batch, with a checkpoint of the state before it (flagged: a resume runs it)."""
        rng = rng_state(self.device)
        try:
            metrics, _, _ = self.evaluate(self.validation_set)
        except EvaluationStopped as stop:
            self.state.validation_due = True
            self._stopped_evaluating(stop, f"the validation at step {self.state.step}", rng)
        self.state.validation_due = False
        self.state.validated_at = self.state.step
        main = self.task.metrics[0]
        value = metrics[main]  # better in its own direction (perplexity: lower)
        first = self.state.best_step is None
        if first or self.config.model_selection == "last":  # "last": the latest model is the one kept
            improved = not math.isnan(value)
        else:
            improved = better(main, value, self.state.best_score)
        self.state.evals_since_best = 0 if improved else self.state.evals_since_best + 1
        if improved:
            self.state.best_score = metrics[main]
            self.state.best_step = self.state.step
            self.state.best_validation = metrics
            if self.config.save_model:
                if self.is_main:
                    target = self.run.model_dir
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
            model = self.run.model_dir
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
        evaluations, one_class = {}, {}
        try:  # a stop ends it at the next batch, with a checkpoint: a resume evaluates every split again
            for name, data in self.eval_sets.items():
                metrics, preds, scores = self.evaluate(data)
                evaluations[name] = metrics
                self._write_predictions(name, preds, scores, data.gold)
                if self.task.kind == CLASSIFICATION:  # one label for all: warned of, kept in results.json
                    one_class.update(single_class(name, preds, self.task.label_names, warn=self.is_main))
        except EvaluationStopped as stop:
            self._stopped_evaluating(stop, "the final evaluation")
        results = results_record(self, evaluations, one_class, train_time)
        self.log({"step": self.state.step, "eval": evaluations, "best_step": self.state.best_step})
        if self.is_main:
            with self._writing(f"{self.run.results}"):
                write_json_atomic(self.run.results, results)
            remove_checkpoint(self.out)  # finished: nothing to resume
        self.distributed.barrier()  # no process returns before the run is complete on disk
        return results

    def _write_predictions(self, split: str, preds: Any, scores: Any, labels: Any) -> None:
        if self.is_main and self.task.kind != LM:  # a language model's "predictions" are its scores
            path = self.run.prediction(split)
            with self._writing(str(path)):
                sources = getattr(self.eval_sets[split], "sources", None)  # seq2seq: its source texts
                write_split_predictions(path, preds, scores, labels, self.task.kind, sources)


def finetune(config: TrainConfig, on_log: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run one fine-tuning job described by ``config``; return the results (also in results.json).

    ``on_log`` is called with every record written to log.jsonl (training steps, validations, the
    final evaluation): ``attendout bench`` prints its progress from the validation records.
    """
    return Trainer(config, on_log).fit()
