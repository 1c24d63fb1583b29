"""Malformed inputs against `attendout finetune` (issue 21): each a non-zero exit, no traceback, the
problem named in a one-line message, and the output folder left as it was.

One tiny model folder and one pair of good toy files serve every case; nearly all cases fail before
training starts. The two run cases (a NaN loss, a busy output folder) run or hold a real run.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from attendout.cli import main
from attendout.core.folder import CHECKPOINT_DIR, CHECKPOINT_FILE
from attendout.core.lock import LOCK_FILE
from conftest import save_tiny_model_dir, snapshot, write_sentiment_csv


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad_input")
    return {
        "model": save_tiny_model_dir(root / "model"),
        "train": write_sentiment_csv(root / "train.csv", 64, seed=0),
        "dev": write_sentiment_csv(root / "dev.csv", 16, seed=1),
        "root": root,
    }


def finetune_args(shared, out: Path, train=None, dev=None, *extra: str, model=None) -> list[str]:
    return [
        "finetune",
        "--task", "file",
        "--train-file", str(train or shared["train"]),
        "--eval-file", f"dev={dev or shared['dev']}",
        "--text-columns", "text",
        "--label-column", "label",
        "--model", str(model or shared["model"]),
        "--batch-size", "8",
        "--max-length", "16",
        "--max-steps", "2",
        "--no-progress",
        "--output-dir", str(out),
        *extra,
    ]  # fmt: skip


def refused(capsys, args: list[str], out: Path, *needles: str, code: int | None = None) -> str:
    """Run the CLI; assert a non-zero exit, one message naming every needle, and ``out`` unchanged."""
    before = snapshot(out)
    rc = main(args)
    err = capsys.readouterr().err
    assert rc != 0 if code is None else rc == code, err
    assert "Traceback" not in err
    message = [line for line in err.splitlines() if line.startswith("attendout: error") or "failed" in line]
    assert message, err
    for needle in needles:
        assert needle in err, f"{needle!r} not in {err!r}"
    assert snapshot(out) == before
    return err


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


GOOD_ROWS = ["good fun film,1", "bad dull plot,0", "great nice story,1", "awful boring actors,0"]
JSONL_GOOD = '{"text": "good fun film", "label": 1}\n{"text": "bad dull plot", "label": 0}\n'


def csv_with(*rows: str, header: str = "text,label") -> str:
    return "\n".join([header, *GOOD_ROWS, *rows]) + "\n"


# --------------------------------------------------------------------------------------------------
# Files: (name, file name, contents, expected words in the message). Each is the train file.

FILE_CASES = [
    ("csv-blank-label", "t.csv", csv_with("the plot,"), ["line 6", "column 'label'", "the label is blank"]),
    ("csv-space-label", "t.csv", csv_with('the plot," "'), ["line 6", "column 'label'", "blank"]),
    (
        "tsv-blank-label",
        "t.tsv",
        "text\tlabel\ngood fun\t1\nbad dull\t0\nthe plot\t\n",
        ["t.tsv line 4", "column 'label'", "blank"],
    ),
    (
        "jsonl-null-label",
        "t.jsonl",
        '{"text": "good", "label": 1}\n{"text": "bad", "label": 0}\n{"text": "plot", "label": null}\n',
        ["line 3", "column 'label'", "blank"],
    ),
    (
        "jsonl-missing-key",
        "t.jsonl",
        '{"text": "good", "label": 1}\n{"text": "bad"}\n',
        ["line 2", "no key 'label'"],
    ),
    (
        "jsonl-not-json",
        "t.jsonl",
        '{"text": "good", "label": 1}\n{"text": "bad", \n',
        ["line 2", "not valid JSON"],
    ),
    (
        "jsonl-not-object",
        "t.jsonl",
        '{"text": "good", "label": 1}\n[1, 2]\n',
        ["line 2", "expected a JSON object"],
    ),
    (
        "jsonl-duplicate-key",
        "t.jsonl",
        '{"text": "good", "label": 1}\n{"text": "bad", "label": 0, "label": 1}\n',
        ["line 2", "key 'label' appears twice"],
    ),
    (
        "csv-field-count",
        "t.csv",
        csv_with("a,b,c"),
        ["line 6", "expected 2 comma-separated fields", "found 3"],
    ),
    ("tsv-field-count", "t.tsv", "text\tlabel\ngood\t1\nbad\t0\textra\n", ["line 3", "tab-separated"]),
    (
        "csv-duplicate-header",
        "t.csv",
        csv_with(header="text,text"),
        ["line 1", "duplicate header name 'text'"],
    ),
    ("csv-empty-file", "t.csv", "", ["file is empty"]),
    ("csv-not-utf8", "t.csv", b"text,label\ncaf\xe9 good,1\n", ["not UTF-8"]),
    ("unknown-extension", "t.txt", "text,label\ngood,1\n", ["cannot tell the format"]),
    ("csv-gz-corrupt", "t.csv.gz", b"not gzip at all", ["cannot read"]),
    ("csv-empty-text", "t.csv", csv_with(",1"), ["line 6", "column 'text'", "the text is empty"]),
    ("tsv-blank-text", "t.tsv", "text\tlabel\ngood\t1\n   \t0\n", ["line 3", "column 'text'", "empty"]),
    (
        "jsonl-empty-text",
        "t.jsonl",
        '{"text": "good", "label": 1}\n{"text": " ", "label": 0}\n',
        ["line 2", "empty"],
    ),
    (
        "labels-by-case",
        "t.csv",
        csv_with("nice film,Pos", "dull film,pos"),
        ["line 7", "'pos'", "'Pos'", "only by case"],
    ),
    ("labels-by-space", "t.csv", csv_with('nice film,"1 "'), ["line 6", "'1 '", "surrounding whitespace"]),
    ("one-class", "t.csv", "text,label\ngood,1\nfine,1\nnice,1\n", ["t.csv", "at least 2 labels", "'1'"]),
    # issue 30: a JSON value of the wrong type never becomes a class (or a text) named after its repr
    *(
        (
            f"jsonl-{name}-label",
            "t.jsonl",
            JSONL_GOOD + f'{{"text": "plot", "label": {value}}}\n',
            ["t.jsonl line 3", "column 'label'", *needles],
        )
        for name, value, needles in [
            ("array", "[1]", ["a JSON array", "string or integer"]),
            ("object", '{"y": 1}', ["a JSON object", "string or integer"]),
            ("boolean", "true", ["a JSON boolean", "string or integer"]),
            ("float", "1.0", ["a JSON number with a decimal point", "--label-kind regression"]),
            ("nan", "NaN", ["a JSON NaN or Infinity"]),
        ]
    ),
    (
        "jsonl-object-text",
        "t.jsonl",
        JSONL_GOOD + '{"text": {"a": 1}, "label": 1}\n',
        ["t.jsonl line 3", "key 'text'", "a JSON object", "write the text as a JSON string"],
    ),
    ("jsonl-number-text", "t.jsonl", JSONL_GOOD + '{"text": 5, "label": 1}\n', ["line 3", "a JSON integer"]),
    (
        "jsonl-deeply-nested",
        "t.jsonl",
        JSONL_GOOD + '{"text": ' + "[" * 50_000 + "]" * 50_000 + ', "label": 1}\n',
        ["t.jsonl line 3", "nested too deeply"],
    ),
    (
        "jsonl-huge-integer",
        "t.jsonl",
        JSONL_GOOD + '{"text": "plot", "label": 1' + "0" * 5000 + "}\n",
        ["t.jsonl line 3", "cannot read this JSON"],
    ),
    (
        "labels-by-number",
        "t.csv",
        csv_with("nice film,01"),
        ["line 6", "'01'", "'1'", "the way a number is written"],
    ),
    ("csv-blank-first-line", "t.csv", "\n" + csv_with(), ["t.csv line 1", "the header row is empty"]),
]


@pytest.mark.parametrize("name,filename,contents,needles", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_a_malformed_train_file_is_named(shared, tmp_path, capsys, name, filename, contents, needles):
    train = write(tmp_path / filename, contents)
    refused(capsys, finetune_args(shared, tmp_path / "out", train=train), tmp_path / "out", *needles)


def test_a_train_file_that_is_missing_is_named(shared, tmp_path, capsys):
    missing = tmp_path / "nope.csv"
    refused(
        capsys,
        finetune_args(shared, tmp_path / "out", train=missing),
        tmp_path / "out",
        "file not found",
        "nope.csv",
    )


def test_a_dev_label_outside_the_train_labels_is_named(shared, tmp_path, capsys):
    dev = write(tmp_path / "dev.csv", "text,label\ngood,1\nbad,7\n")
    refused(
        capsys, finetune_args(shared, tmp_path / "out", dev=dev), tmp_path / "out", "dev.csv line 3", "'7'"
    )


def test_a_one_class_train_split_with_named_labels_is_refused(shared, tmp_path, capsys):
    """A built-in task's labels are known: a train file with one of them only is still refused."""
    train = write(tmp_path / "sst.tsv", "sentence\tlabel\ngood\t1\nfine\t1\nnice\t1\n")
    args = finetune_args(shared, tmp_path / "out", train=train)
    args[args.index("file")] = "sst2"
    args[args.index("--text-columns") + 1] = "sentence"
    refused(capsys, args, tmp_path / "out", "one class only", "'positive'")


