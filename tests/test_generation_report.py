"""The generation kinds in the comparison machinery: perplexity is lower-is-better in ``attendout table``
(best mark, Δ, "better"), in ``advise`` (the study's direction, the search's best, the regime's peak,
the verdict), and BLEU's bootstrap rescores resamples as sacrebleu does. Result files written by hand;
nothing trains."""

from __future__ import annotations

import csv
import io
import json

import numpy as np
import optuna
import pytest

from attendout.advise import verdict
from attendout.advise.confirm import Confirmation, ConfirmRow
from attendout.advise.objective import study_direction
from attendout.advise.regime import read_regime
from attendout.advise.search import _study, search_results
from attendout.advise.storage import open_storage
from attendout.bench import Budget, ResultsStore, load_experiment
from attendout.config import TrainConfig
from attendout.report.comparison import build_table
from attendout.report.regime import EpochCurves
from attendout.report.render import to_csv, to_markdown
from attendout.report.stats import bootstrap_difference
from attendout.tasks.textmetrics import bleu
from search_plans import search_plan

optuna.logging.set_verbosity(optuna.logging.WARNING)

EXPERIMENT = """
[experiment]
name = "lm-grid"
seeds = [1, 2, 3]
data_seed = 0

[training]
model_init = "scratch"
vocab_size = 2000
max_steps = 30

[[models]]
id = "gpt2"
name = "gpt2"

[[tasks]]
id = "lm"
name = "movie-reviews-lm"
label = "Movie reviews LM"
splits = ["dev"]

[[methods]]
name = "none"

[[methods]]
id = "dense"
name = "synthesizer"
options = { variant = "dense", init = "paper" }
"""
#: dev perplexity per method and seed: dense is lower (better) by about 10 on every seed
PERPLEXITY = {"none": {1: 150.0, 2: 152.0, 3: 149.0}, "dense": {1: 140.5, 2: 141.0, 3: 139.8}}


@pytest.fixture
def lm_grid(tmp_path):
    path = tmp_path / "lm-grid.toml"
    path.write_text(EXPERIMENT)
    experiment = load_experiment(path)
    store = ResultsStore(tmp_path / "results")
    store.prepare(experiment, Budget())
    for cell in experiment.cells():
        folder = store.cell_dir(cell)
        folder.mkdir(parents=True)
        value = PERPLEXITY[cell.method.id][cell.seed]
        results = {
            "main_metric": "perplexity",
            "eval": {"dev": {"perplexity": value, "tokens": 41234}},
            "data_source": "hand-written",
        }
        (folder / "results.json").write_text(json.dumps(results))
        config = {"config": {"max_steps": 30, "batch_size": 16, "learning_rate": 1e-3, "max_length": 64}}
        (folder / "config.json").write_text(json.dumps({**config, "total_steps": 30, "sizes": {"train": 9}}))
        log = [{"step": s, "validation": {"perplexity": value * (1 + 1 / s)}} for s in (10, 20, 30)]
        (folder / "log.jsonl").write_text("\n".join(map(json.dumps, log)) + "\n")
        (folder / "cell.json").write_text(json.dumps({"fingerprint": cell.fingerprint, "wall_time_s": 5.0}))
    return {"path": path, "experiment": experiment, "root": store.root, "tmp": tmp_path}


