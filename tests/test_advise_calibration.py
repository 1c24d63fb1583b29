"""advise's statistics, calibrated by simulation: thousands of simulated studies with planted effects and
the seed noise of real fine-tuning, no training (seconds).

The noise is the regime grid's (results/regime, the offline MiniLM, 5 seeds, 8 methods against plain
fine-tuning): the standard deviation of one seed's paired difference, method minus plain, was 0.020 MCC
on CoLA-500's dev (median over the methods; 0.018 accuracy on SST-2-500's, 0.039 MCC on CoLA-2,000's),
and 0.028 MCC on CoLA-500's validation split, where the search scores its trials. Each study is drawn
as real runs are: a plain run and each method's run at a seed share that seed's part (head
initialisation, batch order), which the paired difference cancels, and each run adds its own.

Each test prints what it measured (run pytest with -s to see the lines; they are also in the failure
message).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from attendout.advise.answer import seeds_needed
from attendout.advise.objective import SearchNoise, chance_to_find, search_noise
from attendout.advise.search import MethodSearch, SearchPlan
from attendout.report.stats import detectable_difference, holm, paired_t_test

#: one seed's paired difference on the evaluation split (CoLA-500 dev, MCC; see the module docstring)
SD_DEV = 0.020
#: the same on the validation split the search scores trials on (CoLA-500)
SD_VALIDATION = 0.028
#: a seed's share of a run's score, common to every method at that seed (cancels in a difference)
SD_SEED = 0.015
STUDIES = 4000
ALPHA = 0.05


def simulated_confirmations(rng, effects, seeds=5, studies=STUDIES, sd=SD_DEV):
    """Per study, the p-values (raw, Holm-adjusted) of each method against plain fine-tuning over ``seeds``
    seeds, from runs drawn as seed share + own noise (+ the method's planted effect)."""
    m = len(effects)
    run_sd = sd / math.sqrt(2)  # a difference of two runs' own noise has sd ``sd``
    raw = np.empty((studies, m))
    adjusted = np.empty((studies, m))
    for k in range(studies):
        shared = rng.normal(0.0, SD_SEED, seeds)
        plain = 0.10 + shared + rng.normal(0.0, run_sd, seeds)
        p = []
        for effect in effects:
            method = 0.10 + effect + shared + rng.normal(0.0, run_sd, seeds)
            p.append(paired_t_test(method, plain).p)
        raw[k] = p
        adjusted[k] = holm(p)
    return raw, adjusted


def report(line: str) -> str:
    print(line)
    return line


def monte_carlo_se(rate: float, n: int = STUDIES) -> float:
    return math.sqrt(max(rate * (1 - rate), 1e-4) / n)


def test_the_confirmations_family_wise_false_positive_rate_is_at_most_alpha_under_holm():
    """Five methods without any effect, five seeds: Holm keeps the chance of any false 'use it' <= alpha."""
    rng = np.random.default_rng(0)
    raw, adjusted = simulated_confirmations(rng, effects=[0.0] * 5)
    fwer = float(np.mean((adjusted < ALPHA).any(axis=1)))
    unadjusted_any = float(np.mean((raw < ALPHA).any(axis=1)))  # the same studies without Holm
    line = report(
        f"family-wise false-positive rate, 5 null methods x 5 seeds, {STUDIES} studies: Holm {fwer:.4f} "
        f"(alpha {ALPHA}); without Holm {unadjusted_any:.3f}"
    )
    assert fwer <= ALPHA + 3 * monte_carlo_se(ALPHA), line
    assert unadjusted_any > 2 * ALPHA, line  # the family really needs the correction: the test can fail


@pytest.mark.parametrize("methods", [1, 5])
def test_the_printed_detectable_difference_is_detected_with_about_80_percent_power(methods):
    """A gain planted at the detectable difference advise prints (Holm's strictest level, alpha / m) is
    confirmed in about 80% of studies: at least 80% (Holm's later steps are laxer), not much more."""
    rng = np.random.default_rng(1)
    planted = detectable_difference(SD_DEV, 5, ALPHA / methods)
    _, adjusted = simulated_confirmations(rng, effects=[planted] + [0.0] * (methods - 1))
    power = float(np.mean(adjusted[:, 0] < ALPHA))
    line = report(
        f"power at the printed detectable difference ({100 * planted:.2f} points, sd {100 * SD_DEV:.1f}, "
        f"5 seeds, Holm over {methods}): {power:.3f} over {STUDIES} studies"
    )
    tolerance = 3 * monte_carlo_se(0.8)
    assert 0.8 - tolerance <= power <= 0.8 + 0.05, line
    # half the planted gain is detected far less often: the number means what it says
    _, half = simulated_confirmations(rng, effects=[planted / 2] + [0.0] * (methods - 1), studies=1000)
    assert float(np.mean(half[:, 0] < ALPHA)) < 0.5, line


def test_seeds_auto_reaches_its_power_at_the_count_it_chooses():
    """--seeds auto asks for the fewest seeds that detect +2 points at the measured noise; at that count
    a planted +2 is confirmed about 80% of the time, at one seed fewer less often."""
    rng = np.random.default_rng(2)
    n = seeds_needed(SD_DEV, 0.02, ALPHA, 3)
    _, adjusted = simulated_confirmations(rng, effects=[0.02, 0.0, 0.0], seeds=n, studies=2000)
    power = float(np.mean(adjusted[:, 0] < ALPHA))
    _, fewer = simulated_confirmations(rng, effects=[0.02, 0.0, 0.0], seeds=n - 1, studies=2000)
    power_fewer = float(np.mean(fewer[:, 0] < ALPHA))
    line = report(
        f"seeds auto: {n} seeds for +2 points (sd 2.0, Holm over 3): power {power:.3f}; {n - 1}: {power_fewer:.3f}"
    )
    assert power >= 0.8 - 3 * monte_carlo_se(0.8, 2000), line
    assert power_fewer < power, line


def simulated_search(rng, truth, seeds, sd):
    """One method's search over ``truth`` (one true gain per tried setting): each trial's per-seed paired
    differences (what OBJECTIVES['delta'] scores), as search_results rows."""
    rows = []
    for number, gain in enumerate(truth):
        by_seed = {s: gain + float(rng.normal(0.0, sd)) for s in seeds}
        rows.append(
            {
                "number": number,
                "state": "COMPLETE",
                "params": {"p": 0.1},
                "value": float(np.mean(list(by_seed.values()))),
                "by_epoch": {},
                "by_seed": by_seed,
                "seconds": 1.0,
                "error": None,
            }
        )
    return MethodSearch("scores-dropout", None, None, None, rows)


def plan(tmp_path, seeds: int) -> SearchPlan:
    from attendout.config import TrainConfig

    return SearchPlan(
        base=TrainConfig(task="file", train_file="unused.csv", progress=False),
        out=tmp_path,
        storage="sqlite:///unused.db",
        methods=("scores-dropout",),
        epochs=3,
        steps_per_epoch=1,
        metric="mcc",
        repeats=seeds,
        objective="score",  # no reference runs to read in a simulation; the rows carry the deltas
    )


def test_the_search_finds_a_planted_best_setting_as_often_as_its_stated_noise_allows(tmp_path):
    """8 settings, one 3 MCC points better than the rest, 2 search seeds at CoLA-500's validation noise.
    The rate at which the search keeps the best matches the probability advise states from the noise it
    measured (SearchNoise.chance_to_find), and the measured standard error is the true one."""
    rng = np.random.default_rng(3)
    settings, gap, studies = 8, 0.03, 2000
    truth = [gap] + [0.0] * (settings - 1)
    study_plan = plan(tmp_path, seeds=2)
    found = []
    stated = []
    ses = []
    for _ in range(studies):
        search = simulated_search(rng, truth, study_plan.seeds, SD_VALIDATION)
        best = max(search.trials, key=lambda t: t["value"])
        found.append(best["number"] == 0)
        noise = search_noise(study_plan, {"scores-dropout": search})
        ses.append(noise.se)
        stated.append(noise.chance_to_find(gap, settings))
    rate = float(np.mean(found))
    true_se = SD_VALIDATION / math.sqrt(2)
    expected = chance_to_find(gap, true_se, settings)
    mean_stated = float(np.mean(stated))
    rms_se = float(np.sqrt(np.mean(np.square(ses))))
    line = report(
        f"planted best of {settings} settings, +{100 * gap:.0f} points, 2 seeds a trial (true se "
        f"{100 * true_se:.2f}): kept in {rate:.3f} of {studies} searches; probability at the true se "
        f"{expected:.3f}; advise's stated probability, from the se each search measured (rms "
        f"{100 * rms_se:.2f}), {mean_stated:.3f} on average"
    )
    assert abs(rate - expected) <= 3 * monte_carlo_se(expected, studies), line
    assert abs(rms_se - true_se) <= 0.05 * true_se, line  # pooled over 8 trials: its variance is unbiased
    assert abs(mean_stated - rate) <= 0.06, line
    # one seed a trial: the same search keeps the best less often, as the formula says
    one = [
        max(simulated_search(rng, truth, (0,), SD_VALIDATION).trials, key=lambda t: t["value"])["number"] == 0
        for _ in range(studies)
    ]
    assert float(np.mean(one)) < rate, line
    assert abs(float(np.mean(one)) - chance_to_find(gap, SD_VALIDATION, settings)) <= 3 * monte_carlo_se(
        0.5, studies
    ), line


def test_without_a_planted_setting_the_search_keeps_each_as_often_as_chance():
    """The control: 8 equal settings; the search's choice is uniform, and the formula says 1/8."""
    rng = np.random.default_rng(4)
    counts = np.zeros(8)
    for _ in range(4000):
        search = simulated_search(rng, [0.0] * 8, (0, 1000), SD_VALIDATION)
        counts[max(search.trials, key=lambda t: t["value"])["number"]] += 1
    shares = counts / counts.sum()
    line = report(f"no planted best: shares kept {np.round(shares, 3).tolist()} (chance 0.125)")
    assert np.all(np.abs(shares - 0.125) <= 4 * monte_carlo_se(0.125)), line
    assert chance_to_find(0.0, 0.02, 8) == pytest.approx(0.125, abs=1e-6)


def test_the_stated_noise_sentence_names_the_standard_error_and_what_it_resolves():
    noise = SearchNoise("delta", "mcc", (0, 1000), 0.028, 12, {0: 0.1, 1000: 0.12})
    text = noise.sentence(100.0)
    assert f"{100 * 0.028 / math.sqrt(2):.2g} points" in text and "12 complete trials" in text
    assert "could not be told apart" in text and "probability" in text
