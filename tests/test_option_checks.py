"""Issue 49, classes 1, 2, 5 and 6: every option's range and type checked up front, reserved split names,
and a bare string given to ``Predictor.predict``.

Each class is tested over every field it covers, so a new numeric field without a range check (or a
new method whose options are not typed) fails here.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

import pytest
import torch

import attendout
from attendout.bench import ExperimentError, load_experiment
from attendout.cli.flags import parse_eval_files
from attendout.config import TrainConfig
from attendout.configfile import load_config_file
from attendout.methods import METHODS, get_method_config
from attendout.run.devices import check_device_name, pick_device
from attendout.tasks import DataError, load_task_data
from attendout.typecheck import OptionTypeError, check_values, matches
from conftest import toy_cli_args, toy_train_config


def numeric_fields(cls: type) -> list[str]:
    """The fields of ``cls`` whose declared type holds an int or a float (bools are no numbers)."""
    out = []
    for f in dataclasses.fields(cls):
        hint = typing.get_type_hints(cls)[f.name]
        if f.init and (matches(1, hint) or matches(0.5, hint)) and not matches("x", hint):
            out.append(f.name)
    return out


def bool_fields(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls) if typing.get_type_hints(cls)[f.name] is bool]


# ---------------------------------------------------------------------------------------------------
# 1. Option values nobody checked: every numeric field has a range

#: A value outside its range for every numeric TrainConfig field (with the fields it needs beside it).
TRAIN_OUT_OF_RANGE: dict[str, tuple[Any, dict[str, Any]]] = {
    "token_column": (-1, {}),
    "tag_column": (-1, {}),
    "max_train_samples": (0, {}),
    "max_eval_samples": (0, {}),
    "validation_split": (1.0, {}),
    "data_seed": (-1, {}),
    "max_length": (4, {}),
    "window_stride": (200, {"truncation": "sliding"}),
    "block_size": (1, {}),
    "model_layers": (0, {}),
    "model_hidden": (0, {}),
    "model_heads": (0, {}),
    "vocab_size": (0, {}),
    "num_beams": (0, {}),
    "max_new_tokens": (0, {}),
    "epochs": (0, {}),
    "max_steps": (-1, {}),  # 0 is a zero-shot evaluation
    "batch_size": (0, {}),
    "micro_batch_size": (0, {}),
    "eval_batch_size": (0, {}),
    "learning_rate": (-1e-5, {}),
    "weight_decay": (-0.01, {}),
    "warmup_ratio": (1.0, {}),
    "max_grad_norm": (-1.0, {}),
    "seed": (-3, {}),
    "eval_steps": (0, {}),
    "early_stopping_patience": (0, {}),
    "log_steps": (0, {}),
    "checkpoint_steps": (0, {}),
}


def test_every_numeric_training_option_has_an_out_of_range_case():
    assert sorted(TRAIN_OUT_OF_RANGE) == sorted(numeric_fields(TrainConfig))


@pytest.mark.parametrize("name", sorted(TRAIN_OUT_OF_RANGE))
def test_a_training_option_out_of_its_range_is_refused_naming_it(name):
    value, beside = TRAIN_OUT_OF_RANGE[name]
    with pytest.raises(ValueError) as error:
        TrainConfig(**beside, **{name: value})
    message = str(error.value)
    assert name in message and repr(value) in message and "must be" in message, message


#: A value outside its range for every numeric option of every method.
METHOD_OUT_OF_RANGE: dict[str, dict[str, Any]] = {
    "attn-dropout": {"p": 1.0},
    "scores-dropout": {"p": -0.1},
    "drophead": {"p": 1.0, "warmup": 0.0},
    "layerdrop": {"p": 1.5},
    "attn-layerdrop": {"p": -0.5},
    "scheduled": {"start": 1.2, "fit_segments": 0},
    "attendout": {
        "dropout_steps": 0,
        "eval_samples": 0,
        "generator_width": 0,
        "temperature": 0.0,
        "init_drop": 0.0,
        "rate_noise": -0.1,
        "rate_lr": 0.0,
        "generator_lr": -1e-3,
        "baseline_decay": 1.0,
        "reinit_temperature": -1.0,
    },
    "addrop": {"p": 0.0, "q": 1.1, "period": 0, "ig_steps": 0},
    "synthesizer": {"l_max": 0, "rank": 0, "synthesizer_lr": 0.0},
    "none": {},
}
METHOD_CASES = [
    (m, name, value) for m, options in METHOD_OUT_OF_RANGE.items() for name, value in options.items()
]


def test_every_numeric_method_option_has_an_out_of_range_case():
    # the package's own methods (other tests register methods of their own in the same registry)
    ours = {name: cls for name, cls in METHODS.items() if cls.__module__.startswith("attendout.")}
    assert sorted(METHOD_OUT_OF_RANGE) == sorted(ours)
    for method, cls in ours.items():
        assert sorted(METHOD_OUT_OF_RANGE[method]) == sorted(numeric_fields(cls)), method


@pytest.mark.parametrize(("method", "name", "value"), METHOD_CASES)
def test_a_method_option_out_of_its_range_is_refused_naming_it(method, name, value):
    with pytest.raises(ValueError) as error:
        get_method_config(method, **{name: value})
    message = str(error.value)
    assert method in message and name in message and repr(value) in message, message


def test_a_device_this_machine_lacks_is_refused_before_any_data_is_read(tiny_run, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"device 'cuda' is not available on this machine; available: cpu"):
        pick_device("cuda")
    with pytest.raises(ValueError, match="device must be auto, cpu, cuda, cuda:N or mps, got 'gpu'"):
        TrainConfig(device="gpu")
    check_device_name("cuda:1")  # its form is fine: a config made on a GPU machine still reads here

    def no_data(config):
        raise AssertionError("data read before the device was checked")

    import attendout.run.setup as run_setup
    from attendout.run.loop import TrainingLoop

    monkeypatch.setattr(run_setup, "load_data", no_data)

    with pytest.raises(ValueError, match="device 'cuda:0' is not available"):
        TrainingLoop(toy_train_config(tiny_run, device="cuda:0"))


# ---------------------------------------------------------------------------------------------------
# 2. Types at the boundary: one rule (a bool is no number, an int is a float), file/section/field named

TRAIN_NUMERIC = numeric_fields(TrainConfig)
METHOD_NUMERIC = [(m, name) for m, cls in sorted(METHODS.items()) for name in numeric_fields(cls)]


@pytest.mark.parametrize("name", TRAIN_NUMERIC)
@pytest.mark.parametrize("value", [True, [1], "3"])
def test_a_training_number_of_another_type_is_refused_naming_field_type_and_value(name, value):
    with pytest.raises(OptionTypeError) as error:
        TrainConfig(**{name: value})
    message = str(error.value)
    assert message.startswith(f"{name} must be ") and repr(value) in message, message
    assert "integer" in message or "number" in message, message


@pytest.mark.parametrize("name", bool_fields(TrainConfig))
def test_a_training_flag_given_as_text_is_refused(name):
    with pytest.raises(OptionTypeError, match=rf"{name} must be true or false \(a bool\), got str 'no'"):
        TrainConfig(**{name: "no"})


@pytest.mark.parametrize(("method", "name"), METHOD_NUMERIC)
@pytest.mark.parametrize("value", [True, [0.1], "0.1"])
def test_a_method_number_of_another_type_is_refused_for_every_method(method, name, value):
    with pytest.raises(OptionTypeError) as error:
        get_method_config(method, **{name: value})
    message = str(error.value)
    assert message.startswith(f"{method}: {name} must be ") and repr(value) in message, message


@pytest.mark.parametrize(
    ("method", "name"), [(m, name) for m, cls in sorted(METHODS.items()) for name in bool_fields(cls)]
)
def test_a_method_flag_given_as_text_is_refused(method, name):
    with pytest.raises(OptionTypeError, match=rf"{method}: {name} must be true or false"):
        get_method_config(method, **{name: "no"})


def test_ints_stand_for_floats_and_comma_text_for_lists():
    assert TrainConfig(epochs=2, weight_decay=0).epochs == 2
    assert get_method_config("scores-dropout", p=0).p == 0
    assert get_method_config("attn-dropout", layers="0,1").layers == [0, 1]
    assert get_method_config("scheduled", slopes="-0.1,-0.2").slopes == [-0.1, -0.2]
    with pytest.raises(OptionTypeError, match="attendout: dropout_steps must be an integer, got float 2.5"):
        get_method_config("attendout", dropout_steps=2.5)
    with pytest.raises(OptionTypeError, match="epochs must be a finite number, got float nan"):
        TrainConfig(epochs=float("nan"))


def test_the_checker_reads_optional_list_dict_and_literal_types():
    assert matches(None, int | None) and matches(3, int | None) and not matches(True, int | None)
    assert matches(["a"], list[str]) and not matches(["a", 1], list[str]) and not matches("a", list[str])
    assert matches({"dev": "x"}, dict[str, str]) and not matches({"dev": 1}, dict[str, str])
    assert matches("v", Literal["v", "fixed"]) and not matches("w", Literal["v", "fixed"])
    assert matches({"p": [1, "x"]}, dict[str, Any])
    with pytest.raises(OptionTypeError, match=r"f.toml: \[training\]: eval_files must be a table of strings"):
        check_values(TrainConfig, {"eval_files": {"dev": 3}}, "f.toml: [training]")


def test_apply_keywords_are_typed(bert):
    with pytest.raises(OptionTypeError, match="scores-dropout: p must be a number, got bool True"):
        attendout.apply(bert, "scores-dropout", p=True)
    with pytest.raises(OptionTypeError, match="attn-dropout: rescale must be true or false"):
        attendout.apply(bert, "attn-dropout", rescale="no")


@pytest.mark.parametrize(
    ("table", "line", "expected"),
    [
        ("method", "p = true", "[method]: scores-dropout: p must be a number, got bool True"),
        ("method", "p = [0.1, 0.2]", "[method]: scores-dropout: p must be a number, got list [0.1, 0.2]"),
        ("training", "epochs = [1, 2]", "[training]: epochs must be a number, got list [1, 2]"),
        ("training", 'progress = "no"', "[training]: progress must be true or false (a bool), got str 'no'"),
        ("training", "batch_size = 8.0", "[training]: batch_size must be an integer, got float 8.0"),
    ],
)
def test_a_config_file_value_of_the_wrong_type_names_file_section_field_and_type(
    tmp_path, table, line, expected
):
    path = tmp_path / "method.toml"
    method = 'name = "scores-dropout"\n' + (line + "\n" if table == "method" else "")
    training = f"\n[training]\n{line}\n" if table == "training" else ""
    path.write_text(f"[method]\n{method}{training}")
    with pytest.raises(ValueError) as error:
        load_config_file(path)
    assert str(error.value) == f"{path}: {expected}"


def test_an_experiment_files_method_option_of_the_wrong_type_names_the_file(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(
        '[experiment]\nseeds = [1]\n\n[[models]]\nname = "m"\n\n[[tasks]]\nname = "file"\n\n'
        '[[methods]]\nname = "none"\n\n[[methods]]\nname = "scores-dropout"\noptions = { p = true }\n'
    )
    with pytest.raises(ExperimentError) as error:
        load_experiment(path)
    message = str(error.value)
    assert str(path) in message and "[[methods]] #2" in message, message
    assert "p must be a number, got bool True" in message, message
    path.write_text(
        '[experiment]\nseeds = [1]\n\n[training]\nhub = "no"\n\n[[models]]\nname = "m"\n\n'
        '[[tasks]]\nname = "file"\n\n[[methods]]\nname = "none"\n'
    )
    with pytest.raises(ExperimentError, match=r"\[training\] hub = 'no': must be true or false"):
        load_experiment(path)


# ---------------------------------------------------------------------------------------------------
# 5. Names that collide: an evaluation split may not take the run's own split names


@pytest.mark.parametrize("split", ["validation", "train"])
def test_an_eval_split_named_like_the_runs_own_splits_is_refused(tiny_run, split, capsys):
    with pytest.raises(DataError, match=f"--eval-file: an evaluation split may not be named '{split}'"):
        parse_eval_files([f"{split}={tiny_run['dev']}"])
    with pytest.raises(DataError, match=f"eval_files: an evaluation split may not be named '{split}'"):
        load_task_data(
            "file", train_file=tiny_run["train"], eval_files={split: tiny_run["dev"]}, text_columns=["text"]
        )
    from attendout.cli import main

    args = toy_cli_args(tiny_run, "--max-steps", "1")
    args[args.index(f"dev={tiny_run['dev']}")] = f"{split}={tiny_run['dev']}"
    assert main(args) == 2
    assert f"may not be named '{split}'" in capsys.readouterr().err
    assert parse_eval_files([f"dev={tiny_run['dev']}", f"validation-file={tiny_run['dev']}"]) is not None


# ---------------------------------------------------------------------------------------------------
# 6. API misuse: a bare string is one text


def test_predict_takes_a_bare_string_as_one_text(tiny_run):
    from attendout.predict.classification import Predictor

    predictor = Predictor.load(tiny_run["model"], device="cpu", max_length=16)
    one = predictor.predict("good fun nice")
    listed = predictor.predict(["good fun nice"])
    assert len(one.predictions) == 1 and one.labels == listed.labels
    torch.testing.assert_close(torch.as_tensor(one.scores), torch.as_tensor(listed.scores))
    pair = predictor.predict("good fun", "bad dull")
    assert len(pair.predictions) == 1
