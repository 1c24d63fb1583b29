"""Messages that reach users name the user's file and option, not our internals (issue 59, class 3): a
training file too small for a validation split, a file that is not UTF-8 (its line, not a byte offset),
one column given as both source and target, and no message led by one of our function names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from attendout.config import TrainConfig
from attendout.run.loop import finetune
from attendout.tasks import DataError, load_task_data

SRC = Path(__file__).resolve().parents[1] / "src" / "attendout"


def test_a_training_file_too_small_for_a_validation_split_names_the_file_and_the_option(tmp_path):
    train = tmp_path / "train.csv"
    dev = tmp_path / "dev.csv"
    dev.write_text("text,label\ngood,1\nbad,0\n")

    def refused(rows: int, split: float) -> str:
        train.write_text("text,label\n" + "".join(f"text {i},{i % 2}\n" for i in range(rows)))
        config = TrainConfig(
            task="file", train_file=str(train), eval_files={"dev": str(dev)}, text_columns=["text"],
            label_column="label", validation_split=split, progress=False, output_dir=str(tmp_path / "run"),
        )  # fmt: skip
        with pytest.raises(DataError) as error:
            finetune(config)
        assert not (tmp_path / "run").exists()
        return str(error.value)

    five = refused(5, 0.1)
    assert five.startswith(f"{train}: --validation-split 0.1 of its 5 examples leaves no validation example")
    assert five.endswith("use --validation-split between 0.11 and 0.9")
    most = refused(5, 0.95)
    assert most.startswith(f"{train}: --validation-split 0.95 of its 5 examples leaves no training example")
    assert "carve_validation" not in five + most


def test_a_language_modelling_file_of_one_document_names_the_file_and_the_option(tmp_path):
    train = tmp_path / "train.txt"
    train.write_text("a single document\n")
    (tmp_path / "dev.txt").write_text("another one\n")
    config = TrainConfig(
        task="lm", train_file=str(train), eval_files={"dev": str(tmp_path / "dev.txt")}, model="gpt2",
        model_init="scratch", progress=False, output_dir=str(tmp_path / "run"),
    )  # fmt: skip
    with pytest.raises(DataError) as error:
        finetune(config)
    assert str(error.value) == (
        f"{train} has 1 example(s): too few to carve a validation split from (--validation-split 0.1); it "
        "needs at least 2, one for training and one for validation"
    )


def test_a_generation_file_without_eval_file_too_small_for_its_dev_split(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("one\ntwo\nthree\n")
    with pytest.raises(
        DataError, match=r"train.txt: 3 example\(s\); without --eval-file a dev split of 10%"
    ) as error:
        load_task_data("lm", train_file=str(path))
    assert "give --eval-file NAME=PATH, or at least 6 examples" in str(error.value)
    path.write_text("".join(f"doc {i}\n" for i in range(6)))
    assert len(load_task_data("lm", train_file=str(path))[1].eval_splits["dev"]) == 1  # 6 do


@pytest.mark.parametrize("name,task,columns", [("train.csv", "file", ["text"]), ("train.txt", "lm", None)])
def test_a_latin1_file_is_named_by_line_and_column_with_the_command_that_converts_it(
    tmp_path, name, task, columns
):
    """The bad byte lies far past the reader's first chunk: a stream's offset would not be the file's."""
    path = tmp_path / name
    header = "text,label\n" if task == "file" else ""
    good = "".join(f"ünïcode line {i}{',1' if task == 'file' else ''}\n" for i in range(3000))
    path.write_bytes(
        (header + good).encode() + "le café noir".encode("latin-1") + (b",0\n" if task == "file" else b"\n")
    )
    line = 3001 + (task == "file")
    options = dict(text_columns=columns, label_column="label") if task == "file" else {}
    with pytest.raises(DataError) as error:
        load_task_data(task, train_file=str(path), eval_files={"dev": str(path)}, **options)
    message = str(error.value)
    assert message.startswith(f"{path} line {line}, column 7: not UTF-8 text (byte 0xe9: ")
    assert f"iconv -f cp1252 -t utf-8 {path} > {path}.utf8" in message
    assert "byte offset" not in message


def test_one_column_as_source_and_target_names_the_options_given(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("en\tde\n" + "".join(f"a {i}\tb {i}\n" for i in range(10)))
    config = TrainConfig(
        task="seq2seq", train_file=str(path), source_column="en", target_column="en", model="t5",
        model_init="scratch", progress=False, output_dir=str(tmp_path / "run"),
    )  # fmt: skip
    with pytest.raises(DataError) as error:
        finetune(config)
    message = str(error.value)
    assert "the source and the target column are both 'en'" in message
    assert "--source-column and --target-column" in message and "--text-columns" not in message


# --------------------------------------------------------------------------------------------------
# No message led by a function name

#: Python-API errors of functions that only code calls with a wrong argument (none is reached from a
#: command's input): the name tells the caller which call was wrong.
API_ONLY = {
    ("report/stats.py", "paired_t_test"),
    ("report/stats.py", "bootstrap_difference"),
    ("report/stats.py", "text_statistics"),
    ("report/stats.py", "detectable_difference"),
    ("tasks/metrics.py", "sequence_counts"),
    ("methods/attendout/game.py", "score_gap"),
}


#: our names that are also the user's words (a command, its stage, a method, a metric): a message may
#: begin with them
USER_WORDS = {"advise", "confirm", "addrop", "perplexity"}


def _functions() -> set[str]:
    names = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
    return names


def _leading_text(node: ast.expr) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value)
    return ""


def test_no_error_message_starts_with_one_of_our_function_names():
    functions = _functions()
    led = []
    for path in sorted(SRC.rglob("*.py")):
        where = str(path.relative_to(SRC))
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                continue
            match = re.match(r"([A-Za-z_][A-Za-z0-9_]*): ", _leading_text(node.exc.args[0]))
            name = match.group(1) if match else ""
            if name in functions and name not in USER_WORDS and (where, name) not in API_ONLY:
                led.append(f"{where}:{node.lineno} {name}")
    assert not led, led
