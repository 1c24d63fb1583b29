"""The GLUE tasks: from a local folder in the GLUE distribution's format, or from the Hugging Face hub.

Local folder (``data_dir``): either the GLUE root (holding ``CoLA/``, ``SST-2/``, ...; a ``glue/``
sub-folder of ``data_dir`` is also looked in) or the task folder itself. With no ``data_dir`` the
environment variable ``ATTENDOUT_DATA`` is used if set. The files are read as the GLUE
distribution writes them (tab-separated, ``csv.QUOTE_NONE``, CoLA without a header row). When a
task folder has no ``train.tsv`` but has its first evaluation file (the QNLI copy used in
development has only ``dev.tsv``), train and dev are carved from that file: 80/20, seed 0, with a
warning, and ``TaskData.source`` says so. Scores on such a carved dev split are not comparable to
published GLUE dev scores.

Hub (``hub=True``): ``datasets.load_dataset("nyu-mll/glue", config)``; needs the optional
``datasets`` package (``pip install 'attendout[hub]'``) and internet.

Label order follows the hub's ClassLabel names, so indices agree between the two sources; the
GLUE files' ``0``/``1`` labels are class indices in that same order.
"""

from __future__ import annotations

import logging
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .base import CLASSIFICATION, REGRESSION, DataError
from .core import Examples, LoadOptions, Task, TaskData, carve_validation, name_key, register_task, split_data
from .hub import hub_columns, hub_splits, load_hub
from .readers import RawTable, data_root, read_file, to_examples

logger = logging.getLogger(__name__)

HUB_DATASET = "nyu-mll/glue"
CARVE_FRACTION = 0.2  # of the dev file, when a folder has no train.tsv
CARVE_SEED = 0


@dataclass(frozen=True)
class GlueSpec:
    """Where a GLUE task's data lives and how its files are laid out."""

    task: Task
    folder: str  # folder name in the GLUE distribution, e.g. "SST-2"
    files: dict[str, str]  # split -> file name, "train" and every eval split
    text_columns: tuple[str, ...]  # file column names, in the order of task.text_fields
    label_column: str
    hub_config: str
    hub_splits: dict[str, str]  # split -> hub split name; eval splits missing here are absent on the hub
    column_names: tuple[str, ...] | None = None  # for files without a header row (CoLA)
    optional_splits: tuple[str, ...] = field(default=())  # eval splits whose file may be absent


def _spec(
    name: str,
    folder: str,
    *,
    description: str,
    label_names: tuple[str, ...] | None = None,
    text_fields: tuple[str, ...] = ("sentence1", "sentence2"),
    metrics: tuple[str, ...] = ("accuracy",),
    text_columns: tuple[str, ...] | None = None,
    label_column: str = "label",
    eval_splits: tuple[str, ...] = ("dev",),
    hub_splits: dict[str, str] | None = None,
    column_names: tuple[str, ...] | None = None,
    optional_splits: tuple[str, ...] = (),
    label_range: tuple[float, float] | None = None,
) -> GlueSpec:
    """A GLUE task and its layout: the files are ``train.tsv`` and ``<split>.tsv`` of each evaluation split."""
    task = Task(
        name=name,
        kind=REGRESSION if label_names is None else CLASSIFICATION,
        text_fields=text_fields,
        label_names=label_names,
        metrics=metrics,
        eval_split_names=eval_splits,
        description=description,
        label_range=label_range,
    )
    return GlueSpec(
        task=task,
        folder=folder,
        files={split: f"{split}.tsv" for split in ("train", *eval_splits)},
        text_columns=text_columns or text_fields,
        label_column=label_column,
        hub_config=name,
        hub_splits=hub_splits or {"train": "train", "dev": "validation"},
        column_names=column_names,
        optional_splits=optional_splits,
    )


