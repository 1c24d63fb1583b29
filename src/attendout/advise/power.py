"""How much ``advise`` can trust the noise it measured: bounds on a standard deviation, the seeds a gain
needs, and the noise that separates two search trials.

A standard deviation measured on a few seeds is itself noisy: with 5 seeds (4 degrees of freedom) its
80% interval runs from 0.65 to 1.6 times the truth. A power statement made at the observed value holds
for the true noise only about half the time (a detectable difference printed from it is detected with
80% power in about half of the studies, and with 68% on average). So ``advise`` states every power claim
at an **upper confidence bound** on the noise (:data:`CONFIDENCE`, 90%): the detectable difference it
prints, and the seed count ``--seeds auto`` chooses, reach 80% power whenever the true noise is below the
bound, which it is in 9 studies of 10. Seed counts for a given gain are given as a range over the
noise's 80% interval (:func:`seeds_range`), not as one number.

Degrees of freedom. The confirmation pools the paired differences' spread over its methods, but every
method is paired with the same plain runs, so their differences share the plain runs' noise: for
equal run noise the differences of two methods correlate at 0.5 and the pooled variance carries fewer
degrees of freedom than the sum (:func:`pooled_df`, from the variance of a mean of correlated sample
variances).

The search (:func:`comparison_sd`): every trial's score is paired with the same plain runs at the same
seeds, so when two trials are compared the plain runs' noise and each seed's shared part cancel. The
noise that decides which trial the search keeps is the part of a trial's per-seed scores that is its
own: the residual of a two-way fit (trial + seed) over the complete trials' table.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ..report.stats import t_critical, t_test_power

#: the confidence of the upper bound on the noise at which every power claim is made
CONFIDENCE = 0.9
#: the correlation of two methods' paired differences through the plain runs they share (equal run noise)
SHARED_CORRELATION = 0.5


@dataclass(frozen=True)
class Noise:
    """A standard deviation measured with ``df`` degrees of freedom (``df`` may be fractional)."""

    sd: float
    df: float

    @property
    def known(self) -> bool:
        return math.isfinite(self.sd) and self.df > 0

    def quantile(self, q: float) -> float:
        """The value below which the true sd lies with probability ``q`` (a chi-square bound):
        sd x sqrt(df / chi2_{1-q}(df)). NaN where the noise is unknown."""
        if not self.known:
            return float("nan")
        return float(self.sd * math.sqrt(self.df / _chi2_quantile(1.0 - q, self.df)))

    def upper(self, confidence: float = CONFIDENCE) -> float:
        """The upper ``confidence`` bound on the true sd."""
        return self.quantile(confidence)

    def interval(self, level: float = 0.8) -> tuple[float, float]:
        """The central ``level`` interval of the true sd."""
        tail = (1.0 - level) / 2
        return self.quantile(tail), self.quantile(1.0 - tail)


def pooled_df(ns: Sequence[int], shared: float = SHARED_CORRELATION) -> float:
    """The degrees of freedom of a variance pooled over ``len(ns)`` methods' paired differences (each over
    ``n_i`` seeds) that share the same plain runs: sum(n_i - 1) / (1 + (m - 1) shared^2).

    Two sample variances of differences correlated at ``shared`` covary by shared^2 times their variance,
    so a mean of m of them has the variance of one divided by m / (1 + (m - 1) shared^2), not m."""
    usable = [n for n in ns if n >= 2]
    if not usable:
        return 0.0
    return sum(n - 1 for n in usable) / (1.0 + (len(usable) - 1) * shared * shared)


@functools.lru_cache(maxsize=1024)
def _normal_sum(level: float, power: float) -> float:
    """z(1 - level / 2) + z(power): the normal approximation's factor (cached: one per level)."""
    return float(stats.norm.ppf(1 - level / 2) + stats.norm.ppf(power))


@functools.lru_cache(maxsize=4096)
def _chi2_quantile(q: float, df: float) -> float:
    """The chi-square quantile (cached: a study asks for the same few noises' bounds many times)."""
    return float(stats.chi2.ppf(q, df))


def seeds_needed(
    sd: float, delta: float, alpha: float = 0.05, comparisons: int = 1, power: float = 0.8, most: int = 200
) -> int | None:
    """The fewest seeds whose paired t-test, at Holm's strictest level (``alpha / comparisons``), detects a
    true difference ``delta`` with ``power``, for paired differences of standard deviation ``sd``; None if
    more than ``most`` would be needed or ``sd`` is unknown."""
    if not math.isfinite(sd) or delta <= 0:
        return None
    if sd == 0:
        return 2
    level = alpha / max(comparisons, 1)

    def enough(n: int) -> bool:  # the power at delta reaches ``power``: delta is at least the detectable
        return t_test_power(delta / (sd / math.sqrt(n)), n - 1, t_critical(level, n - 1)) >= power

    # the normal approximation's count (the t test needs a few more): bracket from there, then bisect
    z = _normal_sum(level, power)
    guess = int(min(max(math.ceil((z * sd / delta) ** 2), 2), most))
    if enough(guess):
        n = guess
        while n > 2 and enough(n - 1):
            n -= 1
        return n
    low, high = guess + 1, min(2 * guess + 2, most)
    while not enough(high):
        if high == most:
            return None
        low, high = high + 1, min(2 * high, most)
    while low < high:  # the detectable difference falls as n grows: bisect
        mid = (low + high) // 2
        if enough(mid):
            high = mid
        else:
            low = mid + 1
    return low


def seeds_range(
    noise: Noise, delta: float, alpha: float = 0.05, comparisons: int = 1, level: float = 0.8
) -> tuple[int | None, int | None]:
    """The seeds that detect ``delta`` (:func:`seeds_needed`) at the low and the high end of the noise's
    central ``level`` interval: what the measured noise says about the count, with its uncertainty
    (None at an end: more than 200)."""
    low, high = noise.interval(level)
    return seeds_needed(low, delta, alpha, comparisons), seeds_needed(high, delta, alpha, comparisons)


def comparison_sd(table: Sequence[Sequence[float]]) -> Noise:
    """The noise of one seed's score that is a trial's own, from a table of complete trials (rows) by search
    seeds (columns): the residual sd of a two-way fit, trial + seed, with (trials - 1)(seeds - 1) degrees of
    freedom. Whatever every trial shares at a seed (its plain run, the seed's head initialisation and batch
    order) is the seed's column effect, and cancels when two trials are compared. Unknown (NaN, 0) with
    fewer than two trials or two seeds."""
    y = np.asarray(table, dtype=float)
    if y.ndim != 2 or y.shape[0] < 2 or y.shape[1] < 2 or not np.all(np.isfinite(y)):
        return Noise(float("nan"), 0.0)
    residual = y - y.mean(axis=1, keepdims=True) - y.mean(axis=0, keepdims=True) + y.mean()
    df = (y.shape[0] - 1) * (y.shape[1] - 1)
    return Noise(float(math.sqrt(float(np.sum(residual**2)) / df)), float(df))
