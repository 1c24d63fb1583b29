"""Command line: ``attendout advise | finetune | methods | tasks | inspect | plot | predict | bench | table``.

``attendout --help`` lists them with one line each (:data:`COMMANDS`).

Method options come from the method's config dataclass: ``attendout finetune --method scheduled
--help`` lists them. Errors in user input print one line (``attendout: error: ...``) and exit 2.
The flags ``attendout advise`` shares with ``finetune`` are made in :mod:`attendout.cliflags`.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shlex
import sys
from typing import Any

from .cliflags import (
    TASK_DEFAULT_OPTIONS,
    add_dataclass_options,
    add_file_options,
    parse_eval_files,
    quiet_transformers,
)

# Heavy modules (torch, transformers, the method registry, the engines) are imported inside the
# commands, so that `attendout --help` starts at once (benchmarks/bench_startup.py measures it).

EXIT_USAGE = 2


def _add_threads(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """``--threads N``, as ``attendout advise`` and ``bench`` have it."""
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")


def _set_threads(threads: int | None) -> None:
    """torch.set_num_threads(threads), unless None; below 1 is an error."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"--threads must be at least 1, got {threads}")
        import torch

        torch.set_num_threads(threads)


def _finetune_parser(method: str | None) -> argparse.ArgumentParser:
    from .config import TrainConfig
    from .methods import METHODS, list_methods

    parser = argparse.ArgumentParser(
        prog="attendout finetune",
        description="Fine-tune an encoder on a task with an attention regulariser; writes a run directory.",
    )
    add_dataclass_options(
        parser, TrainConfig, skip={"method_options", "eval_files", "text_columns", "method"}
    )
    parser.add_argument(
        "--method", default="none", help=f"one of: {', '.join(list_methods())} (default: none)"
    )
    parser.add_argument(
        "--attention",
        metavar="VARIANT",
        default=None,
        help="shorthand for --method synthesizer --variant VARIANT (e.g. random+dot; see --method synthesizer --help)",
    )
    add_file_options(parser)
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="a method config file ([method] name and options, optional [training] fields; what "
        "`attendout advise` writes as its answer): its values are the defaults that other flags override",
    )
    _add_threads(parser)
    if method in METHODS:
        cls = METHODS[method]
        group = parser.add_argument_group(
            f"options of method {method!r} ({cls.model_dropout} the model's own dropout)"
        )
        add_dataclass_options(group, cls, prefix="method__")
    return parser


