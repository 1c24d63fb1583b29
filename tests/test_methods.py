"""The method registry, configs, `apply`/`remove`, and the scheduled method's schedule."""

from __future__ import annotations

import json

import pytest
import torch

import attendout
from attendout.cli import main
from attendout.methods import METHODS, ScheduledConfig, get_method_config
from attendout.methods.schedules import schedule_value
from attendout.run.loop import TrainingLoop
from conftest import make_batch, no_dropout, tiny_model, toy_train_config

PAPER_METHODS = {
    "none",
    "attn-dropout",
    "scores-dropout",
    "layerdrop",
    "attn-layerdrop",
    "scheduled",
    "drophead",
}


def test_registry_has_the_paper_methods():
    assert PAPER_METHODS <= set(attendout.list_methods())
    for name in PAPER_METHODS:
        config = get_method_config(name)
        assert config.name == name and config.to_dict()["name"] == name
        assert METHODS[name].model_dropout in ("keeps", "replaces")
    assert METHODS["attn-dropout"].model_dropout == "replaces"


# What each method does with no options, as the README's method table says: the rate it drops at in
# training, and the number of forwards it needs to show it (LayerDrop decides once per forward).
# (attn-dropout's default p 0.2 acts inside SDPA, where no rate is counted: tests/test_attention.py
# measures it there, from the weights themselves.)
DEFAULT_RATES = {
    "scores-dropout": (0.1, 2),  # scores before the softmax
    "drophead": (0.1, 2),  # heads, per example (the V schedule's rate at the start)
    "layerdrop": (0.2, 800),  # blocks
    "attn-layerdrop": (0.2, 800),  # layers' attention
}


@pytest.mark.parametrize("family", ["bert", "modernbert", "eurobert", "deberta-v2", "mpnet"])
@pytest.mark.parametrize("method", DEFAULT_RATES)
def test_default_options_drop_at_the_documented_rate_in_every_layer(method, family):
    rate, forwards = DEFAULT_RATES[method]
    model = tiny_model(family, **no_dropout(family))
    handle = attendout.apply(model, method)
    handle.set_progress(0.0)  # the start of training (DropHead's schedule needs a progress)
    model.train()
    torch.manual_seed(0)
    batch = make_batch(batch=64 if forwards == 2 else 1, length=16 if forwards == 2 else 4)
    with torch.no_grad():
        for _ in range(forwards):
            model(**batch)
    rates = {k: v for k, v in handle.stats().items() if "/drop_rate/" in k}
    layers = model.config.num_hidden_layers
    assert sorted(rates) == [f"{method}/drop_rate/L{i}" for i in range(layers)]  # every layer by default
    assert all(abs(value - rate) < 0.05 for value in rates.values()), rates  # > 3 binomial sd


def test_default_schedule_goes_from_0_6_to_0_1_in_every_layer(bert):
    handle = attendout.apply(bert, "scheduled")
    bert.train()
    batch = make_batch(batch=16, length=24)
    for progress, rate in ((0.0, 0.6), (0.5, 0.35), (1.0, 0.1)):
        handle.set_progress(progress)
        bert(**batch)
        stats = handle.stats()
        assert [stats[f"scheduled/scheduled_p/L{i}"] for i in (0, 1)] == pytest.approx([rate, rate])
        assert all(abs(stats[f"scheduled/drop_rate/L{i}"] - rate) < 0.03 for i in (0, 1)), stats


def test_unknown_method_and_option_are_clear_errors():
    with pytest.raises(ValueError, match="unknown method .dropconnect.; known methods: .*scores-dropout"):
        get_method_config("dropconnect")
    with pytest.raises(ValueError, match="method 'scores-dropout' has no option 'q'"):
        get_method_config("scores-dropout", q=0.1)


