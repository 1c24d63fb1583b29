"""The plan of a bench job: the grid's cells checked, the shard and selection it runs, and its listing.

:func:`prepare_cells` builds the grid (with budget and command-line overrides) and checks every cell
(configuration, model and, for local data, the data and its sizes; nothing is downloaded) into a
:class:`GridPlan`; :func:`parse_shard` and :func:`parse_selection` read ``--shard`` and
``--tasks/--methods/--seeds``; :func:`format_listing` prints the plan with each cell's status (the dry
run). Running the cells is :mod:`attendout.bench.runner`.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..config import TrainConfig
from .eta import CellTimes, duration
from .spec import Budget, Cell, Experiment, ExperimentError
from .store import ResultsStore


def parse_shard(text: str | None) -> tuple[int, int]:
    """``"k/n"`` (1 <= k <= n) -> (k, n); None -> (1, 1)."""
    if text is None:
        return 1, 1
    k, sep, n = text.partition("/")
    if not sep or not k.strip().isdigit() or not n.strip().isdigit():
        raise ExperimentError(f"--shard must look like K/N with 1 <= K <= N (e.g. 2/4), got {text!r}")
    k_int, n_int = int(k), int(n)
    if not 1 <= k_int <= n_int:
        raise ExperimentError(f"--shard {text}: K must be between 1 and N, got K={k_int}, N={n_int}")
    return k_int, n_int


@dataclass
class CellCheck:
    """What the pre-flight check learned about one task (or model): sizes and steps, or a problem."""

    note: str = ""
    error: str | None = None
    steps: int | None = None
    model_config: Any = None  # a model's config, where it could be read without a download: its limits
    set_up: str | None = None  # an offline model's short name that is not set up on this machine (yet)
    damaged: str | None = None  # what is wrong with its set-up folder, where it is set up but damaged


@dataclass
class GridPlan:
    """The checked cells of a grid and the shard this job runs."""

    experiment: Experiment
    budget: Budget
    cells: list[Cell]
    shard: tuple[int, int] = (1, 1)
    notes: list[str] = field(default_factory=list)
    steps: dict[str, int] = field(default_factory=dict)  # cell key -> training steps, when known
    not_set_up: list[str] = field(default_factory=list)  # offline models of the grid not set up here
    damaged: dict[str, str] = field(default_factory=dict)  # those of them set up damaged: what is wrong
    # --tasks/--methods/--seeds: "task", "method", "seed" -> the ids this job runs (absent: all)
    selection: dict[str, frozenset[str]] = field(default_factory=dict)

    def selected(self, cell: Cell) -> bool:
        ids = {"task": cell.task.id, "method": cell.method.id, "seed": str(cell.seed)}
        return all(ids[axis] in wanted for axis, wanted in self.selection.items())

    def in_shard(self, cell: Cell) -> bool:
        """This job's cells: every n-th of the selected cells (so shards of a selection are balanced)."""
        k, n = self.shard
        position = self._positions().get(cell.key)
        return position is not None and position % n == k - 1

    def shard_label(self, cell: Cell) -> str:
        """``K/N`` of the shard that runs ``cell``, or ``-`` for a cell the selection leaves out."""
        position = self._positions().get(cell.key)
        return "-" if position is None else f"{position % self.shard[1] + 1}/{self.shard[1]}"

    def _positions(self) -> dict[str, int]:
        """Each selected cell's place among the selected cells, in grid order."""
        selected = [c.key for c in self.cells if self.selected(c)]
        return {key: i for i, key in enumerate(selected)}

    @property
    def shard_cells(self) -> list[Cell]:
        return [c for c in self.cells if self.in_shard(c)]

    @property
    def models_to_set_up(self) -> list[str]:
        """The offline models (short names) that the selected cells need and this machine has not set up:
        a fact about the machine, not a fault of the grid (its cells stay listed as they are)."""
        needed = {c.model.name for c in self.cells if self.selected(c) and c.config is not None}
        return [name for name in self.not_set_up if name in needed]

    @property
    def invalid(self) -> list[Cell]:
        """The selected cells that cannot run (cells that --tasks/--methods/--seeds leave out never count)."""
        return [c for c in self.cells if c.invalid is not None and self.selected(c)]