def _expand_attention(argv: list[str]) -> list[str]:
    """``--attention VARIANT`` -> ``--method synthesizer --variant VARIANT`` (Synthesizer attention)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--attention", default=None)
    pre.add_argument("--method", default=None)
    known, rest = pre.parse_known_args(argv)
    if known.attention is None:
        return argv
    if known.method not in (None, "synthesizer"):
        raise ValueError(
            f"--attention {known.attention} means --method synthesizer; it cannot go with --method {known.method}"
        )
    return ["--method", "synthesizer", "--variant", known.attention, *rest]


def cmd_finetune(argv: list[str]) -> int:
    from .config import TrainConfig
    from .methods import METHODS, list_methods, settle_for_task
    from .report.results import format_results, format_truncation
    from .tasks.defaults import task_defaults
    from .train import finetune

    argv = _expand_attention(argv)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--method", default=None)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    from_file: dict[str, Any] = {}  # the config file's values: defaults that flags override
    if known.config is not None:
        from .configfile import load_config_file

        file_method, training = load_config_file(known.config)
        if known.method not in (None, file_method.name):
            raise ValueError(
                f"--method {known.method} contradicts {known.config}, whose method is {file_method.name!r}"
            )
        known.method = file_method.name
        options = {k: v for k, v in file_method.to_dict().items() if k != "name"}
        from_file = {**training, **{f"method__{k}": v for k, v in options.items()}}
    known.method = known.method or "none"
    if known.method not in METHODS:
        raise ValueError(f"unknown method {known.method!r}; known methods: {', '.join(list_methods())}")
    parser = _finetune_parser(known.method)
    unset = object()  # options with task defaults: unset ones take the task's, else TrainConfig's
    recipe = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    parser.set_defaults(**{name: unset for name in TASK_DEFAULT_OPTIONS})
    parser.set_defaults(**from_file, method=known.method)
    args = parser.parse_args(argv)
    _set_threads(args.threads)
    values = vars(args)
    chosen = task_defaults(values.get("task"))
    for name in TASK_DEFAULT_OPTIONS:
        if values[name] is unset:
            values[name] = chosen.get(name, recipe[name])
    method_options = {k[len("method__") :]: v for k, v in values.items() if k.startswith("method__")}
    # options that depend on the task (AD-DROP's layers) are settled now, so config.json records them
    method_options = settle_for_task(known.method, method_options, values.get("task"))
    train_fields = {f.name for f in dataclasses.fields(TrainConfig)}
    text_columns = args.text_columns.split(",") if isinstance(args.text_columns, str) else args.text_columns
    config = TrainConfig(
        **{k: v for k, v in values.items() if k in train_fields and k not in ("eval_files", "text_columns")},
        eval_files=parse_eval_files(args.eval_file) or from_file.get("eval_files"),
        text_columns=text_columns,
        method_options=method_options,
    )
    results = finetune(config)
    if os.environ.get("RANK", "0") != "0":  # torchrun / accelerate launch: the main process reports
        return 0
    print(f"\n{results['task']} | method {results['method']} | {results['model_description']}")
    print(f"data: {results['data_source']} | best step {results['best_step']} of {results['total_steps']}")
    if "resumed" in results:
        print(f"resumed at step {results['resumed']['step']} from the checkpoint in {config.output_dir}")
    print(format_results(results))
    cut = format_truncation(results)
    if cut:
        print(cut)
    print(f"run directory: {config.output_dir}")
    return 0


def cmd_methods(argv: list[str]) -> int:
    from .methods import METHODS, MethodConfig, list_methods

    argparse.ArgumentParser(prog="attendout methods", description="List the registered methods.").parse_args(
        argv
    )
    for name in list_methods():
        cls: type[MethodConfig] = METHODS[name]
        options = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(cls))
        print(f"{name:16s} {cls.summary} [{cls.model_dropout} model dropout] ({options})")
    return 0


def cmd_tasks(argv: list[str]) -> int:
    from .tasks import get_task, list_tasks
    from .tasks.defaults import task_defaults

    argparse.ArgumentParser(prog="attendout tasks", description="List the built-in tasks.").parse_args(argv)
    for name in list_tasks():
        task = get_task(name)
        if task.kind == "regression":
            labels = "a number"
        elif task.kind == "multiple_choice":
            labels = f"{task.choices} options"
        elif task.kind == "lm":
            labels = "none: the text predicts itself"
        elif task.kind == "seq2seq":
            labels = f"the target text ({' -> '.join(task.text_fields)})"
        elif task.label_names is None:
            labels = "from the data"
        elif len(task.label_names) > 9:
            labels = f"{len(task.label_names)} tags ({', '.join(task.label_names[:6])}, ...)"
        else:
            labels = ", ".join(task.label_names)
        shape = "pair" if task.is_pair else "single"
        defaults = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in task_defaults(name).items())
        print(
            f"{name:16s} {shape:6s} {task.kind:20s} metrics={','.join(task.metrics)}  labels: {labels}"
            + (f"  defaults: {defaults}" if defaults else "")
        )
    return 0


def cmd_inspect(argv: list[str]) -> int:
    """Draw AD-DROP's view of one example: attention map, attribution, candidates, drops (002 Figure 1)."""
    from .methods.addrop import ADDropConfig
    from .report.inspect import inspect_text, load_for_inspection, plot_inspection

    parser = argparse.ArgumentParser(
        prog="attendout inspect",
        description="Draw a layer's attention map of one text (or pair) with AD-DROP's attribution as "
        "shading, the candidate discard region and the dropped positions (paper 002 Figure 1), as PNG.",
    )
    parser.add_argument("--text", required=True, help="the text (first segment of a pair)")
    parser.add_argument("--text-pair", default=None, help="second segment of a sentence pair")
    parser.add_argument(
        "--model", default="minilm", help="run directory, model folder, 'minilm' or hub id (default: minilm)"
    )
    parser.add_argument("--layer", type=int, default=0, help="layer to draw, from 0 (default: 0)")
    parser.add_argument("--head", default="0", help="head index from 0, or 'mean' (default: 0)")
    add_dataclass_options(
        parser,
        ADDropConfig,
        skip={"layers", "cross_tuning", "period", "start", "attribution_dropout", "dropping", "rd_sampling"},
    )
    parser.add_argument(
        "--num-labels",
        type=int,
        default=2,
        help="labels of a random head for a model without one (default: 2)",
    )
    parser.add_argument("--max-length", type=int, default=64, help="maximum tokens (default: 64)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the drops (and of a random head) (default: 0)"
    )
    parser.add_argument("--output", default="inspect.png", help="PNG file to write (default: inspect.png)")
    args = parser.parse_args(argv)
    if args.head != "mean" and not args.head.isdigit():
        raise ValueError(f"--head must be a head index or 'mean', got {args.head!r}")
    options = ADDropConfig(
        attribution=args.attribution,
        p=args.p,
        q=args.q,
        ig_steps=args.ig_steps,
        ig_form=args.ig_form,
        rounding=args.rounding,
    ).for_task(None)  # p, q and attribution left unset: the authors' defaults (0.3, 0.2, ga)
    model, tokenizer, description = load_for_inspection(args.model, args.num_labels, args.seed)
    inspection = inspect_text(
        model,
        tokenizer,
        args.text,
        args.text_pair,
        layer=args.layer,
        attribution=options.attribution,
        p=options.p,
        q=options.q,
        ig_steps=options.ig_steps,
        ig_form=options.ig_form,
        rounding=options.rounding,
        seed=args.seed,
        max_length=args.max_length,
        model_name=description,
    )
    path = plot_inspection(inspection, args.output, head=None if args.head == "mean" else int(args.head))
    prediction = f"{inspection.prediction}; " if inspection.predicted else ""
    print(
        f"{description}\nlayer {args.layer}, head {args.head}: {len(inspection.tokens)} tokens; {prediction}"
        f"{int(inspection.candidate.sum())} candidate and {int(inspection.dropped.sum())} dropped positions "
        f"over {inspection.candidate.shape[0]} heads\nwrote {path}"
    )
    return 0


