"""How the Generator learns from its games: rate exploration, the rewards, eq. 5.

One game (``dropout_steps`` training steps of the Attacker) gives one reward: the Attacker's gain over
the Defender on the game's validation samples. :class:`GeneratorPolicy` holds everything on the
Generator's side of it:

* **Exploration.** Before a game it draws ``eps ~ N(0, 1)`` per layer; every batch of the game drops
  at rate logits ``rho = b + rate_noise * eps`` (see :mod:`.generator`). Games therefore differ in
  their rates by a visible amount (about +-0.05 around 0.1 at ``rate_noise`` 0.5), where independent
  units alone vary a game's realised rate by about 0.001 (66k units a layer on CoLA), far too little
  for one reward to show an effect.
* **The update (eq. 5).** ``-(R - b) [log N(rho; b_layer, sigma^2) + mean_t log P(masks_t | rho)]``: the
  first term is REINFORCE on the game's one rate action (an unbiased estimate of the gradient of the
  expected reward with respect to the mean rate logits ``b_layer``), the second the paper's estimator on
  the cached masks (the pattern's parameters). The two parameter groups have their own Adam learning
  rates. ``b`` is the moving-average baseline; the first game only sets it.
* **The control.** ``reward_control="noise"`` replaces each game's reward by a draw with the mean and
  spread of the real rewards so far, independent of the masks. Everything else runs as usual, so a
  pattern that also appears under the control was not learned from the rewards.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ...contract import Distributed
from .generator import Generator, GeneratorSample, MovingAverageBaseline, reinforce_loss

if TYPE_CHECKING:
    from .config import AttendOutConfig


#: Adam's moment decays for the rate logits. The rate's gradient (R - b) eps / sigma is heavy-tailed (a
#: product of two normal-ish numbers); with the usual beta2 0.999 one large game sets Adam's step size
#: for the rest of a short run (about 50 updates), so the second moment forgets over about 10 games.
RATE_BETAS = (0.9, 0.9)

#: One cached action as the update reads it: G's input (B, L, E), token validity (B, L), masks applied.
Action = tuple[torch.Tensor, torch.Tensor, dict[int, torch.Tensor]]


def rate_log_prob(rates: torch.Tensor, mean: torch.Tensor, std: float) -> torch.Tensor:
    """log N(rates; mean, std^2) summed over the last (layer) dimension: (..., n) -> (...); the
    log-probability of a game's rate action."""
    log_n = -0.5 * ((rates - mean) / std) ** 2 - math.log(std) - 0.5 * math.log(2 * math.pi)
    return log_n.sum(-1)


