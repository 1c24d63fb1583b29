"""``--report-to``: where a command's runs report (:class:`Tracking`), and the listener that mirrors one
run's log.jsonl into every tracker named (:class:`RunTracker`).

The tracker sees what log.jsonl records, under the same names in every backend: ``train/loss``,
``train/lr``, ``train/steps_per_s``, ``train/examples_per_s``, the method's statistics under its own
names (``scores-dropout/drop_rate/L0``), ``validation/METRIC`` and ``eval/SPLIT/METRIC``; the run's
configuration as parameters. A resumed run reopens its tracker run (the ids are in RUN_DIR/tracking.json)
and skips the records the tracker already had: the loop writes the same records again after a resume,
in the same order, so counting them is enough. A tracker that fails during the run is warned of once
and dropped: the run goes on.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.folder import TRACKING_FILE, RunDir, write_json_atomic
from ..run import Listener
from .backends import BACKENDS, Backend, Opening, TrackerError, first_line, make_backend

logger = logging.getLogger(__name__)


_TRAIN = ("loss", "lr", "epoch", "steps_per_s", "examples_per_s")


def _flat(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def metrics_of(record: dict[str, Any]) -> dict[str, float]:
    """The scalars of a log.jsonl ``record``, under the trackers' names (see the module docstring)."""
    if "validation" in record:
        found = _flat(record["validation"], "validation/")
    elif "eval" in record:
        found = {**_flat(record["eval"], "eval/"), "eval/best_step": record.get("best_step")}
    else:
        found = {(f"train/{k}" if k in _TRAIN else k): v for k, v in record.items() if k != "step"}
    return {k: float(v) for k, v in found.items() if _number(v)}


def params_of(run_dir: Path) -> dict[str, str]:
    """The run's configuration (its config.json: every option, the data's sizes, the budget) as text."""
    record = RunDir(run_dir).read_config()
    kept = {k: record.get(k) for k in ("sizes", "total_steps", "steps_per_epoch", "model_description")}
    flat = _flat({**record.get("config", {}), **kept})
    return {k: json.dumps(v) if isinstance(v, list) else str(v) for k, v in flat.items() if v is not None}


@dataclass(frozen=True)
class Tracking:
    """Where the runs of one command report: the backends, the experiment, MLflow's tracking URI and
    TensorBoard's root folder, all resolved in the command's own process, so that every worker it starts
    (``--jobs``, SLURM, Ray) reports to the same place. Picklable."""

    backends: tuple[str, ...]
    experiment: str
    mlflow_uri: str = ""
    tensorboard_dir: str = ""
    tags: dict[str, str] = field(default_factory=dict)  # given to every run (an advise stage)

    @classmethod
    def of(cls, report_to: str | None, experiment: str, tensorboard_dir: Path) -> Tracking | None:
        """The tracking of ``--report-to REPORT_TO`` (None for ``none``), checked: a backend not
        installed, an MLflow store that cannot be reached or a folder that cannot be written is a
        :class:`TrackerError` now, before anything trains. MLflow's URI is ``$MLFLOW_TRACKING_URI``, else
        MLflow's default (``sqlite:///mlflow.db`` in the working folder), made absolute."""
        names = [n.strip() for n in (report_to or "none").split(",") if n.strip()]
        for name in names:
            if name not in (*BACKENDS, "all", "none"):
                raise TrackerError(f"--report-to {report_to}: unknown tracker {name!r}; give all, none or some of {', '.join(BACKENDS)} (comma-separated)")  # fmt: skip
        if "all" in names:  # as transformers: every tracker installed
            names = [n for n in BACKENDS if importlib.util.find_spec(n)]  # each imports as it is named
        chosen = tuple(dict.fromkeys(n for n in names if n != "none"))
        if not chosen:
            return None
        uri = ""
        if "mlflow" in chosen:
            uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{Path('mlflow.db').resolve()}"
            if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
                uri = f"sqlite:///{Path(uri[len('sqlite:///') :]).resolve()}"
        tracking = cls(chosen, experiment, uri, str(Path(tensorboard_dir).resolve()))
        for name in chosen:
            tracking.backend(name).check(experiment)
        return tracking

    def backend(self, name: str) -> Backend:
        return make_backend(name, self.tensorboard_dir if name == "tensorboard" else self.mlflow_uri)

    def run(self, name: str, tags: dict | None = None, also: Callable | None = None, folder: Path | None = None) -> RunTracker:  # fmt: skip
        """A listener for ``finetune(config, on_log=...)`` that reports one run named ``name`` with
        ``tags``, its TensorBoard events in ``folder`` (default: TENSORBOARD_DIR/NAME); ``also``: a
        listener that gets every record first."""
        folder = folder or Path(self.tensorboard_dir) / name
        return RunTracker(self, name, {**self.tags, **(tags or {})}, also, folder)

    def add(self, run_dir: Path, metrics: dict[str, float]) -> None:
        """``metrics`` that come after the run of ``run_dir`` ended (an ``advise`` trial's objective), added
        to its tracker runs (their ids in its tracking.json) at step 0."""
        try:
            ids = json.loads((Path(run_dir) / TRACKING_FILE).read_text())["ids"]
        except (OSError, ValueError, KeyError):
            return
        for name in self.backends:
            if name in ids:
                folder = Path(ids[name]) if name == "tensorboard" else Path(run_dir)
                try:
                    backend = self.backend(name)
                    backend.open(Opening(self.experiment, Path(run_dir).name, folder, run_id=ids[name]))
                    backend.log(metrics, 0)
                    backend.close("finished")
                except Exception as error:
                    _warn(name, error)

    def note(self, key: str, text: str) -> None:
        """A note on the whole experiment (``advise``'s answer): an MLflow experiment tag, a TensorBoard
        text in the run ``KEY``."""
        for name in self.backends:
            try:
                self.backend(name).note(self.experiment, key, text, Path(self.tensorboard_dir) / key)
            except Exception as error:
                _warn(name, error)


