"""attendout table: the statistics against hand-computed values, and the table of a synthetic grid."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from attendout.bench import Budget, ResultsStore, load_experiment
from attendout.cli import main
from attendout.report.comparison import build_table, majority_floor
from attendout.report.render import to_csv, to_markdown
from attendout.report.stats import bootstrap_difference, detectable_difference, holm, paired_t_test, pooled_sd
from attendout.tasks.metrics import accuracy, f1, mcc
from conftest import panels

# --------------------------------------------------------------------------------------------------
# Statistics


def test_paired_t_test_matches_scipy():
    rng = np.random.default_rng(0)
    for n in (2, 3, 5, 10):
        a, b = rng.normal(0.3, 0.02, n), rng.normal(0.29, 0.02, n)
        ours = paired_t_test(a, b)
        theirs = stats.ttest_rel(a, b)
        assert ours.t == pytest.approx(theirs.statistic, rel=1e-12)
        assert ours.p == pytest.approx(theirs.pvalue, rel=1e-12)
        assert ours.mean == pytest.approx(np.mean(a - b)) and ours.n == n
    # by hand: d = (0.02, 0.01, 0.03): mean 0.02, sd 0.01, t = 0.02 / (0.01 / sqrt 3) = 2 sqrt 3
    test = paired_t_test([0.32, 0.31, 0.33], [0.30, 0.30, 0.30])
    assert test.t == pytest.approx(2 * np.sqrt(3)) and test.p == pytest.approx(
        2 * stats.t.sf(2 * np.sqrt(3), 2)
    )
    # its 95% interval: scipy's t interval of the mean difference, and none from one pair
    low, high = stats.t.interval(0.95, 2, loc=0.02, scale=0.01 / np.sqrt(3))
    assert test.half_interval() == pytest.approx((high - low) / 2, rel=1e-12)
    assert np.isnan(paired_t_test([0.5], [0.4]).half_interval())
    assert np.isnan(paired_t_test([0.5], [0.4]).p)  # one pair: no test
    assert np.isnan(paired_t_test([0.5, 0.6], [0.4, 0.5]).p)  # identical differences: no spread


def test_holm_on_a_known_example():
    # sorted: 0.005, 0.01, 0.03, 0.04 (m = 4) -> 4 x 0.005 = 0.02, 3 x 0.01 = 0.03, 2 x 0.03 = 0.06,
    # max(0.06, 1 x 0.04) = 0.06; back in input order:
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # NaN is not a test: m = 2 here; values are capped at 1
    out = holm([0.04, float("nan"), 0.6])
    assert out[0] == pytest.approx(0.08) and np.isnan(out[1]) and out[2] == pytest.approx(0.6)
    assert holm([0.5, 0.7]) == pytest.approx([1.0, 1.0])


def test_bootstrap_interval_contains_the_true_difference():
    rng = np.random.default_rng(1)
    n = 800
    labels = rng.integers(0, 2, n)

    def runs(correct: float, seeds: int) -> list[np.ndarray]:
        return [np.where(rng.random(n) < correct, labels, 1 - labels) for _ in range(seeds)]

    interval = bootstrap_difference("accuracy", labels, runs(0.85, 3), runs(0.78, 3), seed=0)
    assert interval.low < 0.07 < interval.high  # the population difference of accuracies
    assert interval.high - interval.low < 0.08
    # coverage over many synthetic dev sets is close to the nominal 95%
    hits = 0
    for _ in range(150):
        labels = rng.integers(0, 2, 300)
        a = [np.where(rng.random(300) < 0.85, labels, 1 - labels) for _ in range(2)]
        b = [np.where(rng.random(300) < 0.80, labels, 1 - labels) for _ in range(2)]
        ci = bootstrap_difference("accuracy", labels, a, b, n_resamples=300, seed=int(rng.integers(1 << 30)))
        hits += ci.low <= 0.05 <= ci.high
    assert hits / 150 >= 0.88


def test_bootstrap_confusion_shortcut_equals_scoring_each_resample():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 3, 200)  # three classes
    a = [np.where(rng.random(200) < 0.7, labels, rng.integers(0, 3, 200)) for _ in range(2)]
    b = [np.where(rng.random(200) < 0.6, labels, rng.integers(0, 3, 200)) for _ in range(2)]
    for name, fn in (("accuracy", accuracy), ("f1", f1), ("mcc", mcc)):
        fast = bootstrap_difference(name, labels, a, b, n_resamples=200, seed=3)
        slow = bootstrap_difference(fn, labels, a, b, n_resamples=200, seed=3)
        assert (fast.low, fast.high, fast.estimate) == pytest.approx(
            (slow.low, slow.high, slow.estimate), abs=1e-12
        )
        assert fast.estimate == pytest.approx(
            np.mean([fn(p, labels) for p in a]) - np.mean([fn(p, labels) for p in b])
        )


def test_detectable_difference_has_the_stated_power():
    # many seeds: the normal approximation (z_0.975 + z_0.8) sd / sqrt(n)
    assert detectable_difference(1.0, 2000) == pytest.approx(2.8016 / np.sqrt(2000), rel=2e-3)
    # few seeds: check the power by simulation
    n, sd = 5, 0.01
    delta = detectable_difference(sd, n)
    rng = np.random.default_rng(4)
    d = rng.normal(delta, sd, size=(20000, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
    assert np.mean(np.abs(t) > stats.t.ppf(0.975, n - 1)) == pytest.approx(0.8, abs=0.015)
    assert detectable_difference(sd, 3) > delta > detectable_difference(sd, 10)  # more seeds, finer
    assert np.isnan(detectable_difference(sd, 1))
    assert pooled_sd([0.01, 0.03], [3, 3]) == pytest.approx(np.sqrt((0.01**2 + 0.03**2) / 2))


# --------------------------------------------------------------------------------------------------
# The table of a synthetic grid (result files written by hand, no training)

EXPERIMENT = """
[experiment]
name = "synthetic"
seeds = [1, 2, 3]
data_seed = 0
description = "A synthetic grid"

