"""``attendout tasks``: the built-in tasks, their labels, metrics and defaults."""

from __future__ import annotations

import argparse


def main(argv: list[str]) -> int:
    from ..tasks import get_task, list_tasks
    from ..tasks.defaults import task_defaults

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
