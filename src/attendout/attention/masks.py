"""Pure mask builders: plain functions from shapes and probabilities to boolean masks (True = drop)."""

from __future__ import annotations

import math

import torch

#: Resolution of a drop probability given as a number: masks compare 16 random bits with a threshold.
LEVELS = 1 << 16


def bernoulli_drop(
    shape: tuple[int, ...],
    p: float | torch.Tensor,
    device: torch.device | str,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Bool mask of ``shape``, each element True (dropped) with probability ``p``, independently.

    A number ``p`` is drawn as 16 random bits per element (four per 64-bit draw of the generator),
    compared with ``round(p * 65536)``: the realised probability is ``p`` rounded to a multiple of
    1/65536 (0.1 becomes 0.100006). On this library's CPU that is about half the time of a float
    uniform per element, the largest cost of a scores-dropout mask of (B, H, L, L). ``p`` may also be a
    tensor broadcastable to ``shape`` (a per-layer or per-head probability), drawn as float uniforms,
    as is every mask under ``torch.compile``.
    """
    if isinstance(p, torch.Tensor) or torch.compiler.is_compiling():
        # under torch.compile a float draw traces (random_ with bounds would break the graph), and the
        # compiler fuses it with the comparison, which this bit trick only imitates in eager mode
        return torch.rand(shape, generator=generator, device=device) < p
    count = round(p * LEVELS)
    if count <= 0 or count >= LEVELS:
        return torch.full(shape, count > 0, dtype=torch.bool, device=device)
    numel = math.prod(shape)
    # the full signed range: a bare random_() leaves an int64's sign bit 0 (one lane of four never drops)
    words = torch.empty((numel + 3) // 4, dtype=torch.int64, device=device).random_(
        -(2**63), 2**63 - 1, generator=generator
    )
    bits = words.view(torch.int16)[:numel].view(shape)  # uniform over [-32768, 32767]
    return bits < count - LEVELS // 2


def keep_scale(drop: torch.Tensor, p: float, rescale: bool, dtype: torch.dtype) -> torch.Tensor:
    """Weights multiplier for a dropout mask: 0 where dropped, else 1/(1-p) (rescale) or 1."""
    keep = (~drop).to(dtype)
    return keep / (1.0 - p) if rescale and p < 1 else keep
