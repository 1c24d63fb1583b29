"""``attendout finetune``: its flags, a config file's values under them, and the call to
:func:`attendout.run.loop.finetune`; back the other way, the command line of a run's recorded options
(:func:`finetune_argv`) and what to run to go on with a stopped run (:func:`go_on`; from a run
directory's state: :func:`how_to_finish`)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import os
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .flags import (
    add_dataclass_options,
    add_file_options,
    add_report_to,
    add_threads,
    set_threads,
    task_defaults_unset,
    train_config,
)

if TYPE_CHECKING:
    from ..core.state import RunState


def parser_for(method: str | None) -> argparse.ArgumentParser:
    """The parser of ``attendout finetune``, with the options of ``method`` if it is a known method."""
    from ..config import TrainConfig
    from ..methods import METHODS, list_methods
    from ..methods.synthesizer import VARIANTS

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
        choices=VARIANTS,
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
    add_report_to(parser)
    if method in METHODS:
        cls = METHODS[method]
        group = parser.add_argument_group(
            f"options of method {method!r} ({cls.model_dropout} the model's own dropout)"
        )
        choices = {"variant": VARIANTS} if method == "synthesizer" else {}
        add_dataclass_options(group, cls, prefix="method__", choices=choices)
    return parser


def _method_and_file(argv: list[str]) -> tuple[list[str], str, dict[str, Any]]:
    """The command line with ``--attention VARIANT`` written out as ``--method synthesizer --variant VARIANT``
    (Synthesizer attention), the method it names (``--method``, else ``--config``'s, else none) and the
    config file's values as flag defaults (``method__OPTION`` for its method options)."""
    from ..methods import METHODS, list_methods

    pre = argparse.ArgumentParser(add_help=False)
    for flag in ("--attention", "--method", "--config"):
        pre.add_argument(flag, default=None)
    known, rest = pre.parse_known_args(argv)
    if known.attention is not None:
        if known.method not in (None, "synthesizer"):
            raise ValueError(
                f"--attention {known.attention} means --method synthesizer; it cannot go with --method {known.method}"
            )
        known.method = "synthesizer"
        config = [] if known.config is None else ["--config", known.config]
        argv = ["--method", "synthesizer", "--variant", known.attention, *config, *rest]
    from_file: dict[str, Any] = {}
    if known.config is not None:
        from ..configfile import load_config_file

        file_method, training = load_config_file(known.config)
        if known.method not in (None, file_method.name):
            raise ValueError(
                f"--method {known.method} contradicts {known.config}, whose method is {file_method.name!r}"
            )
        known.method = file_method.name
        from_file = {**training, **{f"method__{k}": v for k, v in _options_of(file_method).items()}}
    method = known.method or "none"
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; known methods: {', '.join(list_methods())}")
    return argv, method, from_file


def config_from_args(argv: list[str]) -> tuple[Any, int | None]:
    """(the :class:`~attendout.config.TrainConfig` of ``attendout finetune ARGV``, its ``--threads``)."""
    from ..methods import get_method_config

    argv, method, from_file = _method_and_file(argv)
    parser = parser_for(method)
    task_defaults_unset(parser)
    parser.set_defaults(**from_file, method=method)
    args = parser.parse_args(argv)
    values = vars(args)
    method_options = {k[len("method__") :]: v for k, v in values.items() if k.startswith("method__")}
    try:  # made once, here: options that depend on the task (AD-DROP's layers) settled for config.json
        made = get_method_config(method, **method_options).for_task(values.get("task"))
    except (ValueError, TypeError):  # the config's own checks report it, in their order
        made = None
    config = train_config(
        values,
        method_options=method_options if made is None else _options_of(made),
        method_made=made,
    )
    return config, args.threads


def _options_of(made: Any) -> dict[str, Any]:
    """Every option of the method's config ``made``, by name (what config.json records of it)."""
    return {k: v for k, v in made.to_dict().items() if k != "name"}


#: TrainConfig fields :func:`finetune_argv` writes first or last, or leaves to its caller (how a run starts).
_OWN_PLACE = {"task", "model", "method", "method_options", "eval_files", "text_columns"}
_STARTS = {"output_dir", "overwrite", "resume"}


def _flags(name: str, value: Any, default: Any) -> list[str] | None:
    """The flags that give option ``name`` the ``value`` (none for its default); None: no flag can."""
    if value == default:
        return []
    option = "--" + name.replace("_", "-")
    if isinstance(value, bool):
        return [option if value else f"--no-{option[2:]}"]
    if value is None:  # a default that is not None: only a method's layers say "all" as text
        return [option, "all"] if name == "layers" else None
    if isinstance(value, list | tuple):
        return [option, ",".join(str(v) for v in value)]
    return [option, repr(value) if isinstance(value, float) else str(value)]


def finetune_argv(values: Mapping[str, Any], output_dir: str | os.PathLike) -> list[str] | None:
    """The arguments of ``attendout finetune`` that give the options ``values`` (a run's config.json
    ``config``: :meth:`attendout.config.TrainConfig.to_dict`), writing to ``output_dir``: the task, the
    model and the method, then every option that differs from its default (the task's own, for the
    options some tasks give one). They are parsed back (:func:`config_from_args`) to check that they give
    the same options, which is what ``--resume`` checks against its checkpoint; None where they do not
    (a value set in Python that no flag gives, such as AD-DROP's ``layers="task"`` left unsettled; a
    method or option unknown here)."""
    from ..config import TrainConfig
    from ..run import checkpoint_config

    argv = _finetune_flags(values, output_dir)
    if argv is None:
        return None
    try:
        wanted = checkpoint_config(TrainConfig.from_dict(dict(values)))
        # argparse prints, then exits, on what it cannot parse
        with contextlib.redirect_stderr(io.StringIO()):
            given = checkpoint_config(config_from_args(argv)[0])
    except (ValueError, TypeError, KeyError, SystemExit):
        return None
    return argv if given == wanted else None


def _finetune_flags(values: Mapping[str, Any], output_dir: str | os.PathLike) -> list[str] | None:
    """The arguments :func:`finetune_argv` gives, unchecked."""
    from ..config import TrainConfig
    from ..methods import get_method_config
    from ..tasks.defaults import task_defaults

    fields = dataclasses.fields(TrainConfig)
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    defaults.update(task_defaults(values.get("task")))
    method = str(values.get("method") or "none")
    argv = [
        "--task",
        str(values.get("task", defaults["task"])),
        "--model",
        str(values.get("model", defaults["model"])),
    ]
    argv += ["--method", method]
    given = [(k, values[k], v) for k, v in defaults.items() if k in values and k not in _OWN_PLACE | _STARTS]
    try:
        own = get_method_config(method).to_dict()
    except (ValueError, TypeError):
        return None
    options = (values.get("method_options") or {}).items()
    given += [(name, value, own.get(name)) for name, value in options if name != "name"]
    for name, value, default in given:
        flags = _flags(name, value, default)
        if flags is None:
            return None
        argv += flags
    for split, path in (values.get("eval_files") or {}).items():
        argv += ["--eval-file", f"{split}={path}"]
    if values.get("text_columns"):
        argv += ["--text-columns", ",".join(values["text_columns"])]
    return [*argv, "--output-dir", str(output_dir)]


def finishing_command(state: RunState) -> list[str] | None:
    """The ``attendout finetune`` command (argv) that finishes the run whose state is ``state`` (a
    :class:`~attendout.core.state.RunState`): its own options (:func:`finetune_argv`) and ``--resume`` when
    it is stopped; unfinished, the command that starts it again (with ``--overwrite`` when its checkpoint
    cannot be used, which ``--resume`` refuses). None: finished, or no command line gives its options."""
    if state.finished or state.settings is None:
        return None
    argv = finetune_argv(state.settings, state.path)
    if argv is None:
        return None
    if state.resumable:
        argv.append("--resume")
    elif state.broken:
        argv.append("--overwrite")
    return ["attendout", "finetune", *argv]


def how_to_finish(state: RunState) -> str:
    """What to run to finish the run whose state is ``state``, in the words a stopped ``finetune``
    prints (:func:`go_on`), for a refusal to use a run that is not finished (``attendout predict``)."""
    if state.finished or state.writer() is not None:
        return state.how_to_go_on()
    command = finishing_command(state)
    if command is not None:
        return go_on(command[2:], resumable=state.resumable)
    from ..core.folder import RunDir

    why = (
        f"{RunDir(state.path).config} cannot be read"
        if state.settings is None
        else "no command line gives its options (a run started from Python)"
    )
    return f"{state.how_to_go_on()}; {why}"


def go_on(argv: list[str], resumable: bool) -> str:
    """What to run to go on with the run of ``attendout finetune ARGV``: with a checkpoint to resume from
    (``resumable``) the same command with ``--resume``, else the same command again. The one wording of
    it: a stopped ``finetune`` prints it (:mod:`attendout.cli`), and so does ``predict`` refusing a run
    that is not finished (:func:`how_to_finish`)."""
    again = ["attendout", "finetune", *argv]
    if not resumable:
        return f"nothing was saved to resume from; to start again: {shlex.join(again)}"
    return "to go on: " + shlex.join(again if "--resume" in argv else [*again, "--resume"])


def _tracker(argv: list[str], output_dir: str) -> Any:
    """The listener of ``--report-to`` (None: none), checked before anything trains: an MLflow run in
    ``$MLFLOW_EXPERIMENT_NAME`` (default: attendout), TensorBoard's events in OUTPUT_DIR/tensorboard."""
    from ..track import Tracking

    pre = argparse.ArgumentParser(add_help=False)
    add_report_to(pre)
    out, experiment = Path(output_dir).resolve(), os.environ.get("MLFLOW_EXPERIMENT_NAME") or "attendout"
    tracking = Tracking.of(pre.parse_known_args(argv)[0].report_to, experiment, out)
    return tracking and tracking.run(out.name, folder=out / "tensorboard")


def main(argv: list[str]) -> int:
    from ..report.results import format_results, format_truncation
    from ..run import finetune

    config, threads = config_from_args(argv)
    set_threads(threads)
    results = finetune(config, _tracker(argv, config.output_dir))
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