def test_the_table_marks_the_lower_perplexity_as_better_and_gives_a_negative_delta(lm_grid):
    table = build_table(lm_grid["experiment"], lm_grid["root"], n_resamples=50)
    none, dense = (table.row("gpt2", "lm", "dev", m) for m in ("none", "dense"))
    assert none.metric == dense.metric == "perplexity"
    assert table.best("gpt2", "lm", "dev") is dense  # the lower mean
    c = dense.comparison
    expected = np.mean([PERPLEXITY["dense"][s] - PERPLEXITY["none"][s] for s in (1, 2, 3)])
    assert c.test.mean == pytest.approx(expected) and c.test.mean < 0  # method minus baseline
    assert c.gain == pytest.approx(-expected) and c.gain > 0 and c.better() is True
    assert c.bootstrap is None and c.note == "no stored predictions"  # an LM writes none

    markdown = to_markdown(table)
    assert "| method | Movie reviews LM dev (perplexity ↓) |" in markdown
    assert "perplexity as it is, lower is better" in markdown  # not ×100
    dense_line = next(line for line in markdown.splitlines() if line.startswith("| dense |"))
    assert f"**{dense.mean:.1f} ± {dense.std:.1f}**" in dense_line and f"(Δ {expected:+.1f}" in dense_line
    none_line = next(line for line in markdown.splitlines() if line.startswith("| none |"))
    assert "**" not in none_line
    difference = next(
        line for line in markdown.splitlines() if line.startswith("| Movie reviews LM | dev | dense")
    )
    assert f"| {expected:+.1f}" in difference and "| better |" in difference
    rows = {r["method"]: r for r in csv.DictReader(io.StringIO(to_csv(table)))}
    assert rows["dense"]["higher_is_better"] == "False" and rows["dense"]["better"] == "better"
    assert float(rows["dense"]["diff"]) == pytest.approx(expected, rel=1e-5)


def test_the_table_command_and_its_figures_on_perplexity(lm_grid, capsys):
    from attendout.cli import main

    out = lm_grid["tmp"] / "report"
    args = ["table", str(lm_grid["path"]), "--results", str(lm_grid["root"]), "--out", str(out)]
    assert main(args + ["--bootstrap", "50"]) == 0
    for name in ("table.md", "table.csv", "bars.png", "deltas.png", "curves-gpt2-lm.png"):
        assert (out / name).stat().st_size > 0, name


def test_fractions_are_shown_x100_and_generation_metrics_as_they_are():
    from attendout.report.comparison import metric_scale
    from attendout.report.render import format_value as _val

    assert metric_scale("bleu") == metric_scale("perplexity") == 1 and metric_scale("mcc") == 100
    assert (
        _val(0.25, "mcc") == "25.0"
        and _val(27.3, "bleu") == "27.3"
        and _val(-3.0, "perplexity", True) == "-3.0"
    )


def test_advise_minimises_perplexity_and_takes_the_lowest_trial(tmp_path):
    assert study_direction("perplexity") == "minimize" and study_direction("loss") == "minimize"
    assert study_direction("bleu") == study_direction("mcc") == "maximize"
    plan = search_plan(
        base=TrainConfig(task="movie-reviews-lm", model="gpt2", model_init="scratch"),
        out=tmp_path,
        storage=f"sqlite:///{tmp_path / 'search.db'}",
        methods=("attn-dropout",),
        epochs=3,
        steps_per_epoch=10,
        metric="perplexity",
        progress=False,
    )
    study = _study(plan, open_storage(plan.study.storage_url), "attn-dropout")
    assert study.direction == optuna.study.StudyDirection.MINIMIZE
    for p, value in ((0.1, 150.0), (0.2, 120.0), (0.3, 180.0)):
        trial = study.ask()
        trial.set_user_attr("options", {"p": p})
        study.tell(trial, value)
    best = search_results(plan)["attn-dropout"]
    assert best.value == 120.0 and best.options == {"p": 0.2}


def test_the_regime_of_a_perplexity_curve_peaks_at_its_lowest():
    # validation perplexity falls to its lowest at epoch 4 and climbs again: that is overfitting
    values = [400.0, 200.0, 150.0, 140.0, 150.0, 170.0]
    curves = EpochCurves(
        metric="perplexity",
        epochs=np.arange(1.0, 7.0),
        validation=np.array(values),
        validation_loss=np.log(values),
        train_epochs=np.arange(1.0, 7.0),
        train_loss=np.linspace(6.0, 3.0, 6),
    )
    assert curves.best == 3
    reading = read_regime(curves)
    assert reading.best_epoch == 4 and reading.overfits and reading.best_score == 140.0
    assert reading.budget == 5  # ceil(1.5 x 4) + 1 = 7, more than the 6 epochs run: the odd 5


def _row(method: str, delta: float, p_holm: float) -> ConfirmRow:
    return ConfirmRow(
        method=method,
        options={"p": 0.1},
        setting="p = 0.1",
        seeds=5,
        mean=150.0 + delta,
        baseline_mean=150.0,
        delta=delta,
        sd=1.0,
        p=p_holm / 2,
        p_holm=p_holm,
        t_low=delta - 1.5,
        t_high=delta + 1.5,
        boot_low=None,
        boot_high=None,
        cost=1.1,
    )


