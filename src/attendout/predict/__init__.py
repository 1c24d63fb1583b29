"""Predictions from a finished run: ``attendout predict`` and :class:`Predictor`.

One family: :class:`~.base.BasePredictor` and its two kinds.

* :mod:`.classification`: :class:`Predictor`, classifiers, taggers and multiple choice;
  :meth:`Predictor.load` hands a generation run to :mod:`.generative`.
* :mod:`.generative`: :class:`GenerationPredictor`, language models and sequence to sequence, decoding
  and scoring.
* :mod:`.base`: :class:`BasePredictor`, what both share: loading a run folder or a model folder, its
  settings, state and splits; and writing rows.

The names of ``__init__.pyi`` are imported from their modules on first use (``lazy_loader``).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
