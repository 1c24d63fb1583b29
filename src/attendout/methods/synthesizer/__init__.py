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

import lazy_loader

from ..registry import register_method
from .config import SynthesizerConfig

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

register_method(
    "synthesizer",
    SynthesizerConfig,
    "attendout.methods.synthesizer.method:Synthesizer",
    "attendout.methods.synthesizer.strategy:SynthesizerStrategy",
)
