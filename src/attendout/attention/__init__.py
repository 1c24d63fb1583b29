"""The one hook into the self-attention of `transformers` encoders, decoders and encoder-decoders.

Every method of attendout that touches attention goes through :func:`attendout_attention`, registered
with ``transformers.AttentionInterface`` under the name ``"attendout"``. Nothing copies a model's
forward: the encoder computes its own query, key and value projections and hands them to us.

Per layer and per forward pass the hook can (paper 001, "Not All Attention Is All You Need", §3.2):

* drop attention **scores** before the softmax (eq. 3: a dropped score becomes ``-inf``);
* multiply the attention **weights** after the softmax by a mask or scale (eq. 2);
* give a row whose every key was dropped **uniform attention** over its non-padding keys (eq. 4),
  which also serves to skip a whole layer's attention (attention LayerDrop);
* **record** the attention probabilities and, on request, keep their gradients.

Padding keys stay masked whatever a method asks, and so do later positions in a causal layer (a decoder's
self-attention: GPT-2, Llama, T5's decoder): eq. 4's uniform attention is uniform over the keys the
query may see, and with a KV cache a query at position t sees keys 0..t. The model's own attention dropout (the ``dropout``
argument the encoder passes) is applied as stock attention applies it, after the softmax, unless an
active method replaces it. With the hook installed and nothing to do, the call goes straight to
``transformers``' SDPA attention, so plain fine-tuning costs the same as stock.

A method is an :class:`AttentionMethod`; the per-model :class:`Controller` holds the active methods
and recorders. Methods usually reach this package through :func:`attendout.apply`.

The package, by module (each imports only those above it; ``from attendout.attention import X``
reaches every name):

* :mod:`~attendout.attention.masks`: Bernoulli drop masks and dropout's keep scale (pure tensors);
* :mod:`~attendout.attention.families`: the family table, the routes families register, causality;
* :mod:`~attendout.attention.call`: what a method sees and says (:class:`AttentionCall`,
  :class:`AttentionEdit`, :class:`RandomDrops`, :class:`AttentionMethod`) and the per-call state;
* :mod:`~attendout.attention.controller`: the per-model :class:`Controller`;
* :mod:`~attendout.attention.paths`: the fused SDPA, filled and explicit attention paths;
* :mod:`~attendout.attention.hook`: :func:`install`, :func:`uninstall` and the registered
  attention function;
* :mod:`~attendout.attention.recording`: :func:`record_attention` and its recorders.
"""

from .call import AttentionCall, AttentionEdit, AttentionMethod, RandomDrops
from .call import CombinedEdits as CombinedEdits
from .call import RateMeter as RateMeter
from .call import combine_edits as combine_edits
from .call import own_edit as own_edit
from .call import query_rows as query_rows
from .call import rewrites_scores as rewrites_scores
from .controller import Controller, get_controller
from .controller import layer_key_valid as layer_key_valid
from .families import FAMILIES as FAMILIES
from .families import Family as Family
from .families import UnsupportedModelError, supported_model_types
from .families import causal_mask as causal_mask
from .families import is_causal as is_causal
from .families import register_route as register_route
from .hook import HOOK_NAME, attendout_attention, install, uninstall
from .paths import BLOCK_BYTES as BLOCK_BYTES
from .paths import allowed_keys as allowed_keys
from .paths import empty_rows as empty_rows
from .paths import no_key_rows_zero as no_key_rows_zero
from .paths import uniform_weights as uniform_weights
from .recording import AttentionRecorder, record_attention

# Besides __all__, the names above imported "as" themselves are re-exported too: the other names of
# the single module this package was, which other modules and tests import from here.
__all__ = [
    "HOOK_NAME",
    "AttentionCall",
    "AttentionEdit",
    "AttentionMethod",
    "AttentionRecorder",
    "Controller",
    "RandomDrops",
    "UnsupportedModelError",
    "attendout_attention",
    "get_controller",
    "install",
    "record_attention",
    "supported_model_types",
    "uninstall",
]
