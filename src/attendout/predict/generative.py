"""Predicting with a generation model (``lm``, ``seq2seq``): :class:`GenerationPredictor`.

``attendout predict`` and :meth:`attendout.predict.classification.Predictor.load` hand a run directory of a generation
task (or a model folder of a causal LM or an encoder-decoder) to this module.

* ``seq2seq``: :meth:`GenerationPredictor.generate` decodes each source with ``model.generate``, greedy
  or with beam search (``num_beams``), at most ``max_new_tokens`` new tokens; with references,
  :meth:`GenerationPredictor.evaluate` scores the outputs by the task's metrics (BLEU and chrF, or
  ROUGE) and gives the loss and the count of target tokens, as ``results.json`` does.
* ``lm``: :meth:`GenerationPredictor.evaluate` scores documents (perplexity per token, the count of
  predicted tokens and the loss), packed into blocks as the run packed its data; and
  :meth:`GenerationPredictor.generate` continues prompts (greedy or beam search). Prompts are tokenised
  as the training documents were (no special tokens); an empty prompt starts a new document (it is the
  end-of-sequence token alone). A prompt longer than the model's context keeps its last tokens.

The model loads with plain ``transformers`` (``AutoModelForCausalLM``, ``AutoModelForSeq2SeqLM``), or
from Synthesizer's documented form (:func:`attendout.methods.synthesizer.checkpoint.load_synthesized`).

>>> predictor = GenerationPredictor.load("runs/multi30k", num_beams=4)
>>> predictor.generate(["A man rides a bike."]).outputs
['Ein Mann fährt Fahrrad.']
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..encoding import GenerationOptions, LMEncoded, Seq2SeqEncoded
from ..models import end_of_sequence
from ..tasks import LM, SEQ2SEQ, DataError, Examples, Seq2SeqExamples, Task, compute_metrics, is_generation
from ..tasks.lm_seq2seq import LM_FILE_TASK, SEQ2SEQ_FILE_TASK, read_documents, read_parallel
from .base import (
    BasePredictor,
    PredictError,
    check_finished,
    load_model_folder,
    task_from_settings,
    with_run_state,
    write_rows_atomic,
)


def generation_kind(model_dir: str | os.PathLike) -> str | None:
    """``"lm"`` or ``"seq2seq"`` for a folder holding a causal LM or an encoder-decoder (by its config's
    ``architectures``; a synthesized checkpoint by its ``base_class``), else None."""
    from transformers.utils import CONFIG_NAME  # the model folder's config.json

    file = Path(model_dir) / CONFIG_NAME
    try:
        config = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(config, dict):
        return None
    names = [config["base_class"]] if isinstance(config.get("base_class"), str) else []
    names += [str(a) for a in config.get("architectures") or []]
    if any(n.endswith("ForConditionalGeneration") for n in names) and (
        config.get("is_encoder_decoder") or config.get("base_config", {}).get("is_encoder_decoder")
    ):
        return SEQ2SEQ
    if any(n.endswith(("ForCausalLM", "LMHeadModel")) for n in names):
        return LM
    return None


@dataclass(frozen=True)
class Generations:
    """Generated texts in input order: ``inputs`` (sources or prompts), ``outputs`` (decoded, without the
    prompt), ``references`` (seq2seq targets, when known), ``loss`` (mean per target token, with references),
    ``token_ids`` (lm: the generated tokens, padding after an end-of-sequence token included),
    ``run_state`` (where the run stood, when its model is of a run that is not finished; else None)."""

    inputs: list[str]
    outputs: list[str]
    references: list[str] | None = None
    loss: float | None = None
    token_ids: list[list[int]] | None = None  # lm: each continuation's token ids (special tokens too)
    run_state: dict[str, Any] | None = None

    def __len__(self) -> int:
        return len(self.outputs)

    def rows(self) -> list[dict[str, Any]]:
        """One row per input, as ``attendout predict`` writes them: ``text_a`` (the source or prompt),
        ``label`` (the reference, when known) and ``prediction`` (the generated text); ``run_state`` last,
        for a run that is not finished."""
        references = self.references
        rows = [
            {"text_a": text, **({} if references is None else {"label": references[i]}), "prediction": output}
            for i, (text, output) in enumerate(zip(self.inputs, self.outputs, strict=True))
        ]
        return with_run_state(rows, self.run_state)

    def write(self, path: str | os.PathLike) -> Path:
        """Write :meth:`rows` to ``path`` (.jsonl, .csv or .tsv), atomically."""
        return write_rows_atomic(path, self.rows())


class GenerationPredictor(BasePredictor):
    """A causal LM or an encoder-decoder with its tokenizer and its task (see the module docstring).

    ``max_length``: tokens per source (seq2seq) or per scored block (lm); ``num_beams`` 1 is greedy;
    ``max_new_tokens``: the most tokens generated per input; ``run_state``: where the run stands, when the
    model is of a run that is not finished (loaded with ``allow_unfinished``): its outputs record it.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer: Any,
        task: Task,
        *,
        num_beams: int = 1,
        max_new_tokens: int | None = None,
        **options: Any,
    ):
        """``options``: :class:`~attendout.predict.base.BasePredictor`'s (max_length, batch_size, device,
        precision, settings, source, progress, run_state)."""
        self._decoding = (num_beams, max_new_tokens)  # made :attr:`options` once checked
        super().__init__(model, tokenizer, task, **options)
        self.cut_prompts = 0  # prompts of the last generate() that kept only their last tokens

    @classmethod
    def load(
        cls,
        path: str | os.PathLike,
        *,
        max_length: int | None = None,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        allow_unfinished: bool = False,
        **options: Any,
    ) -> GenerationPredictor:
        """Load a run directory of a generation task or a model folder (a causal LM, an encoder-decoder);
        ``options``: the predictor's batch_size, device, precision and progress.

        Unset options are the run's own: ``max_length`` (lm: its ``block_size`` if it set one),
        ``num_beams`` and ``max_new_tokens``; a model folder's defaults are greedy and its context length.
        A run directory that is not finished is refused, unless ``allow_unfinished``
        (:func:`~attendout.predict.base.check_finished`).
        """
        from transformers.utils import CONFIG_NAME

        path, settings, model_dir = cls.locate(path)
        run_state = check_finished(path, allow_unfinished) if settings is not None else None
        if not (model_dir / CONFIG_NAME).is_file():
            raise PredictError(f"{path} has no model ({model_dir}/{CONFIG_NAME}): nothing to predict with")
        found = generation_kind(model_dir)
        if settings is not None:
            task = _run_task(settings, path, model_dir, found)
            found = task.kind
            max_length, num_beams, max_new_tokens = _run_lengths(
                settings["config"], task.kind, max_length, num_beams, max_new_tokens
            )
        elif found is None:
            raise PredictError(
                f"{model_dir} holds no causal LM or encoder-decoder (its config's architectures); "
                "`attendout predict` reads it as a classifier"
            )
        else:
            task = LM_FILE_TASK if found == LM else SEQ2SEQ_FILE_TASK
        model, tokenizer = load_model_folder(model_dir, found, file_errors_as_is=True)
        _ready_tokenizer(tokenizer, model, model_dir, found)
        if max_length is None:
            context = _context(model)
            max_length = min(context or 512, getattr(tokenizer, "model_max_length", 512) or 512)
        return cls(
            model, tokenizer, task, max_length=max_length, num_beams=num_beams or 1,
            max_new_tokens=max_new_tokens or min(max_length // (2 if found == LM else 1), 128),
            settings=settings, source=str(path), run_state=run_state, **options,
        )  # fmt: skip

    def check(self, model: nn.Module) -> None:
        """The task a generation task, and the lengths predict sends through ``model``
        (:func:`~attendout.core.limits.check_lengths`), before any work: a scored block or a source, and
        the tokens decoded (for lm: beside a prompt)."""
        from ..core.limits import check_lengths
        from .base import synthesizer_config  # beside the limits: what they are checked against

        task, max_length, batch_size = self.task, self.max_length, self.batch_size
        if not is_generation(task.kind):
            raise PredictError(f"task {task.name!r} is {task.kind}, not a generation task (lm, seq2seq)")
        if batch_size < 1 or max_length < 2:
            raise PredictError(
                f"batch_size must be at least 1 and max_length at least 2, got {batch_size}, {max_length}"
            )
        num_beams, max_new_tokens = self._decoding
        self.options = GenerationOptions(num_beams, max_new_tokens or max_length)
        check_lengths(
            task.kind, model.config, max_length=max_length, max_new_tokens=self.options.max_new_tokens,
            tokenizer=self.tokenizer, method=synthesizer_config(model),
            model=self.source or "the model",
        )  # fmt: skip

    # data -------------------------------------------------------------------------------------------
    def read(
        self, path: str | os.PathLike, *, source_column: str | None = None, target_column: str | None = None
    ) -> Examples:
        """Inputs from a file: documents (lm; a text file or a table's text column) or sources (seq2seq;
        see :func:`read_sources`). Columns default to the run's own."""
        if self.task.kind == LM:
            if target_column is not None:
                raise PredictError("--target-column is for seq2seq runs; an lm run reads one text column")
            column = source_column or self.input_columns()[0]
            return Examples(text_a=read_documents(path, column, "input file"), text_b=None, labels=None)
        columns = self.input_columns()
        return read_sources(
            path,
            source_column or columns[0],
            target_column or columns[1],
            target_given=target_column is not None,
        )

    # predicting -------------------------------------------------------------------------------------
    def evaluate(self, examples: Examples) -> tuple[dict[str, float], Generations | None]:
        """(the task's metrics, the loss and what the metrics are over, the outputs) on ``examples``.

        lm: documents, scored as the run scores a split (``perplexity``, ``tokens``, ``loss``; no outputs);
        seq2seq: pairs, the generated outputs scored against their targets (``bleu``, ``chrf``..., ``loss``,
        ``target_tokens``)."""
        if len(examples) == 0:
            raise PredictError("nothing to score: no examples")
        if self.task.kind == LM:
            try:
                data = LMEncoded(examples, self.tokenizer, self.max_length)
            except ValueError as error:
                raise PredictError(str(error)) from None
            sums, _, loss = self.predict_encoded(data)
            metrics = compute_metrics(self.task, sums, data.gold)
            return {**metrics, "loss": loss, **data.counts()}, None
        if getattr(examples, "targets", None) is None:
            raise PredictError("cannot score sources without references (targets)")
        generations, data = self._seq2seq(examples)
        metrics = compute_metrics(self.task, generations.outputs, generations.references)
        return {**metrics, "loss": generations.loss, **data.counts()}, generations

    def generate(self, inputs: Sequence[str] | Examples) -> Generations:
        """Outputs for sources (seq2seq; :class:`~attendout.tasks.lm_seq2seq.Seq2SeqExamples` with targets
        give the references and the loss too) or continuations of prompts (lm)."""
        examples = inputs if isinstance(inputs, Examples) else Seq2SeqExamples.from_pairs(list(inputs), None)
        if len(examples) == 0:
            raise PredictError("nothing to generate: no inputs")
        if self.task.kind == SEQ2SEQ:
            return self._seq2seq(examples)[0]
        return self._continue(list(examples.text_a))

    def _seq2seq(self, examples: Examples) -> tuple[Generations, Seq2SeqEncoded]:
        data = Seq2SeqEncoded(examples, self.tokenizer, self.max_length, self.options)
        outputs, _, loss = self.predict_encoded(data)
        references = getattr(examples, "targets", None)
        return Generations(list(examples.text_a), outputs, references, loss, run_state=self.state()), data

    @torch.no_grad()
    def _continue(self, prompts: list[str]) -> Generations:
        tokenizer, new = self.tokenizer, self.options.max_new_tokens
        context = _context(self.model)
        keep = None if context is None else context - new
        if keep is not None and keep < 1:
            raise PredictError(
                f"max_new_tokens {new} leaves no room for a prompt in the model's context of {context} tokens"
            )
        ids = tokenizer(prompts, add_special_tokens=False)["input_ids"]
        start = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.bos_token_id
        ids = [row if row else [start] for row in ids]  # an empty prompt: a new document
        self.cut_prompts = sum(keep is not None and len(row) > keep for row in ids)
        ids = [row[-keep:] if keep is not None else row for row in ids]
        pad = tokenizer.pad_token_id
        outputs: list[str] = []
        token_ids: list[list[int]] = []
        self.model.eval()
        for begin in range(0, len(ids), self.batch_size):
            rows = ids[begin : begin + self.batch_size]
            width = max(map(len, rows))
            input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
            mask = torch.zeros((len(rows), width), dtype=torch.long)
            for i, row in enumerate(rows):  # left padding: every prompt ends where generation starts
                input_ids[i, width - len(row) :] = torch.tensor(row)
                mask[i, width - len(row) :] = 1
            dtype = self.autocast_dtype
            with torch.autocast(self.device.type, dtype=dtype, enabled=dtype is not None):
                generated = self.model.generate(
                    input_ids=input_ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    pad_token_id=pad,
                    **self.options.kwargs(),
                )
            texts = tokenizer.batch_decode(generated[:, width:], skip_special_tokens=True)
            outputs.extend(t.strip() for t in texts)
            token_ids.extend(generated[:, width:].tolist())
        return Generations(prompts, outputs, token_ids=token_ids, run_state=self.state())


def _run_task(settings: dict[str, Any], path: Path, model_dir: Path, found: str | None) -> Task:
    """The generation task a run recorded, checked against the kind of model its folder holds (``found``)."""
    task = task_from_settings(settings)
    if not is_generation(task.kind):
        raise PredictError(f"run {path} is a {task.kind} run; it does not generate")
    if found is not None and found != task.kind:
        raise PredictError(f"run {path} is {task.kind} but its model in {model_dir} is a {found} model")
    return task


def _run_lengths(
    run: dict[str, Any], kind: str, max_length: int | None, num_beams: int | None, max_new_tokens: int | None
) -> tuple[int, int, int]:
    """``(max_length, num_beams, max_new_tokens)``: those given, else the run's own (``run``: its settings)."""
    length = run.get("block_size") if kind == LM else None
    max_length = max_length or int(length or run["max_length"])
    num_beams = num_beams or int(run.get("num_beams") or 1)
    # lm: half the context, leaving the other half to the prompt (a run sets no length of its own)
    own = int(run["max_length"]) if kind == SEQ2SEQ else max(1, max_length // 2)
    return max_length, num_beams, max_new_tokens or run.get("max_new_tokens") or own


def _ready_tokenizer(tokenizer: Any, model: nn.Module, model_dir: Path, kind: str) -> None:
    """Give the tokenizer an end-of-sequence token (from the model's config where it has none) and a pad."""
    try:  # a model folder's tokenizer without one takes its config's, as training does
        end_of_sequence(tokenizer, model.config, str(model_dir), kind)
    except ValueError as error:
        raise PredictError(str(error)) from None
    if tokenizer.pad_token_id is None:  # decoders ship none: pad with end-of-sequence, as training did
        tokenizer.pad_token = tokenizer.eos_token


def _context(model: nn.Module) -> int | None:
    """The most positions a decoder takes (GPT-2's ``n_positions``..., or a synthesizer's ``l_max`` where
    fewer), or None (relative positions: T5)."""
    from ..methods.synthesizer import get_synthesizer

    config = model.config
    if getattr(config, "is_encoder_decoder", False):
        return None
    synthesizer = get_synthesizer(model)
    l_max = None if synthesizer is None else synthesizer.l_max
    for name in ("n_positions", "max_position_embeddings"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value if l_max is None else min(value, int(l_max))
    return None if l_max is None else int(l_max)


def read_sources(
    path: str | os.PathLike, source_column: str, target_column: str, *, target_given: bool = False
) -> Seq2SeqExamples:
    """Sources to translate (and their references when the file has them) from ``path``.

    A CSV/TSV/JSON-lines file: ``source_column``, and ``target_column`` as references when present
    (``target_given``: it must be); ``SOURCE_FILE,TARGET_FILE``: two line-aligned text files; any other
    file: plain text, one source per line (blank lines are an error: each line is one input).
    """
    from ..tasks.lm_seq2seq import read_lines as _read_lines
    from ..tasks.lm_seq2seq import text_format as _format
    from ..tasks.readers import read_file

    spec = str(path)
    parts = spec.split(",")
    if len(parts) == 2 and not Path(spec).exists() and all(_format(Path(p)) == "text" for p in parts):
        return read_parallel(spec, what="input file")
    path = Path(spec)
    if _format(path) != "text":
        try:
            return read_parallel(spec, source_column, target_column, "input file")
        except DataError as error:
            if target_given or f"no column {target_column!r}" not in str(error):
                raise
        table = read_file(path, text_columns=(source_column,), label_column=None, what="input file")
        sources, lines = list(table.texts[0]), table.lines
    else:
        if target_given:
            raise DataError(
                f"{path} is a plain text file (one source per line): it has no column {target_column!r}"
            )
        sources = _read_lines(path, "input file")
        lines = range(1, len(sources) + 1)
    for line, source in zip(lines, sources, strict=True):
        if not source.strip():
            raise DataError(f"{path} line {line}: the source text is empty")
    if not sources:
        raise DataError(f"input file {path}: no sources (an empty file)")
    return Seq2SeqExamples.from_pairs([s.strip() for s in sources], None)


def _scores(metrics: dict[str, float]) -> str:
    counts = ("tokens", "target_tokens")
    return ", ".join(
        f"{k} {int(v)}" if k in counts else f"{k} {v:.4f}" for k, v in metrics.items() if v is not None
    )


def predict_main(predictor: GenerationPredictor, args: Any) -> int:
    """``attendout predict`` on a generation run: the parsed ``args`` of :func:`attendout.cli.predict.main`."""
    import sys

    from .base import check_output_path, write_rows

    kind, task = predictor.task.kind, predictor.task
    classifier_flags = {
        "--text-columns": args.text_columns,
        "--label-column": args.label_column,
        "--format": args.file_format,
        "--tag-column": args.tag_column,
        "--token-column": args.token_column or None,
    }
    given = [flag for flag, value in classifier_flags.items() if value is not None]
    if given:
        raise PredictError(
            f"{', '.join(given)}: for classifiers and taggers; {args.model} is {kind}: its input columns are "
            "--source-column (and, seq2seq, --target-column)"
        )
    if kind == SEQ2SEQ and (args.prompt or args.generate):
        raise PredictError(
            f"--prompt and --generate are for lm runs; {args.model} is seq2seq: it generates for every "
            "source of --input or --split"
        )
    if args.split is not None and (args.source_column or args.target_column or args.generate):
        raise PredictError(
            "--source-column, --target-column and --generate describe an --input file, not a --split"
        )
    if args.output:
        check_output_path(args.output)  # before any work: a wrong extension fails at once
    if args.prompt is not None:
        examples = Examples(text_a=list(args.prompt), text_b=None, labels=None)
        what = f"{len(args.prompt)} prompt(s)"
    elif args.split is not None:
        examples = predictor.split(args.split, data_dir=args.data_dir)
        what = f"split {args.split!r} ({len(examples)} examples)"
    else:
        examples = predictor.read(
            args.input, source_column=args.source_column, target_column=args.target_column
        )
        what = f"{args.input} ({len(examples)} {'documents' if kind == LM else 'examples'})"
    metrics: dict[str, float] | None = None
    if kind == LM and args.prompt is None and not args.generate:  # score the documents
        metrics, _ = predictor.evaluate(examples)
        rows = with_run_state([{"input": what, **metrics}], predictor.state())
        count = "a score"
    else:
        if kind == SEQ2SEQ and getattr(examples, "targets", None) is not None:
            metrics, generations = predictor.evaluate(examples)
        else:
            generations = predictor.generate(examples)
        rows = generations.rows()
        count = f"{len(rows)} outputs"
        if predictor.cut_prompts:
            print(
                f"attendout predict: {predictor.cut_prompts} prompt(s) longer than the model's context kept their "
                "last tokens",
                file=sys.stderr,
            )
    if args.output:
        write_rows_atomic(args.output, rows)
        print(f"wrote {count} to {args.output}", file=sys.stderr)
    else:
        write_rows(sys.stdout, rows, "tsv")
    if metrics is not None:
        print(f"{task.name} | {what} | {_scores(metrics)}", file=sys.stderr)
    return 0
