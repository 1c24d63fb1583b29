"""What a run records of itself: the contents of RUN_DIR/config.json and RUN_DIR/results.json.

Both are built from what the fine-tuning loop (:class:`attendout.run.loop.TrainingLoop`) hands over: its
configuration, its set-up's inputs (:class:`attendout.run.setup.RunInputs`), its budget and its state; and
written through its run folder (:class:`attendout.run.runfolder.RunFolder`), whole.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ..core.folder import portable, relative_here
from .devices import environment

if TYPE_CHECKING:
    from ..config import TrainConfig
    from .runfolder import TrainState
    from .setup import RunInputs


def config_record(
    config: TrainConfig, inputs: RunInputs, budget: tuple[int, int], device: Any, processes: int
) -> dict[str, Any]:
    """RUN_DIR/config.json: the full configuration, the task, the data's sizes and source, the model,
    the budget in steps (``budget``: steps per epoch, total steps), the device and the versions. No path
    names the machine: the run and data folders relative to the working folder, the data's source
    relative to the data root (:func:`attendout.core.folder.portable`)."""
    steps_per_epoch, total_steps = budget
    recorded = config.to_dict()  # its folders naming no machine (issue 69); read back from the same folder
    if recorded.get("data_dir"):
        recorded["data_dir"] = relative_here(recorded["data_dir"])
    recorded["output_dir"] = portable(str(recorded["output_dir"]))
    return {
        "config": recorded,
        "task": dataclasses.asdict(inputs.task),
        "data_source": portable(inputs.data_source, data=True),
        "sizes": inputs.sizes(),
        "model_description": portable(inputs.model_description),
        "truncation": inputs.truncation_summary(config.max_length),
        "model_dropout": inputs.method.model_dropout,
        "total_steps": total_steps,
        "steps_per_epoch": steps_per_epoch,
        "device": str(device),
        "processes": processes,
        **environment(),
    }


def results_record(
    config: TrainConfig,
    inputs: RunInputs,
    state: TrainState,
    total_steps: int,
    evaluations: dict[str, Any],
    *,
    one_class: dict[str, str],
    train_time: float,
    stopped_early: bool,
    resumed: tuple[int, float] | None,
) -> dict[str, Any]:
    """RUN_DIR/results.json: the best model's validation and evaluation metrics, and how the run went
    (``one_class``: the splits where a classifier predicted one label for all; ``train_time`` in seconds,
    the time before a resume included; ``resumed``: the step a resume went on from and the training
    seconds before it)."""
    results = {
        "task": inputs.task.name,
        "method": config.method,
        "method_options": inputs.method.to_dict(),
        "model": config.model,
        "model_description": portable(inputs.model_description),
        "data_source": portable(inputs.data_source, data=True),
        "seed": config.seed,
        "data_seed": config.data_seed,
        "main_metric": inputs.task.metrics[0],
        "truncation": inputs.truncation_summary(config.max_length),
        "best_step": state.best_step,
        "total_steps": total_steps,
        "validation": state.best_validation,
        "eval": evaluations,
        "sizes": inputs.sizes(),
        "train_time_s": round(train_time, 2),
        **({"single_class": one_class} if one_class else {}),  # {split: the one label predicted}
    }
    if stopped_early:
        results["stopped_early"] = {"step": state.step, "patience": config.early_stopping_patience}
    if resumed is not None:  # the time before the resume is in train_time_s too
        step, before = resumed
        results["resumed"] = {"step": step, "train_time_before_s": round(before, 2)}
    return results


def kept_before_acting(results: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether the model a run kept is from before its method first changed a training step, so that its
    scores are plain fine-tuning's whatever the method's options: AD-DROP's cross-tuning starts with a
    plain epoch, and model selection may keep that epoch's model (:func:`acted_after_kept`). ``results``,
    ``config``: the run's results.json and config.json. False for plain fine-tuning, and where the files
    do not tell (a run without its steps per epoch, a method or option this version does not know)."""
    from ..methods import get_method_config

    options = dict(results.get("method_options") or {})
    name = options.pop("name", results.get("method"))
    if name in (None, "none"):
        return False
    try:
        method = get_method_config(name, **options)
    except (ValueError, TypeError):  # a method or option this version does not know
        return False
    return acted_after_kept(
        method, results.get("best_step"), results.get("total_steps"), config.get("steps_per_epoch")
    )


def acted_after_kept(method: Any, kept: Any, total: Any, steps_per_epoch: Any) -> bool:
    """Whether ``method`` (a :class:`~attendout.methods.MethodConfig`) first acts after the step ``kept`` of
    a run of ``total`` steps, ``steps_per_epoch`` an epoch (False where a count is unknown or the method is
    plain fine-tuning): :meth:`~attendout.methods.MethodConfig.acts_after`."""
    if method.name == "none" or not all(isinstance(n, int) for n in (kept, total, steps_per_epoch)):
        return False
    acts_after = method.acts_after(steps_per_epoch, total)
    return acts_after is None or kept <= acts_after


def kept_before_acting_warning(
    method: Any, kept: int | None, last: int, budget: tuple[int, int]
) -> str | None:
    """The warning of a run of ``method`` whose kept model (step ``kept``; the run ended at step ``last``,
    ``budget``: steps per epoch, total steps) is from before the method first acted
    (:func:`acted_after_kept`), or None."""
    steps_per_epoch, total_steps = budget
    if not acted_after_kept(method, kept, total_steps, steps_per_epoch):
        return None
    final = kept == last  # the step the run ended at (early stopping: before the budget)
    return (
        f"{method.name}: the model this run kept (step {kept}, {'the final one' if final else 'the best validation'}) "
        f"is from before {method.name} first acted: its results are plain fine-tuning's ("
        + (
            "the run ended before the method acted)"
            if final
            else "model_selection='last' keeps the final model)"
        )
    )
