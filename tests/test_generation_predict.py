"""`attendout predict` on the generation kinds (lm, seq2seq), their checkpoints in plain transformers,
greedy against beam search, and attendout.hf on a causal LM and an encoder-decoder."""

from __future__ import annotations

import json
import re
import textwrap

import pytest
import torch

import plain
from attendout.cli import main
from attendout.config import TrainConfig
from attendout.predict.base import PredictError
from attendout.predict.classification import Predictor
from attendout.predict.generative import GenerationPredictor
from attendout.run.loop import TrainingLoop
from attendout.tasks import DataError

pytestmark = pytest.mark.usefixtures("one_thread")

SUBJECTS = ["the cat", "a dog", "the bird", "my friend"]
VERBS = ["sat on", "looked at", "ran to", "slept near"]
OBJECTS = ["the mat", "a tree", "the house", "the river"]
GERMAN = {"the cat": "die katze", "a dog": "ein hund", "the bird": "der vogel", "my friend": "mein freund"}
TINY = dict(model_layers=2, model_hidden=32, model_heads=2, vocab_size=300, max_length=16, batch_size=8)


def sentences(n: int) -> list[str]:
    return [f"{SUBJECTS[i % 4]} {VERBS[(i // 4) % 4]} {OBJECTS[(i // 16) % 4]}" for i in range(n)]


def trained(config: TrainConfig) -> tuple[TrainingLoop, dict]:
    trainer = TrainingLoop(config)
    return trainer, trainer.fit()


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    """A GPT-2 from scratch trained 4 steps on a text file: (trainer, results, run directory)."""
    tmp = tmp_path_factory.mktemp("lm")
    (tmp / "train.txt").write_text("\n".join(sentences(64)) + "\n")
    config = TrainConfig(
        task="lm", train_file=str(tmp / "train.txt"), model="gpt2", model_init="scratch", max_steps=4,
        output_dir=str(tmp / "run"), progress=False, **TINY,
    )  # fmt: skip
    trainer, results = trained(config)
    return trainer, results, tmp / "run"


@pytest.fixture(scope="module")
def seq2seq_run(tmp_path_factory):
    """A T5 from scratch trained 4 steps on a TSV of pairs: (trainer, results, run directory)."""
    tmp = tmp_path_factory.mktemp("s2s")
    rows = ["source\ttarget"]
    rows += [f"{s}\t{GERMAN[s.split(' ', 2)[0] + ' ' + s.split(' ', 2)[1]]} {s}" for s in sentences(48)]
    (tmp / "pairs.tsv").write_text("\n".join(rows) + "\n")
    config = TrainConfig(
        task="seq2seq", train_file=str(tmp / "pairs.tsv"), model="t5", model_init="scratch", max_steps=4,
        max_new_tokens=6, output_dir=str(tmp / "run"), progress=False, **TINY,
    )  # fmt: skip
    trainer, results = trained(config)
    return trainer, results, tmp / "run"


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- predict: seq2seq ---------------------------------------------------------------------------------
def test_seq2seq_predict_on_a_split_writes_its_outputs_and_the_runs_own_scores(seq2seq_run, tmp_path, capsys):
    _, results, run = seq2seq_run
    out = tmp_path / "dev.jsonl"
    assert main(["predict", str(run), "--split", "dev", "--output", str(out), "--no-progress"]) == 0
    rows = read_jsonl(out)
    recorded = read_jsonl(run / "predictions" / "dev.jsonl")
    assert [r["prediction"] for r in rows] == [
        r["prediction"] for r in recorded
    ]  # the run's own greedy outputs
    assert [r["label"] for r in rows] == [r["label"] for r in recorded] and all(r["text_a"] for r in rows)
    printed = capsys.readouterr().err
    dev = results["eval"]["dev"]
    assert f"bleu {dev['bleu']:.4f}, chrf {dev['chrf']:.4f}" in printed
    assert f"target_tokens {int(dev['target_tokens'])}" in printed


