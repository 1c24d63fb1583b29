# attendout.run's public names, by module: lazy_loader.attach_stub imports each on first use.
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
from .interrupt import EvaluationStopped, Stopped, agreed, check, deferred, handling, requested
from .listener import Listener, as_listener
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
