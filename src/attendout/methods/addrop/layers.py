"""Which layers and keys of a model AD-DROP acts on (:mod:`attendout.methods.addrop` describes the
method; the layers per task are :func:`attendout.methods.addrop.settings.task_layers`).

* :func:`stack_layers`: the encoder and decoder layer counts of a hooked encoder-decoder (T5);
* :func:`attended_keys`: the non-padding keys of each query row of a layer: the source's mask in an
  encoder (or a decoder-only model), the target's in the decoder stack of an encoder-decoder.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ...attention import get_controller
from ...attention.families import stack_sizes


def attended_keys(model: nn.Module, batch: Mapping[str, torch.Tensor], layer: int) -> torch.Tensor:
    """(B, 1, Lq, Lk) bool: the non-padding keys of each query row of ``layer``.

    From the batch's attention mask, except in the decoder stack of an encoder-decoder (T5), whose
    self-attention runs over the target: its ``decoder_attention_mask`` if the batch has one, else every
    target position (the decoder's stock mask is causal only, and padding sits after the real tokens).
    """
    if layer in _decoder_layers(model):
        mask = batch.get("decoder_attention_mask")
        if mask is None:
            mask = torch.ones_like(batch["labels"] if "labels" in batch else batch["decoder_input_ids"])
    else:
        mask = batch.get("attention_mask")
        if mask is None:
            mask = torch.ones_like(batch["input_ids"])
        mask = mask.reshape(-1, mask.shape[-1])  # multiple choice: (B, C, L) -> the encoder's (B * C, L)
    b, length = mask.shape
    return mask.bool()[:, None, None, :].expand(b, 1, length, length)


def stack_layers(model: nn.Module) -> tuple[int, int] | None:
    """(encoder layers, decoder layers) of a hooked encoder-decoder (T5), None for a single stack (or an
    encoder alone, T5EncoderModel)."""
    controller = get_controller(model)
    if controller is None or not controller.family.stacks:
        return None
    encoder = (stack_sizes(model.config) or (controller.num_layers, 0))[0]
    decoder = controller.num_layers - encoder
    return (encoder, decoder) if decoder > 0 else None


def _decoder_layers(model: nn.Module) -> range:
    stacks = stack_layers(model)
    return range(0) if stacks is None else range(stacks[0], stacks[0] + stacks[1])
