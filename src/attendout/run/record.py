"""What a run records of itself: the contents of RUN_DIR/config.json and RUN_DIR/results.json.

Both are built from the fine-tuning loop's state (:class:`attendout.run.train.Trainer`, passed in as
``trainer``) and written by the loop, whole (:func:`attendout.run.folder.write_json_atomic`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .devices import environment

__all__ = ["config_record", "results_record"]


def config_record(trainer: Any) -> dict[str, Any]:
    """RUN_DIR/config.json: the full configuration, the task, the data's sizes and source, the model,
    the budget in steps, the device and the versions."""
    return {
        "config": trainer.config.to_dict(),
        "task": dataclasses.asdict(trainer.task),
        "data_source": trainer.data_source,
        "sizes": trainer.sizes(),
        "model_description": trainer.model_description,
        "truncation": trainer.truncation_summary(),
        "model_dropout": trainer.config.method_config().model_dropout,
        "total_steps": trainer.total_steps,
        "steps_per_epoch": trainer.steps_per_epoch,
        "device": str(trainer.device),
        "processes": trainer.distributed.world_size,
        **environment(),
    }


def results_record(
    trainer: Any, evaluations: dict[str, Any], one_class: dict[str, str], train_time: float
) -> dict[str, Any]:
    """RUN_DIR/results.json: the best model's validation and evaluation metrics, and how the run went
    (``one_class``: the splits where a classifier predicted one label for all; ``train_time`` in seconds,
    the time before a resume included)."""
    config, state = trainer.config, trainer.state
    results = {
        "task": trainer.task.name,
        "method": config.method,
        "method_options": config.method_config().to_dict(),
        "model": config.model,
        "model_description": trainer.model_description,
        "data_source": trainer.data_source,
        "seed": config.seed,
        "data_seed": config.data_seed,
        "main_metric": trainer.task.metrics[0],
        "truncation": trainer.truncation_summary(),
        "best_step": state.best_step,
        "total_steps": trainer.total_steps,
        "validation": state.best_validation,
        "eval": evaluations,
        "sizes": trainer.sizes(),
        "train_time_s": round(train_time, 2),
        **({"single_class": one_class} if one_class else {}),  # {split: the one label predicted}
    }
    if trainer.stopped_early:
        results["stopped_early"] = {"step": state.step, "patience": config.early_stopping_patience}
    if trainer.resumed_at is not None:  # the time before the resume is in train_time_s too
        results["resumed"] = {
            "step": trainer.resumed_at,
            "train_time_before_s": round(trainer.elapsed_before, 2),
        }
    return results
