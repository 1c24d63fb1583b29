"""The ground floor: what every other floor of attendout borrows, importing nothing of attendout above it.

* :mod:`.folder`: files written whole (a temporary name, then a rename) and folders closed by a manifest;
  the run folder's files by name and their readers (:class:`~.folder.RunDir`); the checkpoint's format.
* :mod:`.state`, :mod:`.lock`: where a run folder stands, and who owns it.
* :mod:`.optim`: the pieces of an optimisation step every loop borrows (AdamW, parameter groups, the
  schedule, micro-batches, one accumulated update) and :class:`~.optim.TrainingError`.
* :mod:`.limits`: a model's and a method's limits (:class:`~.limits.LimitError`), checked before anything trains.

Beside it, below it: :mod:`attendout.contract` (the loop contract methods see), :mod:`attendout.typecheck`,
:mod:`attendout.version`. Import names from their modules: this package re-exports
nothing.
"""
