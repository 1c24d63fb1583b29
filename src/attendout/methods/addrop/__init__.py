"""``addrop``: attribution-driven attention dropout with cross-tuning (paper 002, AD-DROP).

Per training batch AD-DROP (002 §2, Figure 1):

1. runs an **attribution pass** without any dropping and scores every attention position of the
   chosen layers for the *predicted* label ``c = argmax F(x)`` (for regression: the gold loss):

   * ``ga``  gradient attribution, ``B_h = dF_c(A) / dA_h`` (002 eq. 3): the plain gradient of the
     label's logit with respect to the attention weights, *not* multiplied by the weights, as in the
     paper. Gradient x weights is exactly ``iga`` with ``ig_steps=1``, so it stays one option away.
   * ``iga`` integrated gradients over ``m = ig_steps`` points ``alpha_k = k / m`` (002 eq. 4, after
     Hao et al.'s self-attention attribution): the weights of one layer are scaled by ``alpha`` through
     the hook (``AttentionEdit.scale_weights``) while every other layer runs normally; each layer costs
     ``m`` forward+backward passes. Two forms (``ig_form``):

     - ``authors`` (default), as the public code computes it (``compute_integrated_gradient`` in
       TaoYang225/AD-DROP): the head output is scaled by ``alpha``, the gradient is taken with respect
       to the *unscaled* weights, ``B_h = A_h * (1/m) sum_k dF_{c_k}(alpha_k A) / dA_h``, which is
       ``alpha_k`` times the textbook integrand, and the label ``c_k`` is predicted again at every
       ``alpha_k``;
     - ``textbook``: ``B_h = A_h * (1/m) sum_k dF_c / d(alpha_k A_h)``, the Riemann sum of eq. 4 as
       written, with the label ``c`` predicted once at ``alpha = 1``; its attributions sum to
       ``F_c(A) - F_c(0)`` as ``m`` grows (completeness), the authors' do not.

     The default is the authors' form because every other default of this method (p, q, layers,
     attribution, cross-tuning) is their public code's, so that ``--attribution iga`` runs what produced
     their numbers. How much the two differ depends on how far from linear the model is along the path:
     on tiny random BERTs (layer 0, m 20, p 0.3) they choose different candidates in 0.1-0.5% of the
     rows with a gradient at initializer range 0.02, and in 80-86% at range 0.3.
   * ``aa``  the attention weights themselves (one forward pass, no backward).
   * ``rd``  the random control (no attribution pass at all): each key dropped with probability p * q,
     as the public code's ``generate_mask_random`` (``rd_sampling="exact"``: random scores, whose
     candidates and drops follow step 2).

2. builds **masks**: in every query row of every head, the candidate discard region is the
   ``ceil(p * n)`` non-padding keys of highest attribution (``n`` = non-padding keys of the row), as in
   the public code (it keeps the keys ranked at or above position ``floor((1 - p) * n)`` from the
   bottom: ``ceil(p * n)`` of them), and each candidate is dropped with probability ``q``. Masks are
   booleans. Ties: the public code keeps every key tied with the threshold (an all-zero row becomes
   all candidates); here ties are broken at random for exactly ``ceil(p * n)`` keys. That only matters
   in rows whose attributions tie, such as rows of zero gradient (padding queries, or every query but
   ``[CLS]`` in the last layer), and those rows do not reach the logits, so the training signal is
   the same. ``rounding="round"`` takes ``floor(p * n + 1/2)`` keys instead: attendout's rule until
   the candidate count was checked against the public code (issue 20), kept so that the layer-0
   ``cpu-small`` cells run with it can be reproduced. It takes one key fewer at about 40% of lengths
   (51-53 of the lengths 1..128 at every p but 0.5): mean candidate fraction at p 0.3 0.301 against
   0.321, at p 0.1 0.0995 against 0.1245.

3. runs the **training pass** with the model's ordinary dropout on; the dropped positions get a
   ``-inf`` score (002 eq. 1, 001 eq. 3; a row with every key dropped attends uniformly, 001 eq. 4).
   Its loss is the one that trains.

**Cross-tuning** (002 §2.4) alternates plain fine-tuning and AD-DROP with a period in epochs or steps.

**Layers.** ``layers="task"`` (the default) takes the layers the authors' search scripts use for the
task (``*/run_addrop.sh`` in TaoYang225/AD-DROP, ``MASK_LAYERS``): every layer for CoLA, MRPC and RTE,
the first layer for SST-2, STS-B, QNLI, QQP and MNLI (and, as their ``--mask_layers`` default, for any
other task; for a model with fewer layers, "every layer" is all of its own). It is settled when the
method meets a task: ``attendout finetune`` and ``attendout bench`` write the layers into the run's
options before the run starts (:meth:`ADDropConfig.for_task`, through
:func:`attendout.methods.settle_for_task`), so ``config.json`` records them (``null`` = every layer);
the strategy settles it from ``LoopContext.task`` in any loop that gives one (attendout's own loop
does, so a ``TrainConfig`` made in Python records ``"task"`` beside the task's name, and the log says
which layers it took); a loop that names no task (``transformers.Trainer``, ``attendout.hf.Trainer``
without ``task=``, a hand-written loop) gets the first layer, and a warning says so. Pass ``layers`` to
choose.

**Generation** (``lm`` and ``seq2seq``). The authors' OPUS-MT runs (``translation/main_en_ro_mt_cut.py``
of TaoYang225/AD-DROP and the ``compute_loss`` of its ``self_transformers/trainer.py``) run the model
once with teacher forcing, take each target position's predicted token (the argmax of its logits, not
the gold token), and attribute the cross-entropy of those predicted tokens by its gradient with respect
to the attention weights of **every layer of the encoder's self-attention** (gradient attribution,
``-grad``: high = supports the predicted tokens). The masks drop in the encoder's self-attention only
(p 0.2, keep rate 0.8, i.e. q 0.2, in their script); the decoder's self-attention and the
cross-attention stay stock, and cross-tuning alternates by epoch, plain first. Here, likewise:

* the target is the mean log-probability of the predicted next token over the positions the loss
  trains (:func:`attendout.methods.nexttoken.predicted_token_target`); every ``attribution`` works
  with it (``iga`` predicts the tokens again at each ``alpha``, as for labels);
* ``layers="task"`` is ``"encoder"`` on a ``seq2seq`` task (every encoder self-attention layer, as
  theirs) and every layer on an ``lm`` task: the authors have no language-model run, and a causal LM's
  one stack plays the part of their encoder (our choice); a loop that names no task gets the same from
  the model's head. Explicit ``layers`` may name decoder self-attention layers too (T5 numbers the
  encoder's layers first, then the decoder's); the drops there stay causal. Cross-attention is never
  attributed or dropped: the hook does not reach it.

Departures: their cross-entropy averages over every target position, padding included (labels -100
turned into predicted tokens); ours leaves padding out, as the loss does. Their attribution pass is
the training mode forward (dropout on) whose outputs they discard when masks apply; ours runs with
dropout off (see below). Their ``p`` and ``q`` for WMT16 en-ro, 0.2 and 0.2, are the task's defaults
here (``wmt16-en-ro``); other translation tasks take ``main.py``'s 0.3 and 0.2 (tr-en, not a task
here, ran at p 0.6, q 0.1).

**p, q and attribution per task.** Left unset (None), they are settled like ``layers="task"``, by
:meth:`ADDropConfig.for_task` before a CLI or bench run and from ``LoopContext.task`` in the strategy:
the setting the task's script states (:data:`TASK_SETTINGS`: CoNLL-2003 p 0.8 and q 0.1 from
``ner/main.py``; MRPC ``iga`` from ``mrpc/run_addrop.sh``; WMT16 en-ro p 0.2 and q 0.2), else the
argparse defaults of their ``main.py`` (p 0.3, q 0.2, ``ga``), which is also what a loop that names no
task gets. Their GLUE scripts search p and q over a 9 x 9 grid and state no setting. A value given
explicitly always wins.

**The random control** (``attribution="rd"``) drops each key with probability p * q, as their
``generate_mask_random`` (:func:`random_drops`); ``rd_sampling="exact"`` is attendout's form before
issue 50, ceil(p * n) random candidates per row each dropped with probability q (the published ``rd``
cells ran with it). **The drop-low ablation** (``dropping="low"``, their ``--dropping_method low``)
makes the floor(p * n) keys of *lowest* attribution the candidates, as their ``generate_mask_low``.

The attribution pass runs with the model's ordinary dropout **off** by default (``attribution_dropout``):
the attribution then describes the model being trained, not one random sub-network, so ``ga`` is not
blurred towards ``rd`` by dropout noise and its predicted label is the evaluation-time prediction.
Every module's ``training`` flag is restored exactly afterwards, so the training pass always runs in
the mode it was given. (The public implementation leaves the model in eval mode after its integrated
gradients, so with ``iga`` standard dropout is off for the rest of that epoch, training passes
included, until its loop calls ``model.train()`` at the next epoch's start; its ``ga`` pass runs in
train mode, with dropout.)

In any loop, :class:`ADDropStrategy` (``attendout.prepare(model, "addrop")``) runs the pass and cross-tuning
in ``before_forward``; by hand, one forward at a time::

    handle = attendout.apply(model, "addrop", attribution="ga")
    model.train()
    extra = handle.method.prepare(model, batch)  # attribution pass; train mode is restored afterwards
    loss = model(**batch, **extra).loss          # this forward drops; the drops go nowhere else

A training forward of the model without ``extra`` raises instead of training plainly.

The package, by module: :mod:`.attribution` (the attribution pass and the masks, pure functions),
:mod:`.layers` (which layers and keys of a model it acts on), :mod:`.settings` (the options' values and
the authors' settings per task), :mod:`.method` (:class:`ADDrop`, its part in the hook),
:mod:`.strategy` (cross-tuning and :class:`ADDropStrategy`), :mod:`.config` (:class:`ADDropConfig`).
The names of ``__init__.pyi`` are its public API; those that need torch are imported on first use.
"""

import lazy_loader

from ..registry import register_method
from .config import ADDropConfig

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

register_method(
    "addrop",
    ADDropConfig,
    "attendout.methods.addrop.method:ADDrop",
    "attendout.methods.addrop.strategy:ADDropStrategy",
)
