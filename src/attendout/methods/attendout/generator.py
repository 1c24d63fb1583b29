"""G-Net, the Generator of AttendOut (paper 001 §4.1, Figure 2), and the pieces of eq. 5.

The Generator is a stack of one-head self-attention layers, as many as the encoder has, that share
one set of parameters and have no feed-forward part. It reads the token representations of a batch
(the Attacker's embedding output, detached: see :class:`~.strategy.AttendOutStrategy`), projects them
to its own small width, and runs its layers; layer ``i``'s attention gives the drop probabilities of
the encoder's layer ``i``. "G-Net only exports the attention scores from attention layers with no extra
output layers" (§4.1).

**The action, in two parts.** The paper leaves the action's parametrisation open; we split it so that
a game's one reward is not spread over ~10^5 independent units, and so that the two parts cannot leak
into each other:

* the *rate* of layer ``i``, ``r_i = sigmoid(rho_i)``, ``rho_i = b_i + sigma * eps_i``, says *how much*
  is dropped. ``b`` (``n`` numbers, initialised at ``init_drop``) is the policy's mean; ``eps ~ N(0, 1)``
  is drawn once per game (:class:`~.policy.GeneratorPolicy`), so every batch of a game explores the
  same rates and the game's reward can tell a higher rate from a lower one;
* the *pattern*: G's attention weights ``alpha_qk`` of layer ``i`` (a softmax over the real keys of
  each query row, sample-dependent as in the paper) say *where*.

Unit (q, k) of layer ``i`` (both tokens real; padding is never a unit) is dropped with probability
``p_qk = min(r_i * n_q * alpha_qk, 1 - 1e-4)``, ``n_q`` the row's real keys, by a hard Gumbel sample:
a row drops ``r_i`` of its units on average whatever the pattern (exactly, unless a unit is capped),
so a pattern that wanders cannot move the rate. Uniform attention (G at initialisation) is plain
scores dropout at rate ``r_i``. log P(a) = log N(rho; b, sigma^2) + log P(masks | rho): the rate's term
carries the game's signal on the rates, the masks' term (the paper's estimator) the signal on the
pattern. With ``sigma = 0`` the rate is ``b`` itself and only the masks' term remains, as in attendout 0.1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn


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


def embed_in_eval(embeddings: nn.Module, tokens: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """(B, L, E) the output of the embedding block ``embeddings`` for the token inputs, in eval mode (no
    dropout), float32; its training flag is restored after."""
    was_training = embeddings.training
    embeddings.eval()
    try:
        if isinstance(embeddings, nn.Embedding):  # a token table only (EuroBERT)
            return embeddings(tokens["input_ids"]).float()
        return embeddings(**tokens).float()
    finally:
        embeddings.train(was_training)


@dataclass
class GeneratorSample:
    """The masks of one batch and their drop probabilities.

    masks:       {encoder layer: (B, L, L) bool, True = drop}; padding units are always False.
    drop_prob:   {encoder layer: mean drop probability over the batch's units at the rates drawn}.
    policy_prob: {encoder layer: the same at the policy's mean rates (no exploration)}. 0-dim tensors.
    """

    masks: dict[int, torch.Tensor]
    drop_prob: dict[int, torch.Tensor]
    policy_prob: dict[int, torch.Tensor]


#: The largest drop probability of one unit: keeps log P(kept) finite where a pattern piles up.
MAX_DROP = 1 - 1e-4


class Generator(nn.Module):
    """G-Net: ``num_layers`` one-head self-attention layers with shared parameters, no feed-forward.

    Shapes: ``inputs`` (B, L, E) token representations, ``token_valid`` (B, L) bool (True = real
    token). With ``embeddings`` (G's own embedding block, trained with G: the paper's Generator has its
    own, "1/3 of RoBERTa size" with it), ``inputs`` are instead the batch's token inputs (``input_ids``
    and, for a block that takes them, ``token_type_ids``), which G embeds itself. :meth:`forward` returns the log pattern (num_layers, B, L, L), ``log(n_q * alpha_qk)`` (0
    everywhere for uniform attention); :meth:`drop_log_prob` combines it with rate logits.
    ``layer_bias`` (num_layers,) is the policy's mean rate logit.
    """

    def __init__(
        self,
        input_dim: int,
        num_layers: int,
        width: int = 64,
        init_drop: float = 0.5,
        temperature: float = 1.0,
        embeddings: nn.Module | None = None,
    ) -> None:
        super().__init__()
        if not 0 < init_drop < 1:
            raise ValueError(f"Generator: init_drop must be in (0, 1), got {init_drop!r}")
        self.num_layers, self.width, self.temperature = num_layers, width, temperature
        #: G's own embedding block (None: G reads representations it is given)
        self.embeddings = embeddings
        self.project = nn.Linear(input_dim, width)
        self.input_norm = nn.LayerNorm(width)
        # The one attention layer that every layer of G-Net shares.
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.output = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.layer_bias = nn.Parameter(torch.full((num_layers,), math.log(init_drop / (1 - init_drop))))
        for linear in (self.project, self.query, self.key, self.value, self.output):
            nn.init.normal_(linear.weight, std=0.02)  # near-uniform attention at start: plain scores dropout
            nn.init.zeros_(linear.bias)

    def pattern_parameters(self) -> list[nn.Parameter]:
        """Every parameter but the rates' ``layer_bias``: what shapes the pattern."""
        return [p for name, p in self.named_parameters() if name != "layer_bias"]

    def embed(self, tokens: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """(B, L, E) G's own embedding output for the token inputs, in eval mode (no dropout, so the
        game's recomputation sees what the sampling saw), float32."""
        if self.embeddings is None:
            raise RuntimeError("Generator: it has no embeddings of its own; give it token representations")
        return embed_in_eval(self.embeddings, tokens)

    def forward(
        self, inputs: torch.Tensor | Mapping[str, torch.Tensor], token_valid: torch.Tensor
    ) -> torch.Tensor:
        if not isinstance(inputs, torch.Tensor):  # token inputs: G embeds them with its own block
            inputs = self.embed(inputs)
        h = self.input_norm(self.project(inputs))  # (B, L, w)
        key_ok = token_valid[:, None, :]  # (B, 1, L)
        log_keys = key_ok.sum(-1, keepdim=True).clamp(min=1).log()  # (B, 1, 1) log n_q
        lowest = torch.finfo(h.dtype).min
        patterns = []
        for _ in range(self.num_layers):
            q, k, v = self.query(h), self.key(h), self.value(h)  # (B, L, w) each
            scores = torch.matmul(q, k.transpose(1, 2)) / math.sqrt(self.width)  # (B, L, L)
            scores = scores.masked_fill(~key_ok, lowest)  # padded keys: never attended, never a unit
            log_alpha = torch.log_softmax(scores / self.temperature, dim=-1)
            patterns.append(log_alpha + log_keys)  # (B, L, L) log(n_q alpha_qk)
            weights = torch.softmax(scores, dim=-1)  # (B, L, L)
            h = self.norm(h + self.output(torch.matmul(weights, v)))  # (B, L, w); no feed-forward
        return torch.stack(patterns)  # (n, B, L, L)

    def drop_log_prob(self, pattern: torch.Tensor, rates: torch.Tensor | None = None) -> torch.Tensor:
        """(n, B, L, L) log p_qk = log min(sigmoid(rho) n_q alpha_qk, MAX_DROP); ``rates`` (n,) are the
        rate logits rho (default: the mean ``layer_bias``)."""
        rates = self.layer_bias if rates is None else rates
        log_p = nn.functional.logsigmoid(rates)[:, None, None, None] + pattern
        return log_p.clamp(max=math.log(MAX_DROP))

    @torch.no_grad()
    def sample(
        self,
        inputs: torch.Tensor | Mapping[str, torch.Tensor],
        token_valid: torch.Tensor,
        layers: Sequence[int],
        rates: torch.Tensor | None = None,
    ) -> GeneratorSample:
        """Masks for the encoder ``layers`` of one batch at rate logits ``rates`` (n,) (default: the mean).

        No gradient: the masks are actions. ``drop_prob`` is the mean probability at ``rates``,
        ``policy_prob`` at the mean rates (what the policy has learned, without the game's exploration).
        """
        pattern = self(inputs, token_valid)  # (n, B, L, L)
        log_p = self.drop_log_prob(pattern, rates)
        mean_log_p = self.drop_log_prob(pattern)
        units = unit_mask(token_valid)  # (B, L, L)
        count = units.sum().clamp(min=1)
        masks, drop_prob, policy_prob = {}, {}, {}
        for layer in layers:
            logits = log_p[layer] - torch.log1p(-log_p[layer].exp())  # log(p / (1 - p))
            masks[layer] = gumbel_drop(logits, 1.0) & units  # (B, L, L)
            drop_prob[layer] = (log_p[layer].exp() * units).sum() / count
            policy_prob[layer] = (mean_log_p[layer].exp() * units).sum() / count
        return GeneratorSample(masks, drop_prob, policy_prob)

    def log_prob(
        self,
        inputs: torch.Tensor | Mapping[str, torch.Tensor],
        token_valid: torch.Tensor,
        masks: dict[int, torch.Tensor],
        rates: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """(B,) log P(masks | rates) per sample: mean of log P(unit) over its units in all layers of ``masks``.

        Units are independent given the rates (paper 001 §4.2), so log P = (1 / n l^2) sum_ij log P(d_ij),
        with l^2 replaced by the sample's number of real (query, key) pairs. ``rates`` (n,) are the rate
        logits the masks were drawn at (default: the mean ``layer_bias``, which then gets a gradient).
        """
        log_p = self.drop_log_prob(self(inputs, token_valid), rates)  # (n, B, L, L)
        units = unit_mask(token_valid)  # (B, L, L)
        total = torch.zeros(token_valid.shape[0], device=token_valid.device)
        for layer, mask in masks.items():
            # log p for a dropped unit, log(1 - p) for a kept one; padding units count as neither
            log_unit = torch.where(mask, log_p[layer], torch.log1p(-log_p[layer].exp()))  # (B, L, L)
            total = total + torch.where(units, log_unit, 0.0).sum(dim=(1, 2))
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