# Regression (STS-B from a file: scores 0..5): a non-number, NaN, a score out of range.
@pytest.mark.parametrize(
    "score,needles",
    [
        ("abc", ["'abc'", "is not a number"]),
        ("nan", ["'nan'", "not a number"]),
        ("inf", ["not a number"]),
        ("7.5", ["outside the range 0..5"]),
    ],
    ids=["non-numeric", "nan", "inf", "out-of-range"],
)
def test_a_bad_regression_score_is_named(shared, tmp_path, capsys, score, needles):
    rows = "sentence1,sentence2,label\na good film,a fine film,4.0\na plot,the plot,3.5\n"
    train = write(tmp_path / "sts.csv", rows + f"dull actors,bad actors,{score}\n")
    args = finetune_args(shared, tmp_path / "out", train=train, dev=write(tmp_path / "dev.csv", rows))
    args[args.index("file")] = "stsb"
    args[args.index("--text-columns") + 1] = "sentence1,sentence2"
    refused(capsys, args, tmp_path / "out", "sts.csv line 4", "column 'label'", *needles)


# --------------------------------------------------------------------------------------------------
# Columns and options

OPTION_CASES = [
    (
        "no-text-column",
        ["--text-columns", "review"],
        ["no column 'review'", "columns present: 'text', 'label'"],
    ),
    ("no-label-column", ["--label-column", "stars"], ["no column 'stars'"]),
    ("three-text-columns", ["--text-columns", "text,label,text"], ["1 or 2"]),
    ("batch-size-0", ["--batch-size", "0"], ["batch_size must be at least 1, got 0"]),
    ("negative-lr", ["--learning-rate", "-1"], ["learning_rate must be positive"]),
    ("bad-precision", ["--precision", "fp8"], ["precision must be fp32, bf16 or fp16"]),
    ("unknown-method", ["--method", "dropconnect"], ["unknown method 'dropconnect'"]),
    ("bad-method-option", ["--method", "scores-dropout", "--p", "1.5"], ["p", "1.5"]),
    ("unknown-task", ["--task", "imdbx"], ["unknown task 'imdbx'"]),
    ("eval-file-without-split", ["--eval-file", "dev.csv"], ["SPLIT=PATH"]),
    ("eval-split-twice", ["--eval-file", "dev=other.csv"], ["names split 'dev' twice"]),
    # issue 30: a run that would read the answer as input is refused before any file is read
    (
        "label-column-as-text",
        ["--text-columns", "label"],
        ["column 'label' is both a text column", "read the answer as input", "--text-columns"],
    ),
    ("text-column-twice", ["--text-columns", "text,text"], ["name column 'text' twice"]),
    ("text-is-the-label", ["--label-column", "text"], ["column 'text' is both a text column"]),
]


