# attendout.bench's public names, by module: lazy_loader.attach_stub imports each on first use.
from .parse import find_experiment, load_experiment
from .plan import GridPlan, format_listing, parse_shard, prepare_cells
from .runner import RunSummary, run_cells
from .spec import (
    Budget,
    Cell,
    Experiment,
    ExperimentError,
    MethodSpec,
    ModelSpec,
    TaskSpec,
    config_fingerprint,
)
from .store import ResultsStore, default_results_root