@pytest.mark.parametrize(
    "name,options,match",
    [
        ("scores-dropout", {"p": 1.5}, r"scores-dropout: p must be in \[0, 1\], got 1.5"),
        ("attn-dropout", {"p": 1.0}, r"attn-dropout: p must be in \[0, 1\), got 1.0"),
        ("drophead", {"p": -0.1}, "drophead: p must be"),
        ("drophead", {"schedule": "u"}, "drophead: schedule must be v, fixed or knots"),
        ("drophead", {"warmup": 1.0}, r"drophead: warmup must be in \(0, 1\), got 1.0"),
        ("drophead", {"schedule": "0:0.2;0:0.1"}, "schedule takes one curve for every layer"),
        ("scores-dropout", {"layers": "0,x"}, "layers must be 'all' or comma-separated integers"),
        ("scheduled", {"knots": "0:0.6,0.5"}, "knots must look like"),
        ("scheduled", {"knots": "0.5:0.6,0.2:0.1"}, "must rise"),
        ("scheduled", {"knots": "0:0.6,1:0.1", "slopes": "-0.1"}, "either knots or slopes"),
    ],
)
def test_bad_options_raise_naming_the_field(name, options, match):
    with pytest.raises(ValueError, match=match):
        get_method_config(name, **options)


def test_apply_and_remove_restore_the_stock_model(bert):
    batch = make_batch()
    bert.eval()
    stock = bert(**batch).logits
    handle = attendout.apply(bert, attendout.get_method_config("scores-dropout", p=0.5))
    handle.remove()
    second = attendout.apply(
        bert, [get_method_config("drophead", p=0.5), get_method_config("layerdrop", p=0.5)]
    )
    second.remove()
    bert.train()
    torch.manual_seed(0)
    a = bert(**batch).logits
    torch.manual_seed(0)
    b = bert(**batch).logits
    torch.testing.assert_close(a, b)  # no random masks left (no dropout in this model)
    attendout.remove(bert)
    bert.eval()
    torch.testing.assert_close(bert(**batch).logits, stock)


def test_schedule_is_piecewise_linear():
    curve = [(0.0, 0.6), (0.5, 0.2), (1.0, 0.2)]
    assert schedule_value(curve, 0.0) == pytest.approx(0.6)
    assert schedule_value(curve, 0.25) == pytest.approx(0.4)
    assert schedule_value(curve, 0.75) == pytest.approx(0.2)
    config = ScheduledConfig(start=0.6, slopes="-0.6,-0.2")
    assert config.curves() == [[(0.0, 0.6), (1.0, 0.0)], [(0.0, 0.6), (1.0, pytest.approx(0.4))]]


def test_scheduled_rate_follows_progress(bert):
    handle = attendout.apply(bert, "scheduled", start=0.6, slopes="-0.6,0.0")
    bert.train()
    batch = make_batch(batch=16, length=24)
    handle.set_progress(0.0)
    bert(**batch)
    start = handle.stats()
    handle.set_progress(1.0)
    bert(**batch)
    end = handle.stats()
    assert (
        abs(start["scheduled/drop_rate/L0"] - 0.6) < 0.03
        and abs(start["scheduled/drop_rate/L1"] - 0.6) < 0.03
    )
    assert "scheduled/drop_rate/L0" not in end  # p reached 0: no mask at all
    assert abs(end["scheduled/drop_rate/L1"] - 0.6) < 0.03
    assert end["scheduled/scheduled_p/L1"] == pytest.approx(0.6)


def test_scheduled_needs_one_curve_per_layer(bert):
    with pytest.raises(ValueError, match="got 3 per-layer schedules for a model with 2 layers"):
        attendout.apply(bert, "scheduled", slopes="-0.1,-0.2,-0.3")


def test_drophead_rate_follows_the_v_schedule(bert):
    """Scheduled DropHead: p at the start, 0 at the end of the warm-up (0.1 of training), p at the end."""
    handle = attendout.apply(bert, "drophead", p=0.4)
    assert handle.config.curve() == [(0.0, 0.4), (0.1, 0.0), (1.0, 0.4)]
    bert.train()
    with pytest.raises(RuntimeError, match="drophead: a training forward before any progress was given"):
        bert(**make_batch())
    batch = make_batch(batch=64, length=8)
    torch.manual_seed(0)
    for progress, rate in ((0.0, 0.4), (0.05, 0.2), (0.1, 0.0), (0.55, 0.2), (0.775, 0.3), (1.0, 0.4)):
        handle.set_progress(progress)
        with torch.no_grad():
            for _ in range(8):
                bert(**batch)
        stats = handle.stats()
        assert stats["drophead/scheduled_p"] == pytest.approx(rate)
        for layer in (0, 1):  # 8 x 64 x 4 = 2,048 head decisions per layer: sd <= 0.011
            assert abs(stats[f"drophead/drop_rate/L{layer}"] - rate) < 0.04, (progress, stats)
    fixed = get_method_config("drophead", p=0.4, schedule="fixed")
    assert fixed.curve() is None
    knots = get_method_config("drophead", schedule="0:0.2,1:0")
    assert knots.curve() == [(0.0, 0.2), (1.0, 0.0)]


