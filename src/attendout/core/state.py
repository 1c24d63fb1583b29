"""Where a run directory stands: finished, stopped at step N of M, or unfinished (:class:`RunState`).

:meth:`attendout.core.folder.RunDir.state` is the one reader of it: whatever tells a finished run from
another asks it (``attendout predict`` and :class:`~attendout.predict.classification.Predictor`, the generation
predictor, ``attendout table`` and ``bench`` through :attr:`~attendout.core.folder.RunDir.finished`, the
bench's resumable work folders). It calls :func:`read_state`, which holds the rules:

* **finished**: its results file, written last, is there;
* **stopped**: else, a checkpoint that ``finetune --resume`` goes on from (complete by its manifest, or
  written before manifests), at step N of M;
* **unfinished**: neither (killed or failed before its first checkpoint, or its checkpoint is incomplete
  or corrupt): its log says how far it got.

Each also says which step the kept model (RUN_DIR/model) is of. The command that finishes a run is the
command line's (:func:`attendout.cli.finetune.how_to_finish`, from the options the run recorded).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .lock import RunLock

if TYPE_CHECKING:
    from .folder import RunDir


FINISHED, STOPPED, UNFINISHED = "finished", "stopped", "unfinished"
#: The kinds of :class:`RunState`, in the order :meth:`RunDir.state` tells them apart.
RUN_KINDS = (FINISHED, STOPPED, UNFINISHED)


def read_json_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``; {} if it is missing, unreadable or not an object."""
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass
class CheckpointStatus:
    """What a checkpoint folder holds. ``kind``: ``none`` (nothing to resume from), ``complete`` (its
    manifest agrees with its files), ``unchecked`` (written before manifests: state.pt and no
    manifest), ``broken`` (incomplete or corrupt: ``problem`` says why). ``step``: its step, if known."""

    kind: str
    step: int | None = None
    problem: str | None = None

    @property
    def resumable(self) -> bool:
        return self.kind in ("complete", "unchecked")


