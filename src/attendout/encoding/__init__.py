"""From a task's examples to the batches a model reads, for every task kind.

* :mod:`.classification`: sequence and pair classification, regression, tags, multiple choice, windows
  of long documents (``encode``).
* :mod:`.lm_seq2seq`: language modelling and sequence to sequence.
* :mod:`.batches`: what every encoded split shares: its batches, in order or shuffled, resumable.

The names of ``__init__.pyi`` are imported from their modules on first use (``lazy_loader``).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
