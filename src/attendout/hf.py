"""Every attendout method in a ``transformers.Trainer`` script.

:class:`Trainer` is ``transformers.Trainer`` with a ``method`` argument. It drives the method through
its strategy (:mod:`attendout.contract`), so that

* scheduled dropout follows the Trainer's progress (``global_step / max_steps``);
* AD-DROP runs its attribution pass before each training forward and drops in that forward
  (cross-tuning by the Trainer's epochs);
* AttendOut trains its Attacker after each of the Trainer's optimizer steps and plays its games on
  ``validation_dataset`` (labelled examples never reported on: a split carved from train);
  evaluation and the model left in ``trainer.model`` after ``train()`` are the better of D and A;
* each method's statistics join the Trainer's training logs (``log_history`` and every ``report_to``
  integration: TensorBoard, W&B, ...);
* Synthesizer's new weights train at ``synthesizer_lr``;
* a causal LM (GPT-2, Llama...) or an encoder-decoder (T5) trains as a classifier does: the methods act
  on self-attention (encoder and decoder; never on cross-attention); :class:`Seq2SeqTrainer` is
  ``transformers.Seq2SeqTrainer`` with a method (``predict_with_generate`` evaluation);
* on several processes, ``ddp_find_unused_parameters`` is set for the methods that leave weights
  without a gradient in a step (both LayerDrops, Synthesizer without ``+dot``) unless you set it.

>>> trainer = attendout.hf.Trainer(
...     model=model, args=TrainingArguments("out", num_train_epochs=3), train_dataset=train,
...     processing_class=tokenizer, method="addrop", method_options={"attribution": "ga"},
... )
>>> trainer.train()

The method's options join ``hyperparameter_search`` like any ``TrainingArguments`` field: a key
``"method.<option>"`` in the dict ``hp_space`` returns sets that option for the trial, over the
``method_options`` given to the Trainer, and ``"method"`` (a method name) switches the method. As
transformers requires, the model comes from ``model_init``; each trial's model trains with that trial's
method (``trainer.method_config`` says which), and a value the method refuses stops the search with
the method's ``ValueError``. Name each suggestion as its key, so ``best_run.hyperparameters`` says
which options won:

>>> trainer = attendout.hf.Trainer(
...     model_init=lambda: AutoModelForSequenceClassification.from_pretrained(name), args=args,
...     train_dataset=train, eval_dataset=dev, method="scores-dropout",
... )
>>> best = trainer.hyperparameter_search(
...     backend="optuna", direction="minimize", n_trials=20,
...     hp_space=lambda trial: {
...         "learning_rate": trial.suggest_float("learning_rate", 1e-5, 1e-4, log=True),
...         "method.p": trial.suggest_float("method.p", 0.05, 0.3),
...     },
... )

After the search, like ``trainer.args``, ``trainer.method_config`` holds the last trial's values.

``transformers.Trainer`` itself, on a model given only ``attendout.apply(model, "addrop")`` (or
``"attendout"`` or ``"scheduled"``), raises at the first training forward instead of training plainly.
Not yet supported here, each with a clear error: resuming AttendOut from a Trainer checkpoint (its
Attacker and Generator are not in it) and AttendOut on several processes.
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
import math
import sys
from pathlib import Path
from typing import Any

import torch
import transformers
from torch import nn
from transformers import TrainerCallback

from .attention.deberta import install_hooks as _deberta  # noqa: F401  (importing it registers DeBERTa's route)
from .attention.mpnet import install_hooks as _mpnet  # noqa: F401  (importing it registers MPNet's route)
from .contract import Distributed, LoopContext, StepInfo
from .core.limits import check_length
from .methods import METHODS, MethodConfig, TrainingStrategy, get_method_config, prepare
from .methods.registry import check_options
from .run import Stopped, agreed, deferred, requested

# a documented module (docs/reference/hf.md): its public names, in the order the reference lists them
__all__ = ["CollatedSource", "Seq2SeqTrainer", "Trainer"]

logger = logging.getLogger(__name__)


class CollatedSource:
    """A dataset of feature dicts, batched by a collator: an :class:`~attendout.contract.EvalSource`.

    Keeps the tensors the model's ``forward`` accepts; ``label`` (or ``label_ids``) is renamed ``labels``
    as ``DataCollatorWithPadding`` does. The collator sees every field of an example: columns it cannot
    batch (a text column) must be gone first (:class:`Trainer` removes them as transformers does).
    """

    def __init__(self, dataset: Any, collate: Any, model: nn.Module) -> None:
        self.dataset = dataset
        self.collate = collate
        self.accepts = set(inspect.signature(model.forward).parameters)
        # every example must be labelled (games score against labels); a list per example for token tasks
        self.labels = [_label_of(dataset[i], i) for i in range(len(dataset))]

    def __len__(self) -> int:
        return len(self.dataset)

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        features = [self.dataset[i] for i in indices]
        batch = dict(self.collate(features))
        for key in ("label", "label_ids"):
            if key in batch and "labels" not in batch:
                batch["labels"] = batch.pop(key)
        return {k: v for k, v in batch.items() if torch.is_tensor(v) and k in self.accepts}


def _label_of(example: Any, index: int) -> Any:
    for key in ("labels", "label", "label_ids"):
        if key in example:
            value = example[key]
            return value.tolist() if torch.is_tensor(value) else value
    raise ValueError(
        f"attendout.hf: validation_dataset example {index} has no 'label', 'labels' or 'label_ids' field"
    )


def _is_hf_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` is a ``datasets.Dataset`` (without importing ``datasets`` when nothing has)."""
    datasets = sys.modules.get("datasets")
    return datasets is not None and isinstance(dataset, getattr(datasets, "Dataset", ()))


