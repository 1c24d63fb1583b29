"""The Defender/Attacker game of AttendOut as pure functions (paper 001 §4.1-4.2, Algorithm 1 lines 6-9).

Every ``dropout_steps`` steps the Defender D and the Attacker A score the same validation samples; the
functions here turn those scores into the game's decisions, with no model, optimizer or cache in sight
(:class:`~.strategy.AttendOutStrategy` runs the models and keeps the state):

* **Scoring a round.** :func:`batch_scores` reads one batch's logits into per-sample scores (the gold
  label's log-probability, 0/1 correctness, minus the squared error...) and :func:`collect_scores`
  assembles a model's batches into its :class:`GameScores`; :func:`perplexity` is a generation
  round's metric.
* **The rewards.** :func:`sample_rewards`: the Generator's reward of each sample, A's score minus D's,
  positive exactly when A did better (eq. 5's ``r_t``).
* **The winner.** :func:`score_gap` measures A's lead over D in standard errors; :func:`attacker_probability`
  and :func:`pick_winner` sample which of the two re-initialises both (the better one more often);
  :func:`attacker_leads` is the plain comparison that picks the model to evaluate between games.
  :class:`GameOutcome` holds one game's decision and the statistics it logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ...tasks import compute_metrics
from ...tasks.metrics import sequences_array

#: The reward kinds: the gold label's log-probability, 0/1 correctness, and the task's main metric.
LOGPROB, CORRECT, METRIC = "logprob", "correct", "metric"


@dataclass
class GameScores:
    """One model's results on a game's samples."""

    per_sample: torch.Tensor  # (E,) the reward kind's score of each sample
    metric: float  # the task's main metric on the samples
    predictions: np.ndarray | None = None  # (E,) for the metric's standard error
    labels: np.ndarray | None = None  # (E,)

    def game_score(self, reward: str) -> float:
        """The number D and A are compared by: the main metric for reward 'metric', else the mean score."""
        return self.metric if reward == METRIC else self.per_sample.mean().item()


# scoring a round ------------------------------------------------------------------------------------
def batch_scores(
    logits: torch.Tensor, labels: torch.Tensor, kind: str, reward: str
) -> tuple[torch.Tensor, list[Any], list[Any]]:
    """One batch's (per-sample scores (b,), predictions, gold labels) for the game.

    By the logits' shape: regression ``(b, 1)``, minus the squared error; token classification
    ``(b, L, T)`` with labels ``(b, L)`` (-100 off the words), the mean log-probability of the gold tags
    of the sample's words (reward 'correct': the share of words tagged right), predictions and golds
    one list of tags per sample; classification ``(b, C)`` or multiple choice ``(b, options)``, the gold
    label's (option's) log-probability (reward 'correct': 1 if predicted, else 0). Predictions and golds
    of the other kinds are one CPU tensor each, for :func:`collect_scores` to concatenate.
    """
    if kind == "regression":
        values = logits.squeeze(-1)  # (b,)
        return -((values - labels) ** 2), [values.cpu()], [labels.cpu()]
    log_p = torch.log_softmax(logits, dim=-1)
    predicted = log_p.argmax(-1)
    if logits.dim() == 3:  # token classification: (b, L, T), labels (b, L) with -100 off words
        words = labels >= 0
        if reward == CORRECT:
            hits = (predicted == labels) & words
        else:
            hits = log_p.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1) * words
        per_sample = hits.float().sum(1) / words.sum(1).clamp(min=1)
        predictions = [predicted[row][words[row]].tolist() for row in range(len(labels))]
        golds = [labels[row][words[row]].tolist() for row in range(len(labels))]
        return per_sample, predictions, golds
    if reward == CORRECT:  # classification (b, C) or multiple choice (b, options)
        per_sample = (predicted == labels).float()
    else:
        per_sample = log_p.gather(1, labels[:, None]).squeeze(1)
    return per_sample, [predicted.cpu()], [labels.cpu()]


def collect_scores(
    per_sample: list[torch.Tensor], predictions: list[Any], golds: list[Any], task: Any
) -> GameScores:
    """A model's :class:`GameScores` from its batches' :func:`batch_scores`: the per-sample scores in one
    tensor, the task's main metric on all the predictions (NaN read as 0)."""
    if task.kind == "token_classification":
        preds, gold = sequences_array(predictions), sequences_array(golds)
    else:
        preds, gold = torch.cat(predictions).numpy(), torch.cat(golds).numpy()
    metric = compute_metrics(task, list(preds) if task.kind == "token_classification" else preds, gold)
    return GameScores(torch.cat(per_sample).cpu(), float(np.nan_to_num(metric[task.metrics[0]])), preds, gold)