@dataclass
class RunningStats:
    """Mean and standard deviation of a stream of numbers (Welford's algorithm)."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0

    def add(self, value: float) -> None:
        self.count += 1
        delta = value - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (value - self.mean)

    @property
    def std(self) -> float:
        return math.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else 0.0


class GeneratorPolicy:
    """The Generator, its optimizer, the baseline, this game's exploration and the reward control."""

    def __init__(
        self,
        generator: Generator,
        config: AttendOutConfig,
        layers: Sequence[int],
        seed: int,
        distributed: Distributed | None = None,
    ) -> None:
        self.generator, self.config, self.layers = generator, config, list(layers)
        #: several processes: each caches its own batches' masks, the rewards are shared (every process
        #: scores the same samples with the same D and A), and the update averages the processes'
        #: gradients, so every process keeps the same Generator
        self.distributed = distributed or Distributed()
        self.optimizer = torch.optim.Adam(
            [
                {"params": [generator.layer_bias], "lr": config.rate_lr, "betas": RATE_BETAS},
                {"params": generator.pattern_parameters(), "lr": config.generator_lr},
            ]
        )
        self.baseline = MovingAverageBaseline(config.baseline_decay)
        self.real_rewards = RunningStats()
        self.rng = torch.Generator().manual_seed(seed)  # exploration and the control's draws
        self.updates = 0
        self.exploration = self._draw_exploration()

    def _draw_exploration(self) -> torch.Tensor:
        return torch.randn(self.generator.num_layers, generator=self.rng)  # (n,)

    def rates(self) -> torch.Tensor | None:
        """This game's rate logits (n,), detached (they are an action); None at ``rate_noise`` 0, where
        the rates are the mean ``layer_bias`` itself and learn through the masks' term."""
        if self.config.rate_noise == 0:
            return None
        bias = self.generator.layer_bias
        return (bias + self.config.rate_noise * self.exploration.to(bias.device)).detach()

    def sample(self, inputs: torch.Tensor, token_valid: torch.Tensor) -> GeneratorSample:
        """Masks for one training batch at this game's rates."""
        return self.generator.sample(inputs, token_valid, self.layers, self.rates())

    def learn(self, actions: Iterable[Action], count: int, rewards: torch.Tensor) -> dict[str, float]:
        """End a game: eq. 5 on its ``count`` cached ``actions`` with the per-sample ``rewards`` (E,), the
        baseline, a new exploration draw. Returns the game's statistics (real and used reward, loss)."""
        real = rewards.mean().item()
        self.real_rewards.add(real)
        if self.config.reward_control == "noise":
            rewards = self.noise_rewards(rewards)
        reward = rewards.mean().item()
        if self.config.pairing == "mean":
            action_rewards = torch.full((count,), reward)  # (T,)
        else:  # the paper's: the t-th cached action gets the t-th sample's reward (cycled if E < T)
            action_rewards = rewards[torch.arange(count) % len(rewards)].float()
        out = {"reward": real, "reward_used": reward, "exploration": self.exploration.abs().mean().item()}
        if self.baseline.count > 0:  # the first game only sets the baseline
            out["advantage"] = reward - self.baseline.value
            out["generator_loss"] = self._step(actions, count, reward, action_rewards)
            self.updates += 1
        self.baseline.update(reward)
        self.exploration = self._draw_exploration()
        return out

    def noise_rewards(self, rewards: torch.Tensor) -> torch.Tensor:
        """The control: the game's mean reward replaced by a normal draw with the mean and standard
        deviation of the real game rewards so far (this one included), the per-sample deviations from
        it permuted. Drawn, not shuffled across games: rewards arrive one game at a time and each game
        must update at once, and a draw needs no store of past games."""
        draw = self.real_rewards.mean + self.real_rewards.std * torch.randn((), generator=self.rng).item()
        deviations = rewards - rewards.mean()
        return draw + deviations[torch.randperm(len(rewards), generator=self.rng)]

    def _step(
        self, actions: Iterable[Action], count: int, reward: float, action_rewards: torch.Tensor
    ) -> float:
        """One Adam step on eq. 5; each action is back-propagated on its own to bound memory."""
        self.generator.train()
        self.optimizer.zero_grad(set_to_none=True)
        rates = self.rates()  # the rates this game's masks were drawn at
        total = 0.0
        if rates is not None:  # the game's one rate action
            log_p = rate_log_prob(rates, self.generator.layer_bias, self.config.rate_noise)
            loss = reinforce_loss(log_p[None], torch.tensor([reward]), self.baseline.value)
            loss.backward()
            total += loss.item()
        for (inputs, token_valid, masks), action_reward in zip(actions, action_rewards.tolist(), strict=True):
            log_p = self.generator.log_prob(inputs, token_valid, masks, rates).mean()
            loss = reinforce_loss(log_p[None], torch.tensor([action_reward]), self.baseline.value) / count
            loss.backward()
            total += loss.item()
        if self.distributed.world_size > 1:
            grads = []
            for p in self.generator.parameters():
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
                grads.append(p.grad)
            self.distributed.mean_(grads)
        self.optimizer.step()
        return total

    # resuming ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "generator": self.generator.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "baseline": (self.baseline.value, self.baseline.count),
            "real_rewards": (self.real_rewards.count, self.real_rewards.mean, self.real_rewards.m2),
            "rng": self.rng.get_state(),
            "exploration": self.exploration,
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.load_state_dict(state["generator"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline.value, self.baseline.count = state["baseline"]
        self.real_rewards = RunningStats(*state["real_rewards"])
        self.rng.set_state(state["rng"])
        self.exploration = state["exploration"]
        self.updates = state["updates"]
