"""The training run: the loop, its set-up and run folder, stops and limits, devices and the optimiser.

* :mod:`.loop`: the fine-tuning loop (``finetune``): fit, step, validate, stop; for every method and task kind.
* :mod:`.setup`, :mod:`.data`: a run's set-up: its data read, split and encoded, its model, its method.
* :mod:`.runfolder`: the run object that owns the run folder over the run's life (lock, config, log,
  checkpoints, resume, predictions, results).
* :mod:`.folder`, :mod:`.record`, :mod:`.state`, :mod:`.lock`: the run folder's files written whole, what a
  run records of itself, where it stands, and who owns it.
* :mod:`.interrupt`, :mod:`.evalstop`: a stop at the next whole step (Ctrl-C, SIGTERM) or evaluation batch.
* :mod:`.limits`: a model's and a method's limits, checked before anything trains.
* :mod:`.devices`, :mod:`.optim`: where a run computes; AdamW, the schedule, one accumulated update.

The names below are imported from their modules on first use: importing this package costs nothing.
"""

from __future__ import annotations

from ..lazy import lazy_names

#: name -> the module that defines it
_NAMES = {
    "CELL_FILE": ".folder",
    "CHECKPOINT_DIR": ".folder",
    "CHECKPOINT_FILE": ".folder",
    "CHECKPOINT_FORMAT": ".folder",
    "CHECKPOINT_SUMMARY": ".folder",
    "CheckpointError": ".folder",
    "CheckpointStatus": ".folder",
    "DEVICE_TYPES": ".devices",
    "EvaluationStopped": ".evalstop",
    "FINISHED": ".state",
    "LOCK_FILE": ".lock",
    "LOG_FILE": ".folder",
    "LimitError": ".limits",
    "MANIFEST": ".folder",
    "MODEL_DIR": ".folder",
    "OutputDirError": ".folder",
    "Owner": ".lock",
    "POSITIONS": ".limits",
    "PREDICTIONS_DIR": ".folder",
    "READABLE_FORMATS": ".folder",
    "RESULTS_FILE": ".folder",
    "RUN_CONFIG_FILE": ".folder",
    "RUN_KINDS": ".state",
    "RUN_OUTPUTS": ".runfolder",
    "RunBusyError": ".lock",
    "RunDir": ".folder",
    "RunExistsError": ".runfolder",
    "RunFolder": ".runfolder",
    "RunInputs": ".setup",
    "RunLock": ".lock",
    "RunState": ".state",
    "STOPPED": ".state",
    "Stopped": ".interrupt",
    "StorageError": ".folder",
    "TrainState": ".runfolder",
    "TrainingLoop": ".loop",
    "TrainingError": ".optim",
    "UNFINISHED": ".state",
    "adamw": ".optim",
    "agreed": ".interrupt",
    "autocast_dtype": ".devices",
    "available_devices": ".devices",
    "check": ".interrupt",
    "check_batches_fit_processes": ".devices",
    "check_device_name": ".devices",
    "check_length": ".limits",
    "check_lengths": ".limits",
    "check_output_dir": ".folder",
    "check_run_dir": ".runfolder",
    "checkpoint_config": ".runfolder",
    "checkpoint_status": ".folder",
    "concat_batches": ".optim",
    "config_record": ".record",
    "data_parallel": ".devices",
    "deferred": ".interrupt",
    "describe_os_error": ".folder",
    "environment": ".devices",
    "exclusive": ".lock",
    "find_checkpoint": ".runfolder",
    "finetune": ".loop",
    "handling": ".interrupt",
    "linear_schedule": ".optim",
    "load_data": ".data",
    "load_checkpoint": ".folder",
    "micro_batches": ".optim",
    "mixed_precision": ".devices",
    "os_error_remedy": ".folder",
    "output_dir_failure": ".folder",
    "param_groups": ".optim",
    "pick_device": ".devices",
    "pid_alive": ".lock",
    "position_limit": ".limits",
    "prepare_run_dir": ".runfolder",
    "process_group": ".devices",
    "process_start_time": ".lock",
    "read_checkpoint": ".folder",
    "read_resumable": ".runfolder",
    "read_state": ".state",
    "recover_folder": ".folder",
    "remove_checkpoint": ".runfolder",
    "requested": ".interrupt",
    "results_record": ".record",
    "rng_state": ".devices",
    "save_model_atomic": ".folder",
    "set_rng_state": ".devices",
    "set_seed": ".devices",
    "set_up": ".setup",
    "setting_up": ".runfolder",
    "sha256_of": ".folder",
    "shard": ".devices",
    "single_class": ".runfolder",
    "this_host": ".lock",
    "update": ".optim",
    "verify_folder": ".folder",
    "write_checkpoint": ".folder",
    "write_folder_atomic": ".folder",
    "write_json_atomic": ".folder",
    "write_split_predictions": ".runfolder",
    "write_text_atomic": ".folder",
}

__all__ = sorted(_NAMES)
__getattr__ = lazy_names(__name__, _NAMES)
