"""G-Net, the Generator of AttendOut (paper 001 §4.1, Figure 2), and the pieces of eq. 5.

The Generator is a stack of one-head self-attention layers, as many as the encoder has, that share
one set of parameters and have no feed-forward part. It reads the token representations of a batch
(the Attacker's embedding output, detached: see :class:`~.strategy.AttendOutStrategy`), projects them
to its own small width, and runs its layers; layer ``i``'s attention scores (B, L, L) are the drop
logits of the encoder's layer ``i``. "G-Net only exports the attention scores from attention layers
with no extra output layers" (§4.1): the only additions are a learned bias per layer (``n`` numbers,
so that layers can settle at different drop rates as in Figure 3, with the attention itself shared)
initialised so that the initial drop probability is ``init_drop``, and the input projection.

A unit is one (query, key) pair of one layer with both tokens real; padding is never a unit (never
dropped, never in a log-probability). Masks are hard Gumbel samples: unit ``j`` of layer ``i`` is
dropped with probability ``sigmoid(z_ij / temperature)``. The Generator learns only from eq. 5
(:func:`reinforce_loss`); sampling runs without gradient, so the Attacker's loss never reaches it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ...attention import AttentionCall, AttentionEdit, AttentionMethod

__all__ = [
    "Generator",
    "GeneratorSample",
    "MaskSlot",
    "MovingAverageBaseline",
    "gumbel_drop",
    "reinforce_loss",
    "unit_mask",
]


def unit_mask(token_valid: torch.Tensor) -> torch.Tensor:
    """(B, L) bool of real tokens -> (B, L, L) bool of units: (query, key) pairs of two real tokens."""
    return token_valid[:, :, None] & token_valid[:, None, :]


def gumbel_drop(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Hard Gumbel-max samples of keep/drop with logits (0, z / temperature): True = drop.

    The difference of two standard Gumbel variables is a standard logistic variable, so one uniform
    number per unit gives an exact sample: drop iff z / temperature + log(u / (1 - u)) > 0, i.e. with
    probability sigmoid(z / temperature).
    """
    u = torch.rand_like(logits, dtype=torch.float32).clamp_(1e-6, 1 - 1e-6)
    return logits / temperature + (torch.log(u) - torch.log1p(-u)) > 0


@dataclass
class GeneratorSample:
    """The masks of one batch and their drop probabilities.

    masks:     {encoder layer: (B, L, L) bool, True = drop}; padding units are always False.
    drop_prob: {encoder layer: mean drop probability over the batch's units}, a 0-dim tensor.
    """

    masks: dict[int, torch.Tensor]
    drop_prob: dict[int, torch.Tensor]