def track_run(tracking: Tracking | None, name: str, also: Callable | None = None, **tags: str) -> Any:
    """The listener of the run ``name`` with ``tags`` (and ``also`` first), or ``also`` without tracking."""
    return also if tracking is None else tracking.run(name, tags, also)


def _warn(name: str, error: BaseException) -> None:
    said = f"{type(error).__name__}: {first_line(error)}"
    logger.warning("--report-to %s: the tracker failed (%s); the run goes on without it", name, said)


class RunTracker(Listener):
    """Mirrors one run into the trackers of a :class:`Tracking` (see the module docstring)."""

    def __init__(
        self, tracking: Tracking, name: str, tags: dict, also: Callable | None, folder: Path
    ) -> None:
        self.tracking, self.name, self.tags, self.also, self.folder = tracking, name, tags, also, folder
        self.live: dict[str, Backend] = {}
        self.state_file: Path | None = None
        self.ids: dict[str, str] = {}
        self.sent = self.seen = 0  # records the trackers were given (over every resume), records seen now

    def _failed(self, name: str, error: BaseException) -> None:
        self.live.pop(name, None)
        _warn(name, error)

    def start(self, run_dir: Path, resumed_at: int | None) -> None:
        self.state_file, self.live, self.seen = run_dir / TRACKING_FILE, {}, 0
        state: dict[str, Any] = {}
        if resumed_at is not None:  # the ids to reopen, the records the trackers have
            with contextlib.suppress(OSError, ValueError):
                state = json.loads(self.state_file.read_text())
        self.sent, self.ids = int(state.get("records", 0)), dict(state.get("ids", {}))
        params = params_of(run_dir)
        for name in self.tracking.backends:
            folder = self.folder if name == "tensorboard" else run_dir
            opening = Opening(self.tracking.experiment, self.name, folder, self.tags, params, self.ids.get(name))  # fmt: skip
            try:
                backend = self.tracking.backend(name)
                self.ids[name] = backend.open(opening)
                self.live[name] = backend
            except Exception as error:
                self._failed(name, error)
        self._save()
        for record in RunDir(run_dir).log_records() if resumed_at is not None else []:
            self._send(record)  # what the kept log has and a killed run had not told the trackers

    def _save(self) -> None:
        if self.state_file is not None:
            write_json_atomic(self.state_file, {"ids": self.ids, "records": self.sent})

    def __call__(self, record: dict[str, Any]) -> None:
        if self.also is not None:
            self.also(record)
        self._send(record)

    def _send(self, record: dict[str, Any]) -> None:
        self.seen += 1
        if self.seen <= self.sent:  # told before the run was resumed
            return
        self.sent = self.seen
        self._save()  # first: a run killed now loses this record in the trackers, never repeats it
        metrics = metrics_of(record)
        for name, backend in list(self.live.items()):
            try:
                backend.log(metrics, int(record.get("step", 0)))
            except Exception as error:
                self._failed(name, error)

    def end(self, status: str, results: dict[str, Any] | None = None) -> None:
        run = RunDir(self.state_file.parent) if self.state_file is not None else None
        for name, backend in list(self.live.items()):
            try:
                if status == "finished" and run is not None:
                    final = metrics_of({"eval": (results or {}).get("eval", {})})
                    backend.summary(params_of(run.path), final)
                    for path in (run.config, run.results):
                        backend.keep(path)
            except Exception as error:
                self._failed(name, error)
            try:  # never a run left "running"
                backend.close(status)
            except Exception as error:
                self._failed(name, error)
        self.live = {}