def parse_selection(
    experiment: Experiment, tasks: str | None, methods: str | None, seeds: str | None
) -> dict[str, frozenset[str]]:
    """``--tasks cola,mrpc --methods none,attendout --seeds 1,2`` checked against the experiment's ids."""
    known = {
        "task": [t.id for t in experiment.tasks],
        "method": [m.id for m in experiment.methods],
        "seed": [str(s) for s in experiment.seeds],
    }
    selection: dict[str, frozenset[str]] = {}
    for axis, text in (("task", tasks), ("method", methods), ("seed", seeds)):
        if text is None:
            continue
        wanted = [item.strip() for item in text.split(",") if item.strip()]
        unknown = [item for item in wanted if item not in known[axis]]
        if not wanted or unknown:
            raise ExperimentError(
                f"--{axis}s {text!r}: {'unknown ' + ', '.join(unknown) if unknown else 'empty'}; "
                f"the {axis}s of {experiment.name} are {', '.join(known[axis])}"
            )
        selection[axis] = frozenset(wanted)
    return selection


def prepare_cells(
    experiment: Experiment,
    budget: Budget,
    *,
    shard: tuple[int, int] = (1, 1),
    selection: dict[str, frozenset[str]] | None = None,
    data_dir: str | None = None,
    save_model: bool | None = None,
    device: str | None = None,
    micro_batch_size: int | None = None,
    check_data: bool = True,
) -> GridPlan:
    """The grid with its overrides, every cell checked; bad cells are marked invalid, not raised."""
    cells = experiment.cells(
        budget, data_dir=data_dir, save_model=save_model, device=device, micro_batch_size=micro_batch_size
    )
    plan = GridPlan(experiment=experiment, budget=budget, cells=cells, shard=shard, selection=selection or {})
    model_checks = {m.id: _check_model(m.name, scratch=_from_scratch(cells, m.id)) for m in experiment.models}
    task_checks: dict[str, CellCheck] = {}
    for task in experiment.tasks:
        # only the tasks this job runs: a task left out by --tasks may have no data on this machine
        first = next(
            (c for c in cells if c.task.id == task.id and c.config is not None and plan.selected(c)), None
        )
        if first is None:
            continue
        task_checks[task.id] = _check_task_data(first, check_data)
    plan.not_set_up = [c.set_up for c in model_checks.values() if c.set_up is not None]
    plan.damaged = {c.set_up: c.damaged for c in model_checks.values() if c.set_up and c.damaged}
    for kind, checks in (("model", model_checks), ("task", task_checks)):
        plan.notes += [f"{kind} {entry}: {check.note}" for entry, check in checks.items() if check.note]
    checked = []
    for cell in cells:
        if cell.config is not None and cell.task.id in task_checks:
            problem = (
                model_checks[cell.model.id].error
                or _check_limits(cell, model_checks[cell.model.id])
                or task_checks[cell.task.id].error
            )
            if problem is not None:
                cell = dataclasses.replace(cell, config=None, invalid=problem)
            else:
                steps = _cell_steps(cell.config, task_checks[cell.task.id])
                if steps is not None:
                    plan.steps[cell.key] = steps
        checked.append(cell)
    plan.cells = checked
    return plan


def _check_limits(cell: Cell, model: CellCheck) -> str | None:
    """The cell's lengths beyond its model's or method's limits (:func:`attendout.core.limits.check_lengths`:
    a generation task's block, targets and decoded outputs too)."""
    from ..core.limits import LimitError, check_lengths
    from ..tasks import DataError, get_task

    if cell.config is None or model.model_config is None:
        return None
    try:
        kind = get_task(cell.config.task).kind
    except DataError:  # an unknown task: the cell's own check says so
        kind = ""
    c = cell.config
    try:
        check_lengths(
            kind, model.model_config, max_length=c.max_length, block_size=c.block_size,
            max_new_tokens=c.max_new_tokens, method=c.method_config(), model=cell.model.name, warn=False,
            flags=False,
        )  # fmt: skip
    except LimitError as error:
        return str(error)
    return None


