"""How any training loop trains with AttendOut: the Defender/Attacker game of Algorithm 1.

Per training step (paper 001 §4.2, Algorithm 1 lines 2-5):

1. the Defender D (the loop's model, with the model's default dropout) takes the loop's own optimizer
   step on the batch (attendout's loop: AdamW with a linear schedule; transformers' Trainer: its own);
2. the Generator G reads the Attacker's embedding output for the batch (detached, no gradient) and
   samples one scores mask per layer; the Attacker A (a deep copy of D) takes a step on the same batch
   with those masks (eq. 3), with its own optimizer and schedule made by the loop's recipe
   (``LoopContext.make_optimizer``) in :meth:`AttendOutStrategy.after_step`;
3. the batch's inputs and the masks actually applied are cached.

Every ``dropout_steps`` steps, a game (lines 6-9): D and A score ``eval_samples`` samples of the
validation source; the rewards update G by REINFORCE with a moving-average baseline (eq. 5) through
:class:`~.policy.GeneratorPolicy`: on the game's explored rates and on the log-probabilities of the
cached masks recomputed from the cached inputs (the first game only sets the baseline, see
:class:`~.generator.MovingAverageBaseline`); then D or A is sampled with probability
``sigmoid(z / reinit_temperature)``, ``z`` the score gap in standard errors, and its weights,
optimizer state and schedule position are copied over the other; the cache is released.

The game's rules (scores, rewards, the gap, the winner) are pure functions in :mod:`.game`; setting up
G, its layers and the games' data is :mod:`.players`; scoring a model in a game, :mod:`.scoring`; the
logged statistics, :mod:`.stats`. This module runs the models, the optimizers and the cache.

**What G reads, and why the embedding output.** The masks of every layer are sampled in one pass
before A's forward, so A runs unchanged through the hook; G's decisions for layer i do not depend
on A's own (masked) computation of the layers below; and eq. 5 can recompute the log-probabilities
from the cached token ids (one embedding lookup), where per-layer hidden states would need A's full
forward again or a cache of n x B x L x H floats. The embedding output (word + position + segment,
normalised) carries the tokens and their positions, which is what G's own attention layers need.
It is computed in eval mode (no embedding dropout), so the recomputation at the game sees the same
inputs as the sampling did, up to the change of A's embeddings over at most ``dropout_steps`` steps.

**Generation.** On ``lm`` and ``seq2seq`` the reward is the Attacker's mean log-likelihood of a
sample's gold next tokens minus the Defender's (:func:`attendout.methods.nexttoken.label_log_likelihood`),
on the carved validation split; reward 'metric' is refused (BLEU would need every game to generate).
G masks the self-attention over the input tokens: every layer of a causal LM (the hook keeps the
drops causal), the encoder's layers of an encoder-decoder (the decoder's self-attention runs over the
target, which G does not read; asking for its layers is an error). Cross-attention is never touched.

**Cost.** Two models and two optimizer states (about 2x the memory of the weights), two training
passes per step, a small G, and a cache of ``dropout_steps`` x B x n x L x L booleans (the masks).
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ...attention import AttentionEdit, install
from ...contract import ForwardEdits, LoopContext, StepInfo
from ...core.optim import concat_batches, rows_of, update
from ...tasks import LM, SEQ2SEQ
from ...tasks.core import task_of
from ..base import TrainingStrategy
from ..nexttoken import generation_kind
from .game import (
    GameOutcome,
    GameScores,
    attacker_leads,
    pick_winner,
    sample_rewards,
    score_gap,
)
from .generator import embed_in_eval
from .method import MaskSlot
from .players import make_generator, masked_layers, validation_source
from .policy import GeneratorPolicy
from .scoring import score_classifier, score_generation
from .stats import StepStatistics

if TYPE_CHECKING:
    from .config import AttendOutConfig


MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass
class CachedAction:
    """One training step's action: the batch's inputs (on the device) and the masks applied to A."""

    inputs: dict[str, torch.Tensor]
    masks: dict[int, torch.Tensor]  # layer -> (B, L, L) bool, True = dropped


def copy_optimizer_state(source: torch.optim.Optimizer, target: torch.optim.Optimizer) -> None:
    """Copy ``source``'s state (moments, step counts) and group hyperparameters into ``target``, in place.

    The two optimizers must hold parameters of the same shapes in the same order (two copies of one
    model). Tensors are copied, never shared, so the two optimizers stay independent afterwards.
    """
    for source_group, target_group in zip(source.param_groups, target.param_groups, strict=True):
        for key, value in source_group.items():
            if key != "params":
                target_group[key] = copy.deepcopy(value)
        for p_source, p_target in zip(source_group["params"], target_group["params"], strict=True):
            state = source.state.get(p_source)
            if not state:
                target.state.pop(p_target, None)
                continue
            target_state = target.state[p_target]
            for key, value in state.items():
                if torch.is_tensor(value):
                    old = target_state.get(key)
                    if torch.is_tensor(old) and old.shape == value.shape and old.dtype == value.dtype:
                        old.copy_(value)
                    else:
                        target_state[key] = value.detach().clone()
                else:
                    target_state[key] = copy.deepcopy(value)


class AttendOutStrategy(TrainingStrategy):
    """Trains a Defender and an Attacker and plays the game every ``dropout_steps`` steps.

    The Defender D is the loop's model, trained by the loop with its optimizer (plain fine-tuning:
    D's forwards get no edits). After each of the loop's optimizer steps, :meth:`after_step` trains
    the Attacker A on the same batch under G's masks and, every ``dropout_steps`` steps, plays a game.
    After :meth:`start`: ``defender``, ``attacker``, ``generator``, A's ``optimizer`` and ``scheduler``.
    """

    config: AttendOutConfig
    needs = ("optimizer", "make_optimizer", "validation")

    def attach(self, model: nn.Module, *, max_length: int | None = None) -> None:
        self.model = self.defender = model  # D runs stock attention: no hook, no method

    def start(self, loop: LoopContext) -> None:
        super().start(loop)
        config = self.config
        task = loop.task
        kind = task.kind if task is not None else None
        self.generation = kind if kind in (LM, SEQ2SEQ) else generation_kind(self.defender)
        if self.generation is not None and config.reward == "metric":
            raise ValueError(
                f"attendout: reward 'metric' is not defined on a {self.generation} task (BLEU would need every "
                "game to generate, and perplexity is the exponential of what reward 'logprob' measures): use "
                "reward 'logprob' (the mean log-likelihood of the gold tokens) or 'correct'"
            )
        self.attacker: nn.Module = copy.deepcopy(self.defender)
        controller = install(self.attacker)
        controller.add(MaskSlot(config.layers))  # checks that the layers exist; guards A's forwards
        self.layers = masked_layers(config, self.generation, controller, self.attacker)

        self.defender_optimizer, self.defender_scheduler = loop.optimizer, loop.scheduler
        self.optimizer, self.scheduler = loop.make_optimizer(self.attacker)
        self.scaler = torch.amp.GradScaler(loop.device.type, enabled=loop.autocast_dtype == torch.float16)

        self.generator, self.embeddings, self.generator_share = make_generator(
            config, self.attacker, self.defender, controller.num_layers, loop.device
        )
        self._embedding_args = set(inspect.signature(self.embeddings.forward).parameters)
        self.policy = GeneratorPolicy(
            self.generator, config, self.layers, seed=loop.seed + 2, distributed=loop.distributed
        )
        self.attacker_train = loop.wrap(self.attacker)  # DDP in several processes: A's gradients averaged

        self.task = task if task is not None else task_of(self.defender)
        if config.reward == "correct" and self.task.kind == "regression":
            raise ValueError(
                f"attendout: reward 'correct' needs labels to be right or wrong; {self.task.name!r} is regression"
            )
        self.source = validation_source(config, loop)
        self.rng = torch.Generator().manual_seed(loop.seed + 1)  # the games' samples and the winner draws
        judge_order = torch.randperm(
            len(loop.validation), generator=torch.Generator().manual_seed(loop.data_seed)
        )
        self.judge_indices = judge_order[: config.eval_samples].tolist()

        self.cache: list[CachedAction] = []
        self.steps_since_game = 0
        self.steps_done = 0
        self.games = self.attacker_wins = 0
        self._chosen: nn.Module = self.defender
        self._chosen_at: int | None = None
        self.statistics = StepStatistics()

    # training ---------------------------------------------------------------------------------
    def after_step(self, micro_batches: list[dict[str, torch.Tensor]], step: StepInfo) -> None:
        """A's step on D's batch under G's masks; a game every ``dropout_steps`` steps."""
        loop = self.started()
        batch = {k: v.to(loop.device) for k, v in concat_batches(micro_batches).items()}
        # The encoder's rows: multiple choice's (B, C, L) inputs are B * C sequences to the encoder.
        inputs = {k: batch[k].reshape(-1, batch[k].shape[-1]) for k in MODEL_INPUTS if k in batch}
        per_example = rows_of(inputs) // rows_of(batch)  # encoder rows per example (C, or 1)
        token_valid = inputs["attention_mask"].bool()  # (B, L)
        sample = self.policy.sample(self.generator_input(inputs), token_valid)
        sizes = [rows_of(part) for part in micro_batches]
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        parts = [{k: v[a : a + n] for k, v in batch.items()} for a, n in zip(starts, sizes, strict=True)]

        def attacker_edits(part: dict[str, torch.Tensor], rows: slice) -> dict[str, Any]:
            rows = slice(rows.start * per_example, rows.stop * per_example)
            edits = {
                layer: AttentionEdit(drop_scores=mask[rows][:, None])  # (b, 1, L, L): every head alike
                for layer, mask in sample.masks.items()
            }
            return ForwardEdits(edits, driver="attendout").kwargs()

        self.attacker.train()
        attacker_loss = update(
            self.attacker_train,
            parts,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            scaler=self.scaler,
            loop=loop,
            forward_kwargs=attacker_edits,
            failure=lambda loss: f"the Attacker's loss is {loss.item()} at step {step.step + 1}",
        )

        self.cache.append(CachedAction(inputs, sample.masks))
        self.statistics.record_step(sample, attacker_loss)
        self.steps_done += 1
        self.steps_since_game += 1
        if self.steps_since_game >= self.config.dropout_steps:
            self.play()

    @torch.no_grad()
    def generator_input(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor | dict[str, torch.Tensor]:
        """(B, L, E) the Attacker's embedding output in eval mode (no dropout), detached; with
        ``generator_embeddings="own"``, the token inputs themselves, which G embeds with its own block."""
        kwargs = {k: v for k, v in inputs.items() if k in self._embedding_args and k != "attention_mask"}
        tokens = {**kwargs, "input_ids": inputs["input_ids"]}
        return tokens if self.generator.embeddings is not None else embed_in_eval(self.embeddings, tokens)

    # the game ---------------------------------------------------------------------------------
    def play(self) -> None:
        """Score D and A, update G by eq. 5, re-initialise from the sampled winner, release the cache."""
        reward = self.config.reward
        order = torch.randperm(len(self.source), generator=self.rng)
        indices = order[: self.config.eval_samples].tolist()
        defender = self.score(self.defender, self.source, indices)
        attacker = self.score(self.attacker, self.source, indices)
        actions = (
            (self.generator_input(a.inputs), a.inputs["attention_mask"].bool(), a.masks) for a in self.cache
        )
        learned = self.policy.learn(actions, len(self.cache), sample_rewards(defender, attacker, reward))
        gap, error = score_gap(defender, attacker, reward, self.task, self.rng)
        keep_attacker, p_keep_better = self.pick_attacker(gap, error)
        outcome = GameOutcome(
            defender.game_score(reward), attacker.game_score(reward), gap, error, keep_attacker, p_keep_better
        )
        self.games += 1
        self.attacker_wins += int(outcome.attacker_won)
        self.reinitialise(outcome.keep_attacker)
        self.cache.clear()
        self.steps_since_game = 0
        self.statistics.add(learned)
        self.statistics.add(outcome.statistics())

    @torch.no_grad()
    def score(self, model: nn.Module, data: Any, indices: list[int]) -> GameScores:
        """``model``'s per-sample score (reward kind) and main metric on ``data[indices]``, in eval mode.

        Per-sample scores by task kind: see :func:`~.game.batch_scores`; generation (``lm``,
        ``seq2seq``), the mean log-likelihood of the sample's gold next tokens ('correct': the share
        predicted right), with ``metric`` the per-token perplexity of the samples.
        """
        if self.generation is not None:
            return score_generation(model, data, indices, self.loop, self.generation, self.config.reward)
        return score_classifier(model, data, indices, self.loop, self.task, self.config.reward)

    def pick_attacker(self, gap: float, error: float) -> tuple[bool, float]:
        """Sample the winner by :func:`~.game.pick_winner` with a draw of the games' generator: whether A
        is kept, and the probability with which the better of the two was kept."""
        draw = torch.rand(1, generator=self.rng).item()
        return pick_winner(gap, error, self.config.reinit_temperature, draw)

    def reinitialise(self, keep_attacker: bool) -> None:
        """Copy the kept model's weights, optimizer state and schedule position over the other."""
        models = (self.defender, self.attacker)
        optimizers = (self.defender_optimizer, self.optimizer)
        schedulers = (self.defender_scheduler, self.scheduler)
        src, dst = (1, 0) if keep_attacker else (0, 1)
        with torch.no_grad():
            models[dst].load_state_dict(models[src].state_dict())
        copy_optimizer_state(optimizers[src], optimizers[dst])
        if schedulers[src] is not None and schedulers[dst] is not None:
            schedulers[dst].load_state_dict(schedulers[src].state_dict())

    # resuming ---------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """A, G, their optimizers, the baseline, the games' generator, the cached actions, counters.

        D (the loop's model), its optimizer and schedule are in the loop's own checkpoint.
        """
        return {
            "attacker": self.attacker.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": None if self.scheduler is None else self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "policy": self.policy.state_dict(),
            "rng": self.rng.get_state(),
            "cache": [(action.inputs, action.masks) for action in self.cache],
            "counters": (self.steps_since_game, self.games, self.attacker_wins, self.steps_done),
            "chosen": ("attacker" if self._chosen is self.attacker else "defender", self._chosen_at),
            "window": self.statistics.state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.attacker.load_state_dict(state["attacker"])
        self.optimizer.load_state_dict(state["optimizer"])
        if self.scheduler is not None:
            self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.policy.load_state_dict(state["policy"])
        self.rng.set_state(state["rng"])
        self.cache = [CachedAction(inputs, masks) for inputs, masks in state["cache"]]
        self.steps_since_game, self.games, self.attacker_wins, self.steps_done = state["counters"]
        chosen, self._chosen_at = state["chosen"]
        self._chosen = self.attacker if chosen == "attacker" else self.defender
        self.statistics.load(state["window"])

    # the loop's other calls -------------------------------------------------------------------
    def stats(self) -> dict[str, float]:
        """Mean drop probability per layer since the last call, at the policy's mean rates (Figure 3) and at
        the games' explored rates, and the games' statistics."""
        out = self.statistics.take()
        if self.games:
            out["attendout/games"] = self.games
            out["attendout/generator_updates"] = self.policy.updates  # games - 1: the first sets b
            out["attendout/win_rate"] = self.attacker_wins / self.games  # A's share of the games so far
            out["attendout/baseline"] = self.policy.baseline.value
        return out

    def eval_model(self) -> nn.Module:
        """The better of D and A, judged on a fixed sample of the carved validation split.

        Right after a game the two are identical and D is returned without judging. The choice is
        made once per training step, so every call at one step (evaluate, save, restore) gets the same model.
        """
        if self.loop is None:  # not started: D is all there is
            return self.defender
        step = self.steps_done
        if self._chosen_at != step:
            self._chosen = self.defender
            if self.steps_since_game > 0:
                data = self.loop.validation
                reward = self.config.reward
                d = self.score(self.defender, data, self.judge_indices).game_score(reward)
                a = self.score(self.attacker, data, self.judge_indices).game_score(reward)
                self._chosen = self.attacker if attacker_leads(d, a) else self.defender
            self._chosen_at = step
        return self._chosen
