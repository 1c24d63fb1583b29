"""The predictor family's common ground: :class:`BasePredictor`, and reading run folders and writing rows.

:mod:`attendout.predict.classification` (classifiers, taggers, multiple choice) and :mod:`attendout.predict.generative` (the
generation kinds, ``lm`` and ``seq2seq``) hold the two kinds of :class:`BasePredictor`; both read run
directories, load model folders, rebuild a run's splits and write prediction files the same way.
Both refuse a run directory that is not finished (:func:`check_finished`), unless asked to predict with
its model as it is; the outputs then record the run's state (``run_state``).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import TrainConfig, split_for_training
from ..core.folder import RunDir
from ..core.state import RunState
from ..encoding import Encoded, predict_batches
from ..run import autocast_dtype, load_data, pick_device
from ..tasks import Examples, Task
from ..tasks.hub import first_line

if TYPE_CHECKING:
    from torch import nn

logger = logging.getLogger(__name__)


#: The formats of an output file, by its extension.
OUTPUT_FORMATS = (".jsonl", ".csv", ".tsv")


class PredictError(ValueError):
    """A folder that cannot be predicted with, or inputs that do not fit the model."""


class UnfinishedRunError(PredictError):
    """A run directory that is not finished (stopped, or unfinished): ``state`` says where it stands.

    Its one line names the run's state, its kept model's step and what finishes it: in the state's own
    words (:meth:`~attendout.core.state.RunState.how_to_go_on`), or in the words given to :meth:`saying`
    (the command line names the exact command, :func:`attendout.cli.finetune.how_to_finish`)."""

    def __init__(self, path: Path, state: RunState, finish: str | None = None) -> None:
        super().__init__(
            f"run {path} is not finished: {state.describe()}; {state.weights()}; "
            f"{finish or state.how_to_go_on()}; or pass --allow-unfinished (Python: allow_unfinished=True) "
            "to predict with that model as it is"
        )
        self.path, self.state = path, state

    def saying(self, finish: str) -> UnfinishedRunError:
        """The same refusal, saying ``finish`` for what finishes the run."""
        return UnfinishedRunError(self.path, self.state, finish)


def check_finished(path: Path, allow_unfinished: bool = False) -> RunState | None:
    """None if the run directory ``path`` finished; else refuse it, or with ``allow_unfinished`` warn.

    The refusal (:class:`UnfinishedRunError`) is one line: the run's state (:meth:`RunDir.state`),
    which step its kept model is of, and the command that finishes it. Allowed, a warning on stderr
    says the run is not finished and which step's weights predict, and the state comes back for the
    outputs to record (``run_state``).
    """
    state = RunDir(path).state()
    if state.finished:
        return None
    if not allow_unfinished:
        raise UnfinishedRunError(path, state)
    step = "a step its files do not say" if state.best_step is None else f"step {state.best_step}"
    logger.warning(
        "run %s is not finished (%s): predicting with the weights of %s; %s",
        path,
        state.describe(),
        step,
        state.how_to_go_on(),
    )
    return state


def run_settings(path: Path) -> dict[str, Any] | None:
    """The settings of the run directory ``path`` (its config.json), or None for a model folder."""
    run = RunDir(path)
    if not run.config.is_file():
        return None
    try:
        settings = run.read_config()
    except json.JSONDecodeError as error:
        raise PredictError(f"{run.config}: not valid JSON ({error.msg}, line {error.lineno})") from None
    return settings if isinstance(settings, dict) and "config" in settings and "task" in settings else None


def task_from_settings(settings: dict[str, Any]) -> Task:
    """The task a run recorded in its config.json."""
    fields = {f.name for f in dataclasses.fields(Task)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in settings["task"].items() if k in fields}
    return Task(**values)


def run_split(settings: dict[str, Any], name: str, data_dir: str | None, source: str) -> Examples:
    """Split ``name`` of a run's data as the run saw it: ``train``, the carved ``validation``, or an
    evaluation split (subsampled like the run's). ``data_dir`` replaces the run's data folder."""
    values = dict(settings["config"])
    if data_dir is not None:
        values["data_dir"] = str(data_dir)
    config = TrainConfig.from_dict(values)
    task, data = load_data(config)
    train, validation, evals = split_for_training(data, config, task.label_names)
    splits = {"train": train, "validation": validation, **evals}
    if name not in splits:
        raise PredictError(f"run {source} has no split {name!r}; its splits: {', '.join(splits)}")
    return splits[name]


class BasePredictor:
    """A fine-tuned model with its tokenizer and its task, from a run directory or a model folder.

    What the two kinds (:class:`~attendout.predict.classification.Predictor`,
    :class:`~attendout.predict.generative.GenerationPredictor`) share: the device and precision the model
    runs in, the run's settings (``settings``: its config.json; None for a model folder), ``source`` (the
    folder it came from), ``progress`` (a bar over batches), ``run_state`` (where the run stands, when its
    model is of a run that is not finished: the outputs record it), and :meth:`split`.
    """

    #: what :meth:`split` says of a model folder, after "<source> is a model folder, not a run directory: "
    no_split_words = "predict a file instead"

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        task: Task,
        *,
        max_length: int = 128,
        batch_size: int = 64,
        device: str = "auto",
        precision: str = "fp32",
        settings: dict[str, Any] | None = None,
        source: str = "",
        progress: bool = False,
        run_state: RunState | None = None,
    ):
        self.tokenizer = tokenizer
        self.task = task
        self.max_length = max_length
        self.batch_size = batch_size
        self.settings = settings  # the run's config.json, when loaded from a run directory
        self.source = source
        self.progress = progress  # a bar over the batches of each prediction
        self.run_state = run_state
        try:
            self.check(model)
        except ValueError as error:  # a LimitError: a length beyond the model's positions or its l_max
            raise PredictError(str(error)) from None
        self.device = pick_device(device)
        self.model = model.to(self.device).eval()
        self.autocast_dtype = autocast_dtype(precision)

    def check(self, model: nn.Module) -> None:
        """Refuse what cannot predict (a batch size below 1; lengths beyond what ``model`` takes: the
        kinds' own checks) before any work; a ValueError is a :class:`PredictError`."""
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")

    def predict_encoded(self, data: Encoded) -> tuple[Any, Any, float | None]:
        """(predictions, scores, mean loss) of the model over encoded ``data``, in order: the loop's own
        evaluation (:func:`~attendout.encoding.classification.predict_batches`)."""
        return predict_batches(
            self.model, data, self.batch_size, self.device, self.autocast_dtype, progress=self.progress
        )

    @staticmethod
    def locate(path: str | os.PathLike) -> tuple[Path, dict[str, Any] | None, Path]:
        """``(path, the run's settings or None, the model folder)`` of a run directory or a model folder."""
        path = Path(path)
        if not path.is_dir():
            raise PredictError(f"{path} is not a folder (expected a run directory or a model folder)")
        settings = run_settings(path)
        return path, settings, RunDir(path).model_dir if settings is not None else path

    def run_config(self) -> dict[str, Any]:
        """The run's training settings (``config`` of its config.json); empty for a model folder."""
        return self.settings["config"] if self.settings is not None else {}

    def input_columns(self) -> tuple[str, ...]:
        """The columns the run read its inputs from: a seq2seq file's source and target, a file task's
        text columns, else the task's text fields."""
        run = self.run_config()
        if run.get("source_column"):
            return (run["source_column"], run["target_column"])
        return tuple(run.get("text_columns") or self.task.text_fields)

    def state(self) -> dict[str, Any] | None:
        """What the outputs record of a run that is not finished (None: a finished run, a model folder)."""
        return None if self.run_state is None else self.run_state.to_dict()

    def split(self, name: str, data_dir: str | None = None) -> Examples:
        """Split ``name`` of the run's data, as the run saw it (run directories only).

        ``train`` and ``validation`` are the run's training part and the validation part carved
        from train; any other name is one of the task's evaluation splits (subsampled like the
        run's). ``data_dir`` replaces the run's data folder (a run made elsewhere, or a path that
        was relative to another working directory).
        """
        if self.settings is None:
            raise PredictError(f"{self.source} is a model folder, not a run directory: {self.no_split_words}")
        return run_split(self.settings, name, data_dir, self.source)


def synthesizer_config(model: nn.Module) -> Any:
    """The config of the synthesizer ``model`` carries, or None."""
    from ..methods.synthesizer import get_synthesizer

    synthesizer = get_synthesizer(model)
    return None if synthesizer is None else synthesizer.resolved_config()


def load_model_folder(
    model_dir: Path, kind: str | None = None, *, file_errors_as_is: bool = False
) -> tuple[nn.Module, Any]:
    """The model and the tokenizer of ``model_dir``, checked first
    (:func:`~attendout.models.loading.check_model_folder`); what goes wrong is a :class:`PredictError`.

    The model is Synthesizer's documented form (:func:`~attendout.methods.synthesizer.checkpoint.load_synthesized`)
    or a plain ``transformers`` one: with its own head (``kind`` None: a classifier, a tagger, multiple
    choice) or of a generation ``kind`` (``AutoModelForCausalLM``, ``AutoModelForSeq2SeqLM``); its
    weights finite (:func:`~attendout.models.loading.check_finite`). A damaged file found by the check is
    reported in its own words; one found while loading too when ``file_errors_as_is``, else as any
    other failure to load ("cannot load the model in ...").
    """
    import transformers

    from ..methods.synthesizer import is_synthesized_checkpoint, load_synthesized
    from ..models import AUTO_CLASSES
    from ..models.loading import ModelFileError, check_finite, check_model_folder, head_class, load_tokenizer

    try:
        check_model_folder(model_dir)  # its manifest, if attendout saved it; safetensors headers
    except ModelFileError as error:
        raise PredictError(str(error)) from None
    try:
        if is_synthesized_checkpoint(model_dir):
            model = load_synthesized(model_dir)
        elif kind is None:
            model = head_class(transformers.AutoConfig.from_pretrained(model_dir)).from_pretrained(model_dir)
        else:
            model = getattr(transformers, AUTO_CLASSES[kind]).from_pretrained(model_dir)
        check_finite(model, str(model_dir))
        return model, load_tokenizer(model_dir)
    except ModelFileError as error:
        if not file_errors_as_is:
            raise _cannot_load(model_dir, error) from None
        raise PredictError(str(error)) from None
    except (OSError, ValueError, KeyError) as error:
        raise _cannot_load(model_dir, error) from None


def _cannot_load(model_dir: Path, error: Exception) -> PredictError:
    return PredictError(f"cannot load the model in {model_dir} ({first_line(error)})")


def write_rows(handle: Any, rows: list[dict[str, Any]], fmt: str) -> None:
    """Write prediction rows to an open text ``handle`` as ``jsonl``, ``csv`` or ``tsv`` (with a header)."""
    import csv

    if fmt == "jsonl":
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        return
    writer = csv.DictWriter(handle, fieldnames=list(rows[0]), delimiter="\t" if fmt == "tsv" else ",")
    writer.writeheader()
    for row in rows:  # a value of several fields (run_state) is a cell of JSON
        writer.writerow({k: json.dumps(v) if isinstance(v, dict) else v for k, v in row.items()})


def with_run_state(rows: list[dict[str, Any]], run_state: dict[str, Any] | None) -> list[dict[str, Any]]:
    """``rows`` with the state of the run that is not finished whose model made them (``run_state``) last
    in each; as they are for a finished run or a model folder."""
    return rows if run_state is None else [{**row, "run_state": run_state} for row in rows]


def check_output_path(path: str | os.PathLike) -> Path:
    """``path`` as a ``Path`` if its extension names an output format, else a :class:`PredictError`."""
    path = Path(path)
    if path.suffix.lower() not in OUTPUT_FORMATS:
        raise PredictError(f"{path}: the output must end in .jsonl, .csv or .tsv")
    return path


def write_rows_atomic(path: str | os.PathLike, rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` to ``path`` in the format of its extension; the file appears complete or not at all."""
    path = check_output_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", newline="") as handle:
            write_rows(handle, rows, path.suffix.lower().lstrip("."))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
