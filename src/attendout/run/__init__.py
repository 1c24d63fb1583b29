"""The training run: the loop, its set-up, the run object over the run's life, stops and devices.

* :mod:`.loop`: the fine-tuning loop (``finetune``): fit, step, validate, stop; for every method and task kind.
* :mod:`.setup`, :mod:`.data`: a run's set-up: its data read, split and encoded, its model, its method.
* :mod:`.runfolder`: the run object that owns the run folder over the run's life (lock, config, log,
  checkpoints, resume, predictions, results); :mod:`.record`: what a run records of itself.
* :mod:`.interrupt`: a stop at the next whole step (Ctrl-C, SIGTERM) or evaluation batch.
* :mod:`.devices`: where a run computes.
* :mod:`.listener`: what the loop tells whoever watches a run (the trackers of ``--report-to``).

The run folder's format (its files' names and readers, files written whole, where a run stands, who owns
it), the optimiser's pieces and the limits sit on the ground floor, :mod:`attendout.core`, which every floor
borrows from. The names of ``__init__.pyi`` are imported from their modules on first use (``lazy_loader``):
importing this package costs nothing.
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
