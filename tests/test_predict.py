"""Predicting with a fine-tuned model: the Python API and `attendout predict`."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from attendout.cli import main
from attendout.predict.base import PredictError
from attendout.predict.classification import Predictor, write_predictions
from attendout.run.loop import finetune
from attendout.tasks import DataError, Examples
from conftest import toy_train_config


@pytest.fixture
def finished_run(tiny_run):
    """A tiny run with its model saved: (run directory, results)."""
    config = toy_train_config(
        tiny_run, max_steps=8, eval_steps=4, method="scores-dropout", method_options={"p": 0.1}
    )
    results = finetune(config)
    return tiny_run["tmp"] / "run", results


def recorded_predictions(run, split="dev"):
    return [json.loads(line) for line in (run / "predictions" / f"{split}.jsonl").read_text().splitlines()]


def test_a_run_directory_reproduces_the_runs_own_dev_predictions_and_metrics(finished_run):
    run, results = finished_run
    predictor = Predictor.load(run, device="cpu")
    assert predictor.max_length == 16 and predictor.task.label_names == ("0", "1")
    metrics, predictions = predictor.evaluate(predictor.split("dev"))
    recorded = recorded_predictions(run)
    # The Predictor batches as the run did (64 examples) with the saved weights: the same computation,
    # equal to the bit in practice. The tolerances (a few float32 ulps of probabilities and losses)
    # only keep the test about the predictions, not about which SDPA call each side makes.
    assert predictions.predictions.tolist() == [r["prediction"] for r in recorded]
    np.testing.assert_allclose(predictions.scores, [r["score"] for r in recorded], atol=1e-6)
    assert metrics["accuracy"] == pytest.approx(results["eval"]["dev"]["accuracy"])
    assert metrics["loss"] == pytest.approx(results["eval"]["dev"]["loss"], rel=1e-5)


def test_the_validation_split_is_the_one_the_run_selected_its_model_on(finished_run):
    run, results = finished_run
    predictor = Predictor.load(run, device="cpu")
    validation = predictor.split("validation")
    assert len(validation) == json.loads((run / "config.json").read_text())["sizes"]["validation"]
    metrics, _ = predictor.evaluate(validation)
    assert metrics["accuracy"] == pytest.approx(results["validation"]["accuracy"])
    with pytest.raises(PredictError, match="no split 'test'.*train, validation, dev"):
        predictor.split("test")


def test_texts_predict_as_in_the_batch_and_alone(finished_run):
    run, _ = finished_run
    predictor = Predictor.load(run, device="cpu", batch_size=3)
    texts = ["good fun film", "bad dull boring plot", "nice", "awful poor", "great great great fine"]
    together = predictor.predict(texts)
    alone = [predictor.predict([t]) for t in texts]
    # Dynamic padding within a batch must not change any example's output. Other padded lengths
    # make other matrix shapes, so only up to float32 rounding: 1e-5 on probabilities is over 100
    # float32 ulps (measured: equal to the bit on every setting of `make test-matrix`).
    np.testing.assert_allclose(together.scores, np.concatenate([a.scores for a in alone]), atol=1e-5)
    assert together.labels == [predictor.task.label_names[int(i)] for i in together.predictions]
    np.testing.assert_allclose(together.scores.sum(axis=1), 1.0, atol=1e-6)  # softmax: float32 rounding
    assert together.loss is None


def test_a_model_folder_predicts_from_its_own_labels(finished_run):
    run, _ = finished_run
    from_run = Predictor.load(run, device="cpu")
    from_folder = Predictor.load(run / "model", device="cpu", max_length=16)
    assert from_folder.task.label_names == ("0", "1") and from_folder.settings is None
    texts = ["good fun", "bad awful"]
    np.testing.assert_allclose(from_folder.predict(texts).scores, from_run.predict(texts).scores, atol=1e-6)
    with pytest.raises(PredictError, match="model folder, not a run directory"):
        from_folder.split("dev")
    # A model folder does not know whether it was trained on pairs: two columns make pairs.
    pairs = run.parent / "pairs.tsv"
    pairs.write_text("first\tsecond\ngood fun\tnice film\nbad\tawful plot\n")
    examples = from_folder.read(pairs, text_columns=["first", "second"])
    assert examples.text_b == ["nice film", "awful plot"] and len(from_folder.predict_examples(examples)) == 2
    with pytest.raises(PredictError, match="takes single texts.*inputs are pairs"):
        from_run.predict_examples(examples)  # the run knows its task is single-text


def test_a_labelled_input_file_is_scored_and_written_atomically(finished_run, tmp_path):
    run, results = finished_run
    predictor = Predictor.load(run, device="cpu")
    examples = predictor.read(run.parent / "dev.csv", label_column="label")  # the run's own dev file
    metrics, predictions = predictor.evaluate(examples)
    assert metrics["accuracy"] == pytest.approx(results["eval"]["dev"]["accuracy"])
    out = write_predictions(
        tmp_path / "out" / "dev.tsv", predictions, examples, label_names=predictor.task.label_names
    )
    rows = list(csv.DictReader(out.open(), delimiter="\t"))
    assert len(rows) == 24 and set(rows[0]) == {"text_a", "label", "prediction", "p_0", "p_1"}
    assert [r["prediction"] for r in rows] == predictions.labels
    assert not list(out.parent.glob(".*.tmp"))
    with pytest.raises(PredictError, match=r"must end in \.jsonl, \.csv or \.tsv"):
        write_predictions(tmp_path / "out.txt", predictions, examples)


def test_bad_inputs_are_clear_errors(finished_run, tmp_path):
    run, _ = finished_run
    predictor = Predictor.load(run, device="cpu")
    bad = tmp_path / "in.csv"
    bad.write_text("review\nnice film\n")
    with pytest.raises(DataError, match="no column 'text'.*'review'"):
        predictor.read(bad)
    assert len(predictor.read(bad, text_columns=["review"])) == 1
    with pytest.raises(DataError, match="takes 1 text column"):
        predictor.read(bad, text_columns=["review", "review"])
    unknown = tmp_path / "labelled.csv"
    unknown.write_text("text,label\nnice film,maybe\n")
    with pytest.raises(DataError, match="label 'maybe' is not in the label set"):
        predictor.read(unknown, label_column="label")
    empty = tmp_path / "empty.csv"
    empty.write_text("text\n")
    with pytest.raises(DataError, match="no rows to predict"):
        predictor.read(empty)
    with pytest.raises(PredictError, match="takes single texts.*inputs are pairs"):
        predictor.predict(["a"], ["b"])
    with pytest.raises(
        PredictError, match="max_length 10000 is more than .* can embed: .* 64 learned positions"
    ):
        Predictor.load(run, device="cpu", max_length=10_000)
    with pytest.raises(PredictError, match="not a folder"):
        Predictor.load(tmp_path / "nowhere")
    no_model = tmp_path / "cell"
    no_model.mkdir()
    (no_model / "config.json").write_text((run / "config.json").read_text())
    with pytest.raises(PredictError, match="kept no model"):
        Predictor.load(no_model)
    with pytest.raises(PredictError, match="without labels"):
        predictor.evaluate(Examples(text_a=["a"], text_b=None, labels=None))


def test_cli_predicts_a_file_and_scores_a_split(finished_run, tmp_path, capsys):
    run, results = finished_run
    inputs = tmp_path / "in.jsonl"
    inputs.write_text("\n".join(json.dumps({"text": t}) for t in ["good fun nice", "bad dull"]) + "\n")
    out = tmp_path / "pred.jsonl"
    assert main(["predict", str(run), "--input", str(inputs), "--output", str(out), "--device", "cpu"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["text_a"] for r in rows] == ["good fun nice", "bad dull"]
    assert all(r["prediction"] in ("0", "1") and abs(r["p_0"] + r["p_1"] - 1) < 1e-5 for r in rows)
    capsys.readouterr()
    assert main(["predict", str(run), "--split", "dev", "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].split("\t") == ["text_a", "label", "prediction", "p_0", "p_1"] and len(lines) == 25
    assert f"accuracy {results['eval']['dev']['accuracy']:.4f}" in captured.err
    assert main(["predict", str(run), "--split", "dev", "--label-column", "label"]) == 2
    assert "describe an --input file" in capsys.readouterr().err


def test_a_synthesized_run_predicts_through_its_own_checkpoint_format(tiny_run):
    options = {"variant": "dense+dot", "synthesizer_lr": 0.01}
    finetune(toy_train_config(tiny_run, method="synthesizer", method_options=options, max_steps=4))
    run = tiny_run["tmp"] / "run"
    predictor = Predictor.load(run, device="cpu")
    _, predictions = predictor.evaluate(predictor.split("dev"))
    np.testing.assert_allclose(predictions.scores, [r["score"] for r in recorded_predictions(run)], atol=1e-6)
    # l_max (the run's max length, 16) bounds the inputs: a model folder defaults to it, more is refused.
    assert Predictor.load(run / "model", device="cpu").max_length == 16
    with pytest.raises(PredictError, match="l_max 16 is less than max_length 32"):
        Predictor.load(run / "model", device="cpu", max_length=32)
