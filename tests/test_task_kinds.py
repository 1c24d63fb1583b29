"""Token classification, multiple choice and long documents in the loop: encodings, heads, every method,
AD-DROP's targets against finite differences, AttendOut's game scores, saved models in plain transformers."""

from __future__ import annotations

import json
import random
import textwrap

import numpy as np
import pytest
import torch
from transformers import AutoModelForMultipleChoice, AutoModelForTokenClassification

import plain
from attendout.config import TrainConfig
from attendout.encoding.classification import (
    ChoiceEncoded,
    Encoded,
    TokenEncoded,
    Windows,
    encode,
    head_tail_sizes,
)
from attendout.methods import list_methods
from attendout.methods.addrop import attribute
from attendout.report.results import format_truncation
from attendout.run.loop import TrainingLoop, finetune
from attendout.tasks import (
    MULTIPLE_CHOICE,
    TOKEN_CLASSIFICATION,
    ChoiceExamples,
    Examples,
    Task,
    TaskData,
    TokenExamples,
    register_task,
)
from conftest import WORDS, make_batch, no_dropout, save_tiny_model_dir, tiny_config
from test_addrop import Perturb, inputs

POS, NEG = ["good", "great", "fine", "fun", "nice"], ["bad", "awful", "poor", "dull", "boring"]
TAGS = ("O", "B-POS", "I-POS", "B-NEG", "I-NEG")


def token_examples(n: int, seed: int) -> TokenExamples:
    """Sentences of the toy vocabulary; a positive word starts a POS entity, a negative one a NEG entity,
    and a positive word right after a positive one continues it (I-POS)."""
    rng = random.Random(seed)
    words, tags = [], []
    for _ in range(n):
        sentence = [rng.choice(WORDS) for _ in range(rng.randint(3, 9))]
        row, previous = [], "O"
        for word in sentence:
            tag = "O"
            if word in POS:
                tag = "I-POS" if previous.endswith("POS") else "B-POS"
            elif word in NEG:
                tag = "B-NEG"
            row.append(TAGS.index(tag))
            previous = tag
        words.append(sentence)
        tags.append(row)
    return TokenExamples.from_words(words, tags)


def choice_examples(n: int, seed: int, options: int = 4) -> ChoiceExamples:
    """The right option is the one made of positive words."""
    rng = random.Random(seed)
    questions, choices, labels = [], [], []
    for _ in range(n):
        right = rng.randrange(options)
        row = [" ".join(rng.sample(NEG, 2)) for _ in range(options)]
        row[right] = " ".join(rng.sample(POS, 2))
        questions.append("the film was")
        choices.append(row)
        labels.append(right)
    return ChoiceExamples(text_a=questions, text_b=None, labels=labels, choices=choices)