class Generator(nn.Module):
    """G-Net: ``num_layers`` one-head self-attention layers with shared parameters, no feed-forward.

    Shapes: ``inputs`` (B, L, E) token representations, ``token_valid`` (B, L) bool (True = real
    token); :meth:`forward` returns drop logits (num_layers, B, L, L).
    """

    def __init__(
        self,
        input_dim: int,
        num_layers: int,
        width: int = 64,
        init_drop: float = 0.5,
        temperature: float = 1.0,
    ) -> None:
        super().__init__()
        if not 0 < init_drop < 1:
            raise ValueError(f"Generator: init_drop must be in (0, 1), got {init_drop!r}")
        self.num_layers, self.width, self.temperature = num_layers, width, temperature
        self.project = nn.Linear(input_dim, width)
        self.input_norm = nn.LayerNorm(width)
        # The one attention layer that every layer of G-Net shares.
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.output = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        # logit z = score + bias_i; sigmoid(bias_i / temperature) = init_drop while the scores are ~0.
        bias = temperature * math.log(init_drop / (1 - init_drop))
        self.layer_bias = nn.Parameter(torch.full((num_layers,), bias))
        for linear in (self.project, self.query, self.key, self.value, self.output):
            nn.init.normal_(linear.weight, std=0.02)  # small scores at start: drop rate ~ init_drop
            nn.init.zeros_(linear.bias)

    def forward(self, inputs: torch.Tensor, token_valid: torch.Tensor) -> torch.Tensor:
        h = self.input_norm(self.project(inputs))  # (B, L, w)
        key_ok = token_valid[:, None, :]  # (B, 1, L)
        lowest = torch.finfo(h.dtype).min
        logits = []
        for i in range(self.num_layers):
            q, k, v = self.query(h), self.key(h), self.value(h)  # (B, L, w) each
            scores = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(self.width)  # (B, L, L)
            logits.append(scores + self.layer_bias[i])
            weights = torch.softmax(scores.masked_fill(~key_ok, lowest), dim=-1)  # (B, L, L)
            h = self.norm(h + self.output(torch.matmul(weights, v)))  # (B, L, w); no feed-forward
        return torch.stack(logits)  # (n, B, L, L)

    def drop_probability(self, logits: torch.Tensor) -> torch.Tensor:
        """sigmoid(z / temperature): the probability that a unit is dropped."""
        return torch.sigmoid(logits / self.temperature)

    @torch.no_grad()
    def sample(
        self, inputs: torch.Tensor, token_valid: torch.Tensor, layers: Sequence[int]
    ) -> GeneratorSample:
        """Masks for the encoder ``layers`` of one batch (no gradient: the masks are actions)."""
        logits = self(inputs, token_valid)  # (n, B, L, L)
        units = unit_mask(token_valid)  # (B, L, L)
        count = units.sum().clamp(min=1)
        masks, drop_prob = {}, {}
        for layer in layers:
            masks[layer] = gumbel_drop(logits[layer], self.temperature) & units  # (B, L, L)
            drop_prob[layer] = (self.drop_probability(logits[layer]) * units).sum() / count
        return GeneratorSample(masks, drop_prob)

    def log_prob(
        self, inputs: torch.Tensor, token_valid: torch.Tensor, masks: dict[int, torch.Tensor]
    ) -> torch.Tensor:
        """(B,) log P(a) of eq. 5 per sample: mean of log P(unit) over its units in all layers of ``masks``.

        Units are independent (paper 001 §4.2), so log P(a) = (1 / n l^2) sum_ij log P(d_ij), with
        l^2 replaced by the sample's number of real (query, key) pairs.
        """
        logits = self(inputs, token_valid) / self.temperature  # (n, B, L, L)
        units = unit_mask(token_valid).float()  # (B, L, L)
        total = torch.zeros(inputs.shape[0], device=inputs.device)
        for layer, mask in masks.items():
            # log sigmoid(z) for a dropped unit, log sigmoid(-z) for a kept one
            log_p = -nn.functional.binary_cross_entropy_with_logits(
                logits[layer], mask.float(), reduction="none"
            )  # (B, L, L)
            total = total + (log_p * units).sum(dim=(1, 2))
        return total / (units.sum(dim=(1, 2)) * len(masks)).clamp(min=1)


def reinforce_loss(log_probs: torch.Tensor, rewards: torch.Tensor, baseline: float) -> torch.Tensor:
    """Eq. 5 as a loss to minimise: -mean_t (r_t - b) log P(a_t).

    ``log_probs`` (T,) are the log-probabilities of the cached actions under the current Generator,
    ``rewards`` (T,) the reward paired with each action. The mean over t (the paper sums) keeps the
    learning rate independent of the number of cached actions. Zero advantage gives zero gradient.
    """
    advantage = (rewards - baseline).to(log_probs)
    return -(advantage.detach() * log_probs).mean()


class MovingAverageBaseline:
    """b of eq. 5: an exponential moving average of the games' mean rewards.

    It starts at the first game's mean reward (``count`` = games seen), not at 0: early in
    fine-tuning the Attacker typically trails the Defender by a steady margin, and a baseline of 0
    would turn that margin into a run of same-sign advantages that carry no information about the
    masks. The first game therefore only sets b (its advantage would be 0 under 'mean' pairing).
    """

    def __init__(self, decay: float) -> None:
        self.decay = decay
        self.value = 0.0
        self.count = 0

    def update(self, mean_reward: float) -> None:
        if self.count == 0:
            self.value = mean_reward
        else:
            self.value = self.decay * self.value + (1 - self.decay) * mean_reward
        self.count += 1


class MaskSlot(AttentionMethod):
    """The Attacker's end of the hook: applies the masks it is given to the scores (eq. 3).

    The AttendOut strategy sets :attr:`masks` before the Attacker's training forward and clears it
    after. With no masks set, or in eval mode, it does nothing.
    """

    name = "attendout"

    def __init__(self, layers: Sequence[int] | None = None) -> None:
        self.layers = layers
        self.masks: dict[int, torch.Tensor] | None = None

    def edit(self, call: AttentionCall) -> AttentionEdit | None:
        if self.masks is None or call.layer not in self.masks:
            return None
        mask = self.masks[call.layer]  # (B, L, L)
        b, _, lq, lk = call.shape
        if mask.shape != (b, lq, lk):
            raise ValueError(
                f"attendout: layer {call.layer} got a mask of shape {tuple(mask.shape)} for attention "
                f"of shape {(b, lq, lk)}; masks must be built from the same batch"
            )
        return AttentionEdit(drop_scores=mask[:, None])  # (B, 1, L, L), every head alike