[training]
epochs = 2

[[models]]
id = "m"
name = "minilm"
label = "MiniLM"

[[tasks]]
id = "cola"
name = "cola"
label = "CoLA"
splits = ["dev", "dev_ood"]

[[methods]]
name = "none"

[[methods]]
name = "scores-dropout"
options = { p = 0.1 }

[[methods]]
name = "attn-dropout"

[[methods]]
name = "future-method"
"""
ACCURACY = {"none": 0.70, "scores-dropout": 0.78, "attn-dropout": 0.70}
SIZES = {"dev": 240, "dev_ood": 180}


def write_cell(
    store: ResultsStore, cell, rng: np.random.Generator, labels: dict, fingerprint: str | None = None
):
    folder = store.cell_dir(cell)
    (folder / "predictions").mkdir(parents=True)
    evals = {}
    for split, y in labels.items():
        pred = np.where(rng.random(len(y)) < ACCURACY[cell.method.id], y, 1 - y)
        evals[split] = {"mcc": mcc(pred, y), "accuracy": float((pred == y).mean())}
        lines = [
            json.dumps({"index": i, "prediction": int(p), "label": int(t)})
            for i, (p, t) in enumerate(zip(pred, y, strict=True))
        ]
        (folder / "predictions" / f"{split}.jsonl").write_text("\n".join(lines) + "\n")
    results = {
        "main_metric": "mcc",
        "eval": evals,
        "data_source": "synthetic",
        "model_description": "a model",
    }
    (folder / "results.json").write_text(json.dumps(results))
    config = {
        "config": {
            "epochs": 2.0,
            "batch_size": 32,
            "learning_rate": 5e-5,
            "max_length": 128,
            "eval_steps": 10,
        },
        "sizes": {"train": 1000, "validation": 100, **SIZES},
        "total_steps": 30,
        "hardware": {"machine": "x86_64", "cpus": 2, "threads": 2},
    }
    (folder / "config.json").write_text(json.dumps(config))
    log = [{"step": s, "validation": {"mcc": 0.1 * s / 10 + 0.01 * cell.seed}} for s in (10, 20, 30)]
    (folder / "log.jsonl").write_text("\n".join(map(json.dumps, log)) + "\n")
    record = {"fingerprint": fingerprint or cell.fingerprint, "wall_time_s": 60.0, "seed": cell.seed}
    (folder / "cell.json").write_text(json.dumps(record))


@pytest.fixture
def grid(tmp_path):
    path = tmp_path / "synthetic.toml"
    path.write_text(EXPERIMENT)
    experiment = load_experiment(path)
    store = ResultsStore(tmp_path / "results")
    store.prepare(experiment, Budget())
    rng = np.random.default_rng(0)
    labels = {split: rng.integers(0, 2, n) for split, n in SIZES.items()}
    for cell in experiment.cells():
        if cell.runnable and cell.key != "m/cola/attn-dropout/seed-3":
            write_cell(store, cell, rng, labels)
    stale = next(c for c in experiment.cells() if c.key == "m/cola/attn-dropout/seed-3")
    write_cell(store, stale, rng, labels, fingerprint="an-older-config")
    return {"path": path, "experiment": experiment, "root": store.root, "tmp": tmp_path}


def test_table_statistics_of_a_synthetic_grid(grid):
    table = build_table(grid["experiment"], grid["root"], n_resamples=400)
    assert table.status == {"done": 8, "stale": 1, "invalid": 3}
    base = table.row("m", "cola", "dev", "none")
    values = np.array([base.values[s] for s in (1, 2, 3)])
    assert base.mean == pytest.approx(values.mean()) and base.std == pytest.approx(values.std(ddof=1))
    row = table.row("m", "cola", "dev", "scores-dropout")
    a = [row.values[s] for s in (1, 2, 3)]
    assert row.comparison.test.p == pytest.approx(stats.ttest_rel(a, values).pvalue)
    stale_row = table.row("m", "cola", "dev", "attn-dropout")
    assert sorted(stale_row.values) == [1, 2] and stale_row.comparison.test.n == 2  # the stale seed is out
    tests = [r.comparison for r in table.rows if r.comparison is not None]
    assert len(tests) == 4 and table.family_size == 4
    assert [c.p_holm for c in tests] == pytest.approx(list(holm([c.test.p for c in tests])))
    assert row.comparison.bootstrap.low < row.comparison.test.mean < row.comparison.bootstrap.high
    assert table.row("m", "cola", "dev", "future-method").invalid.startswith(
        "unknown method 'future-method'; "
    )
    detectable = {d.split: d for d in table.detectable}
    assert set(detectable) == {"dev", "dev_ood"} and detectable["dev_ood"].n_examples == 180
    assert detectable["dev"].at_holm_first_step > detectable["dev"].at_alpha > 0  # m = 6 planned comparisons

    markdown = to_markdown(table)
    assert "| method | CoLA dev (mcc) | CoLA dev_ood (mcc) |" in markdown  # out-of-domain beside in-domain
    assert "One data seed (0) for the whole grid" in markdown and "No option was tuned on dev" in markdown
    assert "Holm-corrected over the 4 comparisons" in markdown and "1 stale" in markdown
    assert f"{100 * base.mean:.1f} ± {100 * base.std:.1f}" in markdown
    rows = list(csv.DictReader(io.StringIO(to_csv(table))))
    assert len(rows) == 8  # 2 splits x 4 methods
    first = next(r for r in rows if r["method"] == "scores-dropout" and r["split"] == "dev")
    assert float(first["p"]) == pytest.approx(row.comparison.test.p, rel=1e-5)


def test_the_table_compares_another_stored_metric_when_asked(grid):
    """`attendout table --metric accuracy`: the same runs, their stored accuracy, the bootstrap re-scoring
    accuracy from the stored predictions (a translation grid's chrF beside its BLEU, in the same way)."""
    table = build_table(grid["experiment"], grid["root"], n_resamples=200, metric="accuracy")
    row = table.row("m", "cola", "dev", "scores-dropout")
    assert row.metric == "accuracy"
    runs = [r for r in table.runs.values() if r.cell.method.id == "scores-dropout"]
    assert sorted(row.values.values()) == sorted(r.results["eval"]["dev"]["accuracy"] for r in runs)
    assert row.comparison.bootstrap.low < row.comparison.test.mean < row.comparison.bootstrap.high
    assert "| method | CoLA dev (accuracy) | CoLA dev_ood (accuracy) |" in to_markdown(table)
    default = build_table(grid["experiment"], grid["root"], n_resamples=10)
    assert default.row("m", "cola", "dev", "none").metric == "mcc"


class StoredLabels:
    """Stands in for a finished run: only its stored predictions of one split matter here."""

    def __init__(self, labels):
        self.labels = np.asarray(labels)

    def predictions(self, split):
        return (np.zeros_like(self.labels), self.labels) if split == "dev" else None


def test_the_majority_floor_is_the_score_of_always_predicting_the_commonest_label(grid):
    mostly_positive = [StoredLabels([1] * 70 + [0] * 30)]
    assert majority_floor(mostly_positive, "dev", "accuracy") == pytest.approx(0.7)
    assert majority_floor(mostly_positive, "dev", "f1") == pytest.approx(
        2 * 0.7 / 1.7
    )  # precision 0.7, recall 1
    assert majority_floor(mostly_positive, "dev", "mcc") == 0.0
    assert (
        majority_floor([StoredLabels([0] * 60 + [1] * 40)], "dev", "f1") == 0.0
    )  # never predicts the positive
    assert majority_floor([StoredLabels([0.5, 3.2, 4.0])], "dev", "pearson") is None  # regression
    assert majority_floor(mostly_positive, "dev_ood", "accuracy") is None  # no stored predictions

    table = build_table(grid["experiment"], grid["root"], n_resamples=100)
    assert table.floor("m", "cola", "dev") == 0.0 and table.floor("m", "cola", "dev_ood") == 0.0
    assert "| *majority class* (always the most frequent label: the floor) | *0.0* | *0.0* |" in to_markdown(
        table
    )
    assert {r["majority"] for r in csv.DictReader(io.StringIO(to_csv(table)))} == {"0"}


def test_table_command_writes_markdown_csv_and_figures(grid, capsys, saved_figures):
    out = grid["tmp"] / "report"
    args = [
        "table",
        str(grid["path"]),
        "--results",
        str(grid["root"]),
        "--out",
        str(out),
        "--bootstrap",
        "200",
    ]
    assert main(args) == 0
    for name in ("table.md", "table.csv", "bars.png", "deltas.png", "curves-m-cola.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    text = (out / "table.md").read_text()
    assert "![bar chart](bars.png)" in text and "](curves-m-cola.png)" in text and "](deltas.png)" in text
    bars, deltas, curves = saved_figures
    # a panel per split; in each a bar per method with finished cells, as high as its mean x 100, the
    # baseline's mean as a dashed line and the majority class (MCC 0) as a dotted one
    table = build_table(grid["experiment"], grid["root"], n_resamples=10)
    assert [ax.get_title() for ax in panels(bars)] == ["CoLA dev", "CoLA dev_ood"]
    for ax, split in zip(panels(bars), ("dev", "dev_ood"), strict=True):
        methods = ("none", "scores-dropout", "attn-dropout")
        expected = [100 * table.row("m", "cola", split, method).mean for method in methods]
        np.testing.assert_allclose([bar.get_height() for bar in ax.patches], expected)
        lines = {
            line.get_linestyle(): line.get_ydata()[0] for line in ax.lines if line.get_linestyle() != "None"
        }
        assert lines == pytest.approx({"--": expected[0], ":": 0.0})
    # differences: a panel per split, a row per method other than none; its dot at the paired mean x 100,
    # its thick bar the t-interval over seeds around it, its thin bar the bootstrap interval
    assert [ax.get_title() for ax in panels(deltas)] == ["CoLA dev", "CoLA dev_ood"]
    for ax, split in zip(panels(deltas), ("dev", "dev_ood"), strict=True):
        comparisons = [
            table.row("m", "cola", split, m).comparison for m in ("scores-dropout", "attn-dropout")
        ]
        dots = [line for line in ax.lines if line.get_marker() == "o"]
        np.testing.assert_allclose([d.get_xdata()[0] for d in dots], [100 * c.test.mean for c in comparisons])
        for dot, comparison in zip(dots, comparisons, strict=True):
            bars_at = [
                line.get_xdata()
                for line in ax.lines
                if line.get_linewidth() == 4 and line.get_ydata()[0] == dot.get_ydata()[0]
            ]
            ((low, high),) = bars_at  # the t-interval (n >= 2), centred on the mean
            assert low < dot.get_xdata()[0] < high and (low + high) / 2 == pytest.approx(
                100 * comparison.test.mean
            )
        zero = [line for line in ax.lines if line.get_linestyle() == "--"]
        assert len(zero) == 1 and list(zero[0].get_xdata()) == [0.0, 0.0]
    # validation curves: one panel, a line per method over the logged steps
    (ax,) = panels(curves)
    assert [line.get_label() for line in ax.lines] == [
        "none (n=3)",
        "scores-dropout (n=3)",
        "attn-dropout (n=2)",
    ]
    assert all(line.get_xdata().tolist() == [10, 20, 30] for line in ax.lines)
    assert main(["table", str(grid["path"]), "--results", str(grid["root"]), "--bootstrap", "100"]) == 0
    assert "## Differences against none" in capsys.readouterr().out  # no output file: Markdown on stdout
    assert main(["table", str(grid["path"]), "--results", str(Path(grid["tmp"]) / "nowhere")]) == 2


def test_a_task_without_finished_cells_is_named_by_its_metric_and_gets_no_empty_panel(
    grid, capsys, saved_figures
):
    """MRPC added to the grid with no cell run: its column says f1 (from the task registry), the bar
    chart has the same panels as without it (no empty panel)."""
    before = grid["tmp"] / "before.png"
    assert main(["table", str(grid["path"]), "--results", str(grid["root"]), "--bar-chart", str(before)]) == 0
    with_mrpc = grid["tmp"] / "with-mrpc.toml"
    text = (
        grid["path"]
        .read_text()
        .replace(
            '[[methods]]\nname = "none"',
            '[[tasks]]\nid = "mrpc"\nname = "mrpc"\nlabel = "MRPC"\n\n[[methods]]\nname = "none"',
            1,
        )
    )
    with_mrpc.write_text(text)
    after = grid["tmp"] / "after.png"
    capsys.readouterr()
    assert main(["table", str(with_mrpc), "--results", str(grid["root"]), "--bar-chart", str(after)]) == 0
    assert "MRPC dev (f1)" in capsys.readouterr().out
    without, with_mrpc = saved_figures
    titles = [ax.get_title() for ax in panels(with_mrpc)]
    assert titles == [ax.get_title() for ax in panels(without)] == ["CoLA dev", "CoLA dev_ood"]
    assert len(with_mrpc.axes) == len(without.axes)  # no hidden spare panel either


def test_bar_colours_are_distinct_and_only_the_baseline_is_grey():
    from attendout.report.figures import BASELINE_COLOUR, method_colour

    colours = [method_colour(n, is_baseline=False) for n in range(9)]
    assert len(set(colours)) == 9 and BASELINE_COLOUR not in colours and "C7" not in colours
    assert method_colour(3, is_baseline=True) == BASELINE_COLOUR
