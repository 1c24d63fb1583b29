"""Setting up AttendOut's game: the Generator G and what it reads, the layers it masks, the games' data.

:class:`~.strategy.AttendOutStrategy` builds these at the start of training: G reading the Attacker's
embedding output (or its own copy of the embedding block), the layers G masks (in a seq2seq model the
encoder's only), and the split the games score D and A on.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ...attention import UnsupportedModelError
from ...attention.families import stack_sizes
from ...contract import LoopContext
from ...tasks import SEQ2SEQ
from .config import CARVED
from .generator import Generator

if TYPE_CHECKING:
    from .config import AttendOutConfig

logger = logging.getLogger(__name__)


def embedding_block(model: nn.Module) -> nn.Module:
    """The module whose output the Generator reads: the encoder's embedding block (token, position and
    type embeddings with their norm), or, for families that have none (EuroBERT: RoPE positions, no
    embedding norm), the token embedding table."""
    embeddings = getattr(getattr(model, "base_model", model), "embeddings", None)
    if isinstance(embeddings, nn.Module):
        return embeddings
    tokens = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if isinstance(tokens, nn.Module):
        return tokens
    raise UnsupportedModelError(
        f"attendout: the Generator reads the embedding output, and {type(model).__name__} has neither a "
        "base_model.embeddings module nor input embeddings"
    )


def make_generator(
    config: AttendOutConfig,
    attacker: nn.Module,
    defender: nn.Module,
    num_layers: int,
    device: torch.device,
) -> tuple[Generator, nn.Module, float]:
    """``(G, the Attacker's embedding block, G's share of the model's parameters)``: G reads that block's
    output (or, with ``generator_embeddings="own"``, its own copy of the block, trained with G); logs
    G's size against the model's."""
    embeddings = embedding_block(attacker)
    own = config.generator_embeddings == "own"
    generator = Generator(
        input_dim=attacker.get_input_embeddings().embedding_dim,
        num_layers=num_layers,
        width=config.generator_width,
        init_drop=config.init_drop,
        temperature=config.temperature,
        embeddings=copy.deepcopy(embeddings).float() if own else None,
    ).to(device)
    size = sum(p.numel() for p in generator.parameters())
    model_size = sum(p.numel() for p in defender.parameters())
    share = size / max(model_size, 1)
    logger.info(
        "attendout: the Generator has %d parameters, %.2g%% of the model's %d (%s embeddings, width %d; "
        "paper 001: 1/3 of RoBERTa-base)",
        size,
        100 * share,
        model_size,
        "its own" if own else "the Attacker's",
        config.generator_width,
    )
    return generator, embeddings, share


def masked_layers(
    config: AttendOutConfig, generation: str | None, controller: Any, attacker: nn.Module
) -> list[int]:
    """The layers G masks: the config's, or every layer; in a seq2seq model, the encoder's only.

    G reads the source tokens and masks (B, L, L) scores over them; a seq2seq decoder attends over
    the target, whose length differs, so its self-attention is out of G's reach (and the
    cross-attention is never hooked).
    """
    layers = config.layers
    if generation != SEQ2SEQ or not controller.family.stacks:
        return list(layers) if layers is not None else list(range(controller.num_layers))
    encoder = stack_sizes(attacker.config)[0]
    if layers is None:
        return list(range(encoder))
    beyond = [layer for layer in layers if layer >= encoder]
    if beyond:
        raise ValueError(
            f"attendout: layers {beyond} are decoder self-attention layers of {type(attacker).__name__} "
            f"(layers 0..{encoder - 1} are its encoder's); on a seq2seq task the Generator reads the source "
            "and masks the encoder's self-attention only: pick layers below "
            f"{encoder}, or leave layers unset for all of them"
        )
    return list(layers)


def validation_source(config: AttendOutConfig, loop: LoopContext) -> Any:
    """The data the games score D and A on: the carved validation split, or the evaluation split that
    ``validation_source`` names (with a warning: the Generator then learns from reported data)."""
    name = config.validation_source
    if name == CARVED:
        data = loop.validation
    elif name in loop.splits:
        data = loop.splits[name]
        logger.warning(
            "attendout: the games score the evaluation split %r (paper 001's choice): the Generator "
            "learns from data that is reported; the default 'validation' keeps it unseen",
            name,
        )
    else:
        known = ", ".join([CARVED, *loop.splits])
        raise ValueError(f"attendout: validation_source {name!r} is not a split of this run; splits: {known}")
    if len(data) == 0:
        raise ValueError(f"attendout: validation_source {name!r} is empty")
    return data
