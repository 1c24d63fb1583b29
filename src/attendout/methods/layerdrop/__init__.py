"""Layer-level regularisers of paper 001 §7.1.

* ``layerdrop`` (Fan et al., 2019, "Reducing Transformer Depth on Demand with Structured Dropout"):
  in training, each block (an encoder or decoder layer) is skipped with probability p (the block
  returns its input). The attention hook cannot skip a feed-forward sub-layer, so this is the one
  method that wraps a module:
  it sets an instance ``forward`` on each block that either calls the block's own forward or returns
  the hidden states unchanged. Parameters and state-dict keys are untouched; ``remove()`` deletes the
  instance attribute. The decision is per batch, as in LayerDrop.
* ``attn-layerdrop`` (001 §7.1, "attention LayerDrop"): each layer's attention is skipped with
  probability p through eq. 4: the layer attends uniformly to its non-padding keys, so W_Q, W_K and
  their dot product drop out of the computation. The decision is per batch by default
  (``per_sample=True`` decides per example). Both keep the model's own dropout.

In an encoder-decoder (T5) both act on the blocks (self-attentions) of the encoder and of the
decoder, numbered through the encoder first. ``attn-layerdrop`` replaces a self-attention only: the
cross-attention stays stock. ``layerdrop`` skips a whole block, and a decoder block holds its
cross-attention and feed-forward too: those are skipped with it (the block returns its input), which
is what LayerDrop is; a run that wants the decoder's cross-attention kept gives ``layers`` of the
encoder only.
"""

import lazy_loader

from ..registry import register_method
from .config import AttnLayerDropConfig, LayerDropConfig

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

register_method("layerdrop", LayerDropConfig, "attendout.methods.layerdrop.method:block_drop")

register_method("attn-layerdrop", AttnLayerDropConfig, "attendout.methods.layerdrop.method:attention_skip")
