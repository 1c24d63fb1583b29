"""Which layers and keys AD-DROP acts on (:mod:`attendout.methods.addrop` describes the method).

* :func:`task_layers`: the layers ``layers="task"`` stands for on a task (the authors' choice per task;
  the encoder's self-attention for ``seq2seq``, every layer for ``lm``);
* :func:`_stacks`: the encoder and decoder layer counts of a hooked encoder-decoder (T5);
* :func:`_key_valid`: the non-padding keys of each query row of a layer: the source's mask in an
  encoder (or a decoder-only model), the target's in the decoder stack of an encoder-decoder.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ..attention import get_controller
from ..attention.families import stack_sizes
from .nexttoken import LM, SEQ2SEQ

__all__ = ["ALL_LAYER_TASKS", "ENCODER_LAYERS", "TASK_LAYERS", "task_layers"]

#: ``layers="task"``: the layers come from the task (see :func:`task_layers`)
TASK_LAYERS = "task"
#: ``layers="encoder"``: every self-attention layer of an encoder-decoder's encoder (seq2seq's default)
ENCODER_LAYERS = "encoder"
#: Tasks whose search script in the authors' code (TaoYang225/AD-DROP, ``<task>/run_addrop.sh``) sets
#: ``MASK_LAYERS`` to every layer; every other script (SST-2, STS-B, QNLI, QQP, MNLI) sets "0", as
#: does the ``--mask_layers`` default of their ``main.py``.
ALL_LAYER_TASKS = frozenset({"cola", "mrpc", "rte", "conll2003"})


def task_layers(task: str | None, kind: str | None = None) -> list[int] | str | None:
    """The layers AD-DROP takes on ``task`` (a task name) of ``kind`` (looked up by name if not given).

    Classification: the authors' search scripts, None (every layer) for CoLA, MRPC and RTE, ``[0]`` for
    any other task or none (see :data:`ALL_LAYER_TASKS`). ``seq2seq``: ``"encoder"``, every layer of the
    encoder's self-attention, as the authors' OPUS-MT trainer. ``lm``: None, every layer (our choice:
    the authors have no language-model run; a causal LM's one stack plays the part of their encoder).
    """
    kind = kind if kind is not None else _kind_of(task)
    if kind == SEQ2SEQ:
        return ENCODER_LAYERS
    if kind == LM:
        return None
    return None if task in ALL_LAYER_TASKS else [0]


def _kind_of(task: str | None) -> str | None:
    if task is None:
        return None
    from ..tasks import get_task

    try:
        return get_task(task).kind
    except (KeyError, ValueError):
        return None


def _key_valid(model: nn.Module, batch: Mapping[str, torch.Tensor], layer: int) -> torch.Tensor:
    """(B, 1, Lq, Lk) bool: the non-padding keys of each query row of ``layer``.

    From the batch's attention mask, except in the decoder stack of an encoder-decoder (T5), whose
    self-attention runs over the target: its ``decoder_attention_mask`` if the batch has one, else every
    target position (the decoder's stock mask is causal only, and padding sits after the real tokens).
    """
    if layer in _decoder_layers(model):
        mask = batch.get("decoder_attention_mask")
        if mask is None:
            mask = torch.ones_like(batch["labels"] if "labels" in batch else batch["decoder_input_ids"])
        b, length = mask.shape
        return mask.bool()[:, None, None, :].expand(b, 1, length, length)
    ids = batch["input_ids"]
    mask = batch.get("attention_mask")
    if mask is None:
        mask = torch.ones_like(ids)
    mask = mask.reshape(-1, mask.shape[-1])  # multiple choice: (B, C, L) -> the encoder's (B * C, L)
    b, length = mask.shape
    return mask.bool()[:, None, None, :].expand(b, 1, length, length)


def _stacks(model: nn.Module) -> tuple[int, int] | None:
    """(encoder layers, decoder layers) of a hooked encoder-decoder (T5), None for a single stack (or an
    encoder alone, T5EncoderModel)."""
    controller = get_controller(model)
    if controller is None or not controller.family.stacks:
        return None
    encoder = (stack_sizes(model.config) or (controller.num_layers, 0))[0]
    decoder = controller.num_layers - encoder
    return (encoder, decoder) if decoder > 0 else None


def _decoder_layers(model: nn.Module) -> range:
    stacks = _stacks(model)
    return range(0) if stacks is None else range(stacks[0], stacks[0] + stacks[1])