@pytest.mark.parametrize("name,extra,needles", OPTION_CASES, ids=[c[0] for c in OPTION_CASES])
def test_a_bad_option_is_named(shared, tmp_path, capsys, name, extra, needles):
    refused(capsys, finetune_args(shared, tmp_path / "out") + extra, tmp_path / "out", *needles)


# --------------------------------------------------------------------------------------------------
# Model folders


def test_an_absent_model_folder(shared, tmp_path, capsys):
    refused(
        capsys,
        finetune_args(shared, tmp_path / "out", model=tmp_path / "nope"),
        tmp_path / "out",
        "nope",
        "does not exist",
    )


def test_a_model_folder_without_config(shared, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    refused(capsys, finetune_args(shared, out, model=tmp_path / "empty"), out, "has no config.json")


def test_a_model_folder_without_weights(shared, tmp_path, capsys):
    folder = tmp_path / "noweights"
    folder.mkdir()
    for f in Path(shared["model"]).iterdir():
        if f.suffix != ".safetensors":
            (folder / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "out"
    refused(capsys, finetune_args(shared, out, model=folder), out, "could not load model", "noweights")


def test_a_model_of_an_unsupported_family(shared, tmp_path, capsys):
    from transformers import DebertaConfig, DebertaForSequenceClassification

    folder = tmp_path / "deberta"
    torch.manual_seed(0)
    config = DebertaConfig(
        vocab_size=99, max_position_embeddings=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37,
    )  # fmt: skip
    DebertaForSequenceClassification(config).save_pretrained(folder)  # DeBERTa v1: not hooked
    for f in Path(shared["model"]).iterdir():
        if "token" in f.name or f.name == "vocab.txt":
            (folder / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "out"
    refused(
        capsys, finetune_args(shared, out, model=folder), out, "model_type 'deberta'", "supported model types"
    )


def test_a_model_whose_head_has_another_label_count(shared, tmp_path, capsys):
    folder = save_tiny_model_dir(tmp_path / "three", num_labels=3, id2label={0: "a", 1: "b", 2: "c"})
    out = tmp_path / "out"
    refused(
        capsys,
        finetune_args(shared, out, model=folder),
        out,
        "3 labels (a, b, c)",
        "2 labels (0, 1)",
        "--ignore-mismatched-head",
    )


# --------------------------------------------------------------------------------------------------
# Runs


def test_a_finished_run_is_not_replaced_without_overwrite(shared, tmp_path, capsys):
    out = tmp_path / "out"
    write(out / "results.json", "{}")
    refused(capsys, finetune_args(shared, out), out, "holds a finished run", "--overwrite")


@contextlib.contextmanager
def lock_held(out: Path):
    """Another process holding ``out``'s run lock (its pid yielded) until the block ends."""
    holder = textwrap.dedent(
        f"""
        import fcntl, os, sys
        fd = os.open({str(out / LOCK_FILE)!r}, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"pid {{os.getpid()}} on test".encode())
        print("ready", flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        yield proc.pid
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_a_busy_output_folder_refuses_a_second_run(shared, tmp_path, capsys):
    """Another process holds the folder's lock: the second run refuses and writes nothing."""
    out = tmp_path / "out"
    out.mkdir()
    with lock_held(out) as pid:
        refused(capsys, finetune_args(shared, out), out, "in use by another run", f"pid {pid}")
    # the holder is gone: its lock is stale and the next run takes the folder over (and frees it)
    assert main(finetune_args(shared, out, None, None, "--max-steps", "1")) == 0
    assert (out / "results.json").is_file() and not (out / LOCK_FILE).exists()


def test_a_folder_a_live_run_writes_is_refused_naming_its_process_before_anything_else(
    shared, tmp_path, capsys
):
    """Issue 49, class 4: what the folder holds (a run's results, a checkpoint) is not the point while a live
    process writes it: the message names that process instead of advising --resume or --overwrite."""
    out = tmp_path / "out"
    write(out / "results.json", "{}")
    with lock_held(out) as pid:
        assert main(finetune_args(shared, out)) == 2
        err = capsys.readouterr().err
        assert "in use by another run" in err and f"pid {pid}" in err and "--overwrite" not in err
    assert main(finetune_args(shared, out)) == 2  # the holder gone: the finished run is the point again
    assert "holds a finished run" in capsys.readouterr().err


def test_a_nan_loss_stops_naming_the_step_and_keeps_the_last_checkpoint(shared, tmp_path, capsys):
    out = tmp_path / "out"
    extra = ["--max-steps", "8", "--checkpoint-steps", "1", "--log-steps", "1", "--eval-steps", "100"]
    args = finetune_args(shared, out, None, None, *extra, "--learning-rate", "1e30", "--warmup-ratio", "0")
    rc = main(args)
    err = capsys.readouterr().err
    assert rc == 1 and "Traceback" not in err
    assert "training failed: loss is nan at step" in err or "training failed: loss is inf at step" in err, err
    failed_at = int(err.split(" at step ")[1].split()[0])
    summary = json.loads((out / CHECKPOINT_DIR / "state.json").read_text())
    assert summary["step"] == failed_at - 1  # the last good step's state, whole
    state = torch.load(out / CHECKPOINT_DIR / CHECKPOINT_FILE, weights_only=True)
    assert state["state"]["step"] == failed_at - 1
    assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())
    assert not (out / "results.json").exists() and not (out / LOCK_FILE).exists()


def test_a_checkpoint_holding_a_pickled_object_is_refused(shared, tmp_path, capsys):
    out = tmp_path / "out"
    marker = tmp_path / "code-ran"
    write(out / "log.jsonl", "")
    (out / CHECKPOINT_DIR).mkdir()
    torch.save({"format": 2, "evil": Evil(str(marker))}, out / CHECKPOINT_DIR / CHECKPOINT_FILE)
    refused(
        capsys,
        finetune_args(shared, out, None, None, "--resume"),
        out,
        "refusing the checkpoint",
        "pickled Python object",
    )
    assert not marker.exists()  # nothing in the file was run


class Evil:
    """Unpickling this makes a folder: proof that loading ran code."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        import os

        return (os.makedirs, (self.path,))


def test_drop_bad_rows_leaves_out_blank_labels_and_empty_texts_and_says_how_many(shared, tmp_path, caplog):
    """The explicit way on: rows with a blank label or an empty text are dropped, and counted."""
    train = write(tmp_path / "t.csv", Path(shared["train"]).read_text() + "the plot,\n,1\n")
    out = tmp_path / "out"
    assert main(finetune_args(shared, out, train, None, "--max-steps", "1", "--drop-bad-rows")) == 0
    assert "t.csv: dropped 2 of 66 rows with an empty text or a blank label (lines 66, 67)" in caplog.text
    config = json.loads((out / "config.json").read_text())
    assert config["sizes"]["train"] + config["sizes"]["validation"] == 64
    assert config["task"]["label_names"] == ["0", "1"]  # no '' class


def test_train_eval_overlap_is_warned_of_before_training(shared, tmp_path, caplog):
    """Issue 30: dev rows copied from the train file are counted in one warning; the run goes on."""
    rows = Path(shared["train"]).read_text().splitlines()
    dev = write(tmp_path / "dev.csv", "\n".join(rows[:17]) + "\n")  # the header and 16 training rows
    out = tmp_path / "out"
    assert main(finetune_args(shared, out, None, dev, "--max-steps", "1")) == 0
    [line] = [r.getMessage() for r in caplog.records if "train/eval overlap" in r.getMessage()]
    count = int(line.split("train/eval overlap: ")[1].split()[0])
    assert 12 <= count <= 16 and "of 16 'dev' examples have an input identical to a training example" in line