def perplexity(log_likelihoods: list[torch.Tensor], counts: list[torch.Tensor]) -> float:
    """Per-token perplexity of a generation round: ``exp(-sum_i ll_i n_i / sum_i n_i)`` over the samples'
    mean gold-token log-likelihoods ``ll_i`` and scored-token counts ``n_i`` (one (b,) tensor a batch)."""
    tokens = torch.cat(counts).sum().clamp(min=1)
    weighted = [likelihood * count for likelihood, count in zip(log_likelihoods, counts, strict=True)]
    return torch.exp(-torch.cat(weighted).sum() / tokens).item()


# the rewards --------------------------------------------------------------------------------------
def sample_rewards(defender: GameScores, attacker: GameScores, reward: str) -> torch.Tensor:
    """The Generator's reward of each of the game's samples (E,): A's score minus D's, so positive exactly
    where A did better (a higher log-probability of the gold label: a lower loss) and 0 on a tie; for
    reward 'metric', the gap of the main metric, the same for every sample."""
    if reward == METRIC:
        return torch.full((len(defender.per_sample),), attacker.metric - defender.metric)
    return attacker.per_sample - defender.per_sample  # (E,)


# the winner ---------------------------------------------------------------------------------------
def score_gap(
    defender: GameScores, attacker: GameScores, reward: str, task: Any, rng: torch.Generator, draws: int = 200
) -> tuple[float, float]:
    """A's score minus D's on one game's samples, and the gap's standard error over those samples.

    Both models score the same samples, so the error is that of the paired per-sample differences
    (std / sqrt(E)); for reward 'metric' (one number, not a mean) it is the standard deviation of the
    metric gap over ``draws`` paired bootstrap resamples of the samples, drawn from ``rng``.
    """
    gap = attacker.game_score(reward) - defender.game_score(reward)
    if reward != METRIC:
        differences = attacker.per_sample - defender.per_sample  # (E,)
        count = len(differences)
        return gap, (differences.std().item() / count**0.5) if count > 1 else 0.0
    if defender.predictions is None or attacker.predictions is None:
        raise ValueError("score_gap: reward 'metric' needs the models' predictions on the game's samples")
    labels, count = defender.labels, len(defender.labels)
    metric = task.metrics[0]
    gaps = []
    for _ in range(draws):
        rows = torch.randint(0, count, (count,), generator=rng).numpy()
        a = compute_metrics(task, _rows(attacker.predictions, rows), _rows(labels, rows))[metric]
        d = compute_metrics(task, _rows(defender.predictions, rows), _rows(labels, rows))[metric]
        gaps.append(float(np.nan_to_num(a)) - float(np.nan_to_num(d)))
    return gap, float(np.std(gaps))


def _rows(values: np.ndarray, rows: np.ndarray) -> Any:
    """``values[rows]``; per-sample lists (token tags) as a list, as the metrics take them."""
    picked = values[rows]
    return list(picked) if picked.dtype == object else picked


def attacker_probability(gap: float, error: float, temperature: float) -> float:
    """P(A re-initialises both) = sigmoid(z / temperature), z = gap / error (A's lead in standard errors);
    temperature 0, or no error to measure, gives the better one for sure (a tie keeps D)."""
    if temperature == 0 or error <= 0:
        return float(gap > 0)
    return torch.sigmoid(torch.tensor(gap / error / temperature)).item()


def pick_winner(gap: float, error: float, temperature: float, draw: float) -> tuple[bool, float]:
    """(keep A, probability with which the better of the two is kept) for a uniform ``draw`` in [0, 1):
    A is kept when ``draw < attacker_probability(gap, error, temperature)``."""
    p_attacker = attacker_probability(gap, error, temperature)
    p_keep_better = p_attacker if gap > 0 else 1 - p_attacker
    return draw < p_attacker, p_keep_better


def attacker_leads(defender_score: float, attacker_score: float) -> bool:
    """Whether A is the better model to evaluate: a strictly higher game score (a tie keeps D)."""
    return attacker_score > defender_score


@dataclass(frozen=True)
class GameOutcome:
    """One game's decision: both scores, A's lead and its standard error, and which model was kept."""

    defender_score: float
    attacker_score: float
    gap: float
    error: float
    keep_attacker: bool
    p_keep_better: float

    @property
    def attacker_won(self) -> bool:
        """A scored higher than D (the win counted in the win rate, whichever model is kept)."""
        return self.gap > 0

    @property
    def z(self) -> float:
        """A's lead in standard errors (0 where there is no error to measure)."""
        return self.gap / self.error if self.error > 0 else 0.0

    def statistics(self) -> dict[str, float]:
        """The numbers a game logs (under ``attendout/``), averaged over the games between two logs."""
        return {
            "score_defender": self.defender_score,
            "score_attacker": self.attacker_score,
            "score_gap_z": self.z,
            "p_keep_better": self.p_keep_better,
            "kept_attacker": float(self.keep_attacker),
        }