def cmd_plot(argv: list[str]) -> int:
    """Figures from run directories: convergence curves, AttendOut's dropout patterns, the regime."""
    from .report.plotting import plot_main

    return plot_main(argv)


def cmd_bench(argv: list[str]) -> int:
    """Run (or, with --dry-run, list and check) the grid of an experiment file; see attendout.experiments."""
    from .experiments.runner import bench_main

    return bench_main(argv)


def cmd_predict(argv: list[str]) -> int:
    """Label a file, or score a split of the run's own data, with a fine-tuned model."""
    from .predict import Predictor, prediction_rows, write_predictions, write_rows

    parser = argparse.ArgumentParser(
        prog="attendout predict",
        description="Predict with a fine-tuned model: a run directory of `attendout finetune` (it knows its "
        "task, max length and data) or a model folder (a run's model/, a transformers classifier, a "
        "synthesized checkpoint). Inputs: a CSV/TSV/JSON-lines file (--input) or a split of the run's data "
        "(--split dev). With labels (--label-column, or a split) the task's metrics are printed too.",
    )
    parser.add_argument("model", help="run directory or model folder")
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
    _add_threads(parser)
    parser.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, default=True, help="a progress bar on stderr"
    )
    args = parser.parse_args(argv)
    _set_threads(args.threads)
    if args.split is not None and (args.text_columns or args.label_column or args.file_format):
        raise ValueError(
            "--text-columns, --label-column and --format describe an --input file, not a --split"
        )

    predictor = Predictor.load(
        args.model,
        max_length=args.max_length,
        batch_size=args.batch_size,
        device=args.device,
        precision=args.precision,
        progress=args.progress,
        num_beams=args.num_beams,
        max_new_tokens=args.max_new_tokens,
    )
    if not isinstance(predictor, Predictor):  # a generation run (lm, seq2seq)
        from .generate import predict_main

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


def cmd_advise(argv: list[str]) -> int:
    """Which regulariser, at what strength, for this model and data; see attendout.advise."""
    from .advise.cli import advise_main

    return advise_main(argv)


def cmd_table(argv: list[str]) -> int:
    """The comparison table, CSV and figures of an experiment grid; see attendout.report.table."""
    from .report.table import table_main

    return table_main(argv)


