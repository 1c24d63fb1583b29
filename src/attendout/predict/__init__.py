"""Predictions from a finished run: ``attendout predict`` and :class:`Predictor`.

One family: :class:`~.base.BasePredictor` and its two kinds.

* :mod:`.classification`: :class:`Predictor`, classifiers, taggers and multiple choice;
  :meth:`Predictor.load` hands a generation run to :mod:`.generation`.
* :mod:`.generation`: :class:`GenerationPredictor`, language models and sequence to sequence, decoding
  and scoring.
* :mod:`.base`: :class:`BasePredictor`, what both share: loading a run folder or a model folder, its
  settings, state and splits; and writing rows.

The names below are imported from their modules on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

#: name -> the module that defines it
_NAMES = {
    "BasePredictor": ".base",
    "GenerationPredictor": ".generation",
    "Generations": ".generation",
    "OUTPUT_FORMATS": ".base",
    "PredictError": ".base",
    "Predictions": ".classification",
    "Predictor": ".classification",
    "UnfinishedRunError": ".base",
    "check_finished": ".base",
    "check_output_path": ".base",
    "generation_kind": ".generation",
    "predict_main": ".generation",
    "read_inputs": ".classification",
    "read_sources": ".generation",
    "run_settings": ".base",
    "run_split": ".base",
    "task_from_settings": ".base",
    "write_predictions": ".classification",
    "write_rows": ".base",
    "write_rows_atomic": ".base",
}

if TYPE_CHECKING:  # the lazy names, for type checkers and the API reference
    from .base import (
        OUTPUT_FORMATS,
        BasePredictor,
        PredictError,
        UnfinishedRunError,
        check_finished,
        check_output_path,
        run_settings,
        run_split,
        task_from_settings,
        write_rows,
        write_rows_atomic,
    )
    from .classification import Predictions, Predictor, read_inputs, write_predictions
    from .generation import GenerationPredictor, Generations, generation_kind, predict_main, read_sources

__all__ = [
    "BasePredictor",
    "GenerationPredictor",
    "Generations",
    "OUTPUT_FORMATS",
    "PredictError",
    "Predictions",
    "Predictor",
    "UnfinishedRunError",
    "check_finished",
    "check_output_path",
    "generation_kind",
    "predict_main",
    "read_inputs",
    "read_sources",
    "run_settings",
    "run_split",
    "task_from_settings",
    "write_predictions",
    "write_rows",
    "write_rows_atomic",
]
__getattr__ = lazy_names(__name__, _NAMES)
