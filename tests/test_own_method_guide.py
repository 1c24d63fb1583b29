"""The method of docs/guides/own-method.md ("Writing your own method"), run from the page itself.

The fixture takes the page's ```python block after ``<!-- keyed-dropout -->``, runs it as the module
``keyed_dropout`` (what a user's file would be), and afterwards takes ``"keyed-dropout"`` out of the
registry again (:func:`attendout.unregister_method`), so that no other test sees it.
"""

from __future__ import annotations

import json
import re
import sys
import types
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification

import attendout
import plain
from attendout.cli import main
from attendout.methods import METHODS
from attendout.typecheck import OptionTypeError
from conftest import make_batch, no_dropout, tiny_model, toy_cli_args

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guides" / "own-method.md"
NAME = "keyed-dropout"

pytestmark = pytest.mark.usefixtures("one_thread")


def example_code() -> str:
    """The page's ```python block right after ``<!-- keyed-dropout -->``."""
    found = re.search(r"<!-- keyed-dropout -->\s*```python\n(.*?)```", PAGE.read_text(), re.S)
    assert found, f"{PAGE} has no python block after <!-- keyed-dropout -->"
    return found.group(1)


@pytest.fixture(scope="module")
def keyed_dropout():
    """The page's example, imported as the module ``keyed_dropout``; unregistered afterwards."""
    assert NAME not in METHODS, "keyed-dropout is registered before the guide's code runs"
    module = types.ModuleType("keyed_dropout")
    module.__file__ = str(PAGE)
    sys.modules["keyed_dropout"] = module  # dataclasses and type hints look the module up by name
    try:
        exec(compile(example_code(), str(PAGE), "exec"), module.__dict__)
        yield module
    finally:
        if NAME in METHODS:
            attendout.unregister_method(NAME)
        sys.modules.pop("keyed_dropout", None)


def test_the_example_registers_a_method_that_apply_takes(keyed_dropout, capsys):
    assert NAME in attendout.list_methods()
    assert METHODS[NAME] is keyed_dropout.KeyedDropoutConfig
    model = tiny_model("bert", **no_dropout("bert"))
    handle = attendout.apply(model, NAME, p=0.2, layers="1")
    assert handle.config == keyed_dropout.KeyedDropoutConfig(p=0.2, layers=[1])
    assert isinstance(handle.method, keyed_dropout.KeyedDropout)
    model.train()
    model(**make_batch())
    assert list(handle.stats()) == [f"{NAME}/drop_rate/L1"]  # layers: only where it was asked to act
    assert main(["methods"]) == 0
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith(NAME)]
    assert len(listed) == 1 and "p=0.1" in listed[0] and "drop each key for every query" in listed[0]


def test_in_training_whole_keys_drop_at_rate_p_per_example_and_head(keyed_dropout):
    p = 0.1
    model = tiny_model("bert", **no_dropout("bert"))
    handle = attendout.apply(model, NAME, p=p)
    batch = make_batch(batch=64, length=16, pad_from={1: 6, 5: 10})
    model.train()
    torch.manual_seed(0)
    with torch.no_grad(), attendout.record_attention(model) as recorder:
        model(**batch)
    stats = handle.stats()
    assert sorted(stats) == [f"{NAME}/drop_rate/L0", f"{NAME}/drop_rate/L1"]
    real = batch["attention_mask"].bool()[:, None, :].expand(-1, 4, -1)  # (B, H, keys): non-padding keys
    for layer in (0, 1):
        probs = recorder.probs[layer]  # (B, H, queries, keys), after the drops
        dropped = (probs == 0).all(dim=2)  # a whole column: no query of that head attends to the key
        # 64 x 4 x 16 key columns less the padding: a binomial sd of about 0.005 at p = 0.1
        rate = dropped[real].float().mean().item()
        assert abs(rate - p) < 0.02, rate
        # the method's own count agrees with the columns the softmax really zeroed (padding not counted)
        assert stats[f"{NAME}/drop_rate/L{layer}"] == pytest.approx(rate, abs=1e-6)
        # the shape: every zero weight of a real key lies in a column that is zero for every query
        stray = (probs == 0) & real[:, :, None, :] & ~dropped[:, :, None, :]
        assert not stray.any()
        # per head: the heads of one example draw different keys
        assert (dropped[:, 0] != dropped[:, 1]).any()


def test_in_eval_mode_the_model_is_the_plain_model(keyed_dropout):
    model = tiny_model("bert", **no_dropout("bert"))
    batch = make_batch(pad_from={1: 6})
    model.eval()
    with torch.no_grad():
        plain = model(**batch).logits
        handle = attendout.apply(model, NAME, p=0.5)
        assert torch.equal(model(**batch).logits, plain)
        model.train()
        torch.manual_seed(0)
        assert not torch.allclose(model(**batch).logits, plain)  # in training it drops
        handle.remove()
        model.eval()
        assert torch.equal(model(**batch).logits, plain)


def test_a_config_file_and_a_combination_take_it(keyed_dropout, tmp_path):
    path = tmp_path / "keyed.toml"
    path.write_text('[method]\nname = "keyed-dropout"\np = 0.2\n')
    assert attendout.load_config(path) == keyed_dropout.KeyedDropoutConfig(p=0.2)
    model = tiny_model("bert", **no_dropout("bert"))
    handle = attendout.apply(model, [NAME, "layerdrop"])
    model.train()
    model(**make_batch())
    assert {key.split("/")[0] for key in handle.stats()} >= {NAME}
    with pytest.raises(attendout.MethodStackError, match="already carries attendout method 'keyed-dropout'"):
        attendout.apply(model, "scores-dropout")


