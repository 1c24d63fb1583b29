"""The training run: the loop, its set-up, the run object over the run's life, stops and devices.

* :mod:`.loop`: the fine-tuning loop (``finetune``): fit, step, validate, stop; for every method and task kind.
* :mod:`.setup`, :mod:`.data`: a run's set-up: its data read, split and encoded, its model, its method.
* :mod:`.runfolder`: the run object that owns the run folder over the run's life (lock, config, log,
  checkpoints, resume, predictions, results); :mod:`.record`: what a run records of itself.
* :mod:`.interrupt`, :mod:`.evalstop`: a stop at the next whole step (Ctrl-C, SIGTERM) or evaluation batch.
* :mod:`.devices`: where a run computes.

The run folder's format (its files' names and readers, files written whole, where a run stands, who owns
it), the optimiser's pieces and the limits sit on the ground floor, :mod:`attendout.core`, which every floor
borrows from. The names below are imported from their modules on first use: importing this package costs
nothing.

The names below are imported from their modules on first use: importing this package costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

#: name -> the module that defines it
_NAMES = {
    "EvaluationStopped": ".evalstop",
    "RUN_OUTPUTS": ".runfolder",
    "RunExistsError": ".runfolder",
    "RunFolder": ".runfolder",
    "RunInputs": ".setup",
    "Stopped": ".interrupt",
    "TrainState": ".runfolder",
    "TrainingLoop": ".loop",
    "agreed": ".interrupt",
    "autocast_dtype": ".devices",
    "available_devices": ".devices",
    "check": ".interrupt",
    "check_batches_fit_processes": ".devices",
    "check_run_dir": ".runfolder",
    "checkpoint_config": ".runfolder",
    "config_record": ".record",
    "data_parallel": ".devices",
    "deferred": ".interrupt",
    "environment": ".devices",
    "find_checkpoint": ".runfolder",
    "finetune": ".loop",
    "handling": ".interrupt",
    "load_data": ".data",
    "mixed_precision": ".devices",
    "pick_device": ".devices",
    "prepare_run_dir": ".runfolder",
    "process_group": ".devices",
    "read_resumable": ".runfolder",
    "remove_checkpoint": ".runfolder",
    "requested": ".interrupt",
    "results_record": ".record",
    "rng_state": ".devices",
    "set_rng_state": ".devices",
    "set_seed": ".devices",
    "set_up": ".setup",
    "setting_up": ".runfolder",
    "shard": ".devices",
    "single_class": ".runfolder",
    "write_split_predictions": ".runfolder",
}

if TYPE_CHECKING:  # the lazy names, for type checkers and the API reference
    from .data import load_data
    from .devices import (
        autocast_dtype,
        available_devices,
        check_batches_fit_processes,
        data_parallel,
        environment,
        mixed_precision,
        pick_device,
        process_group,
        rng_state,
        set_rng_state,
        set_seed,
        shard,
    )
    from .evalstop import EvaluationStopped
    from .interrupt import Stopped, agreed, check, deferred, handling, requested
    from .loop import TrainingLoop, finetune
    from .record import config_record, results_record
    from .runfolder import (
        RUN_OUTPUTS,
        RunExistsError,
        RunFolder,
        TrainState,
        check_run_dir,
        checkpoint_config,
        find_checkpoint,
        prepare_run_dir,
        read_resumable,
        remove_checkpoint,
        setting_up,
        single_class,
        write_split_predictions,
    )
    from .setup import RunInputs, set_up

__all__ = [
    "EvaluationStopped",
    "RUN_OUTPUTS",
    "RunExistsError",
    "RunFolder",
    "RunInputs",
    "Stopped",
    "TrainState",
    "TrainingLoop",
    "agreed",
    "autocast_dtype",
    "available_devices",
    "check",
    "check_batches_fit_processes",
    "check_run_dir",
    "checkpoint_config",
    "config_record",
    "data_parallel",
    "deferred",
    "environment",
    "find_checkpoint",
    "finetune",
    "handling",
    "load_data",
    "mixed_precision",
    "pick_device",
    "prepare_run_dir",
    "process_group",
    "read_resumable",
    "remove_checkpoint",
    "requested",
    "results_record",
    "rng_state",
    "set_rng_state",
    "set_seed",
    "set_up",
    "setting_up",
    "shard",
    "single_class",
    "write_split_predictions",
]
__getattr__ = lazy_names(__name__, _NAMES)
