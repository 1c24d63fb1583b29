# attendout.encoding's public names, by module: lazy_loader.attach_stub imports each on first use.
from .batches import Batches
from .classification import (
    ChoiceEncoded,
    Encoded,
    TokenEncoded,
    Windows,
    encode,
    predict_batches,
    truncation_summary,
)
from .lm_seq2seq import GenerationOptions, LMEncoded, Seq2SeqEncoded, score_unigram_floor
from .truncation import head_tail_sizes
