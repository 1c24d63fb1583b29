"""`attendout plot`: convergence curves (paper 001 Figure 4) and AttendOut dropout patterns (Figure 3)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from attendout.cli import main
from attendout.report.curves import convergence_figure, group_runs, validation_curve
from attendout.report.patterns import panel_labels, pattern_figure
from conftest import panels

PNG = b"\x89PNG\r\n\x1a\n"


def fake_run(path, method: str, seed: int, steps=(10, 20, 30), task: str = "cola", options=None):
    """A run directory as the fine-tuning loop writes it, with made-up numbers."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(
        json.dumps(
            {
                "config": {
                    "method": method,
                    "seed": seed,
                    "method_options": {"name": method, **(options or {})},
                },
                "task": {"name": task, "metrics": ["mcc"]},
                "total_steps": 30,
            }
        )
    )
    records = []
    for step in steps:
        record = {"step": step, "loss": 0.5, "lr": 1e-5}
        if method == "attendout":
            record.update({f"attendout/drop_prob/L{i}": 0.5 - 0.01 * step * (i + 1) / 3 for i in range(4)})
        records.append(record)
        records.append(
            {"step": step, "validation": {"mcc": 0.2 + step / 100 + seed / 50, "loss": 0.6}, "best": True}
        )
    (path / "log.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    (path / "results.json").write_text(json.dumps({"main_metric": "mcc"}))
    return path


@pytest.fixture
def runs(tmp_path):
    return [fake_run(tmp_path / f"{m}-s{s}", m, s) for m in ("none", "attendout") for s in (1, 2, 3)]


def test_plot_command_draws_the_convergence_curves_and_the_dropout_patterns(
    runs, tmp_path, capsys, saved_figures
):
    out = tmp_path / "figures"
    assert main(["plot", *map(str, runs), "--out-dir", str(out)]) == 0
    assert f"wrote {out / 'convergence.png'}" in capsys.readouterr().out
    assert all(
        (out / name).read_bytes().startswith(PNG) for name in ("convergence.png", "dropout_pattern.png")
    )
    convergence, pattern = saved_figures
    # one panel, a line per method: the mean over its 3 seeds of mcc = 0.2 + step / 100 + seed / 50
    (ax,) = panels(convergence)
    assert [line.get_label() for line in ax.lines] == ["none (n=3)", "attendout (n=3)"]
    for line in ax.lines:
        assert line.get_xdata().tolist() == [10, 20, 30]
        np.testing.assert_allclose(line.get_ydata(), [0.34, 0.44, 0.54])
    assert len(ax.collections) == 2  # a ± std band around each mean of 3 runs
    # one panel per AttendOut run, one line per layer: the logged drop probabilities over the steps
    axes = panels(pattern)
    assert len(axes) == 3
    for ax in axes:
        assert [line.get_label() for line in ax.lines] == ["L0", "L1", "L2", "L3"]
        for layer, line in enumerate(ax.lines):
            assert line.get_xdata().tolist() == [10, 20, 30]
            expected = [0.5 - 0.01 * step * (layer + 1) / 3 for step in (10, 20, 30)]
            np.testing.assert_allclose(line.get_ydata(), expected)


def test_plot_without_attendout_runs_writes_only_the_convergence_figure(runs, tmp_path, saved_figures):
    out = tmp_path / "figures"
    assert main(["plot", *map(str, runs[:3]), "--out-dir", str(out)]) == 0
    assert (out / "convergence.png").exists() and not (out / "dropout_pattern.png").exists()
    (figure,) = saved_figures
    (ax,) = panels(figure)
    assert [line.get_label() for line in ax.lines] == ["none (n=3)"]


def test_runs_are_grouped_by_method_and_averaged(runs, tmp_path):
    groups = group_runs(runs)
    assert list(groups) == ["none", "attendout"] and all(len(g) == 3 for g in groups.values())
    assert list(group_runs(runs[:2], by="run")) == ["none-s1", "none-s2"]
    other_task = fake_run(tmp_path / "sst", "none", 1, task="sst2")
    assert set(group_runs([runs[0], other_task])) == {"cola none", "sst2 none"}
    # one method name with different options: the options that differ name the groups
    ga = [fake_run(tmp_path / f"ga{s}", "addrop", s, options={"attribution": "ga", "p": 0.3}) for s in (1, 2)]
    rd = fake_run(tmp_path / "rd1", "addrop", 1, options={"attribution": "rd", "p": 0.3})
    assert group_runs([*ga, rd]) == {"addrop (attribution=ga)": ga, "addrop (attribution=rd)": [rd]}
    steps, values = validation_curve(runs[0], "mcc")
    assert steps.tolist() == [10, 20, 30] and values[0] == pytest.approx(0.32)


def test_a_long_title_wraps_inside_the_figure(runs, tmp_path, saved_figures):
    # a grid's curves are titled by their model (where it has several), task and what the band means: past
    # 75 characters the title ran over both edges of the figure
    title = (
        "SmolLM2-135M (4-bit GGUF, dequantized; offline), CoLA (full, 8,038 train): validation (carved from "
        "train), mean ± std over seeds"
    )
    convergence_figure({"none": runs[:3], "attendout": runs[3:]}, tmp_path / "x.png", title=title)
    (figure,) = saved_figures
    (ax,) = panels(figure)
    drawn = ax.title.get_text()
    assert "\n" in drawn and " ".join(drawn.split()) == title  # wrapped, every word kept
    box = ax.title.get_window_extent()  # where savefig drew it
    assert 0 <= box.x0 and box.x1 <= figure.bbox.width, (box, figure.bbox)


def test_convergence_figure_errors_name_the_problem(runs, tmp_path):
    odd = fake_run(tmp_path / "odd", "none", 1, steps=(15, 25))
    with pytest.raises(ValueError, match="group 'none': its runs share no evaluation step"):
        convergence_figure({"none": [runs[0], odd]}, tmp_path / "x.png")
    with pytest.raises(ValueError, match="validation records have no metric 'f1'; they have mcc, loss"):
        convergence_figure({"none": runs[:1]}, tmp_path / "x.png", metric="f1")
    with pytest.raises(ValueError, match="no AttendOut drop probabilities"):
        pattern_figure([runs[0]], tmp_path / "p.png")
    assert main(["plot", str(tmp_path / "missing")]) == 2


def test_pattern_panels_are_titled_by_task_differing_options_and_seed(tmp_path):
    low = fake_run(tmp_path / "a", "attendout", 1, options={"init_drop": 0.1, "generator_lr": 3e-3})
    high = fake_run(tmp_path / "b", "attendout", 1, options={"init_drop": 0.5, "generator_lr": 3e-3})
    same = fake_run(tmp_path / "c", "attendout", 2, options={"init_drop": 0.1, "generator_lr": 3e-3})
    assert panel_labels([low, high, same]) == [
        "cola, init_drop=0.1, seed 1",
        "cola, init_drop=0.5, seed 1",
        "cola, init_drop=0.1, seed 2",
    ]
    assert panel_labels([low, same]) == ["cola, seed 1", "cola, seed 2"]


def test_a_control_is_drawn_dashed_beside_its_run_and_final_rates_are_compared(tmp_path, saved_figures):
    """Runs and their noise controls (same task and seed): one panel per run with its control's layers
    dashed in the same colours, and a last panel of final rates per layer, runs vs controls."""
    runs = [fake_run(tmp_path / f"ao{s}", "attendout", s) for s in (1, 2)]
    controls = [
        fake_run(tmp_path / f"ctl{s}", "attendout", s, options={"reward_control": "noise"}) for s in (1, 2)
    ]
    for control in controls:  # the control's rates stay at 0.3
        lines = [json.loads(line) for line in (control / "log.jsonl").read_text().splitlines()]
        for record in lines:
            record.update({key: 0.3 for key in record if key.startswith("attendout/drop_prob/")})
        (control / "log.jsonl").write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    pattern_figure([*runs, *controls], tmp_path / "p.png")
    (figure,) = saved_figures
    axes = panels(figure)
    assert len(axes) == 3  # two runs (controls inside) and the comparison
    for ax in axes[:2]:
        labels = [line.get_label() for line in ax.lines]
        assert labels == ["L0", "L1", "L2", "L3", "L0 control", "L1 control", "L2 control", "L3 control"]
        solid, dashed = ax.lines[:4], ax.lines[4:]
        assert all(line.get_linestyle() == "--" for line in dashed)
        assert [line.get_color() for line in solid] == [line.get_color() for line in dashed]
        assert all(np.allclose(line.get_ydata(), 0.3) for line in dashed)
    run_bars, control_bars = axes[2].containers  # errorbar containers: (data line, caps, bars)
    assert run_bars.get_label() == "run (n=2)" and control_bars.get_label() == "noise control (n=2)"
    np.testing.assert_allclose(
        run_bars.lines[0].get_ydata(), [0.5 - 0.01 * 30 * (i + 1) / 3 for i in range(4)]
    )
    np.testing.assert_allclose(control_bars.lines[0].get_ydata(), 0.3)
    # a control without its run (another seed) keeps a panel of its own, and no comparison is drawn
    saved_figures.clear()
    pattern_figure([runs[0], controls[1]], tmp_path / "q.png")
    assert len(panels(saved_figures[0])) == 2


def overfitting_run(path, task_id: str, peak: int, epochs: int = 6):
    """A bench cell whose validation MCC peaks at epoch ``peak`` while the training loss keeps falling."""
    path.mkdir(parents=True)
    (path / "cell.json").write_text(json.dumps({"task": task_id}))
    (path / "results.json").write_text(json.dumps({"main_metric": "mcc"}))
    records = []
    for epoch in range(1, epochs + 1):
        for part in (0.5, 1.0):  # two training-loss lines an epoch; their mean is the epoch's loss
            records.append(
                {
                    "step": int(10 * (epoch - 1 + part)),
                    "epoch": epoch - 1 + part,
                    "loss": 1.0 / (epoch + part),
                }
            )
        mcc = 0.4 - 0.05 * abs(epoch - peak)
        records.append(
            {
                "step": 10 * epoch,
                "epoch": float(epoch),
                "validation": {"mcc": mcc, "loss": 0.5 + 0.1 * abs(epoch - peak)},
            }
        )
    (path / "log.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return path


def test_regime_curves_find_the_peak_and_the_plot_marks_the_grid_budget(tmp_path, capsys):
    from attendout.report.regime import epoch_curves

    early = overfitting_run(tmp_path / "a", "cola-500", peak=2)
    late = overfitting_run(tmp_path / "b", "sst2-500", peak=6)
    curves = epoch_curves(early)
    assert curves.epochs.tolist() == [1, 2, 3, 4, 5, 6] and curves.best == 1 and curves.overfits
    assert curves.train_loss[0] == pytest.approx((1 / 1.5 + 1 / 2) / 2)  # epoch 1's two lines, not epoch 2's
    assert not epoch_curves(late).overfits  # still climbing at the end of its budget
    experiment = tmp_path / "grid.toml"
    experiment.write_text(
        '[experiment]\nname = "grid"\nseeds = [1]\n[training]\nepochs = 3\n'
        '[[models]]\nname = "minilm"\n[[tasks]]\nid = "cola-500"\nname = "cola"\nepochs = 5\n'
        '[[methods]]\nname = "none"\n'
    )
    out = tmp_path / "figures"
    assert (
        main(["plot", "--regime", str(early), str(late), "--budgets", str(experiment), "--out-dir", str(out)])
        == 0
    )
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("cola-500: validation mcc best 0.400 at epoch 2, 0.200 at the last (6)")
    assert printed[0].endswith("grid budget 5 epochs")
    assert printed[1].endswith("NOT overfitting within this budget") and "grid budget" not in printed[1]
    assert (out / "regime.png").read_bytes().startswith(PNG)
    with pytest.raises(SystemExit):
        main(["plot", str(early), "--budgets", str(experiment), "--out-dir", str(out)])
