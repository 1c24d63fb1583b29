"""Generation's inputs (issue 59): lengths checked against the model's positions before anything trains,
a tokenizer without an end-of-sequence token, and the scratch tokenizer exact in plain ``transformers``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from attendout.config import TrainConfig
from attendout.train import finetune

SENTENCES = [
    "the cat sat on the mat",
    "the dog sat on the log",
    "a bird flew over the house",
    "the cat ran after the dog",
    "a dog ran over the mat",
    "the bird sat on the house",
]
GERMAN = [
    "die katze sass auf der matte",
    "der hund sass auf dem holz",
    "ein vogel flog ueber das haus",
    "die katze lief dem hund nach",
    "ein hund lief ueber die matte",
    "der vogel sass auf dem haus",
]


@pytest.fixture
def files(tmp_path):
    (tmp_path / "train.txt").write_text("\n".join(SENTENCES * 3) + "\n")
    (tmp_path / "dev.txt").write_text("the cat sat on the log\na bird ran\n")
    (tmp_path / "train.tsv").write_text(
        "source\ttarget\n" + "".join(f"{e}\t{d}\n" for e, d in zip(SENTENCES * 3, GERMAN * 3, strict=True))
    )
    (tmp_path / "dev.tsv").write_text(
        "source\ttarget\n" + "".join(f"{e}\t{d}\n" for e, d in zip(SENTENCES, GERMAN, strict=True))
    )
    return tmp_path


def tiny(tmp_path, kind: str, **values) -> TrainConfig:
    lm = kind == "lm"
    base = dict(
        task=kind,
        model="gpt2" if lm else "t5",
        model_init="scratch",
        train_file=str(tmp_path / ("train.txt" if lm else "train.tsv")),
        eval_files={"dev": str(tmp_path / ("dev.txt" if lm else "dev.tsv"))},
        model_layers=1,
        model_hidden=32,
        model_heads=2,
        vocab_size=300,
        max_length=16,
        batch_size=4,
        max_steps=1,
        validation_split=0.2,
        progress=False,
        output_dir=str(tmp_path / "run"),
    )
    return TrainConfig(**{**base, **values})


# --------------------------------------------------------------------------------------------------
# The scratch tokenizer, exact in plain transformers

ROUND_TRIP = [
    "the cat sat on the mat",
    " a leading space",
    "a trailing space ",
    "  two leading spaces",
    "Müller's café — 10 €, 東京 😀",
    "a tab\tand a\nnewline",
    "",
]

PLAIN = r"""
import json, sys
from transformers import AutoTokenizer

tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
texts = json.loads(sys.argv[2])
out = {
    "plain": [tokenizer.decode(tokenizer(t)["input_ids"]) for t in texts],
    "skipped": [tokenizer.decode(tokenizer(t)["input_ids"], skip_special_tokens=True) for t in texts],
    "ours": sorted(m for m in sys.modules if m.split(".")[0] == "attendout"),
}
print(json.dumps(out))
"""


@pytest.mark.parametrize("kind", ["lm", "seq2seq"])
def test_the_saved_scratch_tokenizer_gives_every_text_back_in_plain_transformers(files, tmp_path, kind):
    finetune(tiny(tmp_path, kind))
    model = tmp_path / "run" / "model"
    done = subprocess.run(
        [sys.executable, "-c", PLAIN, str(model), json.dumps(ROUND_TRIP)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ours"] == []  # loaded with transformers alone
    assert out["skipped"] == ROUND_TRIP  # no leading space gained, none lost
    if kind == "lm":  # no special token is added: decode(encode(text)) is the text itself
        assert out["plain"] == ROUND_TRIP
    else:  # a seq2seq text ends with </s>
        assert out["plain"] == [t + "</s>" for t in ROUND_TRIP]