@dataclass(frozen=True)
class RunState:
    """Where a run directory stands, as :meth:`attendout.core.folder.RunDir.state` reads it (:func:`read_state`).

    ``kind``: ``finished`` (its results file is there), ``stopped`` (a checkpoint to resume from) or
    ``unfinished`` (neither: killed or failed before its first checkpoint, or its checkpoint is
    incomplete or corrupt). ``step``: where it is (finished: its last step; stopped: its checkpoint's;
    unfinished: the last its log records), ``total_steps``: of its budget; ``best_step``: the step its
    kept model (RUN_DIR/model, the best so far) is of; ``model``: whether RUN_DIR/model is there. Each is
    None where the files do not say. ``checkpoint``: what its checkpoint folder holds (the one a resume
    reads); ``settings``: the run's training options (config.json ``config``), from which
    :func:`attendout.cli.finetune.how_to_finish` writes the command that finishes it (flags are the
    command line's business: the run directory's modules sit below it and import none of it).
    """

    path: Path
    kind: str
    step: int | None = None
    total_steps: int | None = None
    best_step: int | None = None
    model: bool = False
    checkpoint: CheckpointStatus | None = None
    settings: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    @property
    def finished(self) -> bool:
        return self.kind == FINISHED

    @property
    def resumable(self) -> bool:
        """Whether ``finetune --resume`` goes on from a checkpoint (kind ``stopped``)."""
        return self.kind == STOPPED

    @property
    def broken(self) -> bool:
        """Whether it has a checkpoint that cannot be used (incomplete or corrupt): ``--resume`` refuses it."""
        return self.checkpoint is not None and self.checkpoint.kind == "broken"

    def writer(self) -> str | None:
        """The live process that holds the folder's lock now (pid, host, start), or None.

        Asked only when a run's state is said (:meth:`describe`): a look at the lock takes it shared for
        a moment, which a run starting at that moment would take for a live one."""
        return None if self.finished else RunLock(self.path).holder()

    def _at(self, step: int | None) -> str:
        return f"step {step}" + (f" of {self.total_steps}" if self.total_steps else "")

    def describe(self) -> str:
        """A clause: ``stopped at step 10 of 5000``, ``unfinished (...)``, ``finished at step ...``."""
        if self.kind == FINISHED:
            text = "finished" + (f" at {self._at(self.step)}" if self.step is not None else "")
        elif self.kind == STOPPED:
            text = f"stopped at {self._at(self.step)}" if self.step is not None else "stopped"
        else:
            if self.broken:
                why = f"its checkpoint cannot be used: {self.checkpoint.problem}"
            else:
                why = "killed or failed before its first checkpoint"
            logged = (
                f"its log reaches {self._at(self.step)}"
                if self.step is not None
                else "its log records no step"
            )
            text = f"unfinished ({why}; {logged})"
        writer = self.writer()
        if writer is not None:
            text += f", and being trained now ({writer})"
        return text

    def how_to_go_on(self) -> str:
        """What finishes the run, in words that need no command line: its own words are
        :func:`attendout.cli.finetune.how_to_finish`, which names the exact command where the run's
        options give one."""
        if self.finished:
            return "nothing: it finished"
        if self.writer() is not None:
            return "wait for it to end"
        if self.resumable:
            return "to go on: run what started it again with --resume (Python: resume=True)"
        return "nothing was saved to resume from; to start again: run what started it again"

    def weights(self) -> str:
        """Which model the folder keeps (RUN_DIR/model): ``its model is of step 10``."""
        if not self.model:
            return "it kept no model"
        if self.best_step is None:
            return "its model is of a step its files do not say"
        said = f"its model is of step {self.best_step}"
        if self.finished:
            return said
        last = (self.settings or {}).get("model_selection") == "last"
        return f"{said} ({'the latest validated' if last else 'the best so far'})"

    def to_dict(self) -> dict[str, Any]:
        """What an output made with this run's model records of it (``run_state``)."""
        return {
            "kind": self.kind,
            "step": self.step,
            "total_steps": self.total_steps,
            "model_step": self.best_step if self.model else None,
            "run": str(self.path),
        }


def read_state(run: RunDir, checkpoint: CheckpointStatus, summary: Path) -> RunState:
    """The state of ``run`` (:meth:`RunDir.state` calls it): ``checkpoint`` is what the checkpoint folder a
    resume reads holds, ``summary`` that folder's state.json (its step, total steps and best step).

    Reads small files only (results.json, config.json, state.json, log.jsonl) and never raises for one
    that is missing or unreadable: what it would have said is then None.
    """
    model = run.model_dir.is_dir()
    if run.results.is_file():
        results = read_json_object(run.results)
        total = _int(results.get("total_steps"))
        early = results.get("stopped_early")
        step = _int(early.get("step")) if isinstance(early, dict) else total
        return RunState(run.path, FINISHED, step, total, _int(results.get("best_step")), model, checkpoint)
    settings = read_json_object(run.config)
    total = _int(settings.get("total_steps"))
    logged, best_logged = _logged_steps(run.log)
    kind, step, best = UNFINISHED, logged, best_logged
    if checkpoint.resumable:
        saved = read_json_object(summary)
        total = _int(saved.get("total_steps")) or total
        kind, step, best = STOPPED, checkpoint.step, _int(saved.get("best_step"))
        if best_logged is not None and (best is None or best_logged > best):
            best = best_logged  # a model saved after the checkpoint (killed before the next one)
    options = settings.get("config")
    options = options if isinstance(options, dict) else None
    return RunState(run.path, kind, step, total, best, model, checkpoint, settings=options)


def _logged_steps(log: Path) -> tuple[int | None, int | None]:
    """(the last step of the log, the step of its last validation that kept a model), None where unknown."""
    last = best = None
    try:
        lines = log.read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None, None
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a last line cut short by a kill
        if not isinstance(record, dict) or _int(record.get("step")) is None:
            continue
        last = record["step"] if last is None else max(last, record["step"])
        if "validation" in record and record.get("best"):
            best = record["step"]
    return last, best
