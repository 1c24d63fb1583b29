"""AttendOut's game as pure functions (paper 001 §4.2): scores, rewards, the gap, the winner. No model."""

from __future__ import annotations

import math

import pytest
import torch

from attendout.methods.attendout.game import (
    GameOutcome,
    GameScores,
    attacker_leads,
    attacker_probability,
    batch_scores,
    perplexity,
    pick_winner,
    sample_rewards,
    score_gap,
)


def losses_as_scores(losses: list[float]) -> GameScores:
    """A model's game scores as reward 'logprob' reads them: the gold label's log-probability, -loss."""
    return GameScores(-torch.tensor(losses), 0.0)


def test_a_reward_is_positive_exactly_where_the_attackers_loss_is_below_the_defenders():
    defender = losses_as_scores([0.7, 0.7, 0.7, 1.2])
    attacker = losses_as_scores([0.2, 0.7, 1.5, 1.1])
    rewards = sample_rewards(defender, attacker, "logprob")
    torch.testing.assert_close(rewards, torch.tensor([0.5, 0.0, -0.8, 0.1]))
    below = -attacker.per_sample < -defender.per_sample  # A's loss below D's
    assert torch.equal(rewards > 0, below)
    assert rewards[1] == 0  # a tie is neither rewarded nor punished


def test_reward_metric_gives_every_sample_the_gap_of_the_main_metric():
    defender = GameScores(torch.zeros(3), 0.6)
    attacker = GameScores(torch.ones(3), 0.75)  # per-sample scores play no part
    torch.testing.assert_close(sample_rewards(defender, attacker, "metric"), torch.full((3,), 0.15))


def test_the_gap_is_the_attackers_lead_with_the_error_of_paired_differences():
    defender = GameScores(torch.tensor([-1.0, -1.0, -2.0, -2.0]), 0.0)
    attacker = GameScores(torch.tensor([-0.5, -1.0, -1.0, -2.5]), 0.0)
    gap, error = score_gap(defender, attacker, "logprob", task=None, rng=torch.Generator())
    differences = torch.tensor([0.5, 0.0, 1.0, -0.5])
    assert gap == pytest.approx(0.25)
    assert error == pytest.approx(differences.std().item() / 2)
    one = score_gap(GameScores(torch.zeros(1), 0.0), GameScores(torch.ones(1), 0.0), "logprob", None, None)
    assert one == (1.0, 0.0)  # one sample: no spread to measure


def test_the_attacker_is_kept_with_the_sigmoid_of_its_lead_in_standard_errors():
    assert attacker_probability(0.02, 0.01, 1.0) == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert attacker_probability(0.02, 0.01, 2.0) == pytest.approx(0.5 + 0.5 * math.tanh(0.5))  # sigmoid(1)
    assert attacker_probability(-0.02, 0.01, 1.0) == pytest.approx(1 - attacker_probability(0.02, 0.01, 1.0))
    assert attacker_probability(0.0, 0.01, 1.0) == pytest.approx(0.5)  # a tie: a coin toss
    # temperature 0 or no error to measure: the better one for sure, and a tie keeps the Defender
    assert attacker_probability(0.001, 0.01, 0.0) == 1.0 and attacker_probability(-0.001, 0.01, 0.0) == 0.0
    assert attacker_probability(0.0, 0.01, 0.0) == 0.0 and attacker_probability(0.3, 0.0, 1.0) == 1.0


def test_the_winner_is_the_attacker_exactly_when_the_draw_is_below_its_probability():
    p = attacker_probability(0.02, 0.01, 1.0)  # 0.88
    assert pick_winner(0.02, 0.01, 1.0, draw=p - 1e-6) == (True, pytest.approx(p))
    assert pick_winner(0.02, 0.01, 1.0, draw=p + 1e-6) == (False, pytest.approx(p))
    keep, p_better = pick_winner(-0.02, 0.01, 1.0, draw=0.5)  # D ahead: kept with 0.88, the better
    assert keep is False and p_better == pytest.approx(p)
    assert pick_winner(0.0, 0.01, 0.0, draw=0.0) == (False, 1.0)  # a tie at temperature 0 keeps D