class _MethodCallback(TrainerCallback):
    """Progress before each step, the method's after-step after the Trainer's optimizer step."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        self.trainer._start_method(state, kwargs.get("train_dataloader"))

    def on_step_begin(self, args, state, control, **kwargs):
        self.trainer.strategy.set_progress(state.global_step / max(1, state.max_steps))

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer._after_step(state)
        if self.trainer._stop_requested(args):  # Ctrl-C, SIGTERM: a checkpoint of this step, then stop
            control.should_save = True
            control.should_training_stop = True

    def on_train_end(self, args, state, control, **kwargs):
        self.trainer._keep_eval_model()


class Trainer(transformers.Trainer):
    """``transformers.Trainer`` that trains with an attendout method (see the module docstring).

    Extra arguments: ``method`` (a name or a :class:`~attendout.methods.MethodConfig`),
    ``method_options`` (with a name), ``validation_dataset`` (AttendOut's games: labelled examples
    not the ones you report on, a ``datasets.Dataset`` or any dataset of feature dicts; as for the
    Trainer's own datasets, the columns the model's ``forward`` does not take, a text column say, are
    left out unless ``remove_unused_columns=False``), ``task`` (an
    :class:`attendout.tasks.Task` for AttendOut's metric; default: from the model's head) and
    ``max_length`` (Synthesizer's default ``l_max``).
    """

    def __init__(
        self,
        *args: Any,
        method: str | MethodConfig = "none",
        method_options: dict[str, Any] | None = None,
        validation_dataset: Any = None,
        task: Any = None,
        max_length: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        config, options = method_and_options(method, method_options)
        # what a hyperparameter search's trial starts from: the method and the options given here
        self._base_config, self._base_options = config, options
        self._max_length = max_length
        if max_length is not None and self.model is not None:  # the model's and the method's limits
            check_length(
                max_length,
                self.model.config,
                tokenizer=self.processing_class,
                method=config,
                setting="max_length",
            )
        self._fresh_strategy(config, self.model)
        self.validation_dataset = validation_dataset
        self.task = task
        self.add_callback(_MethodCallback(self))

    def _find_unused_parameters(self, config: MethodConfig) -> None:
        if config.unused_parameters and self.args.ddp_find_unused_parameters is None:
            # DDP must look for weights a step leaves without a gradient, or it stops with an error
            logger.info("attendout.hf: ddp_find_unused_parameters=True: %s", config.unused_parameters)
            self.args.ddp_find_unused_parameters = True

    # a new model (model_init) or a trial of a hyperparameter search: the method follows -------------
    def _fresh_strategy(self, config: MethodConfig, model: nn.Module | None) -> None:
        """Train with ``config`` from now on: a fresh strategy attached to ``model``, started at the next
        train; the last one is taken off the model it is on first.

        With ``model`` None (before ``model_init`` makes the next model) it is attached to none yet
        (:meth:`_hp_search_setup` attaches it), so the last model, its optimizer and the method's own
        state (AttendOut's Attacker) can be freed first, and a ``model_init`` that returns the same model
        does not stack two methods on it.
        """
        if getattr(self, "strategy", None) is not None and self.strategy.handle is not None:
            self.strategy.handle.remove()
        self.method_config = config
        if model is not None:
            self._find_unused_parameters(config)
        self.strategy: TrainingStrategy = prepare(model, config, max_length=self._max_length)
        self._micro_batches: list[dict[str, torch.Tensor]] = []
        self._started = False

    def call_model_init(self, trial: Any = None) -> nn.Module:
        if getattr(self, "strategy", None) is not None:  # not the first model (transformers' __init__)
            self._fresh_strategy(self.method_config, None)
        return super().call_model_init(trial)

    def hyperparameter_search(self, *args: Any, **kwargs: Any):
        best = super().hyperparameter_search(*args, **kwargs)
        if self.model is None:  # transformers released the last trial's model: the method lets it go too
            self._fresh_strategy(self.method_config, None)  # (and AttendOut's Attacker); the last trial's
        return best

    def _hp_search_setup(self, trial: Any) -> None:
        """transformers' setup of a trial (``TrainingArguments`` fields), with the method's keys taken first.

        ``"method.<option>"`` and ``"method"`` are not ``TrainingArguments`` fields: transformers would
        warn and skip them. They make the trial's method config here (over the Trainer's own method and
        options; a refused value raises), which the trial's model then trains with. Outside a search
        (``trial`` None), a model made anew by ``model_init`` gets the Trainer's method.
        """
        config = self.method_config
        if self.hp_search_backend is None or trial is None:
            super()._hp_search_setup(trial)
        else:
            optuna = self.hp_search_backend == transformers.trainer_utils.HPSearchBackend.OPTUNA
            params = dict(self.hp_space(trial) if optuna else trial)
            method = {k: params.pop(k) for k in list(params) if k == "method" or k.startswith("method.")}
            # options a trial does not name are the Trainer's own, not the last trial's
            config = (
                trial_method_config(self._base_config, self._base_options, method)
                if method
                else self._base_config
            )
            self._find_unused_parameters(config)  # before transformers makes the trial's accelerator
            hp_space = self.hp_space
            self.hp_space = lambda _trial: params  # transformers sets the rest on self.args
            try:
                super()._hp_search_setup(trial if optuna else params)
            finally:
                self.hp_space = hp_space
            self._trial = trial
        if config is not self.method_config or self.strategy.model is not self.model:
            self._fresh_strategy(config, self.model)

    # the optimizer: the method's parameter groups --------------------------------------------
    def create_optimizer(self, model: nn.Module | None = None) -> torch.optim.Optimizer:
        if self.optimizer is None:
            self.optimizer = self._new_optimizer(self.model if model is None else model)
        return self.optimizer

    def _new_optimizer(self, model: nn.Module) -> torch.optim.Optimizer:
        optimizer_cls, optimizer_kwargs = self.get_optimizer_cls_and_kwargs(self.args, model)
        return optimizer_cls(self.strategy.param_groups(model, self.args.weight_decay), **optimizer_kwargs)

    def _make_optimizer(self, model: nn.Module) -> tuple[torch.optim.Optimizer, Any]:
        """The Trainer's optimizer and schedule recipe, for a second model (AttendOut's Attacker)."""
        optimizer = self._new_optimizer(model)
        total = self.state.max_steps
        scheduler = transformers.get_scheduler(
            self.args.lr_scheduler_type,
            optimizer=optimizer,
            num_warmup_steps=self.args.get_warmup_steps(total),
            num_training_steps=total,
            scheduler_specific_kwargs=self.args.lr_scheduler_kwargs,
        )
        return optimizer, scheduler

    # the method's part of each step ----------------------------------------------------------------
    def train(self, resume_from_checkpoint: Any = None, *args: Any, **kwargs: Any):
        if resume_from_checkpoint and keeps_own_state(self.strategy):
            raise NotImplementedError(
                f"attendout.hf.Trainer cannot resume {self.method_config.name!r} from a transformers checkpoint "
                "yet: the method's own state (AttendOut's Attacker and Generator) is not in it. Train from the "
                "start, or use `attendout finetune --resume`"
            )
        with deferred():
            result = super().train(resume_from_checkpoint, *args, **kwargs)
            signum = requested()
        if signum is not None:
            raise self._stopped(signum)
        return result

    def _stop_requested(self, args: Any) -> bool:
        """Whether a stop was requested (on any process: all stop at the same step, or the others hang)."""
        group = Distributed(args.process_index, args.world_size, device=args.device)
        return agreed(group if torch.distributed.is_initialized() else Distributed()) is not None

    def _start_method(self, state: Any, train_dataloader: Any) -> None:
        if self._started:
            return
        self.strategy.start(self._loop_context(state, train_dataloader))
        self._started = True

    def _loop_context(self, state: Any, train_dataloader: Any) -> LoopContext:
        """What the method's strategy starts with in this Trainer's loop (refused: AttendOut on several
        processes, a method that needs validation data without ``validation_dataset``)."""
        args, strategy, name = self.args, self.strategy, self.method_config.name
        distributed = Distributed(args.process_index, args.world_size)
        if distributed.world_size > 1 and strategy.needs:
            raise NotImplementedError(
                f"attendout.hf.Trainer: {name!r} on {distributed.world_size} processes is not "
                "supported yet (its Attacker and Generator would differ per process); train on one process"
            )
        batches = len(train_dataloader) if train_dataloader is not None else state.max_steps
        steps_per_epoch = max(1, math.ceil(batches / args.gradient_accumulation_steps))
        dtype = torch.bfloat16 if args.bf16 else torch.float16 if args.fp16 else None
        scaler = getattr(self.accelerator, "scaler", None)
        validation = self._validation_source() if self.validation_dataset is not None else None
        if "validation" in strategy.needs and validation is None:
            raise ValueError(
                f"attendout.hf.Trainer: {name!r} scores its games on labelled data that is "
                "never reported: pass validation_dataset= (e.g. a tenth of train, carved off before training)"
            )
        return LoopContext(
            device=args.device,
            total_steps=max(1, state.max_steps),
            steps_per_epoch=steps_per_epoch,
            optimizer=self.optimizer,
            scheduler=self.lr_scheduler,
            make_optimizer=self._make_optimizer,
            autocast_dtype=dtype,
            max_grad_norm=args.max_grad_norm,
            seed=args.seed,
            data_seed=args.data_seed if args.data_seed is not None else args.seed,
            task=self.task,
            validation=validation,
            eval_batch_size=args.per_device_eval_batch_size,
            loss_scale=scaler.get_scale if scaler is not None and scaler.is_enabled() else None,
            distributed=distributed,
            loop="transformers.Trainer",
        )

    def _stopped(self, signum: int) -> Stopped:
        """After a stopped ``train()``: the :class:`~attendout.run.interrupt.Stopped` to raise, naming the
        checkpoint (or, for a method with state of its own, warning that it cannot be resumed from)."""
        step = self.state.global_step
        folder = Path(self.args.output_dir) / f"{transformers.trainer_utils.PREFIX_CHECKPOINT_DIR}-{step}"
        stateful = keeps_own_state(self.strategy)
        if stateful:  # the Trainer's checkpoint lacks the method's own state: not a checkpoint to resume
            logger.warning(
                "attendout.hf: %s holds the model but not %s's own state; it cannot be resumed from",
                folder,
                self.method_config.name,
            )
        stop = Stopped(signum, None if stateful else folder, step, self.state.max_steps)
        if not stateful:
            stop.args = (
                f"{stop.describe()}; to go on: trainer.train(resume_from_checkpoint={str(folder)!r})",
            )
        return stop

    def _validation_source(self) -> CollatedSource:
        """``validation_dataset`` batched as transformers batches the Trainer's own datasets.

        The columns the model's ``forward`` does not take (a text column left by ``.map``) are removed
        from a ``datasets.Dataset``, and from each example of any other dataset before the collator sees
        it; ``remove_unused_columns=False`` keeps them all, as it does for the Trainer's datasets.
        """
        dataset, collate = self.validation_dataset, self.data_collator
        if _is_hf_dataset(dataset):
            dataset = self._remove_unused_columns(dataset, description="validation")
        else:
            collate = self._get_collator_with_removed_columns(collate, description="validation")
        return CollatedSource(dataset, collate, self.model)

    def training_step(self, model: nn.Module, inputs: dict[str, Any], *args: Any, **kwargs: Any):
        self._micro_batches.append({k: v for k, v in inputs.items() if torch.is_tensor(v)})
        return super().training_step(model, inputs, *args, **kwargs)

    def compute_loss(self, model: nn.Module, inputs: dict[str, Any], *args: Any, **kwargs: Any):
        if model.training and self._started:  # a training forward: the method's edits go with it
            step = StepInfo(self.state.global_step, int(self.state.epoch or 0))
            inputs = {**inputs, **self.strategy.before_forward(self.model, inputs, step)}
        return super().compute_loss(model, inputs, *args, **kwargs)

    def _after_step(self, state: Any) -> None:
        batches, self._micro_batches = self._micro_batches, []
        if batches:
            self.strategy.after_step(batches, StepInfo(state.global_step - 1, int(state.epoch or 0)))

    # evaluation, logs, the final model --------------------------------------------------------------
    def _eval_model(self) -> nn.Module:
        """The model to evaluate: the method's choice once training has started (AttendOut: D or A)."""
        return self.strategy.eval_model() if self._started else self.model

    def prediction_step(self, model: nn.Module, *args: Any, **kwargs: Any):
        chosen = self._eval_model()
        return super().prediction_step(model if chosen is self.model else chosen, *args, **kwargs)

    def log(self, logs: dict[str, float], *args: Any, **kwargs: Any) -> None:
        if "loss" in logs and self._started:  # a training log: the method's statistics since the last
            logs.update(self.strategy.stats())
        super().log(logs, *args, **kwargs)

    def _keep_eval_model(self) -> None:
        """Leave the better model (AttendOut: of D and A) in ``self.model``, for save_model and evaluate."""
        chosen = self._eval_model()
        if chosen is not self.model:
            self.model.load_state_dict(chosen.state_dict())