def _confirmation(rows) -> Confirmation:
    return Confirmation(
        split="test",
        metric="perplexity",
        seeds=(1, 2, 3, 4, 5),
        rows=rows,
        baseline_seeds=5,
        detectable=2.5,
        detectable_alpha=2.0,
        table=None,
    )


def test_a_confirmed_fall_in_perplexity_is_a_gain_and_a_rise_is_not():
    v = verdict(_confirmation([_row("attn-dropout", -4.0, 0.01), _row("drophead", 6.0, 0.001)]))
    assert v.winner is not None and v.winner.method == "attn-dropout"  # the rise is significant, not a gain
    assert v.sentence.startswith(
        "Use attn-dropout at p = 0.1: perplexity -4.0 ± 1.5 against plain fine-tuning"
    )
    assert "lower is better" in v.sentence
    # two gains: the larger fall wins
    v = verdict(_confirmation([_row("attn-dropout", -4.0, 0.01), _row("drophead", -7.0, 0.02)]))
    assert v.winner.method == "drophead"
    # only a significant rise: no winner; the closest is the one that rose least
    rows = [_row("attn-dropout", 1.0, 0.5), _row("drophead", 6.0, 0.001)]
    # a user who cares about a 5% fall: 2.5 at 150 is fine grain
    v = verdict(_confirmation(rows), detect=0.05)
    assert v.winner is None and "The closest, attn-dropout" in v.sentence
    assert "a true fall of 2.5 in perplexity or more would have been detected" in v.sentence
    # perplexity's --detect is a share: one who cares about a 1% fall (1.5 at 150) could not have seen it
    v = verdict(_confirmation(rows), detect=0.01)
    assert v.sentence.startswith("Cannot answer: this design cannot detect") and not v.answered


def test_bleu_bootstrap_rescores_each_resample_as_sacrebleu():
    rng = np.random.default_rng(0)
    words = "a the cat dog sat on mat ran blue house".split()
    refs = np.array([" ".join(rng.choice(words, 7)) for _ in range(60)])

    def noisy(keep: float) -> np.ndarray:
        return np.array(
            [" ".join(w if rng.random() < keep else rng.choice(words) for w in r.split()) for r in refs]
        )

    a, b = [noisy(0.9), noisy(0.9)], [noisy(0.6), noisy(0.6)]
    fast = bootstrap_difference("bleu", refs, a, b, n_resamples=40, seed=1)
    slow = bootstrap_difference(bleu, refs, a, b, n_resamples=40, seed=1)  # sacrebleu on every resample
    assert fast.estimate == pytest.approx(
        np.mean([bleu(p, refs) for p in a]) - np.mean([bleu(p, refs) for p in b])
    )
    assert fast.estimate > 0 and fast.low < fast.estimate < fast.high
    assert fast.se == pytest.approx(slow.se, rel=0.5)  # other draws (weights vs indices), the same spread


def test_a_method_option_at_its_neutral_value_leaves_the_fingerprint_alone():
    """Published cells stay done when a method gains an option (cross_attention, off as before)."""
    import dataclasses
    import hashlib

    from attendout.bench import spec

    config = TrainConfig(
        task="cola", model="minilm", method="synthesizer", method_options={"variant": "dense"}
    )
    data = {
        k: v
        for k, v in config.to_dict().items()
        if k not in spec.FINGERPRINT_EXCLUDE
        and not (k in spec.FINGERPRINT_NEUTRAL and v == spec.FINGERPRINT_NEUTRAL[k])
    }
    assert data["method_options"].pop("cross_attention") is False
    # issue 50's options, unset for a dense synthesizer (no mixture, no random matrix)
    assert data["method_options"].pop("mixing") is None and data["method_options"].pop("random_init") is None
    before = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]
    assert spec.config_fingerprint(config) == before
    other = dataclasses.replace(config, method_options={"variant": "random"})
    assert spec.config_fingerprint(other) != before
