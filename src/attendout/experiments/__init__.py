"""A moved import path, kept for one release: ``attendout.experiments`` is now :mod:`attendout.bench`.

``from attendout.experiments import load_experiment`` (and the package's other names) still works, with a
:class:`DeprecationWarning`; write ``from attendout.bench import ...``. To be removed on 2027-03-01.
"""

from __future__ import annotations

import warnings

from ..bench import (
    Budget,
    Cell,
    Experiment,
    ExperimentError,
    GridPlan,
    MethodSpec,
    ModelSpec,
    ResultsStore,
    RunSummary,
    TaskSpec,
    config_fingerprint,
    default_results_root,
    find_experiment,
    format_listing,
    load_experiment,
    parse_shard,
    prepare_cells,
    run_cells,
)

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

warnings.warn(
    "attendout.experiments moved to attendout.bench; the old path goes on 2027-03-01",
    DeprecationWarning,
    stacklevel=2,
)
