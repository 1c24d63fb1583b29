"""What the methods with feedback read from a generation model: its next-token predictions.

The generation kinds (``lm``, ``seq2seq``; :mod:`attendout.tasks.lm_seq2seq`) have one output per
target position, a distribution over the vocabulary. AD-DROP attributes the *predicted* token at each
position (:func:`predicted_token_target`), AttendOut rewards the Attacker by the *gold* tokens'
log-likelihood (:func:`label_log_likelihood`). Both look at the same positions, the ones the loss
trains:

* ``lm`` (a causal LM, ``labels`` = ``input_ids``): position t predicts token t + 1, so the logits
  of positions 0..L-2 are compared with the labels of positions 1..L-1, as the model's own loss does;
* ``seq2seq`` (an encoder-decoder): decoder position t predicts ``labels[t]``; labels of -100
  (padding) are left out.

:func:`generation_kind` tells the two apart by the model, so that a loop that names no task still gets
the right targets.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ..tasks import LM, SEQ2SEQ

IGNORE_INDEX = -100


def generation_kind(model: nn.Module) -> str | None:
    """``"seq2seq"`` for an encoder-decoder with a language-model head (T5, BART, Marian), ``"lm"`` for a
    causal LM (``...ForCausalLM``, GPT-2's ``...LMHeadModel``), None for every other head."""
    name = type(model).__name__
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False) and name.endswith(
        ("ForConditionalGeneration", "ForSeq2SeqLM", "MTModel")
    ):
        return SEQ2SEQ
    if name.endswith(("ForCausalLM", "LMHeadModel")):
        return LM
    return None


def _labels(batch: Mapping[str, torch.Tensor], kind: str) -> torch.Tensor:
    labels = batch.get("labels")
    if labels is not None:
        return labels
    if kind == LM:  # a causal LM predicts its own input; padding (attention mask 0) is never a target
        ids = batch["input_ids"]
        mask = batch.get("attention_mask")
        return ids if mask is None else ids.masked_fill(mask == 0, IGNORE_INDEX)
    raise ValueError("a seq2seq batch needs its target 'labels' (-100 on padding) for next-token targets")


def scored_positions(
    logits: torch.Tensor, batch: Mapping[str, torch.Tensor], kind: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (B, T, V), targets (B, T)) aligned so that row t of the logits predicts target t; -100
    marks a position that is not scored. ``lm``: the logits of positions 0..L-2 and the labels of 1..L-1."""
    labels = _labels(batch, kind)
    if kind == LM:
        return logits[:, :-1], labels[:, 1:]
    if kind == SEQ2SEQ:
        return logits, labels
    raise ValueError(f"next-token targets exist for the kinds lm and seq2seq, not {kind!r}")


def label_log_likelihood(
    logits: torch.Tensor, batch: Mapping[str, torch.Tensor], kind: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per example: (mean log-likelihood of its gold tokens (B,), share of them predicted right (B,),
    number of scored tokens (B,)). An example with no scored token gets 0 for both."""
    logits, targets = scored_positions(logits.float(), batch, kind)
    scored = targets != IGNORE_INDEX  # (B, T)
    log_p = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    gold = log_p.gather(-1, targets.clamp(min=0)[..., None]).squeeze(-1)  # (B, T)
    hits = (log_p.argmax(-1) == targets) & scored
    count = scored.sum(1)
    denominator = count.clamp(min=1)
    return (gold * scored).sum(1) / denominator, hits.float().sum(1) / denominator, count


def predicted_token_target(
    logits: torch.Tensor,
    batch: Mapping[str, torch.Tensor],
    kind: str,
    predicted: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scalar to attribute, the predicted tokens (B, T)): the mean log-probability of the token the
    model predicts (its argmax, or ``predicted``) at every scored position of the batch.

    A high gradient of it with respect to an attention weight means "this weight supports the tokens
    the model predicts", as AD-DROP's translation code reads it (minus the gradient of the cross-entropy
    of the predicted tokens); see :mod:`attendout.methods.addrop` for where we depart from it.
    """
    logits, targets = scored_positions(logits, batch, kind)
    scored = targets != IGNORE_INDEX  # (B, T)
    if predicted is None:
        predicted = logits.detach().argmax(-1)  # (B, T)
    # shape (B, T)
    cross_entropy = nn.functional.cross_entropy(logits.float().transpose(1, 2), predicted, reduction="none")
    return -(cross_entropy * scored).sum() / scored.sum().clamp(min=1), predicted