def test_the_model_evaluated_between_games_is_the_attacker_only_when_strictly_ahead():
    assert attacker_leads(defender_score=0.5, attacker_score=0.6)
    assert not attacker_leads(defender_score=0.5, attacker_score=0.5)
    assert not attacker_leads(defender_score=0.5, attacker_score=0.4)


def test_a_game_outcome_logs_the_lead_in_standard_errors_and_counts_a_win_by_the_gap():
    outcome = GameOutcome(-0.9, -0.6, gap=0.3, error=0.1, keep_attacker=False, p_keep_better=0.95)
    assert outcome.attacker_won and outcome.z == pytest.approx(3.0)
    assert outcome.statistics() == {
        "score_defender": -0.9,
        "score_attacker": -0.6,
        "score_gap_z": pytest.approx(3.0),
        "p_keep_better": 0.95,
        "kept_attacker": 0.0,
    }
    tie = GameOutcome(0.5, 0.5, gap=0.0, error=0.0, keep_attacker=False, p_keep_better=1.0)
    assert not tie.attacker_won and tie.z == 0.0
    unmeasured = GameOutcome(0.5, 0.7, gap=0.2, error=0.0, keep_attacker=True, p_keep_better=1.0)
    assert unmeasured.attacker_won and unmeasured.z == 0.0  # no error to measure the lead in


def test_classification_scores_are_the_gold_log_probability_or_correctness():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 1.0, 3.0]])
    labels = torch.tensor([0, 1])
    scores, predictions, golds = batch_scores(logits, labels, "classification", "logprob")
    torch.testing.assert_close(scores, torch.log_softmax(logits, -1)[[0, 1], [0, 1]])
    assert torch.equal(predictions[0], torch.tensor([0, 2])) and torch.equal(golds[0], labels)
    correct, _, _ = batch_scores(logits, labels, "classification", "correct")
    torch.testing.assert_close(correct, torch.tensor([1.0, 0.0]))


def test_regression_scores_are_minus_the_squared_error():
    scores, predictions, _ = batch_scores(
        torch.tensor([[1.0], [2.5]]), torch.tensor([1.5, 2.5]), "regression", "logprob"
    )
    torch.testing.assert_close(scores, torch.tensor([-0.25, 0.0]))
    torch.testing.assert_close(predictions[0], torch.tensor([1.0, 2.5]))


def test_token_scores_average_over_the_samples_words_only():
    logits = torch.zeros(1, 4, 2)
    logits[0, 0, 1] = logits[0, 2, 0] = 5.0  # word 0 tagged 1, word 1 tagged 0; position 1 is no word
    labels = torch.tensor([[1, -100, 1, -100]])
    scores, predictions, golds = batch_scores(logits, labels, "token_classification", "correct")
    assert scores.tolist() == [0.5] and predictions == [[1, 0]] and golds == [[1, 1]]
    log_p, _, _ = batch_scores(logits, labels, "token_classification", "logprob")
    expected = (torch.log_softmax(logits[0, 0], -1)[1] + torch.log_softmax(logits[0, 2], -1)[1]) / 2
    torch.testing.assert_close(log_p, expected[None])


def test_perplexity_weights_each_sample_by_its_scored_tokens():
    # two samples: 3 tokens at log-likelihood log(1/4), 1 token at log(1/2)
    likelihoods = [torch.tensor([math.log(0.25)]), torch.tensor([math.log(0.5)])]
    counts = [torch.tensor([3]), torch.tensor([1])]
    expected = math.exp(-(3 * math.log(0.25) + math.log(0.5)) / 4)
    assert perplexity(likelihoods, counts) == pytest.approx(expected)
    assert perplexity([torch.tensor([math.log(0.1)])], [torch.tensor([0])]) == pytest.approx(1.0)  # no token
