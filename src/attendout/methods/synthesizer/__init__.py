"""Synthesizer attention (Tay et al., "Synthesizer: Rethinking Self-Attention in Transformer Models",
ICML 2021): dense, random (trainable or fixed), factorized dense/random, and their mixtures with
dot-product attention, inserted into a pretrained encoder through the attendout hook.

The paper pre-trains with synthetic attention; attendout mostly inserts it into a *pretrained*
encoder at fine-tuning (``attendout finetune --attention random+dot``). For the paper's setting,
training from scratch, see ``experiments/synthesizer_from_scratch.py``.

>>> model = attendout.synthesize(model, "dense+dot", max_length=128)  # the official mixture: weight 1/2
>>> model = attendout.synthesize(model, "dense+dot", max_length=128, mixing="head")  # step 0: as before
>>> ...  # train
>>> attendout.save_synthesized(model, "out/", tokenizer)
>>> model = attendout.load_synthesized("out/")  # transformers' from_pretrained refuses this folder
"""

from typing import TYPE_CHECKING

from ...lazy import lazy_names
from ..registry import register_method
from .config import SynthesizerConfig
from .variants import VARIANTS

register_method(
    "synthesizer",
    SynthesizerConfig,
    "attendout.methods.synthesizer.method:Synthesizer",
    "attendout.methods.synthesizer.strategy:SynthesizerStrategy",
)

if TYPE_CHECKING:  # the lazy names, for type checkers and the API reference
    from .checkpoint import is_synthesized_checkpoint, load_model, load_synthesized, load_synthesized_weights
    from .layer import SynthesizerLayer
    from .method import (
        MODEL_TYPE,
        WEIGHTS_NAME,
        SequenceTooLongError,
        Synthesizer,
        get_synthesizer,
        save_synthesized,
        synthesize,
    )
    from .strategy import SynthesizerStrategy

__getattr__ = lazy_names(
    __name__,
    {
        **dict.fromkeys(
            ("is_synthesized_checkpoint", "load_model", "load_synthesized", "load_synthesized_weights"),
            ".checkpoint",
        ),
        "SynthesizerLayer": ".layer",
        **dict.fromkeys(
            (
                "MODEL_TYPE",
                "WEIGHTS_NAME",
                "SequenceTooLongError",
                "Synthesizer",
                "get_synthesizer",
                "save_synthesized",
                "synthesize",
            ),
            ".method",
        ),
        "SynthesizerStrategy": ".strategy",
    },
)

__all__ = [
    "MODEL_TYPE",
    "VARIANTS",
    "WEIGHTS_NAME",
    "SequenceTooLongError",
    "Synthesizer",
    "SynthesizerConfig",
    "SynthesizerLayer",
    "SynthesizerStrategy",
    "get_synthesizer",
    "is_synthesized_checkpoint",
    "load_model",
    "load_synthesized",
    "load_synthesized_weights",
    "save_synthesized",
    "synthesize",
]