#: name -> (handler, the line `attendout --help` shows for it)
COMMANDS = {
    "advise": (
        cmd_advise,
        "which regulariser, at what strength, for your model and data: searched, then confirmed on fresh seeds",
    ),
    "finetune": (cmd_finetune, "fine-tune a pretrained encoder on a task with one attention method"),
    "methods": (cmd_methods, "list the attention methods and their options"),
    "tasks": (cmd_tasks, "list the built-in tasks and where their data comes from"),
    "inspect": (cmd_inspect, "draw a layer's attention, AD-DROP attribution and dropped positions as PNG"),
    "plot": (cmd_plot, "draw convergence curves of finished runs, and AttendOut's dropout patterns, as PNG"),
    "predict": (cmd_predict, "label a file, or score a split of the run's data, with a fine-tuned model"),
    "bench": (
        cmd_bench,
        "run (or resume, or --dry-run) a grid of tasks x methods x seeds from an experiment file",
    ),
    "table": (
        cmd_table,
        "aggregate a grid: mean ± std, paired tests against the baseline, Markdown, CSV, PNG",
    ),
}


def _usage() -> str:
    lines = ["usage: attendout COMMAND [options]   (attendout COMMAND --help for details)", "", "commands:"]
    lines += [f"  {name:10s} {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def _go_on(command: str, argv: list[str], stop: Any) -> str:
    """What to run after ``stop`` (an :class:`attendout.interrupt.Stopped`) to go on from where it was."""
    again = ["attendout", command, *argv]
    if command == "finetune":
        if stop.checkpoint is None:
            return f" Nothing was saved to resume from; to start again: {shlex.join(again)}"
        return " To go on: " + shlex.join(again if "--resume" in argv else [*again, "--resume"])
    kept = {
        "bench": "Finished cells are kept, and a stopped cell goes on from its checkpoint.",
        "advise": "Finished trials and runs are kept, and a stopped run goes on from its checkpoint.",
    }
    if command in kept:
        return f" {kept[command]} To go on: {shlex.join(again)}"
    return ""


#: The errors that mean bad user input (one line, exit 2), as (module, class): looked up only in modules
#: already imported, since an error can only come from a module that was imported.
_USAGE_ERRORS = (
    ("attendout.tasks.base", "DataError"),
    ("attendout.attention.families", "UnsupportedModelError"),
    ("attendout.models", "ModelNotFoundError"),
    ("attendout.checkpoints", "RunExistsError"),
    ("attendout.runlock", "RunBusyError"),
)

#: Commands that load no model: they skip quieting transformers (importing it costs most of a second).
_LIGHT_COMMANDS = frozenset({"methods", "tasks"})


def _loaded(*names: tuple[str, str]) -> tuple[type[BaseException], ...]:
    """The exception classes ``(module, class)`` of the modules imported so far."""
    return tuple(getattr(sys.modules[m], c) for m, c in names if m in sys.modules)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="attendout: %(levelname)s: %(message)s")
    if argv and argv[0] == "--version":
        from .version import __version__

        print(f"attendout {__version__}")
        return 0
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else EXIT_USAGE
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(
            f"attendout: error: unknown command {command!r}; commands: {', '.join(COMMANDS)}", file=sys.stderr
        )
        return EXIT_USAGE
    if command not in _LIGHT_COMMANDS:
        quiet_transformers()
    from .interrupt import Stopped, handling

    try:
        with handling():  # Ctrl-C, SIGTERM: a run stops at its next whole step with a checkpoint
            return COMMANDS[command][0](rest)
    except KeyboardInterrupt as error:
        stop = Stopped.of(error)
        print(f"\nattendout {command}: {stop.describe()}.{_go_on(command, rest, stop)}", file=sys.stderr)
        return stop.exit_code
    except Exception as error:
        if isinstance(error, (*_loaded(*_USAGE_ERRORS), ValueError)):
            print(f"attendout: error: {error}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(error, _loaded(("attendout.optim", "TrainingError"))):
            print(f"attendout: training failed: {error}", file=sys.stderr)
            return 1
        if isinstance(
            error, OSError
        ):  # a file that cannot be read or written: a full disk, a path through a file
            from .rundir import describe_os_error

            print(f"attendout: error: {describe_os_error(error)}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
