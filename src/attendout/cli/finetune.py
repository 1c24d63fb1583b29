"""``attendout finetune``: its flags, a config file's values under them, and the call to
:func:`attendout.train.finetune`."""

from __future__ import annotations

import argparse
import os
from typing import Any

from .flags import (
    add_dataclass_options,
    add_file_options,
    add_threads,
    parse_eval_files,
    set_threads,
    task_defaults_unset,
    train_config,
)


def parser_for(method: str | None) -> argparse.ArgumentParser:
    """The parser of ``attendout finetune``, with the options of ``method`` if it is a known method."""
    from ..config import TrainConfig
    from ..methods import METHODS, list_methods

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
    add_threads(parser)
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


def _method_and_file(argv: list[str]) -> tuple[str, dict[str, Any]]:
    """The method the command line names (``--method``, else ``--config``'s, else none) and the config
    file's values as flag defaults (``method__OPTION`` for its method options)."""
    from ..methods import METHODS, list_methods

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--method", default=None)
    pre.add_argument("--config", default=None)
    known, _ = pre.parse_known_args(argv)
    from_file: dict[str, Any] = {}
    if known.config is not None:
        from ..configfile import load_config_file

        file_method, training = load_config_file(known.config)
        if known.method not in (None, file_method.name):
            raise ValueError(
                f"--method {known.method} contradicts {known.config}, whose method is {file_method.name!r}"
            )
        known.method = file_method.name
        options = {k: v for k, v in file_method.to_dict().items() if k != "name"}
        from_file = {**training, **{f"method__{k}": v for k, v in options.items()}}
    method = known.method or "none"
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(list_methods())}")
    return method, from_file


def main(argv: list[str]) -> int:
    from ..methods import settle_for_task
    from ..report.results import format_results, format_truncation
    from ..train import finetune

    argv = _expand_attention(argv)
    method, from_file = _method_and_file(argv)
    parser = parser_for(method)
    task_defaults_unset(parser)
    parser.set_defaults(**from_file, method=method)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    values = vars(args)
    method_options = {k[len("method__") :]: v for k, v in values.items() if k.startswith("method__")}
    config = train_config(
        values,
        # options that depend on the task (AD-DROP's layers) are settled now, so config.json records them
        method_options=settle_for_task(method, method_options, values.get("task")),
        eval_files=parse_eval_files(values.get("eval_file")) or from_file.get("eval_files"),
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