@pytest.mark.parametrize("p", [1.0, 1.5, -0.1])
def test_a_bad_p_is_a_value_error_naming_the_method_and_the_option(keyed_dropout, p):
    message = re.escape(f"keyed-dropout: p must be in [0, 1), got {p!r}")
    with pytest.raises(ValueError, match=message):
        attendout.apply(tiny_model("bert"), NAME, p=p)
    with pytest.raises(ValueError, match=message):
        keyed_dropout.KeyedDropoutConfig(p=p)


def test_a_p_of_the_wrong_type_is_refused_by_the_base_class(keyed_dropout):
    with pytest.raises(OptionTypeError, match="keyed-dropout: p must be a number, got bool True"):
        attendout.get_method_config(NAME, p=True)


def test_the_command_line_refuses_a_bad_p_in_one_line(keyed_dropout, tiny_run, capsys):
    out = tiny_run["tmp"] / "bad"
    assert main(toy_cli_args(tiny_run, "--method", NAME, "--p", "1.5", output_dir=out)) == 2
    err = capsys.readouterr().err
    assert "attendout: error: keyed-dropout: p must be in [0, 1), got 1.5" in err
    assert not out.exists()


def test_a_command_line_run_trains_with_it_and_leaves_a_plain_checkpoint(keyed_dropout, tiny_run):
    out = tiny_run["tmp"] / "run"
    args = toy_cli_args(tiny_run, "--method", NAME, "--p", "0.2", "--max-steps", "2", "--eval-steps", "2")
    assert main(args) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["method"] == NAME
    assert json.loads((out / "config.json").read_text())["config"]["method_options"]["p"] == 0.2
    logged = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert any(f"{NAME}/drop_rate/L0" in record for record in logged), logged
    saved = json.loads((out / "model" / "config.json").read_text())
    assert "attendout" not in json.dumps(saved)  # nothing of the hook in the checkpoint
    model = AutoModelForSequenceClassification.from_pretrained(out / "model")
    assert model.config._attn_implementation != "attendout"


def test_prepare_drives_it_in_a_hand_written_loop(keyed_dropout):
    model = tiny_model("bert", **no_dropout("bert"))
    strategy = attendout.prepare(model, NAME, p=0.2)
    optimizer = torch.optim.AdamW(strategy.param_groups(model, 0.01), lr=1e-3)
    strategy.start(attendout.LoopContext(device="cpu", total_steps=2, steps_per_epoch=2))
    model.train()
    for step in range(2):
        batch = make_batch(batch=8, length=10, seed=step)
        info = attendout.StepInfo(step)
        strategy.set_progress(step / 2)
        assert strategy.before_forward(model, batch, info) == {}
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        strategy.after_step([batch], info)
    stats = strategy.stats()
    assert sorted(stats) == [f"{NAME}/drop_rate/L0", f"{NAME}/drop_rate/L1"]
    assert all(0.05 < rate < 0.4 for rate in stats.values()), stats


def test_transformers_trainer_trains_with_it_and_logs_its_statistics(keyed_dropout, tiny_run):
    from test_hf_trainer import hf_trainer, logged

    trainer = hf_trainer(tiny_run, NAME, {"p": 0.2})
    trainer.train()
    assert len(logged(trainer, "loss")) == 4
    rates = logged(trainer, f"{NAME}/drop_rate/L0")
    assert len(rates) == 4 and all(0.0 < rate < 0.5 for rate in rates), rates


def test_register_method_binds_a_name_once_and_unregister_frees_it(keyed_dropout):
    config, method = keyed_dropout.KeyedDropoutConfig, keyed_dropout.KeyedDropout
    assert config.name == NAME  # the name is the config's
    attendout.register_method(NAME, config, method)  # the same config again: its parts replaced
    again = type("KeyedDropoutConfig", (config,), {"__module__": "notebook"})  # a cell run twice
    again = __import__("dataclasses").dataclass(again)
    with pytest.raises(ValueError, match="already registered by KeyedDropoutConfig"):
        attendout.register_method(NAME, again, method)
    with pytest.raises(TypeError, match="must be a MethodConfig dataclass"):
        attendout.register_method("other", object, method)
    with pytest.raises(TypeError, match="method must be callable"):
        attendout.register_method("other", again, 3)
    assert "other" not in METHODS  # a refused registration leaves nothing behind
    attendout.unregister_method(NAME)
    assert NAME not in attendout.list_methods()
    with pytest.raises(ValueError, match="unknown method 'keyed-dropout'"):
        attendout.get_method_config(NAME)
    attendout.register_method(NAME, again, method)  # the name is free for the new class
    assert attendout.get_method_config(NAME, p=0.3) == again(p=0.3)
    attendout.unregister_method(NAME)
    attendout.register_method(NAME, config, method)  # as the fixture left it


def test_attendout_methods_imports_the_modules_the_environment_names(tmp_path, monkeypatch, capsys):
    (tmp_path / "keyed_dropout.py").write_text(example_code())
    # a user's process, which has not imported attendout: `attendout methods` with the module on its path
    monkeypatch.setenv("ATTENDOUT_METHODS", "keyed_dropout")
    listed = plain.attendout("methods", path=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert any(line.startswith("keyed-dropout ") and "p=0.1" in line for line in listed.stdout.splitlines())
    # Here, in this process: what an empty variable imports, and a module that is not there
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "keyed_dropout", raising=False)
    monkeypatch.setenv("ATTENDOUT_METHODS", "")
    assert main(["methods"]) == 0
    assert "keyed_dropout" not in sys.modules  # only what the variable names joins
    monkeypatch.setenv("ATTENDOUT_METHODS", "json, no_such_module")  # json: imports, registers nothing
    assert main(["methods"]) == 2
    err = capsys.readouterr().err
    assert "ATTENDOUT_METHODS names module 'no_such_module', which cannot be imported" in err
