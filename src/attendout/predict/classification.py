"""Predictions from a fine-tuned model: :class:`Predictor` and ``attendout predict``.

Two kinds of folder load with :meth:`Predictor.load`:

* a **run directory** written by ``attendout finetune`` (``config.json`` with the run's settings and
  ``model/``): the predictor knows the task (label names, text fields, metrics), the maximum length
  the model was trained with and where the data came from, so :meth:`Predictor.split` can rebuild
  any split of the run (``dev``, ``dev_ood``, the carved ``validation``...) exactly as the run saw it;
* a **model folder**: a run's ``model/``, any ``transformers`` sequence-classification checkpoint,
  or a synthesized checkpoint (:func:`attendout.load_model` reads both). Only its labels are known:
  texts are read from a ``text`` column unless told otherwise (two columns: pairs), and scored by
  accuracy (regression: Pearson).

A run directory that is not finished (stopped by Ctrl-C at step 10 of 5,000, or killed) is refused with
its state, which step its model is of and the command that finishes it
(:func:`~attendout.predict.base.check_finished`); ``allow_unfinished=True`` predicts with that model,
warns, and records the run's state in every output (``Predictions.run_state``, a ``run_state`` column).

>>> predictor = Predictor.load("runs/cola")
>>> predictor.predict(["The cat sat on the mat.", "Mat the on sat cat."]).labels
['acceptable', 'unacceptable']
>>> metrics, predictions = predictor.evaluate(predictor.split("dev"))
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch import nn

from ..core.limits import check_length, position_limit
from ..encoding import encode
from ..tasks import (
    CLASSIFICATION,
    MULTIPLE_CHOICE,
    TOKEN_CLASSIFICATION,
    ChoiceExamples,
    DataError,
    Examples,
    Task,
    TokenExamples,
    compute_metrics,
    is_generation,
)
from ..tasks.core import task_of
from ..tasks.readers import read_file, to_examples
from .base import (
    BasePredictor,
    PredictError,
    check_finished,
    load_model_folder,
    synthesizer_config,
    task_from_settings,
    with_run_state,
    write_rows_atomic,
)
from .generative import GenerationPredictor, generation_kind


@dataclass(frozen=True)
class Predictions:
    """The model's outputs for n examples, in input order.

    ``predictions``: class indices [n] (regression: values [n]; token classification: a list of tag
    indices per example, one per word; multiple choice: the chosen option's index [n]); ``scores``:
    class probabilities [n, classes] (regression: the values again; token classification: each word's
    tag probability; multiple choice: the options' probabilities [n, options]); ``label_names``: the
    class or tag names (None for regression and multiple choice); ``loss``: the mean loss when the
    examples had labels; ``kind``: the task kind; ``run_state``: where the run stood, when its model is
    of a run that is not finished (:meth:`attendout.core.folder.RunState.to_dict`; else None).
    """

    predictions: Any
    scores: Any
    label_names: tuple[str, ...] | None
    loss: float | None = None
    kind: str = CLASSIFICATION
    run_state: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.predictions)

    @property
    def labels(self) -> list[Any]:
        """The predicted class names (regression: values; token classification: a list of tag names per
        example; multiple choice: the chosen option's index)."""
        if self.kind == TOKEN_CLASSIFICATION:
            names = self.label_names or ()
            return [[names[int(i)] for i in row] for row in self.predictions]
        if self.kind == MULTIPLE_CHOICE:
            return [int(i) for i in self.predictions]
        if self.label_names is None:
            return [float(v) for v in self.predictions]
        return [self.label_names[int(i)] for i in self.predictions]

    def records(self) -> list[dict[str, Any]]:
        """One dict per example: ``prediction`` (name, value, option index, or the words' tags joined by
        spaces) and, for classes and options, each probability."""
        if self.kind == TOKEN_CLASSIFICATION:
            return [{"prediction": " ".join(tags)} for tags in self.labels]
        if self.kind != MULTIPLE_CHOICE and self.label_names is None:  # regression
            return [{"prediction": value} for value in self.labels]
        return [  # each class by its name, each option by its index
            {
                "prediction": label,
                **{
                    f"p_{name}": round(float(p), 6)
                    for name, p in zip(self.label_names or range(len(row)), row, strict=True)
                },
            }
            for label, row in zip(self.labels, self.scores, strict=True)
        ]


def _model_task(model: nn.Module, name: str) -> Task:
    """A task described by a bare checkpoint: its head's kind and labels (:func:`~attendout.tasks.core.task_of`)."""
    task = task_of(model)
    return dataclasses.replace(
        task, name=name, eval_split_names=("input",), description=task.description.replace("the model", name)
    )


def _longest_input(model: nn.Module, tokenizer: Any) -> int:
    """The most tokens the model takes (a default length): a synthesizer's l_max, else its positions."""
    synthesizer = synthesizer_config(model)
    if synthesizer is not None and synthesizer.l_max is not None:
        return int(synthesizer.l_max)
    limits = (position_limit(model.config)[0], getattr(tokenizer, "model_max_length", None))
    return min((v for v in limits if isinstance(v, int) and 0 < v < 1_000_000), default=512)


def _check_has_model(path: Path, model_dir: Path, settings: dict[str, Any] | None) -> None:
    """A run directory that kept its model, or a model folder (its config.json)."""
    from transformers.utils import CONFIG_NAME  # a model folder's config.json

    if settings is not None and not (model_dir / CONFIG_NAME).is_file():
        raise PredictError(
            f"run {path} kept no model (no {model_dir}/{CONFIG_NAME}): it ran with save_model off, "
            "as `attendout bench` cells do unless asked; fine-tune again with --save-model"
        )
    if not (model_dir / CONFIG_NAME).is_file():
        raise PredictError(f"{path} has no {CONFIG_NAME}: it is neither a run directory nor a model folder")


def _run_task(settings: dict[str, Any], model: nn.Module, model_dir: Path) -> Task:
    """The task a run recorded, its outputs checked against the model's."""
    task = task_from_settings(settings)
    expected = task.num_labels
    if task.kind != MULTIPLE_CHOICE and model.config.num_labels != expected:
        raise PredictError(
            f"{model_dir} has {model.config.num_labels} outputs but the run's task {task.name!r} has {expected}"
        )
    return task


class Predictor(BasePredictor):
    """A fine-tuned sequence classifier (or regressor) with its tokenizer, ready to label text.

    ``max_length``: inputs are truncated to this many tokens (a run directory's own max length by
    default). ``precision`` "bf16"/"fp16" runs under autocast (GPU). ``run_state``: where the run stands,
    when the model is of a run that is not finished (loaded with ``allow_unfinished``); its predictions
    record it.
    """

    no_split_words = "it does not know its data; predict a file instead"

    def check(self, model: nn.Module) -> None:
        super().check(model)
        check_length(
            self.max_length, model.config, tokenizer=self.tokenizer, method=synthesizer_config(model),
            model=self.source or "the model", setting="max_length",
        )  # fmt: skip

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        *,
        max_length: int | None = None,
        batch_size: int = 64,
        device: str = "auto",
        precision: str = "fp32",
        progress: bool = False,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        allow_unfinished: bool = False,
    ) -> Predictor | GenerationPredictor:
        """Load a run directory or a model folder (see the module's docstring).

        A run of a generation task (``lm``, ``seq2seq``) or a folder of a causal LM or an encoder-decoder
        loads as a :class:`~attendout.predict.generative.GenerationPredictor`, which takes ``num_beams`` and
        ``max_new_tokens`` too. A run directory that is not finished is a
        :class:`~attendout.predict.base.UnfinishedRunError` (its state, its model's step, the command that
        finishes it), unless ``allow_unfinished``: then a warning, and the predictions record its state.
        """
        path, settings, model_dir = cls.locate(path)
        generation = settings is not None and is_generation(settings["task"].get("kind", ""))
        if generation or (settings is None and generation_kind(model_dir) is not None):
            return GenerationPredictor.load(
                path, max_length=max_length, num_beams=num_beams, max_new_tokens=max_new_tokens,
                batch_size=batch_size, device=device, precision=precision, progress=progress,
                allow_unfinished=allow_unfinished,
            )  # fmt: skip
        if num_beams is not None or max_new_tokens is not None:
            kind = settings["task"].get("kind") if settings is not None else "a classifier"
            raise PredictError(
                f"{path} is {kind}, not a generation model: num_beams and max_new_tokens are for lm and seq2seq"
            )
        run_state = check_finished(path, allow_unfinished) if settings is not None else None
        _check_has_model(path, model_dir, settings)
        model, tokenizer = load_model_folder(model_dir)
        if settings is not None:
            task = _run_task(settings, model, model_dir)
            max_length = max_length or int(settings["config"]["max_length"])
        else:
            task = _model_task(model, path.name)
            max_length = max_length or _longest_input(model, tokenizer)
        return cls(
            model, tokenizer, task, max_length=max_length, batch_size=batch_size, device=device,
            precision=precision, settings=settings, source=str(path), progress=progress, run_state=run_state,
        )  # fmt: skip

    # predicting -----------------------------------------------------------------------------------
    def predict(self, text_a: Sequence[str] | str, text_b: Sequence[str] | str | None = None) -> Predictions:
        """Predict texts (``text_b``: the second text of each pair, for pair tasks).

        A bare string is one text, not a sequence of characters: ``predict("one sentence")`` gives one
        prediction, as ``predict(["one sentence"])`` does (and ``predict("premise", "hypothesis")``
        one pair).
        """
        if isinstance(text_a, str):
            text_a = [text_a]
        if isinstance(text_b, str):
            text_b = [text_b]
        return self.predict_examples(
            Examples(text_a=list(text_a), text_b=None if text_b is None else list(text_b), labels=None)
        )

    def predict_examples(self, examples: Examples) -> Predictions:
        """Predict :class:`~attendout.tasks.Examples` (their labels, if any, give the loss):
        :class:`~attendout.tasks.TokenExamples` for a token classifier, :class:`~attendout.tasks.ChoiceExamples`
        for a multiple-choice model."""
        if len(examples) == 0:
            raise PredictError("nothing to predict: no examples")
        kind = self.task.kind
        needed = {TOKEN_CLASSIFICATION: TokenExamples, MULTIPLE_CHOICE: ChoiceExamples}.get(kind)
        if needed is not None and not isinstance(examples, needed):
            what = (
                "words (one list per sentence)" if needed is TokenExamples else "a question and its options"
            )
            raise PredictError(
                f"task {self.task.name!r} is {kind}: its inputs are {what} ({needed.__name__})"
            )
        pair_model = self.task.is_pair
        knows_inputs = self.settings is not None  # a run knows single vs pairs; a model folder takes both
        if needed is None and knows_inputs and pair_model != (examples.text_b is not None):
            raise PredictError(
                f"task {self.task.name!r} takes {'pairs of texts' if pair_model else 'single texts'} "
                f"({', '.join(self.task.text_fields)}) but the inputs are "
                f"{'pairs' if examples.text_b is not None else 'single texts'}"
            )
        run = self.run_config()
        data = encode(
            examples,
            self.task,
            self.tokenizer,
            self.max_length,
            run.get("truncation", "auto"),
            run.get("window_stride"),
        )
        preds, scores, loss = self.predict_encoded(data)
        return Predictions(preds, scores, self.task.label_names, loss, kind, run_state=self.state())

    def predict_words(self, sentences: Sequence[Sequence[str]]) -> Predictions:
        """Tag sentences given as lists of words (token classification): one tag per word."""
        words = [list(w) for w in sentences]
        return self.predict_examples(TokenExamples.from_words(words, None))

    def predict_choices(self, questions: Sequence[str], options: Sequence[Sequence[str]]) -> Predictions:
        """Choose among each question's options (multiple choice); every question needs as many options."""
        return self.predict_examples(
            ChoiceExamples(
                text_a=list(questions), text_b=None, labels=None, choices=[list(o) for o in options]
            )
        )

    def evaluate(self, examples: Examples) -> tuple[dict[str, float], Predictions]:
        """(the task's metrics and the loss, the predictions) on labelled examples."""
        if examples.labels is None:
            raise PredictError("cannot evaluate examples without labels")
        predictions = self.predict_examples(examples)
        gold = examples.labels if self.task.kind == TOKEN_CLASSIFICATION else np.asarray(examples.labels)
        metrics = compute_metrics(self.task, predictions.predictions, gold)
        return {**metrics, "loss": predictions.loss}, predictions

    # data -----------------------------------------------------------------------------------------
    def read(
        self,
        path: str | os.PathLike,
        *,
        text_columns: Sequence[str] | None = None,
        label_column: str | None = None,
        file_format: str | None = None,
        token_column: int = 0,
        tag_column: int | None = None,
    ) -> Examples:
        """Read a file of inputs (labels too when ``label_column`` / ``tag_column`` is given).

        Sequence tasks: a CSV/TSV/JSON-lines file; text columns default to the run's own (``text_columns``
        of a file task, else the task's text fields: ``sentence`` for CoLA, ``sentence1``/``sentence2``
        for MRPC...). Token classification: a CoNLL-style column file (one word per line, a blank line
        between sentences), words in ``token_column``, gold tags in ``tag_column`` if given. Multiple
        choice: a CSV/TSV/JSON-lines file whose ``text_columns`` are the question and then its options
        (default ``question,A,B,C,D``); ``label_column`` holds the answer (a letter, A for the first
        option, or the option's index from 0).
        """
        if self.task.kind == TOKEN_CLASSIFICATION:
            return read_tagged_inputs(path, self.task, token_column=token_column, tag_column=tag_column)
        if self.task.kind == MULTIPLE_CHOICE:
            columns = tuple(text_columns or ("question", "A", "B", "C", "D"))
            examples = read_choice_inputs(path, columns, label_column=label_column, file_format=file_format)
            self.task = dataclasses.replace(self.task, choices=len(columns) - 1)
            return examples
        columns = tuple(text_columns or self.input_columns())
        task = self.task
        if self.settings is None:  # a model folder does not know whether it was trained on pairs
            task = dataclasses.replace(task, text_fields=columns)
        return read_inputs(
            path,
            task,
            text_columns=columns,
            label_column=label_column,
            file_format=file_format,
        )


def read_inputs(
    path: str | os.PathLike,
    task: Task,
    *,
    text_columns: Sequence[str],
    label_column: str | None = None,
    file_format: str | None = None,
) -> Examples:
    """Examples from a file of inputs for ``task`` (unlabelled unless ``label_column`` is given)."""
    if len(text_columns) != len(task.text_fields):
        raise DataError(
            f"task {task.name!r} takes {len(task.text_fields)} text column(s) "
            f"({', '.join(task.text_fields)}), got {list(text_columns)!r}"
        )
    raw = read_file(
        path, text_columns=text_columns, label_column=label_column, file_format=file_format, what="input file"
    )
    if label_column is not None:
        return to_examples(
            raw, kind=task.kind, label_names=task.label_names, split="input", label_range=task.label_range
        )
    if len(raw) == 0:
        raise DataError(f"{path}: no rows to predict")
    text_b = raw.texts[1] if len(raw.texts) > 1 else None
    return Examples(text_a=raw.texts[0], text_b=text_b, labels=None)


def read_tagged_inputs(
    path: str | os.PathLike, task: Task, *, token_column: int = 0, tag_column: int | None = None
) -> TokenExamples:
    """Sentences of a CoNLL-style column file for a token classifier; gold tags from ``tag_column``."""
    from ..tasks import read_conll
    from ..tasks.tokens import is_iob, to_token_examples

    sentences = read_conll(
        path,
        token_column=token_column,
        tag_column=token_column if tag_column is None else tag_column,
        what="input file",
    )
    if len(sentences) == 0:
        raise DataError(f"{path}: no sentences to tag")
    if tag_column is None:
        return TokenExamples.from_words([list(w) for w in sentences.words], None)
    names = task.label_names or ()
    return to_token_examples(sentences, names, split="input", iob=is_iob(names), groups=False)


def read_choice_inputs(
    path: str | os.PathLike,
    columns: Sequence[str],
    *,
    label_column: str | None = None,
    file_format: str | None = None,
) -> ChoiceExamples:
    """Questions and their options (``columns``: the question, then two or more options) from a file."""
    from ..tasks.choice import LETTERS

    def answer_index(letter: str) -> int | None:
        return LETTERS.index(letter) if len(letter) == 1 and letter in LETTERS else None

    if len(columns) < 3:
        raise DataError(
            f"multiple choice inputs need a question column and 2 or more option columns, got {list(columns)!r}"
        )
    raw = read_file(
        path, text_columns=columns, label_column=label_column, file_format=file_format, what="input file"
    )
    if len(raw) == 0:
        raise DataError(f"{path}: no rows to predict")
    options = [list(row) for row in zip(*raw.texts[1:], strict=True)]
    labels = None
    if label_column is not None:
        labels = []
        for value, line, row in zip(raw.labels, raw.lines, options, strict=True):
            text = str(value).strip()
            digits = text.isascii() and text.isdigit()  # int() of "²" (a digit to isdigit) would raise
            index = int(text) if digits else answer_index(text.upper()) if text.isalpha() else None
            if index is None or not 0 <= index < len(row) or not row[index].strip():
                raise DataError(
                    f"{path} line {line}, column {label_column!r}: answer {value!r} is not one of the row's "
                    f"{sum(bool(o.strip()) for o in row)} options"
                )
            labels.append(index)
    return ChoiceExamples(text_a=list(raw.texts[0]), text_b=None, labels=labels, choices=options)


def write_predictions(
    path: str | os.PathLike,
    predictions: Predictions,
    examples: Examples,
    *,
    label_names: Sequence[str] | None = None,
) -> Path:
    """Write one row per example (texts, gold label if known, prediction, probabilities) atomically.

    The format follows the extension: ``.jsonl``, ``.csv`` or ``.tsv``. The file appears complete or
    not at all.
    """
    return write_rows_atomic(path, prediction_rows(predictions, examples, label_names=label_names))


def prediction_rows(
    predictions: Predictions, examples: Examples, *, label_names: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """The rows :func:`write_predictions` writes: texts, gold label (when known), prediction, probabilities;
    with the predictions of a run that is not finished, its state (``run_state``) last."""
    if len(predictions) != len(examples):
        raise ValueError(f"{len(predictions)} predictions for {len(examples)} examples")
    rows = []
    for i, record in enumerate(predictions.records()):
        row: dict[str, Any] = {"text_a": examples.text_a[i]}
        if examples.text_b is not None:
            row["text_b"] = examples.text_b[i]
        options = getattr(examples, "choices", None)
        if options is not None:
            row.update({f"option_{k}": option for k, option in enumerate(options[i])})
        if examples.labels is not None:
            gold = examples.labels[i]
            if predictions.kind == TOKEN_CLASSIFICATION:
                row["label"] = " ".join(label_names[int(t)] for t in gold) if label_names else gold
            else:
                row["label"] = label_names[int(gold)] if label_names is not None else gold
        rows.append({**row, **record})
    return with_run_state(rows, predictions.run_state)
