"""Synthesizer attention (paper 003): variants, padding, the step-0 equivalence, checkpoints, the loop."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, BertForSequenceClassification

import attendout
from attendout import record_attention
from attendout.attention import UnsupportedModelError, get_controller
from attendout.methods.synthesizer import (
    MODEL_TYPE,
    VARIANTS,
    SequenceTooLongError,
    SynthesizerConfig,
    SynthesizerLayer,
    get_synthesizer,
)
from attendout.run.loop import TrainingLoop
from conftest import SCORE_FAMILIES, make_batch, no_dropout, tiny_model, toy_train_config

MIXTURES = [v for v in VARIANTS if v.endswith("+dot")]
PADDED = {1: 7, 3: 4}  # rows 1 and 3 are padded from positions 7 and 4


def synth_params(model) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if n.startswith("attendout_synthesizer.")}


def reference_logits(model, batch) -> torch.Tensor:
    """The model's logits through the hook's own (eager) softmax path, before any synthesizer."""
    with record_attention(model):
        return model(**batch).logits


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shared_heads", [False, True])
def test_layer_shapes(variant, shared_heads):
    layer = SynthesizerLayer(
        variant, hidden_size=32, heads=4, l_max=16, rank=3, shared_heads=shared_heads, init="paper"
    )
    dot = torch.randn(2, 4, 10, 10)  # (B, H, L, L)
    x = torch.randn(2, 10, 32)  # (B, L, d)
    assert layer(dot, x).shape == (2, 4, 10, 10)
    raw = layer.logits(x, 10, 10)
    assert raw.shape[-2:] == (10, 10) and raw.shape[1] == (1 if shared_heads else 4)


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_variant_trains_in_a_model(variant):
    model = tiny_model("bert", **no_dropout("bert"))
    attendout.synthesize(model, variant, max_length=16, init="paper")
    model.train()
    out = model(**make_batch(pad_from=PADDED))
    assert out.logits.shape == (4, 2)
    out.loss.backward()
    params = synth_params(model)
    assert params and all(p.grad is not None and p.grad.abs().sum() > 0 for p in params.values())
    query = model.bert.encoder.layer[0].attention.self.query.weight
    # replacing variants leave the query-key projections unused; mixtures still train them
    assert (query.grad is not None) == variant.endswith("+dot")


@pytest.mark.parametrize("variant", ["dense", "random", "factorized-dense+dot", "factorized-random"])
def test_padding_is_respected_and_rows_sum_to_one(variant):
    model = tiny_model("bert", **no_dropout("bert"))
    attendout.synthesize(model, variant, max_length=16, init="paper")
    model.eval()
    batch = make_batch(pad_from=PADDED)
    with torch.no_grad(), record_attention(model) as rec:
        logits = model(**batch).logits
    for layer, probs in rec.probs.items():  # (B, H, L, L)
        valid = batch["attention_mask"].bool()[:, None, None, :]  # (B, 1, 1, L)
        assert torch.all(probs.masked_select(~valid) == 0), layer
        torch.testing.assert_close(probs.sum(-1), torch.ones(probs.shape[:-1]))  # float32 rounding
    # A padded row gives what the same sequence gives alone, without padding: other shapes, so other
    # sums of products, equal up to float32 rounding. 1e-5 is over 100 float32 ulps of these logits;
    # the largest difference over `make test-matrix` used under 0.1% of it.
    for row, length in PADDED.items():
        alone = {k: v[row : row + 1, :length] for k, v in batch.items() if k != "labels"}
        with torch.no_grad():
            torch.testing.assert_close(model(**alone).logits[0], logits[row], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", MIXTURES)
def test_exact_init_computes_the_pretrained_model_at_step_0(variant):
    model = tiny_model("bert", **no_dropout("bert"))
    batch = make_batch(pad_from=PADDED)
    model.eval()
    with torch.no_grad():
        stock = model(**batch).logits  # transformers' SDPA
        eager = reference_logits(model, batch)
        attendout.synthesize(model, variant, max_length=16, mixing="head")  # init="exact": its default
        assert get_synthesizer(model).config.init == "exact"
        synthesized = model(**batch).logits
    # Bit for bit: the hook's explicit softmax path on the same scores, changed only by operations
    # that are exact at a = 0: (1 - 0) * dot + 0 * synth = dot.
    assert torch.equal(synthesized, eager)
    # Against fused SDPA, another computation: float32 rounding; 1e-5 is over 100 ulps of these
    # logits (the largest difference over `make test-matrix` used under 0.02% of it).
    torch.testing.assert_close(synthesized, stock, atol=1e-5, rtol=1e-5)
    model.train()  # train mode too (the model's dropouts are off here): the same operations
    assert torch.equal(model(**batch).logits, synthesized)


@pytest.mark.parametrize("family", SCORE_FAMILIES)
def test_every_family_is_exact_at_step_0_and_dense_gets_its_input(family):
    model = tiny_model(family, **no_dropout(family))
    batch = make_batch(pad_from=PADDED)
    batch.pop("labels")
    model.eval()
    with torch.no_grad():
        eager = reference_logits(model, batch)
        attendout.synthesize(model, "dense+dot", max_length=16, mixing="head")
        assert torch.equal(model(**batch).logits, eager)  # bit for bit, as above
        get_synthesizer(model).modules["0"].mix.data.fill_(0.5)
        assert not torch.equal(model(**batch).logits, eager)


def test_deberta_refuses_synthesized_attention_and_stays_stock():
    model = tiny_model("deberta-v2", **no_dropout("deberta-v2"))
    batch = make_batch(pad_from=PADDED)
    model.eval()
    before = model(**batch).logits
    names = set(dict(model.named_parameters()))
    with pytest.raises(UnsupportedModelError, match="synthesizer rewrites attention scores.*DeBERTa"):
        attendout.synthesize(model, "random+dot", max_length=16)
    assert (
        set(dict(model.named_parameters())) == names
        and get_controller(model) is None
        or not get_controller(model).methods
    )
    assert torch.equal(model(**batch).logits, before)


def test_mixing_weight_receives_gradient_then_the_synthesizer_learns():
    model = tiny_model("bert", **no_dropout("bert"))
    attendout.synthesize(model, "random+dot", max_length=16, mixing="head")
    layer = get_synthesizer(model).modules["0"]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    model(**make_batch(pad_from=PADDED)).loss.backward()
    assert layer.mix.grad is not None and layer.mix.grad.abs().sum() > 0
    assert layer.logits.logits.grad is None or layer.logits.logits.grad.abs().sum() == 0  # weight 0
    optimizer.step()
    optimizer.zero_grad()
    assert layer.mix.abs().sum() > 0
    model(**make_batch(pad_from=PADDED)).loss.backward()
    assert layer.logits.logits.grad.abs().sum() > 0


@pytest.mark.parametrize("variant", MIXTURES)
def test_the_official_mixing_weight_starts_at_one_half_and_stays_in_zero_one(variant):
    """The default mixture is the official code's (tensorflow/mesh attention.py lines 288-295): one
    scalar per layer, a = sigmoid(w), w from 0, logits (1 - a) dot + a synth."""
    model = tiny_model("bert", **no_dropout("bert"))
    attendout.synthesize(model, variant, max_length=16)
    synthesizer = get_synthesizer(model)
    assert synthesizer.config.mixing == "layer" and synthesizer.config.init == "paper"
    for layer in synthesizer.modules.values():
        assert layer.mix.shape == (1,) and layer.weight().item() == 0.5
    assert set(synthesizer.stats().values()) == {0.5}
    # the logits are the official mixture, for any w
    layer = synthesizer.modules["0"]
    dot, x = torch.randn(2, 4, 10, 10), torch.randn(2, 10, model.config.hidden_size)
    for w in (-3.0, 0.0, 0.7, 40.0):
        layer.mix.data.fill_(w)
        a = 1 / (1 + torch.exp(torch.tensor(-w)))
        with torch.no_grad():
            synth = layer.logits(x, 10, 10)
            torch.testing.assert_close(layer(dot, x), (1 - a) * dot + a * synth)
    layer.mix.data.zero_()
    # training at a large learning rate moves w far, the weight stays within [0, 1]
    optimizer = torch.optim.SGD([p for layer in synthesizer.modules.values() for p in [layer.mix]], lr=1e4)
    model.train()
    batch = make_batch(pad_from=PADDED)
    moved = False
    for _ in range(5):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
        weights = [layer.weight().item() for layer in synthesizer.modules.values()]
        assert all(0.0 <= w <= 1.0 for w in weights), weights
        moved = moved or any(w != 0.5 for w in weights)
        assert all(0.0 <= v <= 1.0 for v in synthesizer.stats().values())
    assert moved


def test_the_per_head_weight_and_the_plain_sum_stay_options():
    dot, x = torch.randn(2, 4, 10, 10), torch.randn(2, 10, 32)
    head = SynthesizerLayer("random+dot", hidden_size=32, heads=4, l_max=16, mixing="head", init="paper")
    assert head.mix.shape == (4,) and torch.equal(head.mix, torch.full((4,), 0.5))
    head.mix.data = torch.tensor([-1.0, 0.0, 0.5, 2.0])  # raw: unbounded, one per head
    synth = head.logits(x, 10, 10)
    torch.testing.assert_close(
        head(dot, x), (1 - head.mix.view(1, 4, 1, 1)) * dot + head.mix.view(1, 4, 1, 1) * synth
    )
    plain = SynthesizerLayer("dense+dot", hidden_size=32, heads=4, l_max=16, mixing="sum")
    assert plain.mix is None and plain.weight() is None
    torch.testing.assert_close(plain(dot, x), dot + plain.logits(x, 10, 10))


@pytest.mark.parametrize("shared_heads", [False, True])
def test_random_matrices_start_as_the_official_glorot_uniform_and_normal_stays_an_option(shared_heads):
    """TensorFlow's glorot_uniform on the official variables: R (l, H, l) and R1, R2 (k, H, l), fans
    from the last two dims times the rest: U(+-sqrt(6 / (l (H + l)))) and U(+-sqrt(6 / (k (H + l))))."""
    torch.manual_seed(0)
    heads, l_max, rank = 4, 64, 16
    h = 1 if shared_heads else heads
    for variant, tensors, limit in (
        ("random", lambda m: [m.logits], (6 / (l_max * (h + l_max))) ** 0.5),
        ("factorized-random", lambda m: [m.left, m.right], (6 / (rank * (h + l_max))) ** 0.5),
    ):
        layer = SynthesizerLayer(
            variant, hidden_size=32, heads=heads, l_max=l_max, rank=rank, shared_heads=shared_heads
        )
        for t in tensors(layer.logits):
            assert t.abs().max() <= limit and t.abs().max() > 0.95 * limit
            assert abs(t.std().item() - limit / 3**0.5) < 0.05 * limit  # uniform: sd = limit / sqrt(3)
        normal = SynthesizerLayer(
            variant,
            hidden_size=32,
            heads=heads,
            l_max=l_max,
            rank=rank,
            shared_heads=shared_heads,
            random_init="normal",
        )
        full = normal.logits(None, l_max, l_max)  # R, or R1 R2^T: unit variance
        assert abs(full.std().item() - 1) < 0.1
    # the official start is close to uniform attention; N(0, 1) peaks the rows
    glorot = SynthesizerLayer("random", hidden_size=32, heads=heads, l_max=l_max).logits(None, l_max, l_max)
    assert torch.softmax(glorot, -1).max() < 1.1 / l_max
    assert SynthesizerConfig(variant="random").random_init == "glorot"
    assert SynthesizerConfig(variant="dense").random_init is None and SynthesizerConfig().rank == 16


def test_eval_mode_is_deterministic():
    model = tiny_model("bert")  # with its own dropouts (0.1)
    attendout.synthesize(model, "dense", max_length=16)
    batch = make_batch(pad_from=PADDED)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, model(**batch).logits)  # the same operations twice
    model.train()
    assert not torch.equal(model(**batch).logits, model(**batch).logits)


def test_a_longer_sequence_is_an_error_naming_both_lengths():
    model = tiny_model("bert")
    attendout.synthesize(model, "random", max_length=8)
    with pytest.raises(SequenceTooLongError, match=r"sequence length 12 exceeds the synthesizer's l_max 8"):
        model(**make_batch(length=12))
    model(**make_batch(length=8))  # up to l_max is fine


def test_l_max_defaults_to_max_position_embeddings_and_layers_are_chosen():
    model = tiny_model("bert")
    attendout.synthesize(model, "factorized-random", layers=[1])
    synthesizer = get_synthesizer(model)
    assert synthesizer.l_max == 64 and list(synthesizer.modules) == ["1"]
    assert synthesizer.modules["1"].logits.left.shape == (4, 64, 16)  # (H, l, k): the official k
    with pytest.raises(ValueError, match="already synthesized"):
        attendout.synthesize(model, "dense")
    with pytest.raises(ValueError, match=r"layers \[5\] do not exist"):
        attendout.synthesize(tiny_model("bert"), "dense", layers=[5])


def test_prepare_gives_the_loops_longest_input_as_l_max_and_an_explicit_l_max_wins():
    # prepare is the loop's entry (TrainingLoop, hf.Trainer): its max_length reaches Synthesizer's default
    assert (
        get_synthesizer(attendout.prepare(tiny_model("bert"), "synthesizer", max_length=24).model).l_max == 24
    )
    with pytest.raises(ValueError, match="does not say its maximum length; pass l_max"):
        attendout.prepare(tiny_model("bert"), "synthesizer")
    chosen = attendout.prepare(tiny_model("bert"), "synthesizer", max_length=24, l_max=32)
    assert get_synthesizer(chosen.model).l_max == 32


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"variant": "sparse"}, "variant must be one of"),
        ({"variant": "dense", "fixed": True}, "fixed=True keeps a random matrix fixed"),
        ({"variant": "dense", "init": "exact"}, "init='exact' needs a mixture"),
        ({"variant": "random+dot", "init": "zeros"}, "init must be one of exact, paper, got 'zeros'"),
        ({"rank": 0}, "rank must be at least 1, got 0"),
        ({"variant": "factorized-random", "l_max": 4, "rank": 8}, r"rank must be at most l_max \(4\), got 8"),
        (
            {"variant": "random", "mixing": "layer"},
            "mixing 'layer' weighs a mixture with dot-product attention",
        ),
        ({"variant": "random+dot", "mixing": "softmax"}, "mixing must be one of layer, head, sum"),
        ({"variant": "dense", "random_init": "glorot"}, "random_init 'glorot' initialises a random matrix"),
        ({"variant": "random", "random_init": "xavier"}, "random_init must be one of glorot, normal"),
        ({"variant": "random+dot", "init": "exact"}, "init='exact' starts the mixing weight at 0"),
        ({"synthesizer_lr": 0.0}, "synthesizer_lr must be positive"),
    ],
)
def test_config_checks_name_field_and_value(options, message):
    with pytest.raises(ValueError, match=message):
        SynthesizerConfig(**options)


def test_remove_restores_the_stock_model():
    model = tiny_model("bert", **no_dropout("bert"))
    batch = make_batch(pad_from=PADDED)
    model.eval()
    with torch.no_grad():
        before = model(**batch).logits
        handle = attendout.apply(model, SynthesizerConfig(variant="dense", l_max=16))
        assert not torch.allclose(model(**batch).logits, before)
        handle.remove()
        assert not synth_params(model)
        torch.testing.assert_close(model(**batch).logits, before)


def test_plain_transformers_refuses_a_synthesized_checkpoint_and_attendout_loads_it(tmp_path):
    model = tiny_model("bert", **no_dropout("bert"))
    attendout.synthesize(model, "random+dot", max_length=16, fixed=True)
    get_synthesizer(model).modules["1"].mix.data.fill_(0.3)
    batch = make_batch(pad_from=PADDED)
    model.eval()
    with torch.no_grad():
        expected = model(**batch).logits
    attendout.save_synthesized(model, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["model_type"] == MODEL_TYPE and config["base_config"]["model_type"] == "bert"
    assert config["synthesizer"]["l_max"] == 16 and config["synthesizer"]["fixed"] is True
    with pytest.raises(ValueError, match=MODEL_TYPE):
        AutoModelForSequenceClassification.from_pretrained(tmp_path / "m")
    with pytest.raises(OSError):
        BertForSequenceClassification.from_pretrained(tmp_path / "m")
    model.save_pretrained(tmp_path / "p")  # redirected: never a plain checkpoint without the synthesizer
    with pytest.raises(ValueError, match=MODEL_TYPE):
        AutoModelForSequenceClassification.from_pretrained(tmp_path / "p")
    for path in (tmp_path / "m", tmp_path / "p"):
        for loaded in (attendout.load_synthesized(path), attendout.load_model(path)):
            assert not loaded.training
            with torch.no_grad():  # exact: the same weights, bit for bit, through the same operations
                torch.testing.assert_close(loaded(**batch).logits, expected, atol=0, rtol=0)


def test_a_checkpoint_saved_before_issue_50_loads_in_the_forms_of_then(tmp_path):
    """A saved config without 'mixing' and 'random_init' is one raw weight per head and N(0, 1)."""
    model = tiny_model("bert", **no_dropout("bert"))
    attendout.synthesize(model, "random+dot", max_length=16, mixing="head", random_init="normal")
    get_synthesizer(model).modules["1"].mix.data = torch.tensor([0.1, 0.2, 0.3, 0.4])
    batch = make_batch(pad_from=PADDED)
    model.eval()
    with torch.no_grad():
        expected = model(**batch).logits
    attendout.save_synthesized(model, tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    del config["synthesizer"]["mixing"], config["synthesizer"]["random_init"]
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    loaded = attendout.load_synthesized(tmp_path / "m")
    assert get_synthesizer(loaded).config.mixing == "head"
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, expected, atol=0, rtol=0)


def test_the_loop_trains_saves_and_restores_a_synthesized_model(tiny_run):
    options = {"variant": "random+dot", "fixed": True, "synthesizer_lr": 0.01}
    trainer = TrainingLoop(
        toy_train_config(tiny_run, method="synthesizer", method_options=options, max_steps=4, eval_steps=2)
    )
    synthesizer = get_synthesizer(trainer.model)
    assert synthesizer.l_max == 16  # the run's max length
    fixed = synthesizer.modules["0"].logits.logits.clone()
    lrs = {group["initial_lr"] for group in trainer.optimizer.param_groups}
    assert lrs == {0.01, 5e-5}  # the mixing weights train at synthesizer_lr (R is fixed)
    results = trainer.fit()
    assert torch.equal(synthesizer.modules["0"].logits.logits, fixed)  # fixed: unchanged by training
    path = tiny_run["tmp"] / "run" / "model"
    assert attendout.is_synthesized_checkpoint(path)
    assert isinstance(AutoTokenizer.from_pretrained(path), type(trainer.tokenizer))
    # load_best puts the saved weights back into the live model
    saved = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.strategy.save_model(path, trainer.tokenizer)
    with torch.no_grad():
        for p in trainer.model.parameters():
            p.add_(1.0)
    trainer.strategy.load_best(path)
    assert all(torch.equal(v, saved[k]) for k, v in trainer.model.state_dict().items())
    assert 0 <= results["eval"]["dev"]["accuracy"] <= 1


def test_cli_attention_shorthand_runs_and_saves_the_synthesized_form(tiny_run, capsys):
    from attendout.cli import main
    from test_cli import finetune_args

    assert main(finetune_args(tiny_run, "--attention", "dense+dot", "--layers", "1")) == 0
    run = tiny_run["tmp"] / "run"
    results = json.loads((run / "results.json").read_text())
    assert results["method"] == "synthesizer"
    assert results["method_options"]["variant"] == "dense+dot" and results["method_options"]["layers"] == [1]
    assert results["method_options"]["init"] == "paper" and results["method_options"]["mixing"] == "layer"
    log = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert any("synthesizer/mix/L1" in record for record in log)
    model = attendout.load_model(run / "model")
    assert get_synthesizer(model).config.variant == "dense+dot"
    with pytest.raises(ValueError):
        AutoModelForSequenceClassification.from_pretrained(run / "model")
    assert main(finetune_args(tiny_run, "--attention", "dense", "--method", "attn-dropout")) == 2
    assert "cannot go with --method attn-dropout" in capsys.readouterr().err