def test_seq2seq_predict_reads_plain_text_and_tables_with_or_without_references(
    seq2seq_run, tmp_path, capsys
):
    _, _, run = seq2seq_run
    (tmp_path / "in.txt").write_text("the cat sat on the mat\na dog ran to the river\n")
    out = tmp_path / "out.tsv"
    args = ["predict", str(run), "--input", str(tmp_path / "in.txt"), "--output", str(out), "--no-progress"]
    assert main([*args, "--num-beams", "2", "--max-new-tokens", "3"]) == 0
    header, *lines = out.read_text().splitlines()
    assert header == "text_a\tprediction" and len(lines) == 2
    assert "bleu" not in capsys.readouterr().err  # no references: no scores
    (tmp_path / "in.csv").write_text("src,ref\nthe cat sat on the mat,die katze the cat sat on the mat\n")
    table = ["--input", str(tmp_path / "in.csv"), "--source-column", "src", "--target-column", "ref"]
    assert main(["predict", str(run), *table, "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("text_a\tlabel\tprediction") and "bleu" in captured.err


@pytest.mark.parametrize(
    "content, extra, message",
    [
        ("", [], "no sources"),
        ("source\ttarget\n", [], "no sentence pairs|no rows|no sources"),
        ("src\ttarget\na cat\tdie katze\n", [], "no column 'source'"),
        ("source\ttarget\na cat\tdie katze\n", ["--target-column", "ref"], "no column 'ref'"),
        ("source\ta cat\n", ["--prompt", "x"], "not allowed with argument --input"),
    ],
)
def test_seq2seq_predict_refuses_bad_input_with_one_line(
    seq2seq_run, tmp_path, capsys, content, extra, message
):
    _, _, run = seq2seq_run
    path = tmp_path / ("in.txt" if not content.count("\t") else "in.tsv")
    path.write_text(content)
    try:
        code = main(["predict", str(run), "--input", str(path), "--no-progress", *extra])
    except SystemExit as stop:  # argparse
        code = stop.code
    assert code == 2
    assert re.search(message, capsys.readouterr().err)


def test_a_run_of_another_kind_refuses_the_other_kinds_options(lm_run, seq2seq_run, tiny_run, capsys):
    cases = [
        (["predict", str(seq2seq_run[2]), "--prompt", "a cat"], "--prompt and --generate are for lm runs"),
        (
            ["predict", str(lm_run[2]), "--input", tiny_run["dev"], "--label-column", "y"],
            "--label-column: for classifiers",
        ),
        (
            ["predict", tiny_run["model"], "--input", tiny_run["dev"], "--num-beams", "2"],
            "not a generation model",
        ),
        (
            ["predict", tiny_run["model"], "--input", tiny_run["dev"], "--source-column", "x"],
            "for generation runs",
        ),
    ]
    for argv, message in cases:
        assert main([*argv, "--no-progress"]) == 2, argv
        assert message in capsys.readouterr().err
    with pytest.raises(PredictError, match="holds no causal LM or encoder-decoder"):
        GenerationPredictor.load(tiny_run["model"])


# --- predict: lm -----------------------------------------------------------------------------------
def test_lm_predict_scores_a_split_as_the_run_did_and_a_file(lm_run, tmp_path, capsys):
    _, results, run = lm_run
    out = tmp_path / "score.jsonl"
    assert main(["predict", str(run), "--split", "dev", "--output", str(out), "--no-progress"]) == 0
    (row,) = read_jsonl(out)
    dev = results["eval"]["dev"]
    assert row["perplexity"] == pytest.approx(dev["perplexity"], rel=1e-5) and row["tokens"] == dev["tokens"]
    assert f"tokens {int(dev['tokens'])}" in capsys.readouterr().err
    (tmp_path / "docs.txt").write_text("the cat sat on the mat\n\nmy friend ran to a tree\n")
    predictor = Predictor.load(run, device="cpu")
    assert isinstance(predictor, GenerationPredictor)
    metrics, outputs = predictor.evaluate(predictor.read(tmp_path / "docs.txt"))
    assert outputs is None and metrics["tokens"] > 0 and metrics["perplexity"] > 1
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(DataError, match="no text"):
        predictor.read(tmp_path / "empty.txt")


def test_lm_predict_continues_prompts_and_writes_them(lm_run, tmp_path):
    _, _, run = lm_run
    out = tmp_path / "continued.jsonl"
    argv = ["predict", str(run), "--prompt", "the cat", "--prompt", "", "--max-new-tokens", "4"]
    assert main([*argv, "--output", str(out), "--no-progress"]) == 0
    rows = read_jsonl(out)
    assert [r["text_a"] for r in rows] == ["the cat", ""] and all(
        isinstance(r["prediction"], str) for r in rows
    )
    (tmp_path / "prompts.txt").write_text("the cat sat\na dog\n")
    out = tmp_path / "continued.csv"
    argv = ["predict", str(run), "--input", str(tmp_path / "prompts.txt"), "--generate", "--output", str(out)]
    assert main([*argv, "--no-progress"]) == 0
    assert out.read_text().splitlines()[0] == "text_a,prediction" and len(out.read_text().splitlines()) == 3


# --- checkpoints in plain transformers ---------------------------------------------------------------
def test_the_checkpoints_load_in_plain_transformers_with_the_trained_models_logits(
    lm_run, seq2seq_run, tmp_path
):
    ids = [[5, 9, 17, 33, 2], [7, 8, 9, 10, 11]]
    expected = {}
    for name, (trainer, _, _) in (("lm", lm_run), ("seq2seq", seq2seq_run)):
        model = trainer.model.eval()
        inputs = {"input_ids": torch.tensor(ids)}
        if name == "seq2seq":
            inputs["decoder_input_ids"] = torch.tensor([[0, 4, 6], [0, 12, 13]])
        with torch.no_grad():
            expected[name] = model(**inputs).logits.tolist()
    script = textwrap.dedent(
        f"""
        import json, sys, torch
        from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM
        ids = torch.tensor({ids})
        lm = AutoModelForCausalLM.from_pretrained({str(lm_run[2] / "model")!r}).eval()
        s2s = AutoModelForSeq2SeqLM.from_pretrained({str(seq2seq_run[2] / "model")!r}).eval()
        with torch.no_grad():
            out = {{"lm": lm(input_ids=ids).logits.tolist(),
                   "seq2seq": s2s(input_ids=ids, decoder_input_ids=torch.tensor([[0, 4, 6], [0, 12, 13]])).logits.tolist()}}
        assert not any(m.startswith("attendout") for m in sys.modules), "attendout was imported"
        print(json.dumps(out))
        """
    )
    done = plain.run(script, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("lm", "seq2seq"):
        torch.testing.assert_close(
            torch.tensor(loaded[name]), torch.tensor(expected[name]), rtol=1e-5, atol=1e-5
        )


# --- greedy and beam search ---------------------------------------------------------------------------
def continuation_logprob(model, prompt: list[int], continuation: list[int]) -> float:
    ids = torch.tensor([prompt + continuation])
    with torch.no_grad():
        logprobs = model(input_ids=ids).logits.log_softmax(-1)[0]
    return sum(float(logprobs[len(prompt) - 1 + i, t]) for i, t in enumerate(continuation))


def test_greedy_is_the_argmax_path_and_beam_search_finds_one_at_least_as_likely(lm_run):
    from transformers import GPT2Config, GPT2LMHeadModel

    tokenizer = lm_run[0].tokenizer
    torch.manual_seed(3)  # random weights: no end-of-sequence stops early, every path has 5 tokens
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=32)
    config.eos_token_id = config.bos_token_id = None
    model = GPT2LMHeadModel(config).eval()
    model.generation_config.eos_token_id = None
    prompts = ["the cat", "a dog ran", "my friend", "the bird slept"]
    prompt_ids = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]

    def predictor(beams: int) -> GenerationPredictor:
        return GenerationPredictor(
            model, tokenizer, lm_run[0].task, max_length=16, num_beams=beams, max_new_tokens=5, device="cpu"
        )

    greedy = predictor(1).generate(prompts).token_ids
    beam = predictor(4).generate(prompts).token_ids
    for ids, path in zip(prompt_ids, greedy, strict=True):  # greedy: the argmax at each step
        context = list(ids)
        for token in path:
            with torch.no_grad():
                assert token == int(model(input_ids=torch.tensor([context])).logits[0, -1].argmax())
            context.append(token)
    scores = [
        (continuation_logprob(model, ids, g), continuation_logprob(model, ids, b))
        for ids, g, b in zip(prompt_ids, greedy, beam, strict=True)
    ]
    assert all(b >= g - 1e-4 for g, b in scores)  # a beam keeps greedy's path unless it finds better
    assert any(g_ids != b_ids for g_ids, b_ids in zip(greedy, beam, strict=True))  # and here it does
    assert all(b > g for (g, b), g_ids, b_ids in zip(scores, greedy, beam, strict=True) if g_ids != b_ids)
    assert predictor(1).generate(prompts[:1]).token_ids == greedy[:1]  # alone as in a batch (left padding)


# --- attendout.hf on generation models -----------------------------------------------------------------
def hf_args(tmp_path, cls=None, **extra):
    from transformers import TrainingArguments

    values = dict(
        output_dir=str(tmp_path / "hf"), per_device_train_batch_size=8, max_steps=3, logging_steps=1,
        save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, learning_rate=1e-3, seed=0,
    )  # fmt: skip
    return (cls or TrainingArguments)(**values, **extra)


def token_data(seed: int, n: int, length: int, vocab: int, seq2seq: bool = False) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        ids = torch.randint(3, vocab, (length,), generator=g)
        labels = torch.randint(3, vocab, (length - 2,), generator=g) if seq2seq else ids.clone()
        rows.append(
            {"input_ids": ids, "attention_mask": torch.ones(length, dtype=torch.long), "labels": labels}
        )
    return rows


def test_the_hf_trainer_trains_a_tiny_lm_with_a_method_that_acts(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    from attendout.hf import Trainer as MethodTrainer

    data = token_data(1, 24, 12, 50)

    def run(method: str, options: dict):
        torch.manual_seed(0)
        config = GPT2Config(vocab_size=50, n_embd=32, n_layer=2, n_head=2, n_positions=16)
        config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = 0.0
        trainer = MethodTrainer(
            model=GPT2LMHeadModel(config), args=hf_args(tmp_path), train_dataset=data, method=method,
            method_options=options,
        )  # fmt: skip
        trainer.train()
        return [log for log in trainer.state.log_history if "loss" in log]

    plain, dropped = run("none", {}), run("scores-dropout", {"p": 0.3})
    rates = [log[f"scores-dropout/drop_rate/L{i}"] for log in dropped for i in (0, 1)]
    assert all(0.15 < r < 0.45 for r in rates)  # about p of the allowed scores, in each layer
    assert [log["loss"] for log in plain] != [log["loss"] for log in dropped]


def test_the_hf_seq2seq_trainer_acts_on_t5_self_attention_and_evaluates_by_generating(tmp_path):
    from transformers import Seq2SeqTrainingArguments, T5Config, T5ForConditionalGeneration

    from attendout.hf import Seq2SeqTrainer

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=50, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=2,
        dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
    )  # fmt: skip
    args = hf_args(
        tmp_path, Seq2SeqTrainingArguments, predict_with_generate=True, per_device_eval_batch_size=8
    )
    trainer = Seq2SeqTrainer(
        model=T5ForConditionalGeneration(config), args=args, train_dataset=token_data(2, 16, 10, 50, True),
        eval_dataset=token_data(3, 8, 10, 50, True), method="drophead", method_options={"p": 0.5},
    )  # fmt: skip
    trainer.train()
    logged = [log for log in trainer.state.log_history if "loss" in log][-1]
    # encoder self-attention (2 layers) and decoder self-attention (2): cross-attention is left alone
    assert sorted(k for k in logged if k.startswith("drophead/drop_rate/")) == [
        f"drophead/drop_rate/L{i}" for i in range(4)
    ]
    predictions = trainer.predict(token_data(3, 4, 10, 50, True)).predictions
    assert predictions.shape[0] == 4  # generated ids, in eval mode with the method idle
