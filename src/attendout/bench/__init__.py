"""Comparison grids: experiment files, a shared results root, and the bench runner.

>>> from attendout.bench import load_experiment, prepare_cells, run_cells, ResultsStore, Budget
>>> experiment = load_experiment("experiments/cpu-small.toml")
>>> plan = prepare_cells(experiment, Budget(), shard=(1, 2), data_dir="../shared/data/glue")
>>> run_cells(plan, ResultsStore("results/cpu-small"))

The command line is ``attendout bench EXPERIMENT`` (``--dry-run`` lists and checks the cells) and
``attendout table EXPERIMENT`` (see :mod:`attendout.report`).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
