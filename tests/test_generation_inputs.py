"""Generation's inputs (issue 59): lengths checked against the model's positions before anything trains,
a tokenizer without an end-of-sequence token, and the scratch tokenizer exact in plain ``transformers``."""

from __future__ import annotations

import json
import re

import pytest

import plain
from attendout.config import TrainConfig
from attendout.core.limits import LimitError
from attendout.run.loop import finetune
from test_generation import GERMAN, SENTENCES  # the tiny parallel corpus both files train on


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
    done = plain.run(PLAIN, str(model), json.dumps(ROUND_TRIP), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["ours"] == []  # loaded with transformers alone
    assert out["skipped"] == ROUND_TRIP  # no leading space gained, none lost
    if kind == "lm":  # no special token is added: decode(encode(text)) is the text itself
        assert out["plain"] == ROUND_TRIP
    else:  # a seq2seq text ends with </s>
        assert out["plain"] == [t + "</s>" for t in ROUND_TRIP]


# --------------------------------------------------------------------------------------------------
# A decoder whose tokenizer names no end-of-sequence token

WORDS = sorted({w for s in SENTENCES for w in s.split()})


def gpt2_with_a_bert_tokenizer(folder, eos_token_id, positions: int = 32):
    """A tiny GPT-2 saved with a BERT tokenizer (as some decoders ship: no end-of-sequence token)."""
    from transformers import BertTokenizerFast, GPT2Config, GPT2LMHeadModel

    folder.mkdir()
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"))
    tokenizer.save_pretrained(folder)
    config = GPT2Config(
        vocab_size=len(vocab), n_positions=positions, n_embd=32, n_layer=1, n_head=2, eos_token_id=eos_token_id,
        bos_token_id=eos_token_id,
    )  # fmt: skip
    GPT2LMHeadModel(config).save_pretrained(folder)
    assert tokenizer.eos_token_id is None
    return folder


def test_a_decoder_whose_tokenizer_has_no_eos_takes_its_configs_and_says_so(files, tmp_path, caplog):
    model = gpt2_with_a_bert_tokenizer(tmp_path / "gpt2-bert", eos_token_id=3)  # [SEP]
    with caplog.at_level("WARNING"):
        results = finetune(tiny(tmp_path, "lm", model=str(model), model_init="pretrained"))
    said = [r.getMessage() for r in caplog.records if "end-of-sequence" in r.getMessage()]
    assert len(said) == 1 and "eos_token_id 3 ('[SEP]')" in said[0], said
    assert results["eval"]["dev"]["tokens"] > 0
    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(tmp_path / "run" / "model")
    assert saved.eos_token == "[SEP]" and saved.eos_token_id == 3  # predict reads the same documents


@pytest.mark.parametrize("eos", [None, 50256], ids=["none", "out of vocabulary"])
def test_a_decoder_without_any_eos_is_refused_before_training_naming_how_to_set_one(files, tmp_path, eos):
    model = gpt2_with_a_bert_tokenizer(tmp_path / "gpt2-bert", eos_token_id=eos)
    with pytest.raises(ValueError, match="names no end-of-sequence token") as refused:
        finetune(tiny(tmp_path, "lm", model=str(model), model_init="pretrained"))
    message = str(refused.value)
    assert "tokenizer_config.json" in message and "eos_token_id in its config.json" in message
    assert ("names none" if eos is None else "50256 is not in the tokenizer's vocabulary") in message
    assert not (tmp_path / "run").exists()  # before anything is written


# --------------------------------------------------------------------------------------------------
# Every length against the model's positions, before anything trains


def config_file(tmp_path, family: str, positions: int):
    """A from-scratch config file of 16 (or ``positions``) learned positions: GPT-2 or BART."""
    from transformers import AutoConfig

    if family == "gpt2":
        fields = dict(n_positions=positions, n_embd=32, n_layer=1, n_head=2)
    else:
        fields = dict(
            max_position_embeddings=positions, d_model=32, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
            decoder_start_token_id=2, forced_eos_token_id=2,
        )  # fmt: skip
    config = AutoConfig.for_model(
        family, vocab_size=1000, pad_token_id=0, bos_token_id=1, eos_token_id=2, **fields
    )
    path = tmp_path / f"{family}-{positions}.json"
    path.write_text(config.to_json_string())
    return str(path)


TOO_LONG = [  # (kind, family, options, the option named, the limit it gives)
    ("lm", "gpt2", dict(max_length=16, block_size=32), "--block-size 32", "--block-size 16 or less"),
    ("lm", "gpt2", dict(max_length=24), "--max-length 24", "--max-length 16 or less"),
    (
        "lm",
        "gpt2",
        dict(max_length=16, max_new_tokens=16),
        "--max-new-tokens 16",
        "--max-new-tokens 15 or less",
    ),
    (
        "seq2seq",
        "bart",
        dict(max_length=16, max_new_tokens=40),
        "--max-new-tokens 40",
        "--max-new-tokens 16 or less",
    ),
    ("seq2seq", "bart", dict(max_length=20), "--max-length 20", "--max-length 16 or less"),
]


@pytest.mark.parametrize(
    "kind,family,options,named,limit",
    TOO_LONG,
    ids=[f"{k} {' '.join(map(str, o))}" for k, _, o, *_ in TOO_LONG],
)
def test_every_length_beyond_the_positions_is_refused_before_training(
    files, tmp_path, kind, family, options, named, limit
):
    config = tiny(tmp_path, kind, model=config_file(tmp_path, family, 16), **options)
    with pytest.raises(LimitError) as refused:
        finetune(config)
    message = str(refused.value)
    assert message.startswith(named) and limit in message and re.search("16 (learned )?positions", message), (
        message
    )
    assert "--truncation sliding" not in message  # a classifier's remedy, not a block's or an output's
    assert not (tmp_path / "run").exists()  # nothing written, nothing trained


def test_a_scratch_model_gets_positions_for_every_length_its_run_sends(files, tmp_path):
    """--block-size above --max-length (lm) and --max-new-tokens above it (seq2seq): the model built from
    scratch, and Synthesizer's default l_max, cover them (the l_max was --max-length: the first step failed)."""
    lm = finetune(
        tiny(
            tmp_path,
            "lm",
            max_length=8,
            block_size=16,
            method="synthesizer",
            method_options={"variant": "dense"},
        )
    )
    assert lm["eval"]["dev"]["tokens"] > 0
    from transformers import AutoConfig

    mt = tiny(
        tmp_path, "seq2seq", model="bart", max_length=8, max_new_tokens=12, output_dir=str(tmp_path / "mt")
    )
    finetune(mt)
    assert AutoConfig.from_pretrained(tmp_path / "mt" / "model").max_position_embeddings == 12


def test_predict_on_a_seq2seq_run_refuses_more_new_tokens_than_the_decoder_has_positions(files, tmp_path):
    from attendout.predict.base import PredictError
    from attendout.predict.classification import Predictor

    finetune(tiny(tmp_path, "seq2seq", model=config_file(tmp_path, "bart", 16), max_new_tokens=16))
    assert Predictor.load(tmp_path / "run").options.max_new_tokens == 16  # the run's own: fine
    with pytest.raises(
        PredictError, match=r"^--max-new-tokens 40 is more than .* use --max-new-tokens 16 or less"
    ):
        Predictor.load(tmp_path / "run", max_new_tokens=40)
    with pytest.raises(PredictError, match=r"^--max-length 17 is more than .* use --max-length 16 or less"):
        Predictor.load(tmp_path / "run", max_length=17)


def test_bench_dry_run_marks_a_generation_cell_beyond_its_models_positions_invalid(files, tmp_path, capsys):
    from attendout.cli import main

    short = gpt2_with_a_bert_tokenizer(tmp_path / "gpt2-32", eos_token_id=3)
    long = gpt2_with_a_bert_tokenizer(tmp_path / "gpt2-64", eos_token_id=3, positions=64)
    path = tmp_path / "gen.toml"
    path.write_text(
        f"""
[experiment]
name = "gen"
seeds = [1]
data_seed = 0

[training]
max_steps = 2
max_length = 16
block_size = 48

[[models]]
id = "gpt2-32"
name = "{short}"

[[models]]
id = "gpt2-64"
name = "{long}"

[[tasks]]
id = "lm"
name = "lm"
train_file = "{tmp_path / "train.txt"}"
eval_files = {{ dev = "{tmp_path / "dev.txt"}" }}

[[methods]]
name = "none"
"""
    )
    assert main(["bench", str(path), "--results", str(tmp_path / "results"), "--dry-run"]) == 2
    rows = {line.split()[3]: line for line in capsys.readouterr().out.splitlines() if "/lm/none/" in line}
    assert "INVALID" not in rows["gpt2-64/lm/none/seed-1"]
    assert "INVALID" in rows["gpt2-32/lm/none/seed-1"]
    assert "block_size 48 is more than" in rows["gpt2-32/lm/none/seed-1"]
    assert "use block_size 32 or less" in rows["gpt2-32/lm/none/seed-1"]