def _read_specs() -> dict[str, GlueSpec]:
    """The GLUE tasks of ``glue_tasks.toml`` (data beside this module), by name; its lists as tuples."""
    table = tomllib.loads((Path(__file__).parent / "glue_tasks.toml").read_text(encoding="utf-8"))
    return {
        name: _spec(name, **{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
        for name, fields in table.items()
    }


#: The GLUE tasks by name, with their files' layout (``glue_tasks.toml``).
GLUE_SPECS: dict[str, GlueSpec] = _read_specs()


def _find_folder(spec: GlueSpec, data_dir: str | Path) -> Path:
    """The task folder: ``data_dir/<Folder>``, ``data_dir/glue/<Folder>``, or ``data_dir`` itself."""
    root = Path(data_dir)
    if not root.exists():
        raise DataError(f"data_dir not found: {root} (task {spec.task.name!r})")
    if not root.is_dir():
        raise DataError(f"data_dir is not a folder: {root} (task {spec.task.name!r})")
    for base in (root, root / "glue"):
        if base.is_dir():
            for child in sorted(base.iterdir()):
                if child.is_dir() and name_key(child.name) == name_key(spec.folder):
                    return child
    others = {name_key(s.folder): s.task.name for s in GLUE_SPECS.values() if s is not spec}
    if name_key(root.name) in others:
        raise DataError(
            f"data_dir {root} is the folder of task {others[name_key(root.name)]!r}, not {spec.task.name!r}"
        )
    if any((root / name).is_file() for name in spec.files.values()):
        return root
    raise DataError(
        f"no GLUE data for task {spec.task.name!r} in {root}: expected a folder {spec.folder}/ "
        f"or the files {', '.join(spec.files.values())}"
    )


def read_glue_file(spec: GlueSpec, path: str | Path, split: str, *, task: Task | None = None) -> Examples:
    """Read one TSV file laid out as the GLUE distribution lays out this task's files."""
    task = task or spec.task
    raw = read_file(
        path,
        text_columns=spec.text_columns,
        label_column=spec.label_column,
        file_format="tsv",
        column_names=spec.column_names,
        what=f"{split} split of task {task.name!r}",
    )
    return to_examples(
        raw, kind=task.kind, label_names=task.label_names, split=split, label_range=task.label_range
    )


def _load_folder(spec: GlueSpec, data_dir: str | Path) -> tuple[Task, TaskData]:
    folder = _find_folder(spec, data_dir)
    task = spec.task
    train_path = folder / spec.files["train"]
    primary = task.eval_split_names[0]
    if not train_path.exists() and not (folder / spec.files[primary]).exists():
        raise DataError(
            f"file not found: {train_path} (train split of task {task.name!r}; no {spec.files[primary]} either)"
        )
    eval_splits: dict[str, Examples] = {}
    for split in task.eval_split_names:
        path = folder / spec.files[split]
        if split in spec.optional_splits and not path.exists():
            logger.info("task %s: no %s, skipping its %s split", task.name, path, split)
            continue
        eval_splits[split] = read_glue_file(spec, path, split)
    source = f"glue folder {folder}"
    if train_path.exists():
        train = read_glue_file(spec, train_path, "train")
    else:
        logger.warning(
            "task %s: %s has no %s; carving train/%s %d/%d from %s (seed %d); %s scores are not "
            "comparable to published GLUE numbers",
            task.name,
            folder,
            spec.files["train"],
            primary,
            round(100 * (1 - CARVE_FRACTION)),
            round(100 * CARVE_FRACTION),
            spec.files[primary],
            CARVE_SEED,
            primary,
        )
        train, eval_splits[primary] = carve_validation(eval_splits[primary], CARVE_FRACTION, CARVE_SEED)
        source += (
            f" (no {spec.files['train']}: train and {primary} carved "
            f"{round(100 * (1 - CARVE_FRACTION))}/{round(100 * CARVE_FRACTION)} from {spec.files[primary]}, "
            f"seed {CARVE_SEED})"
        )
    task = replace(task, eval_split_names=tuple(eval_splits))
    return task, TaskData(train=train, eval_splits=eval_splits, source=source)


def _hub_examples(dataset: Any, spec: GlueSpec, task: Task, hub_split: str, split: str) -> Examples:
    """Convert one hub split (a ``datasets.Dataset``) to Examples."""
    where = f"hub {HUB_DATASET} {spec.hub_config} {hub_split}"
    hub_columns(dataset, where, [*task.text_fields, "label"])
    labels = list(dataset["label"])
    names = None
    features = getattr(dataset, "features", None)
    if task.kind == CLASSIFICATION and features is not None and "label" in features:
        names = getattr(features["label"], "names", None)
    if names is not None:  # ClassLabel: int -> its name, matched to task.label_names by name
        labels = [names[v] if isinstance(v, int) and 0 <= v < len(names) else v for v in labels]
    raw = RawTable(
        path=where,
        texts=tuple([str(t) for t in dataset[name]] for name in task.text_fields),
        labels=labels,
        lines=list(range(1, len(labels) + 1)),  # row numbers
        label_column="label",
    )
    return to_examples(
        raw, kind=task.kind, label_names=task.label_names, split=split, label_range=task.label_range
    )


def _load_hub(spec: GlueSpec) -> tuple[Task, TaskData]:
    names = (HUB_DATASET, spec.hub_config)
    datasets = hub_splits(load_hub(*names), names, spec.hub_splits)
    task = replace(spec.task, eval_split_names=tuple(s for s in spec.task.eval_split_names if s in datasets))
    parts = {
        split: _hub_examples(dataset, spec, task, spec.hub_splits[split], split)
        for split, dataset in datasets.items()
    }
    return split_data(task, parts, f"hub {HUB_DATASET} {spec.hub_config}")


def load_glue(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Loader of the GLUE tasks (registered with each of them)."""
    spec = GLUE_SPECS[task.name]
    if options.hub:
        return _load_hub(spec)
    needs = (
        f"task {task.name!r} needs data_dir=<GLUE folder> (or the ATTENDOUT_DATA environment variable), "
        "or hub=True to download it"
    )
    return _load_folder(spec, data_root(options.data_dir, "", needs))


for _glue_spec in GLUE_SPECS.values():
    register_task(_glue_spec.task, load_glue, replace=True)
