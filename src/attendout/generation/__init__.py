"""Generation tasks in the loop: language modelling and sequence to sequence.

:mod:`.encoding` batches their data and predicts (perplexity's inputs, generated outputs), :mod:`.models`
loads a pretrained decoder or encoder-decoder or builds one from scratch, :mod:`.tokenizer` trains the
byte-level BPE a model from scratch reads. The task kinds and their loaders are in
:mod:`attendout.tasks.generation`, their metrics in :mod:`attendout.tasks.textmetrics`.
"""

from .encoding import GenerationOptions, LMEncoded, Seq2SeqEncoded, score_unigram_floor
from .models import INITS, SCRATCH_ARCHITECTURES, ScratchSize, load_for_generation
from .tokenizer import train_tokenizer

__all__ = [
    "INITS",
    "SCRATCH_ARCHITECTURES",
    "GenerationOptions",
    "LMEncoded",
    "ScratchSize",
    "Seq2SeqEncoded",
    "load_for_generation",
    "score_unigram_floor",
    "train_tokenizer",
]
