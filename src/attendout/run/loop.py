"""The fine-tuning loop: fit, step, validate, stop; one readable loop for every method.

``finetune(TrainConfig(...))`` sets the run up (:mod:`attendout.run.setup`: the task's data, the model,
the method's config), applies the method through the attention hook, trains with AdamW and a linear
warm-up/decay schedule, selects the best checkpoint on a validation split carved from train (dev is only
for reporting), and writes its run folder through :class:`~attendout.run.runfolder.RunFolder`.

The loop is a small :class:`TrainingLoop` whose state (step, epoch, best score, optimizer, scheduler, the
method's own state, the random generators) is held in one place, so a run killed midway resumes from
its last checkpoint to the very numbers it would have reached uninterrupted (on CPU; on GPUs
nondeterministic kernels may make the continuation differ slightly).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import time
from collections.abc import Callable
from typing import Any, NoReturn

import torch
from tqdm.auto import tqdm

from ..config import TrainConfig
from ..contract import LoopContext, StepInfo
from ..core.folder import CHECKPOINT_DIR, CHECKPOINT_FORMAT
from ..core.optim import micro_batches, update
from ..encoding import Encoded, predict_batches
from ..tasks import CLASSIFICATION, LM, better, compute_metrics
from .devices import (
    check_batches_fit_processes,
    mixed_precision,
    process_group,
    rng_state,
    set_rng_state,
    shard,
)
from .interrupt import EvaluationStopped, Stopped, agreed, deferred
from .listener import as_listener
from .record import config_record, kept_before_acting_warning, results_record
from .runfolder import RunFolder, TrainState, checkpoint_config, single_class
from .setup import budget, make_optimizer, set_up, wrap_model

logger = logging.getLogger(__name__)


#: The loop's parts with a state of their own, each saved in a checkpoint under its name.
_STATEFUL = ("model", "optimizer", "scheduler", "scaler", "strategy")


class TrainingLoop:
    """One run's loop: the model, optimizer, schedule and method over the data of its set-up
    (:attr:`inputs`), writing through its run folder (:attr:`run`)."""

    def __init__(self, config: TrainConfig, on_log: Callable[[dict[str, Any]], None] | None = None):
        self.config = c = config
        self.distributed, self.device = process_group(c.device)
        self.listener = as_listener(on_log)  # sees the start, every log.jsonl record and the end
        self.run = RunFolder(c, self.distributed, self.listener)  # refuses a folder that cannot take the run
        self.inputs = inputs = set_up(c, self.device, self.run.is_main)
        self.task, self.model, self.tokenizer = inputs.task, inputs.model, inputs.tokenizer
        self.train_set, self.validation_set = inputs.train_set, inputs.validation_set
        self.eval_sets = inputs.eval_sets
        self.steps_per_epoch, self.total_steps = budget(c, len(self.train_set))
        check_batches_fit_processes(len(self.train_set), c.batch_size, self.distributed.world_size)
        from ..methods import prepare  # here: the hook's import (transformers' attention) waits for a run

        self.strategy = prepare(self.model, inputs.method, max_length=c.longest(self.task.kind))
        self.make_optimizer = functools.partial(make_optimizer, c, self.strategy, self.total_steps)
        self.wrap = functools.partial(wrap_model, self.distributed, self.device, inputs.method, self.model)
        self.train_model = self.wrap(self.model)  # DDP over several processes; the model itself in one
        self.optimizer, self.scheduler = self.make_optimizer(self.model)
        self.autocast_dtype, self.scaler = mixed_precision(c.precision, self.device)
        self.state = TrainState()
        self.loop = self.context()  # what the loop gives the method
        self.strategy.start(self.loop)
        self.running: list[Any] = []  # losses since the last log line
        self.elapsed_before = 0.0  # training seconds before a resume
        self.started: float | None = None  # when fit() began
        self.pace = [0, 0, 0.0]  # since the last log line: steps, examples, seconds in train_step
        # Only now, with data and model loaded and the method applied, touch the run folder.
        with self.run.taking():
            checkpoint = self.run.take(self.device)
            if checkpoint is not None:
                self.restore(checkpoint)
            self.run.write_config(
                lambda: config_record(
                    c,
                    inputs,
                    (self.steps_per_epoch, self.total_steps),
                    self.device,
                    self.distributed.world_size,
                )  # fmt: skip
            )
        if self.run.is_main:
            self.listener.start(self.run.path, self.run.resumed_at)

    def context(self) -> LoopContext:
        """What the loop gives a method (see :mod:`attendout.contract`)."""
        c = self.config
        return LoopContext(
            device=self.device, total_steps=max(1, self.total_steps),  # 0 (zero-shot): no step is taken
            steps_per_epoch=self.steps_per_epoch, optimizer=self.optimizer, scheduler=self.scheduler,
            make_optimizer=self.make_optimizer, autocast_dtype=self.autocast_dtype,
            max_grad_norm=c.max_grad_norm, seed=c.seed, data_seed=c.data_seed, task=self.task,
            validation=self.validation_set, splits=self.eval_sets, eval_batch_size=c.eval_batch_size,
            loss_scale=self.scaler.get_scale if self.scaler.is_enabled() else None,
            distributed=self.distributed, wrap=self.wrap, loop="attendout",
        )  # fmt: skip

    # checkpoints ------------------------------------------------------------------------------
    def save_checkpoint(self, rng: dict[str, Any] | None = None) -> None:
        """The whole training state to RUN_DIR/checkpoint (:meth:`RunFolder.save_checkpoint`). ``rng``:
        the random generators' state to record (default: as they are now)."""
        summary = {
            "step": self.state.step,
            "total_steps": self.total_steps,
            "best_step": self.state.best_step,
        }
        self.run.save_checkpoint(lambda: self.checkpoint_contents(rng), self.state.step, summary)

    def checkpoint_contents(self, rng: dict[str, Any] | None = None) -> dict[str, Any]:
        """What a checkpoint holds now (its format: :data:`~attendout.core.folder.CHECKPOINT_FORMAT`): the
        loop's whole state; ``rng``: the random generators' state to record (default: as they are now)."""
        elapsed = self.elapsed_before + (0.0 if self.started is None else time.time() - self.started)
        return {
            "format": CHECKPOINT_FORMAT,
            "config": checkpoint_config(self.config),
            "state": dataclasses.asdict(self.state),
            **{part: getattr(self, part).state_dict() for part in _STATEFUL},
            "best_state": self.run.best_state,
            "running": [float(x) for x in self.running],
            "elapsed": elapsed,
            "rng": rng if rng is not None else rng_state(self.device),
        }

    def restore(self, checkpoint: dict[str, Any]) -> None:
        """Go on from ``checkpoint`` (:meth:`checkpoint_contents`'s), as if the run had never stopped."""
        self.state = TrainState(**checkpoint["state"])
        for part in _STATEFUL:
            getattr(self, part).load_state_dict(checkpoint[part])
        if checkpoint["best_state"] is not None:
            self.run.best_state = checkpoint["best_state"]
        self.running = [torch.tensor(x, device=self.device) for x in checkpoint["running"]]  # beside new ones
        self.elapsed_before = float(checkpoint["elapsed"])
        set_rng_state(checkpoint["rng"], self.device)
        logger.info("resuming %s at step %d of %d", self.run.path, self.state.step, self.total_steps)

    # training ---------------------------------------------------------------------------------
    def fit(self) -> dict[str, Any]:
        """Train to the budget (or early stopping), then evaluate the best model; the results."""
        try:
            with deferred():  # Ctrl-C, SIGTERM: stop at the next whole step (:mod:`attendout.run.interrupt`)
                results = self._fit()
        except BaseException as error:
            if self.run.is_main:
                self.listener.end("stopped" if isinstance(error, KeyboardInterrupt) else "failed")
            raise
        finally:
            self.run.release()  # finished, failed or interrupted: the folder is free again
        if self.run.is_main:
            self.listener.end("finished", results)
        return results

    def _fit(self) -> dict[str, Any]:
        c = self.config
        self.started = time.time()
        if self.state.validation_due:  # resumed from a stop during this step's validation: run it again
            self.validate()
        with tqdm(  # closed before a stop's line or an error is printed
            total=self.total_steps, initial=self.state.step, desc=f"{c.task} {c.method}",
            disable=not c.progress or not self.run.is_main, dynamic_ncols=True,
        ) as bar:  # fmt: skip
            while self.state.step < self.total_steps and not self.stopped_early:
                order = torch.Generator().manual_seed(c.data_seed * 100_003 + self.state.epoch)
                done = self.state.step - self.state.epoch * self.steps_per_epoch  # this epoch's (resume)
                for batch in self.train_set.batches(c.batch_size, order, skip=done):
                    self.step(batch, bar)
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
        return self.finish(self.elapsed_before + time.time() - self.started)

    def step(self, batch: dict[str, torch.Tensor], bar: Any) -> None:
        """One training step on ``batch``, then what falls due at it: a log line, a validation, a checkpoint."""
        c = self.config
        self.strategy.set_progress(self.state.step / self.total_steps)
        lr = self.scheduler.get_last_lr()[0]
        began = time.perf_counter()
        self.running.append(self.train_step(batch))
        rows, seconds = len(next(iter(batch.values()))), time.perf_counter() - began
        self.pace = [self.pace[0] + 1, self.pace[1] + rows, self.pace[2] + seconds]
        self.state.step += 1
        bar.update(1)
        if self.state.step % c.log_steps == 0 or self.state.step == self.total_steps:
            loss = torch.stack(self.running).mean().item()
            self.running.clear()
            bar.set_postfix(loss=f"{loss:.4f}")
            epoch = self.epoch_progress
            steps, examples, seconds = self.pace
            self.pace = [0, 0, 0.0]
            pace = {"steps_per_s": steps / seconds, "examples_per_s": examples / seconds} if seconds else {}
            record = {"step": self.state.step, "epoch": epoch, "loss": loss, "lr": lr}
            self.run.log({**record, **self.strategy.stats(), **pace})
        if c.eval_steps and self.state.step % c.eval_steps == 0:
            self.validate()
        due = c.checkpoint_steps and self.state.step % c.checkpoint_steps == 0
        if due and self.run.checkpointed_at != self.state.step:
            self.save_checkpoint()

    def micro_batches(self, batch: dict[str, torch.Tensor]) -> list[tuple[slice, dict[str, torch.Tensor]]]:
        """``batch`` cut into micro-batches of at most ``micro_batch_size`` rows (:func:`~attendout.core.optim.micro_batches`)."""
        return micro_batches(batch, self.config.micro_batch_size)

    def train_step(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One optimizer step on ``batch`` with the method: its edits in each forward, then its after-step."""
        step = StepInfo(self.state.step, self.state.epoch)
        batch_rows = len(next(iter(batch.values())))
        parts = [part for _, part in self.micro_batches(shard(batch, self.distributed))]
        self.model.train()
        loss = update(
            self.train_model, parts, optimizer=self.optimizer, scheduler=self.scheduler, scaler=self.scaler,
            loop=self.loop, forward_kwargs=lambda part, rows: self.strategy.before_forward(self.model, part, step),
            failure=self._failure, batch_rows=batch_rows,
        )  # fmt: skip
        self.strategy.after_step(parts, step)
        if self.distributed.world_size == 1:
            return loss
        local_rows = sum(len(next(iter(part.values()))) for part in parts)
        return self.distributed.sum(loss * (local_rows / batch_rows))  # the whole batch's mean loss

    def _failure(self, loss: torch.Tensor) -> str:
        return (
            f"loss is {loss.item()} at step {self.state.step + 1} (learning rate "
            f"{self.scheduler.get_last_lr()[0]:.3g}); training stopped before the step was applied; "
            f"{self.run.kept()}"
        )

    @property
    def epoch_progress(self) -> float:
        """Epochs done, fractional."""
        return round(self.state.step / self.steps_per_epoch, 4)

    # stopping ---------------------------------------------------------------------------------
    @property
    def stopped_early(self) -> bool:
        """Early stopping's verdict: the patience ran out before the budget did."""
        patience = self.config.early_stopping_patience
        return (
            patience is not None
            and self.state.evals_since_best >= patience
            and self.state.step < self.total_steps
        )

    def stop_if_requested(self) -> None:
        """At a whole step: if a stop was requested (on any process), checkpoint and raise :class:`Stopped`."""
        signum = agreed(self.distributed)
        if signum is None:
            return
        if self.run.checkpointed_at != self.state.step:
            self.save_checkpoint()
        self.distributed.barrier()  # the main process has written it
        raise Stopped(signum, self.run.path / CHECKPOINT_DIR, self.state.step, self.total_steps)

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
            stop.signum, self.run.path / CHECKPOINT_DIR, self.state.step, self.total_steps, during
        )

    # evaluation -------------------------------------------------------------------------------
    def evaluate(self, data: Encoded) -> tuple[dict[str, float], Any, Any]:
        """(metrics, predictions, scores) of the model being evaluated on ``data``
        (:func:`~attendout.encoding.classification.predict_batches`, as ``attendout predict``'s)."""
        preds, scores, loss = predict_batches(
            self.strategy.eval_model(), data, self.config.eval_batch_size, self.device, self.autocast_dtype,
            between=self.stop_between_batches,
        )  # fmt: skip
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
        # the first validation, or with model_selection "last" any: the latest model is the one kept
        if self.state.best_step is None or self.config.model_selection == "last":
            improved = not math.isnan(value)
        else:
            improved = better(main, value, self.state.best_score)
        self.state.evals_since_best = 0 if improved else self.state.evals_since_best + 1
        if improved:
            self.state.best_score, self.state.best_validation = value, metrics
            self.state.best_step = self.state.step
            self.run.keep_best(self.state.step, self.strategy, self.tokenizer)
        record = {
            "step": self.state.step,
            "epoch": self.epoch_progress,
            "validation": metrics,
            "best": improved,
        }
        if self.stopped_early:
            record["stopped_early"] = True
        self.run.log(record)
        if improved and self.config.checkpoint_steps:
            self.save_checkpoint()  # the kept best model is never newer than the state that resumes
        return metrics

    def finish(self, train_time: float) -> dict[str, Any]:
        """Evaluate the best model on every evaluation split, write predictions and results.json."""
        if self.state.best_step != self.state.step:
            self.run.restore_best(self.state.best_step, self.strategy)
        evaluations, one_class = {}, {}
        try:  # a stop ends it at the next batch, with a checkpoint: a resume evaluates every split again
            for name, data in self.eval_sets.items():
                metrics, preds, scores = self.evaluate(data)
                evaluations[name] = metrics
                if self.task.kind != LM:  # a language model's "predictions" are its scores
                    sources = getattr(data, "sources", None)  # seq2seq: its source texts
                    self.run.write_predictions(name, preds, scores, data.gold, self.task.kind, sources)
                if self.task.kind == CLASSIFICATION:  # one label for all: warned of, kept in results.json
                    one_class.update(single_class(name, preds, self.task.label_names, warn=self.run.is_main))
        except EvaluationStopped as stop:
            self._stopped_evaluating(stop, "the final evaluation")
        resumed = None if self.run.resumed_at is None else (self.run.resumed_at, self.elapsed_before)
        results = results_record(
            self.config, self.inputs, self.state, self.total_steps, evaluations, one_class=one_class,
            train_time=train_time, stopped_early=self.stopped_early, resumed=resumed,
        )  # fmt: skip
        budget = (self.steps_per_epoch, self.total_steps)
        warning = kept_before_acting_warning(
            self.inputs.method, self.state.best_step, self.state.step, budget
        )
        if self.run.is_main and warning:
            logger.warning(warning)
        self.run.log({"step": self.state.step, "eval": evaluations, "best_step": self.state.best_step})
        self.run.finish(results)
        self.distributed.barrier()  # no process returns before the run is complete on disk
        return results


def finetune(config: TrainConfig, on_log: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run one fine-tuning job described by ``config``; return the results (also in results.json).

    ``on_log`` is called with every record written to log.jsonl (training steps, validations, the
    final evaluation): ``attendout bench`` prints its progress from the validation records. A
    :class:`~attendout.run.listener.Listener` also hears the run's start and end (the trackers of
    :mod:`attendout.track` are listeners).
    """
    return TrainingLoop(config, on_log).fit()