TOKEN_TASK = Task(
    name="toy-tags",
    kind=TOKEN_CLASSIFICATION,
    text_fields=("tokens",),
    label_names=TAGS,
    metrics=("entity_f1", "token_accuracy"),
    eval_split_names=("dev",),
    description="toy entities",
)
CHOICE_TASK = Task(
    name="toy-choice",
    kind=MULTIPLE_CHOICE,
    text_fields=("question",),
    label_names=None,
    metrics=("accuracy",),
    eval_split_names=("dev",),
    description="toy multiple choice",
    choices=4,
)
register_task(
    TOKEN_TASK,
    lambda task, options: (task, TaskData(token_examples(96, 0), {"dev": token_examples(24, 1)}, "toy")),
    replace=True,
)
register_task(
    CHOICE_TASK,
    lambda task, options: (task, TaskData(choice_examples(96, 0), {"dev": choice_examples(24, 1)}, "toy")),
    replace=True,
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model_dir(tmp_path_factory.mktemp("kinds") / "model")


@pytest.fixture(scope="module")
def minilm_tokenizer():
    from transformers import AutoTokenizer

    from attendout.models.loading import ModelNotFoundError, packaged_model_path

    try:
        return AutoTokenizer.from_pretrained(packaged_model_path())
    except ModelNotFoundError:
        pytest.skip("the packaged MiniLM is not installed")


def config(model_dir, tmp_path, task, method="none", **overrides) -> TrainConfig:
    values = dict(
        task=task,
        model=model_dir,
        method=method,
        batch_size=16,
        max_steps=4,
        max_length=16,
        progress=False,
        output_dir=str(tmp_path / f"{task}-{method}"),
    )
    values.update(overrides)
    return TrainConfig(**values)


# --------------------------------------------------------------------------------------------------
# Encodings


def test_a_words_tag_sits_on_its_first_piece_and_predictions_come_back_per_word(minilm_tokenizer):
    words = [["Pierre", "Vinken", "visited", "Brussels"], ["EU", "rejects", "it"]]
    examples = TokenExamples.from_words(words, [[1, 2, 0, 3], [3, 0, 0]])
    data = TokenEncoded(examples, minilm_tokenizer, max_length=32)
    batch = data.batch([0, 1])
    ids, labels = batch["input_ids"][0], batch["labels"][0]
    pieces = minilm_tokenizer.convert_ids_to_tokens(ids.tolist())
    assert len(minilm_tokenizer.tokenize("Vinken")) > 1  # a word of several pieces
    labelled = [(pieces[i], int(labels[i])) for i in range(len(pieces)) if labels[i] != -100]
    firsts = [minilm_tokenizer.tokenize(w)[0] for w in words[0]]
    assert labelled == list(zip(firsts, [1, 2, 0, 3], strict=True))
    assert labels[0] == -100 and (labels[ids == minilm_tokenizer.sep_token_id] == -100).all()
    assert (batch["labels"][1][batch["attention_mask"][1] == 0] == -100).all()  # padding
    # predictions: the logits of each word's first piece, one tag per word
    logits = torch.zeros(2, ids.shape[0], 5)
    for row, firsts in enumerate(data.firsts):
        for word, position in enumerate(firsts):
            logits[row, position, (word + 1) % 5] = 5.0
    preds, scores = data.collect([logits])
    assert preds == [[1, 2, 3, 4], [1, 2, 3]]
    assert all(0.9 < s < 1 for row in scores for s in row)
    assert data.gold == [[1, 2, 0, 3], [3, 0, 0]] and data.cut == 0


def test_words_cut_by_max_length_get_tag_zero_and_are_counted(minilm_tokenizer):
    examples = TokenExamples.from_words([["a"] * 20, ["b"] * 3], [[1] * 20, [1] * 3])
    data = TokenEncoded(examples, minilm_tokenizer, max_length=8)
    assert data.cut == 1
    logits = [torch.zeros(2, 8, 5).index_fill_(2, torch.tensor([1]), 3.0)]
    preds, scores = data.collect(logits)
    assert preds[0] == [1] * 6 + [0] * 14 and preds[1] == [1, 1, 1]
    assert scores[0][6] is None


def test_head_tail_keeps_the_first_quarter_and_the_last_three_quarters(minilm_tokenizer):
    short, long = "a short review .", " ".join(f"w{i}" for i in range(400))
    data = Encoded(Examples(text_a=[short, long], text_b=None, labels=[0, 1]), minilm_tokenizer, 64, False)
    assert data.truncation == "head-tail" and data.cut == 1
    assert data.features[0]["input_ids"] == minilm_tokenizer(short)["input_ids"]
    pieces = minilm_tokenizer(long, add_special_tokens=False)["input_ids"]
    head, tail = head_tail_sizes(64)
    assert (head, tail) == (15, 47)
    ids = data.features[1]["input_ids"]
    assert len(ids) == 64 and len(data.features[1]["attention_mask"]) == 64
    assert ids == [
        minilm_tokenizer.cls_token_id,
        *pieces[:head],
        *pieces[-tail:],
        minilm_tokenizer.sep_token_id,
    ]
    head_only = Encoded(
        Examples(text_a=[long], text_b=None, labels=[1]), minilm_tokenizer, 64, False, truncation="head"
    )
    assert head_only.features[0]["input_ids"][1:-1] == pieces[:62]


def test_sliding_windows_cover_the_document_and_average_their_logits(minilm_tokenizer):
    long = " ".join(f"w{i}" for i in range(100))
    examples = Examples(text_a=["short one", long], text_b=None, labels=[0, 1])
    data = Windows(examples, minilm_tokenizer, max_length=32, regression=False, stride=8)
    pieces = minilm_tokenizer(long, add_special_tokens=False)["input_ids"]
    windows = [f["input_ids"][1:-1] for f, d in zip(data.features, data.doc_of, strict=True) if d == 1]
    assert windows[0] == pieces[:30] and windows[-1][-1] == pieces[-1]
    assert all(a[-8:] == b[:8] for a, b in zip(windows, windows[1:], strict=False))  # 8 pieces overlap
    assert data.doc_of[0] == 0 and data.examples_count() == 2 and len(data) == 1 + len(windows)
    assert data.batch([1, 2])["labels"].tolist() == [1, 1]  # a window trains with its document's label
    logits = torch.randn(len(data), 2)
    preds, scores = data.collect([logits])
    mean = logits[1:].mean(0)
    assert scores[1] == pytest.approx(torch.softmax(mean, -1).numpy(), abs=1e-6)
    assert preds.tolist() == [int(logits[0].argmax()), int(mean.argmax())]


def test_choices_batch_as_examples_by_options_and_empty_options_are_never_chosen(minilm_tokenizer):
    examples = ChoiceExamples(
        text_a=["Which is warm?", "Which is red?"],
        text_b=None,
        labels=[1, 0],
        choices=[["ice", "the sun", "snow", ""], ["a tomato", "grass", "sky", "coal"]],
    )
    data = ChoiceEncoded(examples, minilm_tokenizer, max_length=16)
    batch = data.batch([0, 1])
    assert batch["input_ids"].shape[:2] == (2, 4) and batch["labels"].tolist() == [1, 0]
    second = minilm_tokenizer.decode(batch["input_ids"][0, 1][batch["attention_mask"][0, 1].bool()])
    assert second == "[CLS] which is warm? [SEP] the sun [SEP]"
    logits = torch.tensor([[0.0, 1.0, 0.0, 9.0], [2.0, 0.0, 0.0, 0.0]])  # the empty option scores highest
    preds, scores = data.collect([logits])
    assert preds.tolist() == [1, 0] and scores[0][3] == 0.0


# --------------------------------------------------------------------------------------------------
# The loop: every method on each kind, saved models in plain transformers


@pytest.mark.parametrize("task", ["toy-tags", "toy-choice"])
@pytest.mark.parametrize("method", [*sorted(set(list_methods())), "synthesizer-dense"])
def test_every_method_trains_on_token_and_choice_tasks(model_dir, tmp_path, task, method):
    options = {
        "addrop": {"cross_tuning": "off"},  # act from the first step
        "attendout": {"dropout_steps": 2, "eval_samples": 8},
        "synthesizer-dense": {"variant": "dense"},  # reads the hidden states: B x options rows for choices
    }.get(method, {})
    name = method.split("-dense")[0]
    results = finetune(config(model_dir, tmp_path, task, name, method_options=options))
    assert np.isfinite(results["eval"]["dev"]["loss"])


def test_token_and_choice_runs_learn_and_write_their_predictions(model_dir, tmp_path):
    tags = finetune(config(model_dir, tmp_path, "toy-tags", max_steps=None, epochs=6, learning_rate=2e-3))
    assert tags["eval"]["dev"]["token_accuracy"] > 0.8 and tags["eval"]["dev"]["entity_f1"] > 0.5
    rows = [json.loads(line) for line in open(tmp_path / "toy-tags-none" / "predictions" / "dev.jsonl")]
    gold = token_examples(24, 1)
    assert [len(r["prediction"]) for r in rows] == [len(w) for w in gold.words]
    assert [r["label"] for r in rows] == gold.labels and "score" not in rows[0]
    choice = finetune(config(model_dir, tmp_path, "toy-choice", max_steps=None, epochs=6, learning_rate=2e-3))
    assert choice["eval"]["dev"]["accuracy"] > 0.5  # chance: 0.25


PLAIN = textwrap.dedent(
    """
    import json, sys
    import torch, transformers
    kind, path, batch = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    cls = {"token": transformers.AutoModelForTokenClassification, "choice": transformers.AutoModelForMultipleChoice}
    model = cls[kind].from_pretrained(path).eval()
    with torch.no_grad():
        logits = model(**{k: torch.tensor(v) for k, v in batch.items()}).logits
    assert "attendout" not in sys.modules
    print(json.dumps(logits.tolist()))
    """
)


@pytest.mark.parametrize(
    ("task", "kind", "head"),
    [("toy-tags", "token", "ForTokenClassification"), ("toy-choice", "choice", "ForMultipleChoice")],
)
def test_saved_models_give_the_same_logits_in_plain_transformers(model_dir, tmp_path, task, kind, head):
    trainer = TrainingLoop(config(model_dir, tmp_path, task, "scores-dropout"))
    trainer.fit()
    saved = tmp_path / f"{task}-scores-dropout" / "model"
    assert json.loads((saved / "config.json").read_text())["architectures"] == [f"Bert{head}"]
    batch = {k: v for k, v in trainer.eval_sets["dev"].batch([0, 1, 2]).items() if k != "labels"}
    model = trainer.strategy.eval_model().eval()
    with torch.no_grad():
        ours = model(**batch).logits
    out = plain.run(
        PLAIN, kind, str(saved), json.dumps({k: v.tolist() for k, v in batch.items()}), check=True
    )
    theirs = torch.tensor(json.loads(out.stdout))
    torch.testing.assert_close(theirs, ours, rtol=1e-5, atol=1e-5)


def test_a_sentence_classifiers_head_is_not_reused_for_a_token_task(model_dir, tmp_path, caplog):
    trainer = TrainingLoop(config(model_dir, tmp_path, "toy-tags"))
    assert type(trainer.model).__name__ == "BertForTokenClassification"
    assert trainer.model.config.num_labels == 5
    assert "head (BertForSequenceClassification) is not used" in caplog.text


def test_long_documents_record_their_truncation_in_the_config(model_dir, tmp_path):
    train = tmp_path / "train.csv"
    rows = ["text,label"] + [
        f"{' '.join(random.Random(i).choices(WORDS, k=40 if i % 3 == 0 else 5))},{i % 2}" for i in range(40)
    ]
    train.write_text("\n".join(rows) + "\n")
    values = dict(train_file=str(train), eval_files={"dev": str(train)}, text_columns=["text"])
    results = finetune(config(model_dir, tmp_path, "file", **values))
    assert format_truncation(results) == (
        "longer than 16 pieces: 12 of 36 train, 2 of 4 validation, 14 of 40 dev "
        "(head-tail: kept the first 3 and the last 11 pieces)"
    )
    summary = json.loads((tmp_path / "file-none" / "config.json").read_text())["truncation"]
    assert summary["strategy"] == "head-tail" and (summary["head"], summary["tail"]) == (3, 11)
    assert summary["cut"]["dev"] == 14  # rows 0, 3, ..., 39: 40 words do not fit 16 pieces
    finetune(
        config(
            model_dir,
            tmp_path,
            "file",
            truncation="sliding",
            window_stride=4,
            output_dir=str(tmp_path / "w"),
            **values,
        )
    )
    summary = json.loads((tmp_path / "w" / "config.json").read_text())["truncation"]
    assert summary["strategy"] == "sliding" and summary["stride"] == 4
    assert summary["windows"]["dev"] > 40


# --------------------------------------------------------------------------------------------------
# AD-DROP's targets and AttendOut's scores per kind


def finite_difference_check(model, batch, result, target, positions):
    eps = 1e-4
    shape = next(iter(result.probs.values())).shape
    for layer, b, h, i, j in positions:
        weight = result.probs[layer][b, h, i, j].item()
        assert weight > 1e-3
        factor = torch.ones(shape, dtype=torch.float64)
        factor[b, h, i, j] = 1 + eps / weight
        up = target(Perturb(layer, factor.clone()))
        factor[b, h, i, j] = 1 - eps / weight
        down = target(Perturb(layer, factor.clone()))
        numeric = (up - down) / (2 * eps)
        assert result.scores[layer][b, h, i, j].item() == pytest.approx(numeric, rel=1e-4, abs=1e-7)


def with_probe(model, probe, run):
    from attendout.attention import install

    controller = install(model)
    controller.add(probe)
    try:
        with torch.no_grad():
            return run()
    finally:
        controller.remove(probe)


def test_addrop_attributes_the_predicted_tags_of_a_token_model():
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_config(
        tiny_config("bert", num_labels=5, initializer_range=0.2, **no_dropout("bert"))
    ).double()
    model.eval()
    batch = make_batch(batch=3, length=9, pad_from={1: 6})
    result = attribute(model, batch, [0, 1], "ga")
    tags = result.predicted
    assert tags.shape == (3, 9)
    real = batch["attention_mask"].bool()

    def target(probe):  # minus the mean cross-entropy of the predicted tags over the real tokens
        logits = with_probe(model, probe, lambda: model(**inputs(batch)).logits)
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), tags, reduction="none")
        return (-(ce * real).sum() / real.sum()).item()

    finite_difference_check(model, batch, result, target, [(0, 0, 0, 0, 0), (0, 1, 2, 3, 5), (1, 2, 1, 4, 7)])
    # not the sequence target: token 0's logits alone would give a zero gradient to row 4 of layer 1's
    # attention, whose output reaches only token 4's tag
    assert result.scores[1][2, :, 4].abs().max() > 1e-6