# the Trainer's method: which one, a trial's ------------------------------
def method_and_options(
    method: str | MethodConfig, method_options: dict[str, Any] | None
) -> tuple[MethodConfig, dict[str, Any]]:
    """The config of :class:`Trainer`'s ``method`` (a name with ``method_options``, or a config), and the
    options it was given: what a hyperparameter search's trial starts from."""
    if isinstance(method, str):
        return get_method_config(method, **(method_options or {})), dict(method_options or {})
    if method_options:
        raise TypeError("pass method_options with a method name, not with a MethodConfig")
    return method, {f.name: getattr(method, f.name) for f in dataclasses.fields(method) if f.init}


def trial_method_config(
    base: MethodConfig, base_options: dict[str, Any], params: dict[str, Any]
) -> MethodConfig:
    """The config of a trial's ``"method"`` and ``"method.<option>"`` keys (``params``), over the Trainer's
    own method ``base`` and its ``base_options`` (refused values: ValueError)."""
    name = params.pop("method", base.name)
    if not isinstance(name, str):
        raise TypeError(f"attendout.hf.Trainer: hp_space's 'method' must be a method name, got {name!r}")
    options = {key.removeprefix("method."): value for key, value in params.items()}
    if "" in options:
        raise ValueError("attendout.hf.Trainer: hp_space's key 'method.' names no option ('method.<option>')")
    try:
        if name != base.name:  # another method: its options from the trial alone
            return get_method_config(name, **options)
        if METHODS.get(name) is type(base):
            return get_method_config(name, **{**base_options, **options})
        # a config class of the caller's own, not the one registered under its name
        check_options(name, options, set(base_options))
        return dataclasses.replace(base, **options)
    except ValueError as error:
        raise ValueError(
            f"attendout.hf.Trainer: this trial's method {name!r} with options {options} from hp_space: {error}"
        ) from error


def keeps_own_state(strategy: TrainingStrategy) -> bool:
    """Whether the method keeps state of its own (AttendOut's Attacker and Generator), which a
    transformers checkpoint does not hold."""
    return type(strategy).state_dict is not TrainingStrategy.state_dict


class Seq2SeqTrainer(Trainer, transformers.Seq2SeqTrainer):
    """``transformers.Seq2SeqTrainer`` with a ``method`` argument: :class:`Trainer`'s method handling
    for an encoder-decoder (T5, BART, Marian), and ``predict_with_generate`` evaluation as in
    transformers (take ``Seq2SeqTrainingArguments``).

    >>> trainer = attendout.hf.Seq2SeqTrainer(
    ...     model=model, args=Seq2SeqTrainingArguments("out", predict_with_generate=True),
    ...     train_dataset=train, eval_dataset=dev, method="scores-dropout", method_options={"p": 0.1},
    ... )
    """