def test_drophead_schedule_in_the_loop_and_the_help(tiny_run, capsys):
    """attendout's loop gives the progress: the logged rate of each step is the V at step / total."""
    trainer = TrainingLoop(
        toy_train_config(
            tiny_run, method="drophead", method_options={"p": 0.2, "warmup": 0.25}, max_steps=8, log_steps=1
        )
    )
    trainer.fit()
    log = [json.loads(line) for line in (tiny_run["tmp"] / "run" / "log.jsonl").read_text().splitlines()]
    rates = [r["drophead/scheduled_p"] for r in log if "loss" in r]
    # steps 0..7 of 8: progress 0, 1/8, ..., 7/8; down to 0 at 1/4, then up to 0.2 at 1
    expected = [0.2, 0.1, 0.0, 0.2 * (3 / 8 - 0.25) / 0.75, 0.2 * (4 / 8 - 0.25) / 0.75]
    expected += [0.2 * (k / 8 - 0.25) / 0.75 for k in (5, 6, 7)]
    assert rates == pytest.approx(expected)
    with pytest.raises(SystemExit):
        main(["finetune", "--method", "drophead", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for text in (
        "--schedule",
        "(warmup, 0)",
        "(default: v)",
        "--warmup",
        "(default: 0.1)",
        "fixed = p throughout",
    ):
        assert text in help_text, text


# -- one regulariser at a time; combinations only on purpose ------------------------------------------


def forward_stats(model, handle) -> dict[str, float]:
    model.train()
    torch.manual_seed(0)
    with torch.no_grad():
        model(**make_batch(batch=8, length=12))
    return handle.stats()


@pytest.mark.parametrize("second", ["scores-dropout", "drophead", "attendout"])
def test_a_second_apply_is_refused_naming_the_attached_method(second):
    model = tiny_model("bert", **no_dropout("bert"))
    handle = attendout.apply(model, "scores-dropout", p=0.3)
    with pytest.raises(attendout.MethodStackError) as error:
        attendout.apply(model, second)  # a re-run notebook cell, or another method on top
    message = str(error.value)
    assert "'scores-dropout' (p=0.3)" in message and "handle.remove()" in message and "[" in message
    stats = forward_stats(model, handle)
    assert {key.split("/")[0] for key in stats} == {"scores-dropout"}  # still the one method alone
    handle.remove()
    attendout.apply(model, second)  # removed first: accepted


def test_a_combination_on_purpose_acts_with_both_and_names_each_ones_statistics():
    model = tiny_model("bert", **no_dropout("bert"))
    handle = attendout.apply(
        model, [get_method_config("scores-dropout", p=0.3), get_method_config("attn-layerdrop", p=0.5)]
    )
    assert isinstance(handle, attendout.CombinedHandle)
    stats = forward_stats(model, handle)
    assert {key.split("/")[0] for key in stats} == {"scores-dropout", "attn-layerdrop"}
    with pytest.raises(attendout.MethodStackError):
        attendout.apply(model, "drophead")  # a combination is attached: a third is refused too
    handle.remove()
    assert forward_stats(model, attendout.apply(model, "scores-dropout")) is not None
    with pytest.raises(ValueError, match="distinct methods"):
        attendout.apply(tiny_model("bert"), ["scores-dropout", "scores-dropout"])


def test_an_architecture_carries_one_regulariser():
    model = tiny_model("bert", **no_dropout("bert"))
    attendout.synthesize(model, "random+dot", max_length=16)
    handle = attendout.apply(model, "scores-dropout", p=0.3)  # Synthesizer is not a regulariser
    assert "scores-dropout" in {key.split("/")[0] for key in forward_stats(model, handle)}
    with pytest.raises(attendout.MethodStackError):
        attendout.apply(model, "drophead")
