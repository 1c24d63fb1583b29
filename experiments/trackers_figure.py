"""The figure of docs/guides/trackers.md: a bench grid read back from the trackers it reported to.

Left, each cell's validation accuracy by step from MLflow's store (MlflowClient); right, the realised drop
rate of each layer of the scores-dropout cells from TensorBoard's event files (its EventAccumulator).
Nothing is read from the run folders: what is drawn is what a user sees in the two trackers.

    MLFLOW_TRACKING_URI=sqlite:///results/trackers-demo/mlflow.db \\
      attendout bench experiments/trackers-demo.toml --results results/trackers-demo --report-to tensorboard,mlflow
    python experiments/trackers_figure.py results/trackers-demo
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator  # noqa: E402


def main(root: str, experiment: str = "trackers-demo") -> Path:
    root_path = Path(root)
    client = MlflowClient(tracking_uri=f"sqlite:///{(root_path / 'mlflow.db').resolve()}")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    colours = {"none": "tab:grey", "scores-dropout": "tab:blue"}
    for run in sorted(runs, key=lambda r: (r.data.tags["method"], r.data.tags["seed"])):
        method, seed = run.data.tags["method"], run.data.tags["seed"]
        history = sorted(
            client.get_metric_history(run.info.run_id, "validation/accuracy"), key=lambda m: m.step
        )
        style = "-" if seed == "1" else "--"
        left.plot([m.step for m in history], [m.value for m in history], style, color=colours[method],
                  label=f"{method}, seed {seed}")  # fmt: skip
    left.set(title="MLflow: validation accuracy of each cell", xlabel="step", ylabel="accuracy")
    left.legend(fontsize=8)
    cells = sorted((root_path / "tensorboard").glob("*/*/scores-dropout/seed-*"))
    for cell in cells:
        reader = event_accumulator.EventAccumulator(str(cell), size_guidance={event_accumulator.SCALARS: 0})
        reader.Reload()
        tags = sorted(t for t in reader.Tags()["scalars"] if "/drop_rate/" in t)
        for layer, tag in enumerate(tags):
            events = reader.Scalars(tag)
            right.plot([e.step for e in events], [e.value for e in events], "-" if cell.name == "seed-1" else "--", color=f"C{layer}",
                       label=f"{tag.rsplit('/', 1)[-1]}, {cell.name}" if cell.name == "seed-1" else None)  # fmt: skip
    right.set(title="TensorBoard: scores dropout's realised rate per layer (p 0.2)", xlabel="step",
              ylabel="share of scores dropped")  # fmt: skip
    right.legend(fontsize=7, ncol=2)
    figure.suptitle(
        f"attendout bench {experiment} --report-to tensorboard,mlflow, read back from both trackers"
    )
    figure.tight_layout()
    out = root_path / "trackers.png"
    figure.savefig(out, dpi=110)
    return out


if __name__ == "__main__":
    print(main(*sys.argv[1:]))
