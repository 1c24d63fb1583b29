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

The package, by module (each imports only those above it, ``tests/test_layout.py`` checks it;
``from attendout.attention import X`` reaches every name of ``__all__``):

* :mod:`~attendout.attention.masks`: Bernoulli drop masks and dropout's keep scale (pure tensors);
* :mod:`~attendout.attention.families`: the family table and causality;
* :mod:`~attendout.attention.call`: what a method sees and says (:class:`AttentionCall`,
  :class:`AttentionEdit`, :class:`RandomDrops`, :class:`AttentionMethod`), the per-call state, and
  :class:`AttentionRecorder`;
* :mod:`~attendout.attention.controller`: the per-model :class:`Controller` and the routes families register;
* :mod:`~attendout.attention.paths`: the fused SDPA, filled and explicit attention paths;
* :mod:`~attendout.attention.hook`: :func:`install`, :func:`uninstall` and the registered
  attention function;
* :mod:`~attendout.attention.recording`: :func:`record_attention`;
* :mod:`~attendout.attention.deberta`, :mod:`~attendout.attention.mpnet`: the routes of DeBERTa and MPNet,
  which register themselves (the modules above never import them).
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
