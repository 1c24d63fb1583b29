"""The trackers a run reports to (``--report-to``): TensorBoard, MLflow, Weights & Biases, Trackio,
each behind the same small interface (:class:`Backend`).

A backend opens one run of an experiment (or reopens it, by the id it gave before), takes scalars at a
step, keeps files (MLflow's artifacts) and closes with the run's status. Its library is imported when the
backend is made: one that is not installed is a :class:`TrackerError` naming the ``pip install`` that adds
it. :meth:`Backend.check` finds an unreachable store or an unwritable folder before anything trains.
"""

from __future__ import annotations

import importlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

from ..core.folder import describe_os_error

#: every name of ``--report-to`` but ``all`` and ``none``, as transformers' ``report_to`` spells them
BACKENDS = ("tensorboard", "mlflow", "wandb", "trackio")


class TrackerError(ValueError):
    """A tracker that cannot be used: not installed, unreachable, not writable (one line, before training)."""


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (at most 300 characters), else its type's name."""
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def _library(name: str, module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise TrackerError(
            f"--report-to {name}: {name} is not installed; pip install 'attendout[{name}]'"
        ) from None


@dataclass
class Opening:
    """One run to open: its experiment (a TensorBoard folder holds one run), name, tags and parameters;
    ``run_id``: the id a backend gave it before (resuming), else None."""

    experiment: str
    name: str
    folder: Path  # where files of the run go (TensorBoard's events, W&B's and Trackio's local copies)
    tags: dict[str, str] = field(default_factory=dict)
    params: dict[str, str] = field(default_factory=dict)
    run_id: str | None = None


class Backend:
    """One tracker's side of a run (see the module docstring); :meth:`open` returns the run's id."""

    name = ""

    def check(self, experiment: str) -> None:
        """Refuse, with a :class:`TrackerError`, a store that cannot be reached or written."""

    def open(self, run: Opening) -> str:  # type: ignore[empty-body]
        """Open (or with ``run.run_id``, reopen) the run; its id."""

    def log(self, metrics: dict[str, float], step: int) -> None:
        """``metrics`` at ``step``."""

    def keep(self, path: Path) -> None:
        """Keep the file ``path`` with the run (only MLflow keeps files)."""

    def summary(self, params: dict[str, str], metrics: dict[str, float]) -> None:
        """The finished run's parameters beside its final metrics (TensorBoard's HParams table)."""

    def close(self, status: str) -> None:
        """``status``: "finished", "stopped" (resumable) or "failed"."""

    def note(self, experiment: str, key: str, text: str, folder: Path) -> None:
        """A note on the whole experiment (TensorBoard: a text in the run ``folder``)."""


class TensorBoard(Backend):
    """Event files under ``root/RUN_NAME`` (``tensorboard --logdir ROOT`` compares the runs)."""

    name = "tensorboard"

    def __init__(self, root: str) -> None:
        self.writer_class = _library(self.name, "torch.utils.tensorboard").SummaryWriter
        self.root = Path(root)
        self.writer: Any = None

    def check(self, experiment: str) -> None:
        probe = self.root / f".attendout-probe-{os.getpid()}"
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe.write_text("")
            probe.unlink()
        except OSError as error:
            raise TrackerError(
                f"--report-to tensorboard: cannot write its folder {self.root} ({describe_os_error(error)})"
            ) from None

    def open(self, run: Opening) -> str:
        # afresh, a start at step 0 hides from TensorBoard whatever an older run left in the folder
        purge = None if run.run_id else 0
        self.writer = self.writer_class(str(run.folder), purge_step=purge, flush_secs=30)
        return str(run.folder)  # (the configuration: in the HParams summary of the finished run)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # a killed run loses no step it told the tracker

    def summary(self, params: dict[str, str], metrics: dict[str, float]) -> None:
        from torch.utils.tensorboard.summary import hparams

        for part in hparams(params, metrics):  # the HParams table, in this run's own folder
            self.writer.file_writer.add_summary(part)

    def close(self, status: str) -> None:
        if self.writer is not None:
            self.writer.close()

    def note(self, experiment: str, key: str, text: str, folder: Path) -> None:
        with self.writer_class(str(folder)) as writer:
            writer.add_text(key, text, 0)


_STATUS = {"finished": "FINISHED", "stopped": "KILLED", "failed": "FAILED"}


class MLflow(Backend):
    """Runs of an MLflow experiment in the store of ``uri`` (a server, or ``sqlite:///FILE``)."""

    name = "mlflow"

    def __init__(self, uri: str) -> None:
        _library(self.name, "mlflow")
        from mlflow.tracking import MlflowClient

        self.uri = uri
        self.client = MlflowClient(tracking_uri=uri)
        self.run_id = ""

    def experiment_id(self, experiment: str) -> str:
        found = self.client.get_experiment_by_name(experiment)
        if found is not None:
            return found.experiment_id
        location = None
        if self.uri.startswith("sqlite:///"):  # artifacts beside the database, not in the working folder
            location = (Path(self.uri[len("sqlite:///") :]).parent / "mlartifacts" / experiment).as_uri()
        try:
            return self.client.create_experiment(experiment, artifact_location=location)
        except Exception:  # another worker made it first
            return self.client.get_experiment_by_name(experiment).experiment_id

    def check(self, experiment: str) -> None:
        once = {
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
            "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
        }  # no minutes of retries
        try:
            with mock.patch.dict(os.environ, once):
                self.experiment_id(experiment)
        except Exception as error:
            raise TrackerError(
                f"--report-to mlflow: cannot use the MLflow tracking URI {self.uri} ({first_line(error)}); "
                "set MLFLOW_TRACKING_URI to a reachable server or a writable sqlite:///FILE"
            ) from None

    def open(self, run: Opening) -> str:
        from mlflow.entities import Param

        if run.run_id:
            self.run_id = run.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            return self.run_id
        made = self.client.create_run(self.experiment_id(run.experiment), run_name=run.name, tags=run.tags)
        self.run_id = made.info.run_id
        params = [Param(k, v[:6000]) for k, v in run.params.items()]
        for i in range(0, len(params), 100):  # MLflow takes at most 100 parameters a call
            self.client.log_batch(self.run_id, params=params[i : i + 100])
        self.client.set_tag(self.run_id, "attendout.run_dir", str(run.folder))
        return self.run_id

    def log(self, metrics: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in metrics.items()])

    def keep(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def close(self, status: str) -> None:
        if self.run_id:
            self.client.set_terminated(self.run_id, _STATUS[status])

    def note(self, experiment: str, key: str, text: str, folder: Path) -> None:
        self.client.set_experiment_tag(self.experiment_id(experiment), key, text[:5000])


class Wandb(Backend):
    """A Weights & Biases run (``WANDB_MODE=offline`` keeps it on disk until ``wandb sync``)."""

    name = "wandb"

    def __init__(self, target: str) -> None:
        self.library = _library(self.name, self.name)
        self.run: Any = None

    def open(self, run: Opening) -> str:
        self.run = self.library.init(
            project=run.experiment, name=run.name, id=run.run_id, resume="allow" if run.run_id else None,
            config=run.params, tags=[f"{k}={v}"[:64] for k, v in run.tags.items()],
            dir=os.environ.get("WANDB_DIR") or str(run.folder),  # its local files: in the run folder
            reinit="create_new",
        )  # fmt: skip
        return self.run.id

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.run.log(metrics, step=step)

    def close(self, status: str) -> None:
        if self.run is not None:
            self.run.finish(**({"exit_code": int(status != "finished")} if self.name == "wandb" else {}))


class Trackio(Wandb):
    """A Trackio run (local first: ``trackio show`` opens its dashboard)."""

    name = "trackio"

    def open(self, run: Opening) -> str:
        resume = "must" if run.run_id else "never"
        self.run = self.library.init(project=run.experiment, name=run.name, config=run.params, resume=resume)
        return run.name


_CLASSES: dict[str, type[Backend]] = {
    "tensorboard": TensorBoard,
    "mlflow": MLflow,
    "wandb": Wandb,
    "trackio": Trackio,
}


def make_backend(name: str, target: str) -> Backend:
    """The backend ``name`` (one of :data:`BACKENDS`) over ``target``: TensorBoard's root folder, MLflow's
    tracking URI (the others' own settings: ``WANDB_*``, ``TRACKIO_*``)."""
    return _CLASSES[name](target)
