"""A run's data, read from the sources its config names (a task's files, a folder, the hub).

Plain reading, no model: ``attendout bench``'s plan and ``attendout predict`` read a run's data as its
set-up (:mod:`attendout.run.setup`) does, without loading torch; the splits a run trains and selects on
are :func:`attendout.config.split_for_training`'s.
"""

from __future__ import annotations

from ..config import TrainConfig
from ..tasks import Task, TaskData, load_task_data


def load_data(config: TrainConfig) -> tuple[Task, TaskData]:
    """The task and its data, from the sources ``config`` names."""
    c = config
    token_files = {"token_column": c.token_column, "tag_column": c.tag_column}
    return load_task_data(
        c.task,
        data_dir=c.data_dir,
        hub=c.hub,
        train_file=c.train_file,
        eval_files=c.eval_files,
        text_columns=[c.source_column, c.target_column] if c.source_column is not None else c.text_columns,
        metrics=None if c.metrics is None else [m.strip() for m in c.metrics.split(",") if m.strip()],
        label_column=c.label_column,
        kind=c.label_kind,
        drop_bad_rows=c.drop_bad_rows,
        **{k: v for k, v in token_files.items() if v is not None},
    )
