"""Comparison grids: experiment files, a shared results root, and the bench runner.

>>> from attendout.bench import load_experiment, prepare_cells, run_cells, ResultsStore, Budget
>>> experiment = load_experiment("experiments/cpu-small.toml")
>>> plan = prepare_cells(experiment, Budget(), shard=(1, 2), data_dir="../shared/data/glue")
>>> run_cells(plan, ResultsStore("results/cpu-small"))

The command line is ``attendout bench EXPERIMENT`` (``--dry-run`` lists and checks the cells) and
``attendout table EXPERIMENT`` (see :mod:`attendout.report`).
"""

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

__all__ = [
    "Budget",
    "Cell",
    "Experiment",
    "ExperimentError",
    "GridPlan",
    "MethodSpec",
    "ModelSpec",
    "ResultsStore",
    "RunSummary",
    "TaskSpec",
    "config_fingerprint",
    "default_results_root",
    "find_experiment",
    "format_listing",
    "load_experiment",
    "parse_shard",
    "prepare_cells",
    "run_cells",
]