def _model_config(path: str, local_only: bool) -> Any:
    """The model's config.json as transformers reads it, or None where it cannot be read here."""
    try:
        from transformers import AutoConfig

        return AutoConfig.from_pretrained(path, local_files_only=local_only)
    except Exception:  # unreadable here: the run's own loading reports it
        return None


def _from_scratch(cells: list[Cell], model_id: str) -> bool:
    """Whether the model's cells build it from scratch (``model_init = "scratch"``: nothing to load)."""
    return any(
        c.config is not None and c.model.id == model_id and c.config.model_init == "scratch" for c in cells
    )


def _check_model(name: str, scratch: bool = False) -> CellCheck:
    """Is the model loadable here, without downloading anything? (And its config, for its limits.)

    A model from scratch (an architecture name or a config.json) is built by the run: nothing to load.
    """
    from ..models import ModelNotFoundError, damage, model_folder, models_home, offline_model, resolve_model

    if scratch:
        return CellCheck(note=f"{name} from scratch (random weights, a tokenizer trained at run time)")
    folder = model_folder(name) if offline_model(name) is not None else None
    if offline_model(name) is not None and folder is None:
        return CellCheck(note=f"not set up on this machine (looked in {models_home() / name})", set_up=name)
    problem = damage(folder) if folder is not None else None  # once here, not by each cell's (worker's) load
    if problem is not None:
        return CellCheck(note=f"set up in {folder}, damaged: {problem}", set_up=name, damaged=problem)
    try:
        path, description = resolve_model(name)
    except ModelNotFoundError as error:
        return CellCheck(error=str(error))
    if not description.startswith("hub model"):
        return CellCheck(note="", model_config=_model_config(path, local_only=True))
    try:
        from huggingface_hub import try_to_load_from_cache
        from transformers.utils import CONFIG_NAME

        cached = try_to_load_from_cache(path, CONFIG_NAME)
    except Exception:  # any hub-library problem only means "not known to be cached"
        cached = None
    where = "in the local cache" if isinstance(cached, str) else "not cached: downloaded at run time"
    config = _model_config(path, local_only=True) if isinstance(cached, str) else None
    return CellCheck(note=f"hub model {name} ({where})", model_config=config)


def _check_task_data(cell: Cell, check_data: bool) -> CellCheck:
    """Load a task's data as the Trainer will (local sources only) and report its sizes."""
    from ..config import split_for_training
    from ..run import load_data
    from ..tasks import LM, DataError

    config = cell.config
    if config is None:
        return CellCheck()
    if config.hub:
        import importlib.util

        missing = (
            "" if importlib.util.find_spec("datasets") else "; needs pip install 'attendout[hub]' (datasets)"
        )
        return CellCheck(note=f"hub data: not checked (nothing is downloaded before training){missing}")
    if not check_data:
        return CellCheck(note="data not checked (--no-data-check)")
    try:
        task, data = load_data(config)
        train, validation, evals = split_for_training(data, config, task.label_names)
    except DataError as error:
        return CellCheck(error=f"data: {error}")
    if cell.task.splits is not None:
        missing = [s for s in cell.task.splits if s not in data.eval_splits]
        if missing:
            return CellCheck(
                error=f"task {cell.task.id!r}: splits {missing} are not in its data (splits: {', '.join(data.eval_splits)})"
            )
    sizes = ", ".join(
        [f"train {len(train)}", f"validation {len(validation)}", *(f"{k} {len(v)}" for k, v in evals.items())]
    )
    if task.kind == LM:  # documents, packed into blocks by the run's tokenizer: no step count before it
        return CellCheck(note=f"documents: {sizes} ({data.source}; task {task.name}, packed into blocks)")
    return CellCheck(note=f"{sizes} ({data.source}; task {task.name})", steps=len(train))


