"""From a task's examples to the batches a model reads, for every task kind.

* :mod:`.classification`: sequence and pair classification, regression, tags, multiple choice, windows
  of long documents (``encode``).
* :mod:`.generation`: language modelling and sequence to sequence.
* :mod:`.batches`: what every encoded split shares: its batches, in order or shuffled, resumable.

The names below are imported from their modules on first use.
"""

from __future__ import annotations

from ..lazy import lazy_names

#: name -> the module that defines it
_NAMES = {
    "Batches": ".batches",
    "ChoiceEncoded": ".classification",
    "Encoded": ".classification",
    "GenerationOptions": ".generation",
    "LMEncoded": ".generation",
    "Seq2SeqEncoded": ".generation",
    "TRUNCATIONS": ".classification",
    "TokenEncoded": ".classification",
    "Windows": ".classification",
    "encode": ".classification",
    "head_tail_sizes": ".classification",
    "predict_batches": ".classification",
    "score_unigram_floor": ".generation",
    "truncation_summary": ".classification",
}

__all__ = sorted(_NAMES)
__getattr__ = lazy_names(__name__, _NAMES)
