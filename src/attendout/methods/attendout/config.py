"""The options of AttendOut, with their defaults and the reason for each."""

from __future__ import annotations

from dataclasses import dataclass

from ...typecheck import AT_LEAST_0, POSITIVE, Must, one_of, option
from ..config import INTEGER_AT_LEAST_1, PROBABILITY, MethodConfig, layers_field

#: ``validation_source`` of the games: the validation split carved from train
CARVED = "validation"

REWARDS = ("logprob", "correct", "metric")
PAIRINGS = ("mean", "sample")
REWARD_CONTROLS = ("none", "noise")
GENERATOR_EMBEDDINGS = ("attacker", "own")


@dataclass
class AttendOutConfig(MethodConfig):
    """AttendOut (paper 001 §4, Algorithm 1): a Generator learns per-sample scores masks for an Attacker.

    Trains a Defender (the model, default dropout) and an Attacker (a copy, plus the Generator's masks)
    on the same batches with ``none``'s hyperparameters; every ``dropout_steps`` steps both are scored,
    the Generator is updated by REINFORCE (eq. 5), and the one sampled by score is copied over the other.

    Choices the paper leaves open, and why the defaults:

    * games score the validation split carved from train, not dev (the paper's choice, offered as
      ``validation_source="dev"`` and then recorded in the run's config): dev stays unseen by every
      decision, as for model selection;
    * reward ``log p_A(gold) - log p_D(gold)`` per sample: two close models are almost always equally
      right or wrong on a sample, so a 0/1 correctness reward is mostly ties;
    * ``pairing="mean"``: the t-th validation sample has nothing to do with the t-th cached action, so
      the paper's pairing adds that sample's deviation from the game mean as noise to the action's
      reward; the mean keeps the expected reward and drops the noise (the rate's action is one per game
      and always gets the game's mean);
    * initial drop probability 0.1, the fixed rate of ``scores-dropout``: the Generator raises it where
      the Attacker gains. 0.5 (attendout 0.1's G-Net at sigmoid of scores near 0) drops half of every
      row, far above the 0.1-0.2 of fixed-rate attention dropout; on the offline MiniLM and full CoLA
      (2 epochs, seed 1) the Attacker then pulled the Defender it overwrites about half the games
      down with it: validation MCC 0.0 at every evaluation, against 0.27 for ``none``. The paper's
      Figure 3 rates (0.55-0.9) are where its RoBERTa runs went, not where they started;
    * the action is a per-layer drop rate, explored once per game, times G's attention pattern over
      each row (see :mod:`.generator`): a game gives one reward, and independent units spread it over
      ~66k Bernoulli draws per layer whose realised rate varies by ~0.001 between games, so the old
      per-unit estimator could not tell a rate that pays from noise (the planted-signal test);
    * the winner is sampled in units of the score gap's standard error (``reinit_temperature``): in
      the score's own units a fixed temperature made the choice a coin flip on small gaps;
    * ``reward_control="noise"`` runs the same game with rewards that ignore the masks: the control
      any claim that the Generator learned needs beside it;
    * the Generator reads the Attacker's embedding output (see :mod:`.strategy` for why);
    * one default set for every task: the paper tuned T per task on dev, we do not.
    """

    summary = "AttendOut: a learned Generator drops Attacker scores; Defender/Attacker game (001 §4)"

    dropout_steps: int = option(
        10,
        "training steps between games (the paper's T, tuned per task there): enough for the "
        "two models to diverge, few enough for >= 20 Generator updates on small tasks",
        must=INTEGER_AT_LEAST_1,
    )
    eval_samples: int = option(
        64,
        "validation samples each game scores (the paper's T again); two no-grad forwards of "
        "64 samples are a small fraction of the cost of the 10 training steps between games",
        must=INTEGER_AT_LEAST_1,
    )
    validation_source: str = option(
        CARVED,
        "samples the games score: 'validation' (split carved from train, default: dev stays "
        "unseen by every decision) or the name of an evaluation split, e.g. 'dev' (the paper's choice)",
    )
    reward: str = option(
        "logprob",
        "per-sample reward: 'logprob' = log p_A(gold) - log p_D(gold) (default; minus squared "
        "error for regression), 'correct' = difference of 0/1 correctness (ties almost always), "
        "'metric' = difference of the task's main metric on the game's samples (one per game)",
        must=one_of(REWARDS),
    )
    pairing: str = option(
        "mean",
        "reward of each cached action: 'mean' = the game's mean reward (default, lower "
        "variance) or 'sample' = the t-th validation sample's reward (the paper's pairing)",
        must=one_of(PAIRINGS),
    )
    generator_width: int = option(
        64,
        "width of the Generator's one attention head (64: with the Attacker's embeddings, G is "
        "about 1/500 of MiniLM, 1/2000 of RoBERTa-base)",
        must=INTEGER_AT_LEAST_1,
    )
    generator_embeddings: str = option(
        "attacker",
        "what G reads: 'attacker' = the Attacker's embedding output, detached (default: a small "
        "G), or 'own' = G's own copy of the embedding block, trained with G, as the paper's Generator "
        "(with generator_width = the hidden size, 1/3 of RoBERTa-base: the paper's scale)",
        must=one_of(GENERATOR_EMBEDDINGS),
    )
    temperature: float = option(
        1.0,
        "temperature of G's softmax over keys, which places a layer's drops in a row: higher "
        "spreads them evenly (plain scores dropout), lower piles them on G's favourite keys",
        must=POSITIVE,
    )
    init_drop: float = option(
        0.1,
        "initial drop probability of every unit, set through the G-Net's output bias: "
        "scores-dropout's fixed rate, for the Generator to raise where it pays (0.5, an "
        "untrained G-Net's natural start, kept MiniLM at the majority class on CoLA)",
        must=Must(lambda value: 0 < value < 1, "in (0, 1)"),
    )
    rate_noise: float = option(
        0.5,
        "standard deviation of each layer's rate logit around its mean, drawn once per game: the "
        "exploration that lets one reward per game tell rates apart (0.5 spreads 0.1 to about 0.06-0.16); "
        "0 = no exploration, rates learn through the masks' term alone (attendout 0.1's estimator)",
        must=AT_LEAST_0,
    )
    rate_lr: float = option(
        0.1,
        "Adam learning rate of the per-layer mean rate logits (one step per game): 50 games "
        "whose rewards agree move a rate from 0.1 to about 0.4 (the planted-signal test); rewards that "
        "ignore the masks random-walk the rates by about +-0.7 logit in 50 games (0.1 -> 0.05-0.18): "
        "what the control run shows",
        must=POSITIVE,
    )
    generator_lr: float = option(
        3e-3,
        "Adam learning rate of the drop pattern's parameters (G-Net's attention; one step per "
        "game). The pattern's signal is spread over every unit, so its updates are mostly noise: "
        "kept small so that it cannot wander far",
        must=POSITIVE,
    )
    reward_control: str = option(
        "none",
        "'noise' = the control run: each game's reward is replaced by a draw with the mean and "
        "spread of the real rewards so far, independent of the masks (the game, the re-initialisation "
        "and the log are unchanged). A pattern that the control shows too was not learned",
        must=one_of(REWARD_CONTROLS),
    )
    baseline_decay: float = option(
        0.9,
        "decay of the moving-average baseline b of eq. 5 (~10 games); b starts at the first "
        "game's mean reward, and that game updates only b",
        must=PROBABILITY,
    )
    reinit_temperature: float = option(
        1.0,
        "the winner is sampled with P(A) = sigmoid(z / this), z = (s_A - s_D) / its standard "
        "error over the game's samples: a model ahead by one standard error is kept with probability "
        "0.73, by two 0.88; 0 = the better always wins (the paper's 'straightforward strategy')",
        must=AT_LEAST_0,
    )
    layers: list[int] | None = layers_field()

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.reward == "metric" and self.pairing == "sample":
            raise ValueError(
                f"{self.name}: reward 'metric' is one number per game; pairing must be 'mean', got 'sample'"
            )
        if not self.validation_source:
            raise ValueError(f"{self.name}: validation_source is empty; use 'validation' or a split name")