def test_addrop_attributes_the_predicted_choice_of_a_multiple_choice_model():
    torch.manual_seed(0)
    model = AutoModelForMultipleChoice.from_config(
        tiny_config("bert", initializer_range=0.2, **no_dropout("bert"))
    ).double()
    model.eval()
    flat = make_batch(batch=6, length=8, pad_from={1: 5})
    batch = {k: flat[k].view(2, 3, 8) for k in ("input_ids", "attention_mask")}
    result = attribute(model, batch, [0, 1], "ga")
    chosen = result.predicted  # (2,)
    assert next(iter(result.probs.values())).shape[0] == 6  # the encoder's rows: 2 questions x 3 options

    def target(probe):
        logits = with_probe(model, probe, lambda: model(**batch).logits)
        return logits.gather(1, chosen[:, None]).sum().item()

    rows = [3 * q + int(c) for q, c in enumerate(chosen)]
    finite_difference_check(model, batch, result, target, [(0, rows[0], 0, 0, 0), (1, rows[1], 2, 0, 3)])
    other = next(r for r in range(3) if r != rows[0])  # an option not chosen: no part in the target
    assert result.scores[0][other].abs().max() == 0


def test_attendout_scores_a_token_sample_by_its_gold_tags_mean_log_probability(model_dir, tmp_path):
    trainer = TrainingLoop(
        config(model_dir, tmp_path, "toy-tags", "attendout", method_options={"eval_samples": 8})
    )
    strategy = trainer.strategy
    data = trainer.validation_set
    scores = strategy.score(strategy.defender, data, [0, 1, 2])
    batch = data.batch([0, 1, 2])
    with torch.no_grad():
        log_p = torch.log_softmax(strategy.defender(**inputs(batch)).logits, -1)
    for row in range(3):
        words = batch["labels"][row] >= 0
        gold = log_p[row][words].gather(-1, batch["labels"][row][words][:, None]).mean()
        assert scores.per_sample[row].item() == pytest.approx(gold.item(), abs=1e-5)
    assert scores.labels[0] == data.gold[0]


