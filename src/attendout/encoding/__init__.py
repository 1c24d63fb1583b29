"""From a task's examples to the batches a model reads, for every task kind.

* :mod:`.classification`: sequence and pair classification, regression, tags, multiple choice, windows
  of long documents (``encode``).
* :mod:`.generation`: language modelling and sequence to sequence.
* :mod:`.batches`: what every encoded split shares: its batches, in order or shuffled, resumable.

The names below are imported from their modules on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..lazy import lazy_names

#: name -> the module that defines it
_NAMES = {
    "Batches": ".batches",
    "ChoiceEncoded": ".classification",
    "Encoded": ".classification",
    "GenerationOptions": ".generation",
    "LMEncoded": ".generation",
    "Seq2SeqEncoded": ".generation",
    "TokenEncoded": ".classification",
    "Windows": ".classification",
    "encode": ".classification",
    "head_tail_sizes": ".classification",
    "predict_batches": ".classification",
    "score_unigram_floor": ".generation",
    "truncation_summary": ".classification",
}

if TYPE_CHECKING:  # the lazy names, for type checkers and the API reference
    from .batches import Batches
    from .classification import (
        ChoiceEncoded,
        Encoded,
        TokenEncoded,
        Windows,
        encode,
        head_tail_sizes,
        predict_batches,
        truncation_summary,
    )
    from .generation import GenerationOptions, LMEncoded, Seq2SeqEncoded, score_unigram_floor

__all__ = [
    "Batches",
    "ChoiceEncoded",
    "Encoded",
    "GenerationOptions",
    "LMEncoded",
    "Seq2SeqEncoded",
    "TokenEncoded",
    "Windows",
    "encode",
    "head_tail_sizes",
    "predict_batches",
    "score_unigram_floor",
    "truncation_summary",
]
__getattr__ = lazy_names(__name__, _NAMES)
