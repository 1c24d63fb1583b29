"""``attendout predict``: label a file or score a split with a fine-tuned model (:class:`attendout.predict.classification.Predictor`;
generation runs: :func:`attendout.predict.generative.predict_main`)."""

from __future__ import annotations

import argparse
import sys

from .flags import add_threads, set_threads

#: The flags that are :meth:`~attendout.predict.classification.Predictor.load`'s options of their name.
_LOADING = (
    "max_length",
    "batch_size",
    "device",
    "precision",
    "progress",
    "num_beams",
    "max_new_tokens",
    "allow_unfinished",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="attendout predict",
        description="Predict with a fine-tuned model: a run directory of `attendout finetune` (it knows its "
        "task, max length and data) or a model folder (a run's model/, a transformers classifier, a "
        "synthesized checkpoint). Inputs: a CSV/TSV/JSON-lines file (--input) or a split of the run's data "
        "(--split dev). With labels (--label-column, or a split) the task's metrics are printed too.",
    )
    parser.add_argument("model", help="run directory or model folder")
    parser.add_argument(
        "--allow-unfinished",
        action="store_true",
        help="predict with the model of a run that is not finished (stopped, or killed), as it is: a "
        "warning names the step of its weights and the output records the run's state (run_state); "
        "without it such a run is refused, with the command that finishes it",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="CSV/TSV/JSON-lines file of texts to predict")
    source.add_argument(
        "--split", help="a split of the run's data: train, validation (carved from train), dev, dev_ood..."
    )
    source.add_argument(
        "--prompt",
        action="append",
        help="lm: a prompt to continue (repeat for several); the outputs are written",
    )
    parser.add_argument(
        "--text-columns",
        help="one or two input columns (default: the run's text columns, else the task's text fields; "
        "'text' for a model folder)",
    )
    parser.add_argument("--label-column", help="gold labels in the input file: print the task's metrics")
    parser.add_argument(
        "--token-column",
        type=int,
        default=0,
        help="token classifiers: the input is a CoNLL-style column file; its 0-based column of words (default 0)",
    )
    parser.add_argument(
        "--tag-column",
        type=int,
        default=None,
        help="token classifiers: the column of gold tags in the input (prints the task's metrics)",
    )
    parser.add_argument(
        "--format", dest="file_format", help="input format: csv, tsv or jsonl (default: extension)"
    )
    parser.add_argument("--data-dir", help="the run's data folder, if it moved (with --split)")
    parser.add_argument(
        "--output", help="write the predictions here (.jsonl, .csv or .tsv; default: print TSV to stdout)"
    )
    parser.add_argument("--max-length", type=int, help="tokens per input (default: the run's max length)")
    gen = parser.add_argument_group("generation runs (lm, seq2seq)")
    gen.add_argument("--source-column", help="seq2seq: the input's source column (lm: its text column)")
    gen.add_argument(
        "--target-column", help="seq2seq: the input's reference column (its metrics are printed)"
    )
    gen.add_argument(
        "--num-beams", type=int, help="beam search with this many beams (default: the run's; 1 greedy)"
    )
    gen.add_argument(
        "--max-new-tokens", type=int, help="most tokens generated per input (default: the run's)"
    )
    gen.add_argument(
        "--generate", action="store_true", help="lm: continue each document of --input (default: score them)"
    )
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N or mps")
    parser.add_argument("--precision", default="fp32", help="fp32, bf16 or fp16 (autocast, GPU)")
    add_threads(parser)
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True, help="a progress bar on stderr"
    )
    return parser


def main(argv: list[str]) -> int:
    """Label a file, or score a split of the run's own data, with a fine-tuned model."""
    from ..predict import Predictor, write_predictions, write_rows
    from ..predict.classification import prediction_rows

    args = build_parser().parse_args(argv)
    set_threads(args.threads)
    if args.split is not None and (args.text_columns or args.label_column or args.file_format):
        raise ValueError(
            "--text-columns, --label-column and --format describe an --input file, not a --split"
        )

    from ..predict import UnfinishedRunError
    from .finetune import how_to_finish

    try:
        predictor = Predictor.load(args.model, **{name: getattr(args, name) for name in _LOADING})
    except UnfinishedRunError as refused:  # the command line names the command that finishes the run
        raise refused.saying(how_to_finish(refused.state)) from None
    if not isinstance(predictor, Predictor):  # a generation run (lm, seq2seq)
        from ..predict import predict_main

        return predict_main(predictor, args)
    generation_only = {"--prompt": args.prompt, "--source-column": args.source_column}
    generation_only.update({"--target-column": args.target_column, "--generate": args.generate or None})
    given = [flag for flag, value in generation_only.items() if value is not None]
    if given:
        raise ValueError(
            f"{', '.join(given)}: for generation runs (lm, seq2seq); {args.model} is {predictor.task.kind}"
        )
    if args.split is not None:
        examples = predictor.split(args.split, data_dir=args.data_dir)
        what = f"split {args.split!r} ({len(examples)} examples)"
    else:
        columns = args.text_columns.split(",") if args.text_columns else None
        examples = predictor.read(
            args.input,
            text_columns=columns,
            label_column=args.label_column,
            file_format=args.file_format,
            token_column=args.token_column,
            tag_column=args.tag_column,
        )
        what = f"{args.input} ({len(examples)} examples)"
    if examples.labels is not None:
        metrics, predictions = predictor.evaluate(examples)
    else:
        metrics, predictions = None, predictor.predict_examples(examples)
    names = predictor.task.label_names
    if args.output:
        write_predictions(args.output, predictions, examples, label_names=names)
        print(f"wrote {len(predictions)} predictions to {args.output}", file=sys.stderr)
    else:
        write_rows(sys.stdout, prediction_rows(predictions, examples, label_names=names), "tsv")
    if metrics is not None:
        scores = ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if v is not None)
        print(f"{predictor.task.name} | {what} | {scores}", file=sys.stderr)
    return 0