def _cell_steps(config: TrainConfig, check: CellCheck) -> int | None:
    if config.max_steps is not None:
        return config.max_steps
    if check.steps is None:
        return None
    return max(1, math.ceil(config.epochs * math.ceil(check.steps / config.batch_size)))


# --------------------------------------------------------------------------------------------------
# The listing (dry run and status)


def format_listing(plan: GridPlan, store: ResultsStore) -> tuple[str, dict[str, int]]:
    """A table of the cells with their shard and status, the notes, and a summary; also the counts."""
    k, n = plan.shard
    lines = [
        f"experiment {plan.experiment.name} ({plan.experiment.path}): {plan.experiment.shape()}",
        f"results: {store.root}"
        + (f"  budget: {plan.budget.overrides()}" if not plan.budget.is_empty() else ""),
    ]
    lines += [f"  {note}" for note in plan.notes]
    width = max((len(c.key) for c in plan.cells), default=10)
    lines.append(f"{'#':>4}  {'shard':<6} {'status':<8} {'cell':<{width}}  detail")
    counts: Counter[str] = Counter()
    times = CellTimes.of(plan.cells, store)
    left: list[float | None] = []  # the estimated time of each unfinished cell of the shard (None: unknown)
    for cell in plan.cells:
        status, detail = store.status(cell)
        mine = plan.in_shard(cell)
        if mine:
            counts[status] += 1
        if not detail and cell.config is not None:
            detail = _cell_summary(cell, plan.steps.get(cell.key))
        step = None
        if status in ("todo", "failed", "running"):
            resumable, step = store.resumable(cell)
            if resumable and status != "running":
                detail = f"resumes at step {step if step is not None else '?'}; {detail}"
        if mine and status in ("todo", "failed", "stale", "running"):
            left.append(times.left(cell, step, plan.steps.get(cell.key)))
        shard = plan.shard_label(cell)
        lines.append(
            f"{cell.index + 1:>4}  {shard:<6} {status.upper() if status == 'invalid' else status:<8} {cell.key:<{width}}  {detail}"
        )
    summary = ", ".join(f"{v} {s}" for s, v in sorted(counts.items()))
    scope = ("" if n == 1 else f" (shard {k}/{n})") + (
        f" (only {'; '.join(f'{axis}s ' + ','.join(sorted(ids)) for axis, ids in plan.selection.items())})"
        if plan.selection
        else ""
    )
    lines.append(f"summary{scope}: {sum(counts.values())} cells: {summary}")
    if plan.models_to_set_up:
        lines.append(f"before training: {set_up_first(plan.models_to_set_up, plan.damaged)}")
    if None not in left and sum(left):
        lines.append(
            f"estimated time left for this shard: {duration(sum(left))} of one job (the mean time of the finished "
            "cells of each task and method; a resumed cell its steps left)"
        )
    return "\n".join(lines), counts


def set_up_first(names: list[str], damaged: dict[str, str] | None = None) -> str:
    """The one line that says which offline models a grid needs set up (or set up again: ``damaged``, a
    name -> what is wrong with its folder), and the command that does it (and repairs)."""
    why = "; ".join(f"{n} is damaged: {damaged[n]}" for n in names if n in (damaged or {}))
    return (
        f"model{'s' if len(names) > 1 else ''} {', '.join(names)} not set up on this machine"
        + (f" ({why})" if why else "")
        + f"; set {'them' if len(names) > 1 else 'it'} up with: make models (or: attendout models setup "
        f"{' '.join(names)})"
    )


def _cell_summary(cell: Cell, steps: int | None) -> str:
    c = cell.config
    if c is None:
        return ""
    budget = f"{c.max_steps} steps" if c.max_steps is not None else f"{c.epochs:g} epochs"
    if steps is not None and c.max_steps is None:
        budget += f" ({steps} steps)"
    train = "" if c.max_train_samples is None else f", {c.max_train_samples} train examples"
    return f"{cell.method.describe()}; {budget}, lr {c.learning_rate:g}{train}"
