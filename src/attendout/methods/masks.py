"""Pure mask builders: plain functions from shapes and probabilities to boolean masks (True = drop)."""

from __future__ import annotations

import torch


def bernoulli_drop(
    shape: tuple[int, ...], p: float | torch.Tensor, device: torch.device | str
) -> torch.Tensor:
    """Bool mask of ``shape``, each element True (dropped) with probability ``p``.

    ``p`` may be a tensor broadcastable to ``shape`` (a per-layer or per-head probability).
    """
    return torch.rand(shape, device=device) < p


def keep_scale(drop: torch.Tensor, p: float, rescale: bool, dtype: torch.dtype) -> torch.Tensor:
    """Weights multiplier for a dropout mask: 0 where dropped, else 1/(1-p) (rescale) or 1."""
    keep = (~drop).to(dtype)
    return keep / (1.0 - p) if rescale and p < 1 else keep
