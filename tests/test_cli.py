"""The command line: a smoke run, method options from the config dataclass, one-line errors."""

from __future__ import annotations

import json

import pytest

import plain
from attendout.cli import main
from conftest import toy_cli_args


def finetune_args(tiny_run, *extra):
    return toy_cli_args(tiny_run, "--max-steps", "4", *extra)


def test_cli_smoke_run_in_a_subprocess(tiny_run):
    # `python -m attendout.cli ARGS` in a process of its own that has not imported attendout (plain.py's
    # clean process has torch and transformers imported; the fresh interpreters of `make test-processes`
    # start the console script itself)
    out = plain.attendout(
        *finetune_args(tiny_run, "--method", "scheduled", "--start", "0.5", "--slopes", "-0.5")
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| split | accuracy | f1 |" in out.stdout and "| dev |" in out.stdout
    results = json.loads((tiny_run["tmp"] / "run" / "results.json").read_text())
    assert results["method_options"] == {
        "name": "scheduled",
        "start": 0.5,
        "slopes": [-0.5],
        "knots": None,
        "layers": None,
        "from_run": None,
        "fit_segments": 3,
        "fit_slopes": False,
    }


def test_help_and_the_module_docstring_list_every_command_and_a_bare_call_is_a_usage_error(capsys):
    from attendout import __version__, cli
    from attendout.cli import COMMANDS

    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(f"  {name} " in out for name in COMMANDS)
    assert cli.__doc__.splitlines()[0] == f"Command line: ``attendout {' | '.join(COMMANDS)}``."
    assert main([]) == 2 and "commands:" in capsys.readouterr().err
    assert main(["--version"]) == 0 and capsys.readouterr().out.strip() == f"attendout {__version__}"
    assert main(["train"]) == 2 and "unknown command 'train'" in capsys.readouterr().err


def test_method_options_appear_in_help(capsys):
    with pytest.raises(SystemExit):
        main(["finetune", "--method", "scheduled", "--help"])
    out = capsys.readouterr().out
    assert "options of method 'scheduled'" in out and "--knots" in out and "--slopes" in out
    with pytest.raises(SystemExit):
        main(["finetune", "--method", "attn-dropout", "--help"])
    out = capsys.readouterr().out
    assert "replaces the model's own dropout" in out and "--no-rescale" in out


def test_methods_and_tasks_listings(capsys):
    assert main(["methods"]) == 0
    out = capsys.readouterr().out
    assert "scores-dropout" in out and "drophead" in out
    assert main(["tasks"]) == 0
    assert "cola" in capsys.readouterr().out


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert err.startswith("attendout: error:")
    return err


@pytest.mark.parametrize(
    "args,match",
    [
        (["finetune", "--method", "nope"], "unknown method 'nope'; known methods:"),
        (["finetune", "--task", "nope"], "unknown task 'nope'"),
        (["finetune", "--method", "scores-dropout", "--p", "2"], r"p must be in \[0, 1\], got 2.0"),
    ],
)
def test_bad_names_and_options_are_one_line_errors(capsys, args, match):
    assert main(args) == 2
    import re

    assert re.search(match, one_line_error(capsys))


def bad_file_cases(tmp_path):
    malformed = tmp_path / "malformed.tsv"
    malformed.write_text("text\tlabel\ngood film\t1\nbad\tfilm\t0\n")
    missing = tmp_path / "missing.csv"
    missing.write_text("sentence,label\ngood film,1\n")
    unknown = tmp_path / "unknown.tsv"
    unknown.write_text("sentence\tlabel\ngood film\t1\nbad film\t7\n")
    empty = tmp_path / "empty.csv"
    empty.write_text("text,label\n")
    return {"malformed": malformed, "missing": missing, "unknown": unknown, "empty": empty}


@pytest.mark.parametrize(
    "case,task_args,match",
    [
        (
            "malformed",
            ["--task", "file", "--text-columns", "text", "--label-column", "label"],
            r"malformed.tsv.*line 3",
        ),
        (
            "missing",
            ["--task", "file", "--text-columns", "text", "--label-column", "label"],
            r"column 'text'",
        ),
        ("unknown", ["--task", "sst2"], r"unknown.tsv line 3.*label '7' is not in the label set"),
        ("empty", ["--task", "file", "--text-columns", "text", "--label-column", "label"], r"empty"),
    ],
)
def test_bad_data_files_are_one_line_errors(tiny_run, capsys, case, task_args, match):
    import re

    path = bad_file_cases(tiny_run["tmp"])[case]
    args = [
        "finetune",
        *task_args,
        "--train-file",
        str(path),
        "--eval-file",
        f"dev={path}",
        "--model",
        tiny_run["model"],
        "--output-dir",
        str(tiny_run["tmp"] / "run"),
        "--no-progress",
    ]
    assert main(args) == 2
    assert re.search(match, one_line_error(capsys))
    assert not (tiny_run["tmp"] / "run").exists()