def test_attendout_scores_a_choice_sample_by_its_gold_options_log_probability(model_dir, tmp_path):
    trainer = TrainingLoop(
        config(model_dir, tmp_path, "toy-choice", "attendout", method_options={"eval_samples": 8})
    )
    strategy = trainer.strategy
    data = trainer.validation_set
    scores = strategy.score(strategy.defender, data, [0, 1, 2])
    batch = data.batch([0, 1, 2])
    with torch.no_grad():
        log_p = torch.log_softmax(strategy.defender(**inputs(batch)).logits, -1)  # (3, options)
    gold = log_p.gather(1, batch["labels"][:, None]).squeeze(1)
    torch.testing.assert_close(scores.per_sample, gold, rtol=1e-5, atol=1e-5)
    assert scores.predictions.tolist() == log_p.argmax(-1).tolist()


# --------------------------------------------------------------------------------------------------
# The CLI


def test_cli_regression_file_reports_pearson_and_spearman(model_dir, tmp_path, capsys):
    from attendout.cli import main

    rng = random.Random(0)
    lines = ["text,score"]
    for _ in range(48):
        words = rng.sample(WORDS, 5)
        lines.append(f"{' '.join(words)},{sum(w in POS for w in words) + rng.random():.3f}")
    (tmp_path / "sts.csv").write_text("\n".join(lines) + "\n")
    code = main(
        [
            "finetune", "--task", "file", "--label-kind", "regression", "--train-file", str(tmp_path / "sts.csv"),
            "--eval-file", f"dev={tmp_path / 'sts.csv'}", "--label-column", "score", "--model", model_dir,
            "--max-steps", "3", "--max-length", "16", "--no-progress", "--output-dir", str(tmp_path / "run"),
            "--ignore-mismatched-head",
        ]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "| pearson | spearman |" in out
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert set(results["eval"]["dev"]) == {"pearson", "spearman", "loss"}


def test_cli_applies_a_tasks_own_defaults_unless_told_otherwise(monkeypatch):
    from attendout import cli

    seen = {}

    class Seen(Exception):
        pass

    def fake(config, on_log=None):
        seen["c"] = config
        raise Seen  # stop before any data is read (a Ctrl-C would be a stop the command reports)

    monkeypatch.setattr("attendout.run.finetune", fake)
    for argv, expected in [
        (["--task", "conll2003"], (8, 1e-4, 128)),
        (["--task", "conll2003", "--batch-size", "32"], (32, 1e-4, 128)),
        (["--task", "movie-reviews"], (8, 5e-5, 512)),
        (["--task", "cola", "--max-length", "64"], (32, 5e-5, 64)),
    ]:
        with pytest.raises(Seen):
            cli.main(["finetune", *argv, "--no-progress"])
        assert (seen["c"].batch_size, seen["c"].learning_rate, seen["c"].max_length) == expected


def test_encode_picks_the_kind_and_refuses_a_truncation_it_cannot_apply(minilm_tokenizer):
    assert isinstance(encode(token_examples(2, 0), TOKEN_TASK, minilm_tokenizer, 16), TokenEncoded)
    assert isinstance(encode(choice_examples(2, 0), CHOICE_TASK, minilm_tokenizer, 16), ChoiceEncoded)
    for examples, task in ((token_examples(2, 0), TOKEN_TASK), (choice_examples(2, 0), CHOICE_TASK)):
        for truncation in ("sliding", "head-tail"):
            with pytest.raises(ValueError, match=f"truncation '{truncation}' is for long texts.*{task.kind}"):
                encode(examples, task, minilm_tokenizer, 16, truncation)


# --------------------------------------------------------------------------------------------------
# Predicting


def test_predictor_tags_words_and_chooses_options(model_dir, tmp_path, capsys):
    from attendout.cli import main
    from attendout.predict.classification import Predictor

    finetune(config(model_dir, tmp_path, "toy-tags", max_steps=None, epochs=6, learning_rate=2e-3))
    tagger = Predictor.load(tmp_path / "toy-tags-none")
    tagged = tagger.predict_words([["good", "great", "film"], ["bad"]])
    assert [len(tags) for tags in tagged.labels] == [3, 1]
    assert all(tag in TAGS for tags in tagged.labels for tag in tags)
    metrics, _ = tagger.evaluate(tagger.split("dev"))
    assert metrics["token_accuracy"] > 0.8
    conll = tmp_path / "input.conll"
    conll.write_text("good X B-POS\ngreat X I-POS\nfilm X O\n\nbad X B-NEG\nthe X O\n")
    assert (
        main(
            [
                "predict",
                str(tmp_path / "toy-tags-none"),
                "--input",
                str(conll),
                "--tag-column",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "text_a\tlabel\tprediction" and out[1].startswith("good great film\tB-POS I-POS O\t")
    assert len(out[1].split("\t")[2].split()) == 3

    finetune(config(model_dir, tmp_path, "toy-choice", max_steps=None, epochs=6, learning_rate=2e-3))
    chooser = Predictor.load(tmp_path / "toy-choice-none")
    chosen = chooser.predict_choices(["the film was"], [["bad dull", "good fun", "poor awful"]])
    assert chosen.labels in ([0], [1], [2]) and chosen.scores.shape == (1, 3)
    rows = tmp_path / "q.csv"
    rows.write_text("question,A,B,C,D,answer\nthe film was,bad dull,awful poor,good nice,dull bad,C\n")
    args = ["predict", str(tmp_path / "toy-choice-none"), "--input", str(rows), "--label-column", "answer"]
    assert main([*args, "--no-progress"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split("\t")[:6] == ["text_a", "option_0", "option_1", "option_2", "option_3", "label"]
    assert out[1].split("\t")[5] == "2"
    rows.write_text("question,A,B,C,D,answer\nthe film was,bad dull,awful poor,good nice,dull bad,E\n")
    assert main([*args, "--no-progress"]) != 0
    assert "answer 'E' is not one of the row's 4 options" in capsys.readouterr().err


# --------------------------------------------------------------------------------------------------
# transformers.Trainer with a token classifier


@pytest.mark.parametrize("method", ["addrop", "attendout"])
def test_hf_trainer_trains_a_token_classifier_with_the_methods(model_dir, tmp_path, method):
    from transformers import DataCollatorForTokenClassification

    from attendout.hf import Trainer as MethodTrainer
    from test_hf_trainer import hf_args, logged

    data = TrainingLoop(config(model_dir, tmp_path, "toy-tags"))  # for its tokenised splits

    def rows(encoded):
        return [{**encoded.features[i], "labels": encoded.token_labels[i]} for i in range(len(encoded))]

    model = AutoModelForTokenClassification.from_pretrained(
        model_dir, num_labels=5, ignore_mismatched_sizes=True
    )
    options = (
        {"cross_tuning": "off", "q": 1.0} if method == "addrop" else {"dropout_steps": 2, "eval_samples": 8}
    )
    trainer = MethodTrainer(
        model=model,
        args=hf_args(tmp_path),
        train_dataset=rows(data.train_set),
        data_collator=DataCollatorForTokenClassification(data.tokenizer),
        method=method,
        method_options=options,
        validation_dataset=rows(data.validation_set),
        max_length=16,
    )
    trainer.train()
    if method == "addrop":
        assert min(logged(trainer, "addrop/candidate_fraction")) > 0.2
        assert logged(trainer, "addrop/drop_rate_in_candidates") == [1.0] * 4
    else:
        assert logged(trainer, "attendout/games")[-1] == 2  # a game every 2 of the 4 steps


# --------------------------------------------------------------------------------------------------
# Tables of token tasks


def test_sequence_metric_counts_score_any_resample_as_the_metric_does():
    from attendout.report.stats import bootstrap_difference
    from attendout.tasks.metrics import METRICS, SEQUENCE_METRICS, from_counts, sequence_counts

    rng = random.Random(0)
    gold = [[rng.choice(TAGS) for _ in range(rng.randint(1, 8))] for _ in range(300)]
    a = [[t if rng.random() < 0.9 else rng.choice(TAGS) for t in row] for row in gold]
    b = [[t if rng.random() < 0.5 else rng.choice(TAGS) for t in row] for row in gold]
    draw = np.random.default_rng(1).integers(0, 300, size=300)
    for metric in SEQUENCE_METRICS:
        counts = sequence_counts(metric, a, gold)
        direct = METRICS[metric]([a[i] for i in draw], [gold[i] for i in draw])
        assert from_counts(metric, counts[draw].sum(0)) == pytest.approx(direct, abs=1e-12)
        interval = bootstrap_difference(metric, gold, [a], [b], n_resamples=200)
        assert interval.estimate == pytest.approx(
            METRICS[metric](a, gold) - METRICS[metric](b, gold), abs=1e-12
        )
        assert (
            interval.low <= interval.estimate <= interval.high and interval.low > 0
        )  # a is the better tagger


def test_a_token_cells_stored_predictions_are_read_as_tag_names_and_floored_by_the_commonest_tag(tmp_path):
    from attendout.report.comparison import RunRecord, majority_floor

    (tmp_path / "predictions").mkdir()
    rows = [
        {"index": 0, "prediction": [1, 2, 0, 0], "label": [1, 2, 0, 0]},
        {"index": 1, "prediction": [0, 0], "label": [3, 0]},
    ]
    (tmp_path / "predictions" / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = {"task": {"label_names": list(TAGS)}}
    run = RunRecord(cell=None, path=tmp_path, results={}, config=config, record={})
    preds, labels = run.predictions("dev")
    assert list(preds) == [["B-POS", "I-POS", "O", "O"], ["O", "O"]]
    assert list(labels) == [["B-POS", "I-POS", "O", "O"], ["B-NEG", "O"]]
    assert majority_floor([run], "dev", "token_accuracy") == pytest.approx(0.5)  # "O" everywhere: 3 of 6
    assert majority_floor([run], "dev", "entity_f1") == 0.0


def test_cli_trains_on_token_files(model_dir, tmp_path, capsys):
    from attendout.cli import main

    examples = token_examples(40, 3)
    lines = []
    for words, tags in zip(examples.words, examples.labels, strict=True):
        lines += [f"{w} X {TAGS[t]}" for w, t in zip(words, tags, strict=True)] + [""]
    (tmp_path / "train.conll").write_text("\n".join(lines) + "\n")
    args = [
        "finetune",
        "--task",
        "file",
        "--label-kind",
        "token",
        "--train-file",
        str(tmp_path / "train.conll"),
    ]
    args += ["--eval-file", f"dev={tmp_path / 'train.conll'}", "--token-column", "0", "--tag-column", "2"]
    args += ["--model", model_dir, "--max-steps", "2", "--max-length", "16", "--no-progress"]
    assert main([*args, "--output-dir", str(tmp_path / "run")]) == 0, capsys.readouterr().err
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert results["main_metric"] == "entity_f1" and "token_accuracy" in results["eval"]["dev"]
    assert results["sizes"]["dev"] == 40


def test_inspect_draws_a_token_classifiers_attribution_and_refuses_a_choice_model(
    model_dir, tmp_path, capsys
):
    from attendout.cli import main

    finetune(config(model_dir, tmp_path, "toy-tags"))
    finetune(config(model_dir, tmp_path, "toy-choice"))
    out = tmp_path / "inspect.png"
    args = ["inspect", "--text", "good great film", "--layer", "1", "--output", str(out)]
    assert main([*args, "--model", str(tmp_path / "toy-tags-none")]) == 0
    printed = capsys.readouterr().out
    tags = printed.split("predicted ")[1].split(";")[0].split()
    assert len(tags) == 3 and all(tag in TAGS for tag in tags) and out.stat().st_size > 0
    assert main([*args, "--model", str(tmp_path / "toy-choice-none")]) != 0
    assert "multiple-choice model" in capsys.readouterr().err
