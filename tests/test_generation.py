"""The generation kinds' data, metrics and loop (issue 46): lm and seq2seq tasks, their files and errors,
block packing, perplexity on a planted model, BLEU against sacrebleu's own command line, models from
scratch with a trained tokenizer, and model selection in the metric's direction."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from attendout.config import TrainConfig
from attendout.encoding.lm_seq2seq import LMEncoded, Seq2SeqEncoded
from attendout.models.tokenizer import train_tokenizer
from attendout.run.loop import finetune
from attendout.tasks import DataError, better, compute_metrics, get_task, higher_is_better, load_task_data

DATA = Path(os.environ.get("ATTENDOUT_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))

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
def lm_files(tmp_path):
    (tmp_path / "train.txt").write_text("\n".join(SENTENCES * 3) + "\n")
    (tmp_path / "dev.txt").write_text("the cat sat on the log\na bird ran\n")
    return tmp_path


@pytest.fixture
def mt_files(tmp_path):
    (tmp_path / "train.en").write_text("\n".join(SENTENCES * 3) + "\n")
    (tmp_path / "train.de").write_text("\n".join(GERMAN * 3) + "\n")
    (tmp_path / "dev.tsv").write_text(
        "src\ttgt\n" + "".join(f"{e}\t{d}\n" for e, d in zip(SENTENCES, GERMAN, strict=True))
    )
    return tmp_path


# --------------------------------------------------------------------------------------------------
# Tasks and files


def test_lm_files_one_document_a_line_or_blank_line_paragraphs(tmp_path):
    (tmp_path / "lines.txt").write_text("first doc\nsecond doc\n")
    (tmp_path / "paras.txt").write_text("first line\nof one doc\n\nsecond doc\n\n\n")
    (tmp_path / "rows.jsonl").write_text('{"body": "one"}\n{"body": "two"}\n')
    task, data = load_task_data(
        "lm", train_file=str(tmp_path / "lines.txt"), eval_files={"dev": str(tmp_path / "paras.txt")}
    )
    assert task.kind == "lm" and task.metrics == ("perplexity",)
    assert data.train.text_a == ["first doc", "second doc"] and data.train.labels is None
    assert data.eval_splits["dev"].text_a == ["first line of one doc", "second doc"]
    _, data = load_task_data(
        "lm",
        train_file=str(tmp_path / "rows.jsonl"),
        eval_files={"dev": str(tmp_path / "lines.txt")},
        text_columns=["body"],
    )
    assert data.train.text_a == ["one", "two"]


def test_seq2seq_from_parallel_files_and_from_columns(mt_files):
    task, data = load_task_data(
        "seq2seq",
        train_file=f"{mt_files / 'train.en'},{mt_files / 'train.de'}",
        eval_files={"dev": str(mt_files / "dev.tsv")},
        text_columns=["src", "tgt"],
    )
    assert task.kind == "seq2seq" and task.metrics[0] == "bleu"
    assert data.train.text_a[1] == SENTENCES[1] and data.train.targets[1] == GERMAN[1]
    assert data.eval_splits["dev"].targets == GERMAN
    rouge, _ = load_task_data(
        "seq2seq",
        train_file=str(mt_files / "dev.tsv"),
        text_columns=["src", "tgt"],
        metrics=["rougeL", "rouge1"],
    )
    assert rouge.metrics == ("rougeL", "rouge1")


@pytest.mark.parametrize(
    "files, columns, message",
    [
        (("empty.txt", ""), None, "no text"),
        (
            ("a.en", "x\ny\n", "a.de", "x\n"),
            None,
            "has 2 lines but .* has 1; the two files must be line-aligned",
        ),
        (("t.tsv", "src\ttgt\nhello\t\n"), ["src", "tgt"], "line 2: the target text is empty"),
        (("t.tsv", "src\tother\nhello\tworld\n"), ["src", "tgt"], "tgt"),
        (("one.txt", "just sources\n"), None, "a seq2seq file is a CSV/TSV/JSONL table"),
    ],
)
def test_bad_generation_files_name_the_problem(tmp_path, files, columns, message):
    for name, text in zip(files[::2], files[1::2], strict=True):
        (tmp_path / name).write_text(text)
    names = [str(tmp_path / n) for n in files[::2]]
    task = "lm" if files[0] == "empty.txt" else "seq2seq"
    with pytest.raises(DataError, match=message):
        load_task_data(task, train_file=",".join(names), eval_files={"dev": names[0]}, text_columns=columns)


def test_built_in_generation_tasks_refuse_files_and_label_options(tmp_path):
    with pytest.raises(
        DataError, match="task 'multi30k' reads its own data; for your files use task 'seq2seq'"
    ):
        load_task_data("multi30k", train_file=str(tmp_path / "x.tsv"))
    with pytest.raises(DataError, match="label_column= does not apply to task 'lm'"):
        load_task_data("lm", train_file=str(tmp_path / "x.txt"), label_column="label")
    with pytest.raises(DataError, match="comes from the hub only"):
        load_task_data("wikitext-2")
    assert (
        get_task("movie-reviews-lm").kind == "lm"
        and get_task("multi30k").eval_split_names[-1] == "test_2016_flickr"
    )


@pytest.mark.skipif(not (DATA / "multi30k").is_dir(), reason=f"no {DATA}/multi30k (set ATTENDOUT_DATA)")
def test_multi30k_reads_the_shared_folder():
    task, data = load_task_data("multi30k", data_dir=str(DATA / "multi30k"))
    assert data.sizes() == {"train": 29000, "val": 1014, "test_2016_flickr": 1000}
    assert task.text_fields == ("en", "de") and all(data.train.targets[:5])


@pytest.mark.skipif(not (DATA / "multi30k").is_dir(), reason=f"no {DATA}/multi30k (set ATTENDOUT_DATA)")
def test_multi30k_en_fr_reads_the_french_side_aligned_with_the_english():
    task, data = load_task_data("multi30k-en-fr", data_dir=str(DATA / "multi30k"))
    _, german = load_task_data("multi30k", data_dir=str(DATA / "multi30k"))
    assert data.sizes() == {"train": 29000, "val": 1014, "test_2016_flickr": 1000}
    assert task.text_fields == ("en", "fr") and task.eval_split_names == ("val", "test_2016_flickr")
    assert list(data.train.text_a[:50]) == list(german.train.text_a[:50])  # the same English sources
    assert data.train.targets[:50] != german.train.targets[:50]
    assert (DATA / "multi30k" / "train.fr").read_text(encoding="utf-8").splitlines()[0] == data.train.targets[
        0
    ]


# --------------------------------------------------------------------------------------------------
# Metrics


class FixedNextToken(nn.Module):
    """A language model whose next-token distribution is known: ``probs`` at every position."""

    def __init__(self, probs: torch.Tensor):
        super().__init__()
        self.logits = nn.Parameter(probs.log(), requires_grad=False)

    def forward(self, input_ids, attention_mask=None, **_):
        return type("Out", (), {"logits": self.logits.expand(*input_ids.shape, -1)})()


class Tokens:
    """A tokenizer of space-separated integers (for a planted model over ids 0..V-1)."""

    eos_token_id, pad_token_id = 0, 0

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[int(t) for t in text.split()] for text in texts]}


def test_perplexity_of_a_planted_model_is_exp_of_its_cross_entropy():
    from attendout.tasks import Examples

    vocab = 5
    probs = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25])
    docs = Examples(text_a=["1 2 3 4 1 2", "3 3 4", "2"], text_b=None, labels=None)
    data = LMEncoded(docs, Tokens(), block_size=4)
    # stream: 1 2 3 4 1 2 0 3 3 4 0 2 0 -> blocks of 4, the last of 1 token dropped (it predicts nothing)
    assert data.blocks == [[1, 2, 3, 4], [1, 2, 0, 3], [3, 4, 0, 2]] and data.gold == [3, 3, 3]
    nll, _, loss = data.predict(FixedNextToken(probs), 2, torch.device("cpu"))
    predicted = [2, 3, 4, 2, 0, 3, 4, 0, 2]  # every token after the first of its block
    expected = math.exp(-sum(math.log(float(probs[t])) for t in predicted) / len(predicted))
    metrics = compute_metrics(get_task("lm"), nll, data.gold)
    assert metrics["perplexity"] == pytest.approx(expected, rel=1e-6)
    assert loss == pytest.approx(math.log(expected), rel=1e-6)
    uniform, _, _ = data.predict(FixedNextToken(torch.full((vocab,), 1 / vocab)), 8, torch.device("cpu"))
    assert compute_metrics(get_task("lm"), uniform, data.gold)["perplexity"] == pytest.approx(vocab, rel=1e-6)


def test_bleu_and_chrf_equal_sacrebleus_command_line(tmp_path):
    hyps = ["the cat sat on a mat", "a dog ran over the house .", "birds fly", "the the the"]
    refs = ["the cat sat on the mat", "a dog ran over the house .", "a bird flew", "the end"]
    (tmp_path / "hyp.txt").write_text("\n".join(hyps) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(refs) + "\n")
    task = get_task("multi30k")
    ours = compute_metrics(task, hyps, refs)
    for metric in ("bleu", "chrf"):
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "sacrebleu",
                str(tmp_path / "ref.txt"),
                "-i",
                str(tmp_path / "hyp.txt"),
                "-m",
                metric,
                "-b",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert ours[metric] == pytest.approx(float(out.stdout.strip()), abs=0.05), metric
    assert 0 < ours["bleu"] < 100


def test_the_direction_of_each_metric():
    assert not higher_is_better("perplexity") and not higher_is_better("loss")
    assert higher_is_better("bleu") and higher_is_better("accuracy")
    assert better("perplexity", 10.0, 12.0) and not better("perplexity", 12.0, 10.0)
    assert better("bleu", 12.0, 10.0)


# --------------------------------------------------------------------------------------------------
# Encoding and tokenizer


def test_a_scratch_tokenizer_gives_the_text_back_and_is_deterministic():
    texts = SENTENCES + GERMAN + ["Müller's café — 10 €"]
    first = train_tokenizer(texts, 300, end_with_eos=True)
    second = train_tokenizer(texts, 300, end_with_eos=True)
    ids = first(texts)["input_ids"]
    assert ids == second(texts)["input_ids"] and all(row[-1] == first.eos_token_id for row in ids)
    assert [first.decode(r, skip_special_tokens=True) for r in ids] == texts  # exactly: no space added
    with pytest.raises(ValueError, match="vocab_size must be at least"):
        train_tokenizer(texts, 100, end_with_eos=False)


def test_seq2seq_batches_pad_labels_with_ignore_index():
    from attendout.tasks import Seq2SeqExamples

    tok = train_tokenizer(SENTENCES + GERMAN, 300, end_with_eos=True)
    data = Seq2SeqEncoded(Seq2SeqExamples.from_pairs(SENTENCES[:2], ["kurz", GERMAN[0]]), tok, max_length=4)
    batch = data.batch([0, 1])
    assert batch["input_ids"].shape[1] == 4 and data.cut >= 2  # sources longer than 4 pieces are cut
    short = len(tok(text_target=["kurz"])["input_ids"][0])
    assert (batch["labels"][0, short:] == -100).all() and (batch["labels"][0, :short] >= 0).all()


# --------------------------------------------------------------------------------------------------
# The loop


def tiny(tmp_path, **values):
    base = dict(
        model_init="scratch",
        model_layers=1,
        model_hidden=32,
        model_heads=2,
        vocab_size=300,
        max_length=16,
        batch_size=4,
        learning_rate=3e-3,
        validation_split=0.2,
        progress=False,
        output_dir=str(tmp_path / "run"),
    )
    return TrainConfig(**{**base, **values})


def test_an_lm_run_selects_the_lowest_validation_perplexity(lm_files, tmp_path):
    config = tiny(
        tmp_path, task="lm", model="gpt2", train_file=str(lm_files / "train.txt"),
        eval_files={"dev": str(lm_files / "dev.txt")}, max_steps=12, eval_steps=2, learning_rate=3e-2,
    )  # fmt: skip
    results = finetune(config)
    assert results["main_metric"] == "perplexity" and results["eval"]["dev"]["tokens"] > 0
    log = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    curve = {r["step"]: r["validation"]["perplexity"] for r in log if "validation" in r}
    assert results["best_step"] == min(curve, key=curve.get)  # the lowest, not the highest
    assert results["validation"]["perplexity"] == min(curve.values())
    assert not (tmp_path / "run" / "predictions").exists()  # an LM's "predictions" are its scores
    saved = json.loads((tmp_path / "run" / "config.json").read_text())
    assert saved["config"]["model_init"] == "scratch" and "from scratch" in saved["model_description"]
    assert (tmp_path / "run" / "model" / "tokenizer.json").is_file()  # the trained tokenizer beside the model
    # perplexity's floor beside it (issue 57): a unigram model of the training stream, add-one smoothed
    floor = results["eval"]["dev"]["unigram_perplexity"]
    assert floor > 1 and math.isfinite(floor)


def test_the_unigram_floor_is_the_perplexity_of_training_frequencies():
    """score_unigram_floor against a hand count: train stream a a b <eos>; the split c b a <eos> predicts
    b, a and <eos>."""
    from attendout.encoding.lm_seq2seq import LMEncoded, score_unigram_floor

    class Tokens:  # text -> ids by a fixed table; 6 tokens in the vocabulary, eos 5
        eos_token_id, pad_token_id = 5, 5

        def __len__(self):
            return 6

        def __call__(self, texts, add_special_tokens=False):
            table = {"a": 1, "b": 2, "c": 3}
            return {"input_ids": [[table[w] for w in t.split()] for t in texts]}

    train = LMEncoded(_docs(["a a b"]), Tokens(), 8)
    split = LMEncoded(_docs(["c b a"]), Tokens(), 8)
    score_unigram_floor(train, split)
    # training counts: a 2, b 1, eos 1 (4 tokens) + 6 (add one over the vocabulary) = 10; predicted: b, a, eos
    expected = math.exp(-(math.log(2 / 10) + math.log(3 / 10) + math.log(2 / 10)) / 3)
    assert split.unigram_perplexity == pytest.approx(expected)
    assert split.counts()["unigram_perplexity"] == pytest.approx(expected)


def _docs(texts):
    from attendout.tasks import Examples

    return Examples(text_a=list(texts), text_b=None, labels=[0] * len(texts))


def test_a_seq2seq_run_scores_bleu_and_writes_its_outputs(mt_files, tmp_path):
    config = tiny(
        tmp_path, task="seq2seq", model="t5", train_file=f"{mt_files / 'train.en'},{mt_files / 'train.de'}",
        eval_files={"dev": str(mt_files / "dev.tsv")}, text_columns=["src", "tgt"], max_steps=4, max_new_tokens=6,
    )  # fmt: skip
    results = finetune(config)
    assert set(results["eval"]["dev"]) == {"bleu", "chrf", "loss", "target_tokens"}
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "predictions" / "dev.jsonl").read_text().splitlines()
    ]
    assert [r["label"] for r in rows] == GERMAN and all(isinstance(r["prediction"], str) for r in rows)
    # each source is stored beside its output: advise's copy-the-source floor reads it (issue 57)
    dev = (mt_files / "dev.tsv").read_text().splitlines()[1:]
    assert [r["source"] for r in rows] == [line.split("\t")[0] for line in dev]


def test_generation_options_are_checked(tmp_path, lm_files):
    with pytest.raises(ValueError, match="model_init must be 'pretrained' or 'scratch'"):
        tiny(tmp_path, model_init="random")
    with pytest.raises(ValueError, match="hidden \\(30\\) must be a multiple of heads \\(4\\)"):
        tiny(tmp_path, model_hidden=30, model_heads=4)
    with pytest.raises(ValueError, match="source_column and target_column go together"):
        tiny(tmp_path, source_column="en")
    with pytest.raises(ValueError, match="no lm architecture 't5'; choose one of gpt2, llama"):
        finetune(tiny(tmp_path, task="lm", model="t5", train_file=str(lm_files / "train.txt")))
    with pytest.raises(ValueError, match="is for the generation tasks"):
        finetune(tiny(tmp_path, task="rotten-tomatoes", model="minilm"))


def test_a_pretrained_encoder_is_refused_for_a_generation_task(tmp_path, lm_files):
    from transformers import BertConfig, BertModel

    folder = tmp_path / "bert"
    BertModel(
        BertConfig(
            vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=37
        )
    ).save_pretrained(folder)
    config = TrainConfig(
        task="lm", model=str(folder), train_file=str(lm_files / "train.txt"), output_dir=str(tmp_path / "r")
    )
    with pytest.raises(ValueError, match="is a bidirectional encoder \\(bert\\).*needs a decoder"):
        finetune(config)


# --------------------------------------------------------------------------------------------------
# BART and Marian: both stacks' self-attention, never cross-attention


def tiny_bart_like(name: str):
    from transformers import BartConfig, BartForConditionalGeneration, MarianConfig, MarianMTModel

    sizes = dict(vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                 decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37, dropout=0.0,
                 attention_dropout=0.0, max_position_embeddings=32, pad_token_id=0, decoder_start_token_id=2)  # fmt: skip
    torch.manual_seed(0)
    if name == "bart":
        return BartForConditionalGeneration(BartConfig(**sizes))
    return MarianMTModel(MarianConfig(**sizes))


@pytest.mark.parametrize("name", ["bart", "marian"])
def test_bart_and_marian_self_attention_is_hooked_and_cross_attention_is_not(name):
    import attendout
    from attendout.attention import AttentionMethod

    class Spy(AttentionMethod):
        name = "spy"

        def __init__(self):
            self.layers, self.calls = None, []

        def edit(self, call):
            self.calls.append((call.layer, call.shape[2], call.shape[3]))

    model = tiny_bart_like(name).train()
    g = torch.Generator().manual_seed(0)
    batch = {
        "input_ids": torch.randint(4, 99, (3, 9), generator=g),
        "labels": torch.randint(4, 99, (3, 6), generator=g),
    }
    spy = Spy()
    attendout.install(model).add(spy)
    model(**batch)
    assert sorted(set(spy.calls)) == [(0, 9, 9), (1, 9, 9), (2, 6, 6), (3, 6, 6)]  # never (6, 9): cross
    attendout.uninstall(model)
    torch.manual_seed(1)
    stock = model(**batch).logits
    handle = attendout.apply(model, "scores-dropout", p=0.5)
    torch.manual_seed(1)
    # a tiny random Marian attends almost uniformly, so the drops move its logits only slightly
    assert (model(**batch).logits - stock).abs().max() > 1e-6
    layers = {key.rsplit("/L", 1)[1] for key in handle.stats() if "/L" in key}
    assert layers == {"0", "1", "2", "3"}
    handle.remove()
    with pytest.raises(ValueError, match="cross"):
        attendout.apply(model, "synthesizer", variant="dense", cross_attention=True, l_max=16)


def test_a_bart_from_scratch_translates_with_a_method(mt_files, tmp_path):
    config = tiny(
        tmp_path, task="seq2seq", model="bart", train_file=f"{mt_files / 'train.en'},{mt_files / 'train.de'}",
        eval_files={"dev": str(mt_files / "dev.tsv")}, text_columns=["src", "tgt"], max_steps=3, max_new_tokens=6,
        method="synthesizer", method_options={"variant": "dense"},
    )  # fmt: skip
    results = finetune(config)
    assert "bart from scratch" in results["model_description"] and set(results["eval"]["dev"]) >= {
        "bleu",
        "chrf",
    }


def test_a_tokenizer_that_needs_sentencepiece_is_one_line_naming_the_package(tmp_path, monkeypatch, capsys):
    """A Marian folder (source.spm, no tokenizer.json) where sentencepiece is missing: one line, before loading."""
    import importlib.util

    from transformers import AutoConfig, AutoModelForSeq2SeqLM

    from attendout.cli import main

    folder = tmp_path / "marian"
    config = AutoConfig.for_model(
        "marian", vocab_size=99, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
        decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64,
        pad_token_id=0, eos_token_id=2, decoder_start_token_id=0,
    )  # fmt: skip
    AutoModelForSeq2SeqLM.from_config(config).save_pretrained(folder)
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes(b"not read: the check comes first")
    (folder / "vocab.json").write_text("{}")
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sentencepiece" else real(name, *a)
    )
    train = tmp_path / "train.tsv"
    train.write_text("source\ttarget\n" + "".join(f"a b {i}\tc d {i}\n" for i in range(20)))
    capsys.readouterr()  # save_pretrained's progress bar
    code = main([
        "finetune", "--task", "seq2seq", "--train-file", str(train), "--model", str(folder),
        "--max-steps", "1", "--output-dir", str(tmp_path / "run"), "--no-progress",
    ])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "needs the sentencepiece package" in err[0] and "pip install sentencepiece" in err[0]
    assert "Unrecognized configuration class" not in err[0]
