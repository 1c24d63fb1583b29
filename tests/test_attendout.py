"""AttendOut (paper 001 §4): the Generator, eq. 5, the Defender/Attacker game, the CLI, and §7.2's fit."""

from __future__ import annotations

import copy
import json

import pytest
import torch

import attendout
from attendout.attention import get_controller, record_attention, uninstall
from attendout.cli import main
from attendout.methods import AttendOutConfig, get_method_config
from attendout.methods.attendout import generator as generator_mod
from attendout.methods.attendout.generator import (
    Generator,
    MovingAverageBaseline,
    reinforce_loss,
    unit_mask,
)
from attendout.methods.attendout.strategy import GameScores
from attendout.methods.scheduled import fit_piecewise_linear, schedule_value
from attendout.train import Trainer
from conftest import FAMILIES, save_tiny_model_dir, toy_cli_args, toy_train_config


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: one thread is faster, and much faster on a loaded machine (no oversubscription)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def padded_inputs(batch: int = 4, length: int = 10, dim: int = 16, seed: int = 0):
    """Random token representations (B, L, E) and a validity mask with rows padded from 6 and 8."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, dim, generator=g)
    valid = torch.ones(batch, length, dtype=torch.bool)
    valid[1, 6:] = False
    valid[2, 8:] = False
    return x, valid


def make_trainer(tiny_run, **options) -> Trainer:
    method_options = {"dropout_steps": 100, "eval_samples": 8, **options}
    return Trainer(toy_train_config(tiny_run, method="attendout", method_options=method_options, max_steps=8))


def train_steps(trainer: Trainer, count: int) -> list[dict]:
    batches = list(trainer.train_set.batches(trainer.config.batch_size))[:count]
    for batch in batches:
        trainer.train_step(batch)
        trainer.state.step += 1
    return batches


# --------------------------------------------------------------------------------------------------
# The Generator


def test_generator_masks_have_layer_shapes_and_the_initial_drop_rate():
    torch.manual_seed(0)
    x, valid = padded_inputs(batch=8, length=12)
    generator = Generator(input_dim=16, num_layers=3, width=8, init_drop=0.3)
    sample = generator.sample(x, valid, layers=[0, 2])
    assert set(sample.masks) == {0, 2}
    units = unit_mask(valid)
    for layer in (0, 2):
        mask = sample.masks[layer]
        assert mask.shape == (8, 12, 12) and mask.dtype == torch.bool
        assert not mask[~units].any()  # padding is never dropped
        assert abs(mask[units].float().mean().item() - 0.3) < 0.05
        assert abs(sample.drop_prob[layer].item() - 0.3) < 0.01
    assert generator(x, valid).shape == (3, 8, 12, 12)


def test_generator_is_far_smaller_than_the_encoder():
    generator = Generator(input_dim=384, num_layers=6, width=64)
    assert sum(p.numel() for p in generator.parameters()) < 50_000  # MiniLM: 22.7M


def test_padding_is_never_a_unit_of_the_log_probability():
    x, valid = padded_inputs()
    generator = Generator(input_dim=16, num_layers=2, width=8)
    masks = generator.sample(x, valid, [0, 1]).masks
    reference = generator.log_prob(x, valid, masks)
    flipped = {layer: m | ~unit_mask(valid) for layer, m in masks.items()}  # "drop" every padding pair
    noisy = x.clone()
    noisy[~valid] = 100.0  # whatever sits at padding positions
    torch.testing.assert_close(generator.log_prob(x, valid, flipped), reference)
    torch.testing.assert_close(generator.log_prob(noisy, valid, masks), reference)


def test_reinforce_moves_probability_toward_the_rewarded_masks():
    """Toy problem: reward = share of dropped units in layer 0 minus that in layer 1."""
    torch.manual_seed(0)
    x, valid = padded_inputs(batch=16, length=4)
    generator = Generator(input_dim=16, num_layers=2, width=8, init_drop=0.5)
    optimizer = torch.optim.Adam(generator.parameters(), lr=0.05)
    baseline = MovingAverageBaseline(0.9)
    units = unit_mask(valid)
    before = generator.sample(x, valid, [0, 1]).drop_prob
    for _ in range(40):
        masks = generator.sample(x, valid, [0, 1]).masks
        share = {i: (m & units).sum((1, 2)) / units.sum((1, 2)) for i, m in masks.items()}  # (B,)
        rewards = share[0] - share[1]  # one action per sample here
        optimizer.zero_grad()
        reinforce_loss(generator.log_prob(x, valid, masks), rewards, baseline.value).backward()
        optimizer.step()
        baseline.update(rewards.mean().item())
    after = generator.sample(x, valid, [0, 1]).drop_prob
    assert after[0] > before[0] + 0.2 and after[1] < before[1] - 0.2


def test_rewards_that_ignore_the_masks_leave_the_default_policy_near_its_start():
    """Eq. 5 with pure-noise rewards, at the default learning rate and a MiniLM-sized input: Adam turns
    noise into full-size steps, so too high a rate random-walks the drop rates (1e-2 moved them by
    0.35-0.5 here); the default must keep them near their start. The start is 0.5, where the sigmoid
    is steepest and a drift of the logits moves the probabilities most."""
    config = AttendOutConfig(init_drop=0.5)
    torch.manual_seed(0)
    generator = Generator(
        input_dim=384, num_layers=6, width=config.generator_width, init_drop=config.init_drop
    )
    optimizer = torch.optim.Adam(generator.parameters(), lr=config.generator_lr)
    baseline = MovingAverageBaseline(config.baseline_decay)
    x, valid = torch.randn(64, 16, 384), torch.ones(64, 16, dtype=torch.bool)
    drift = 0.0
    for _ in range(40):  # games
        cache = [torch.randint(0, 64, (16,)) for _ in range(5)]
        cache = [(i, generator.sample(x[i], valid[i], range(6)).masks) for i in cache]
        reward = torch.randn(()).item() * 0.003  # the size of MiniLM's game rewards on CoLA
        if baseline.count:
            optimizer.zero_grad()
            log_p = torch.stack([generator.log_prob(x[i], valid[i], m).mean() for i, m in cache])
            reinforce_loss(log_p, torch.full((5,), reward), baseline.value).backward()
            optimizer.step()
        baseline.update(reward)
        with torch.no_grad():
            p = generator.drop_probability(generator(x[:16], valid[:16])).mean(dim=(1, 2, 3))
        drift = max(drift, (p - config.init_drop).abs().max().item())
    assert drift < 0.06


def test_a_zero_advantage_moves_nothing():
    x, valid = padded_inputs()
    generator = Generator(input_dim=16, num_layers=2, width=8)
    optimizer = torch.optim.Adam(generator.parameters(), lr=0.05)
    before = copy.deepcopy(generator.state_dict())
    masks = generator.sample(x, valid, [0, 1]).masks
    rewards = torch.full((4,), 0.7)
    reinforce_loss(generator.log_prob(x, valid, masks), rewards, baseline=0.7).backward()
    optimizer.step()
    for name, value in generator.state_dict().items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0)


# --------------------------------------------------------------------------------------------------
# The strategy: Defender, Attacker, the game


def test_masks_reach_only_the_attacker_and_the_generator_gets_no_gradient_from_its_loss(tiny_run):
    trainer = make_trainer(tiny_run)
    strategy = trainer.strategy
    assert strategy.defender is trainer.model and strategy.attacker is not trainer.model
    assert get_controller(strategy.defender) is None  # D runs stock transformers attention
    batch = next(trainer.train_set.batches(16))
    with record_attention(strategy.attacker, layers=[0]) as recorder:
        trainer.train_step(batch)
    masks = strategy.cache[-1].masks[0]  # (B, L, L)
    probs = recorder.probs[0]  # (B, H, L, L)
    partial = ~unit_mask(batch["attention_mask"].bool()).logical_and(~masks).any(-1)  # rows all dropped
    dropped = masks[:, None].expand_as(probs) & ~partial[:, None, :, None]
    assert dropped.any() and (probs[dropped] == 0).all()  # eq. 3 on A's scores
    assert get_controller(strategy.defender) is None
    assert all(p.grad is None for p in strategy.generator.parameters())


def test_eq5_uses_the_cached_masks(tiny_run, monkeypatch):
    trainer = make_trainer(tiny_run)
    strategy = trainer.strategy
    train_steps(trainer, 2)
    cached = [copy.deepcopy(action) for action in strategy.cache]
    # From now on a fresh sample would drop everything: the update must not sample at all.
    monkeypatch.setattr(generator_mod, "gumbel_drop", lambda logits, t: torch.ones_like(logits, dtype=bool))
    monkeypatch.setattr(strategy.generator_optimizer, "step", lambda: None)  # keep the gradient to inspect
    rewards = torch.tensor([0.5, -0.2])
    strategy.baseline.value = 0.1
    strategy.update_generator(rewards)
    got = [p.grad.clone() for p in strategy.generator.parameters()]

    def expected_gradient(masks_of):
        loss = sum(
            -(r - 0.1)
            * strategy.generator.log_prob(
                strategy.generator_input(a.inputs), a.inputs["attention_mask"].bool(), masks_of(a)
            ).mean()
            for a, r in zip(cached, rewards.tolist(), strict=True)
        ) / len(cached)
        return torch.autograd.grad(loss, list(strategy.generator.parameters()))

    for g, e in zip(got, expected_gradient(lambda a: a.masks), strict=True):
        torch.testing.assert_close(g, e)
    all_dropped = expected_gradient(lambda a: {i: torch.ones_like(m) for i, m in a.masks.items()})
    assert any(not torch.allclose(g, e) for g, e in zip(got, all_dropped, strict=True))


def test_reinitialisation_copies_weights_optimizer_state_and_schedule(tiny_run):
    trainer = make_trainer(tiny_run)
    s = trainer.strategy
    train_steps(trainer, 3)
    d_params, a_params = list(s.defender.parameters()), list(s.attacker.parameters())
    assert any(not torch.equal(d, a) for d, a in zip(d_params, a_params, strict=True))
    s.reinitialise(keep_attacker=True)
    for d, a in zip(d_params, a_params, strict=True):
        assert torch.equal(d, a) and d.data_ptr() != a.data_ptr()
        d_state, a_state = s.defender_optimizer.state[d], s.optimizer.state[a]
        for key in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(d_state[key], a_state[key])
        assert d_state["exp_avg"].data_ptr() != a_state["exp_avg"].data_ptr()
    assert s.defender_scheduler.last_epoch == s.scheduler.last_epoch == 3
    assert s.defender_optimizer.param_groups[0]["lr"] == s.optimizer.param_groups[0]["lr"]
    # the copies are independent: training D alone leaves A's weights and moments alone
    a_moment = s.optimizer.state[a_params[0]]["exp_avg"].clone()
    batch = next(trainer.train_set.batches(16))
    trainer.train_on(s.defender, batch)
    assert torch.equal(s.optimizer.state[a_params[0]]["exp_avg"], a_moment)
    assert not torch.equal(d_params[0], a_params[0])


def test_a_game_updates_the_generator_and_reinitialises(tiny_run, monkeypatch):
    trainer = make_trainer(tiny_run, dropout_steps=2, reinit_temperature=0.0)
    s = trainer.strategy
    before = copy.deepcopy(s.generator.state_dict())
    train_steps(trainer, 2)  # the second step plays the first game: it sets the baseline only
    assert s.games == 1 and s.generator_updates == 0 and s.cache == [] and s.steps_since_game == 0
    assert all(torch.equal(v, before[k]) for k, v in s.generator.state_dict().items())
    assert s.baseline.count == 1 and s.baseline.value != 0
    train_steps(trainer, 2)
    assert s.games == 2 and s.generator_updates == 1
    assert any(not torch.equal(v, before[k]) for k, v in s.generator.state_dict().items())
    for d, a in zip(s.defender.parameters(), s.attacker.parameters(), strict=True):
        assert torch.equal(d, a)
    stats = s.stats()
    assert stats["attendout/games"] == 2 and stats["attendout/generator_updates"] == 1
    assert 0 <= stats["attendout/win_rate"] <= 1
    assert {
        "attendout/drop_prob/L0",
        "attendout/drop_prob/L1",
        "attendout/reward",
        "attendout/baseline",
    } <= set(stats)
    assert "attendout/reward" not in s.stats()  # per-game values only once


@pytest.mark.parametrize("pairing", ["mean", "sample"])
def test_rewards_are_paired_with_the_cached_actions(tiny_run, monkeypatch, pairing):
    trainer = make_trainer(tiny_run, dropout_steps=3, eval_samples=2, pairing=pairing)
    s = trainer.strategy
    seen: dict[str, torch.Tensor] = {}

    def record(rewards: torch.Tensor) -> float:
        seen["rewards"] = rewards.clone()
        return 0.0

    scores = iter([torch.tensor([-1.0, -1.0]), torch.tensor([-0.5, -0.9])])  # D's, then A's
    s.baseline.update(0.0)  # as after a first game: b = 0
    monkeypatch.setattr(s, "update_generator", record)
    monkeypatch.setattr(s, "score", lambda *args: GameScores(next(scores), 0.0))
    train_steps(trainer, 3)
    expected = [0.3, 0.3, 0.3] if pairing == "mean" else [0.5, 0.1, 0.5]  # the t-th sample's, cycled
    torch.testing.assert_close(seen["rewards"], torch.tensor(expected))
    assert s.baseline.value == pytest.approx(0.1 * 0.3)


def test_the_winner_is_sampled_by_score(tiny_run):
    s = make_trainer(tiny_run, reinit_temperature=0.05).strategy
    assert sum(s.pick_attacker(0.0, 0.5) for _ in range(50)) == 50  # a clear winner
    assert 10 < sum(s.pick_attacker(0.0, 0.0) for _ in range(100)) < 90  # a tie is a coin toss
    s.config.reinit_temperature = 0.0
    assert s.pick_attacker(0.0, 0.1) and not s.pick_attacker(0.0, 0.0)


def test_eval_mode_is_the_plain_model(tiny_run):
    trainer = make_trainer(tiny_run)
    s = trainer.strategy
    batches = train_steps(trainer, 2)
    plain = copy.deepcopy(s.attacker)
    uninstall(plain)
    inputs = {k: v for k, v in batches[0].items() if k != "labels"}
    s.slot.masks = {i: torch.ones_like(m) for i, m in s.cache[0].masks.items()}  # would drop everything
    s.attacker.eval()
    plain.eval()
    with torch.no_grad():
        torch.testing.assert_close(s.attacker(**inputs).logits, plain(**inputs).logits)
    s.slot.masks = None
    assert s.eval_model(trainer) in (s.defender, s.attacker)
    assert s.eval_model(trainer) is s.eval_model(trainer)  # one choice per step


@pytest.mark.parametrize("family", FAMILIES)
def test_every_supported_family_plays_a_game(tiny_run, family):
    model = save_tiny_model_dir(tiny_run["tmp"] / family, family)
    trainer = make_trainer({**tiny_run, "model": model}, dropout_steps=2)
    train_steps(trainer, 2)
    assert trainer.strategy.games == 1
    assert "attendout/drop_prob/L1" in trainer.strategy.stats()


def test_apply_adds_only_the_mask_slot_and_warns(bert):
    from conftest import make_batch

    with pytest.warns(UserWarning, match="adds only the Attacker's mask slot"):
        handle = attendout.apply(bert, "attendout")
    batch = make_batch(batch=2, length=6)
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    bert.train()
    handle.method.masks = {0: torch.eye(6, dtype=torch.bool).expand(2, 6, 6)}  # no token sees itself
    with record_attention(bert, layers=[0]) as recorder:
        bert(**inputs)
    assert (recorder.probs[0].diagonal(dim1=-2, dim2=-1) == 0).all()


def test_validation_source_can_be_the_dev_split_and_must_exist(tiny_run):
    trainer = make_trainer(tiny_run, validation_source="dev")
    assert trainer.strategy.source is trainer.eval_sets["dev"]
    with pytest.raises(
        ValueError, match="validation_source 'test' is not a split of this run; splits: validation, dev"
    ):
        make_trainer(tiny_run, validation_source="test")


@pytest.mark.parametrize(
    "options,match",
    [
        ({"dropout_steps": 0}, "attendout: dropout_steps must be an integer of at least 1, got 0"),
        ({"reward": "accuracy"}, "attendout: reward must be one of logprob, correct, metric, got 'accuracy'"),
        ({"pairing": "sample", "reward": "metric"}, "pairing must be 'mean'"),
        ({"init_drop": 1.0}, r"attendout: init_drop must be in \(0, 1\), got 1.0"),
        ({"temperature": 0}, "attendout: temperature must be positive, got 0"),
        ({"baseline_decay": 1.0}, r"attendout: baseline_decay must be in \[0, 1\)"),
        ({"layers": "0,x"}, "layers must be 'all' or comma-separated integers"),
    ],
)
def test_bad_options_are_clear_errors(options, match):
    with pytest.raises(ValueError, match=match):
        get_method_config("attendout", **options)


def test_defaults():
    config = AttendOutConfig()
    assert (config.dropout_steps, config.eval_samples, config.validation_source) == (10, 64, "validation")
    assert (config.reward, config.pairing, config.layers) == ("logprob", "mean", None)
    assert (config.init_drop, config.generator_lr, config.temperature) == (0.1, 3e-3, 1.0)


# --------------------------------------------------------------------------------------------------
# End to end and §7.2


def test_cli_run_logs_generator_updates_and_saves_a_plain_checkpoint(tiny_run):
    run = tiny_run["tmp"] / "cli-run"
    code = main(
        toy_cli_args(
            tiny_run,
            *("--method", "attendout", "--dropout-steps", "2", "--eval-samples", "8"),
            *("--max-steps", "6", "--log-steps", "1"),
            output_dir=run,
        )
    )
    assert code == 0
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert max(r.get("attendout/generator_updates", 0) for r in log) >= 2  # 3 games, the first sets b
    assert all("attendout/drop_prob/L1" in r for r in log if "loss" in r)
    results = json.loads((run / "results.json").read_text())
    assert (
        results["method_options"]["name"] == "attendout" and results["method_options"]["dropout_steps"] == 2
    )
    from transformers import AutoModelForSequenceClassification

    AutoModelForSequenceClassification.from_pretrained(run / "model")  # no attendout needed to load


def write_attendout_log(run_dir, total_steps: int = 100):
    """A synthetic AttendOut run: layer 0 falls 0.6 -> 0.2 linearly, layer 1 rises to 0.8 then falls."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(
        json.dumps({"config": {"method": "attendout"}, "task": {"name": "toy"}, "total_steps": total_steps})
    )
    lines = []
    for step in range(5, total_steps + 1, 5):
        t = step / total_steps
        layer1 = 0.4 + 0.8 * t if t <= 0.5 else 0.8 - 0.6 * (t - 0.5)
        lines.append(
            {
                "step": step,
                "loss": 0.5,
                "attendout/drop_prob/L0": 0.6 - 0.4 * t,
                "attendout/drop_prob/L1": layer1,
            }
        )
    (run_dir / "log.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    return run_dir


def test_scheduled_from_run_fits_the_logged_drop_rates(tmp_path):
    run = write_attendout_log(tmp_path / "ao")
    config = get_method_config("scheduled", from_run=str(run), fit_segments=2)
    curves = config.curves()
    assert len(curves) == 2
    for t in (0.05, 0.3, 0.5, 0.75, 1.0):
        assert schedule_value(curves[0], t) == pytest.approx(0.6 - 0.4 * t, abs=0.01)
    assert schedule_value(curves[1], 0.5) == pytest.approx(0.8, abs=0.01)
    assert schedule_value(curves[1], 1.0) == pytest.approx(0.5, abs=0.01)
    # a saved config (from_run + knots) keeps its knots; slopes and from_run conflict
    again = get_method_config("scheduled", from_run=str(tmp_path / "gone"), knots=config.knots)
    assert again.curves() == curves
    with pytest.raises(ValueError, match="either from_run or slopes"):
        get_method_config("scheduled", from_run=str(run), slopes="-0.1")
    with pytest.raises(ValueError, match="no AttendOut drop probabilities"):
        (tmp_path / "none").mkdir()
        (tmp_path / "none" / "log.jsonl").write_text('{"step": 1, "loss": 0.3}\n')
        get_method_config("scheduled", from_run=str(tmp_path / "none"))


def test_piecewise_fit_recovers_a_line_with_one_segment():
    x = torch.linspace(0, 1, 11).numpy()
    curve = fit_piecewise_linear(x, 0.6 - 0.5 * x, segments=1)
    assert curve == [(0.0, pytest.approx(0.6)), (1.0, pytest.approx(0.1))]
