"""The statistics of the comparison tables: paired t-test, Holm, bootstrap, detectable difference.

All functions are plain numpy/scipy on arrays (scipy imported where used, so that a run printing its table starts
without it); :mod:`attendout.report.comparison` feeds them result files.

* :func:`paired_t_test`: a method against the baseline over the seeds both ran (seed s of the method
  paired with seed s of the baseline: same data, same seed of the head initialisation), two-sided.
* :func:`holm`: Holm's step-down adjustment of a family of p-values (here: every comparison of a
  table), which controls the family-wise error rate without assuming independence; :func:`holm_family`
  also counts the family.
* :func:`bootstrap_difference`: a percentile interval over the evaluation examples: resample the
  examples with replacement, score every run of both methods on the same resample, take the
  difference of the seed-means. It measures how much the difference depends on which examples the
  dev set happens to hold, which the t-test over seeds does not see. Corpus metrics of generated text
  (BLEU, chrF: sacrebleu's sums of n-gram counts; ROUGE: a mean over sentences) are rescored on each
  resample from per-sentence statistics (:data:`TEXT_METRICS`), as scoring the resample anew would.
* :func:`detectable_difference`: the smallest true mean difference the paired t-test with ``n``
  seeds detects with the given power at level ``alpha``, for a standard deviation of the paired
  differences ``sd`` (exact, from the noncentral t distribution); :func:`detectable_from_examples`, the
  same from the bootstrap's standard errors (the noise of the evaluation examples alone).
* :func:`majority_score`: the score of always predicting the most frequent label (a table's floor).
* :func:`chance_floor`: the best score any constant prediction reaches (``advise``'s chance floor): the
  majority class for accuracy, MCC 0, for F1 the better of always the majority and always the positive
  class, 0 for a correlation, the targets' variance for a mean squared error.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..tasks import METRICS, higher_is_better
from ..tasks.metrics import METRIC_KINDS, SEQUENCE_METRICS, from_counts, sequence_counts, sequences_array


@dataclass(frozen=True)
class PairedTest:
    """A two-sided paired t-test of ``a - b``."""

    n: int
    mean: float  # mean of the differences
    sd: float  # their sample standard deviation (ddof 1)
    t: float
    p: float  # NaN when it is undefined (fewer than 2 pairs, or differences without spread)

    def half_interval(self, level: float = 0.95) -> float:
        """Half the width of the t confidence interval of the mean difference (NaN below 2 pairs)."""
        if self.n < 2 or not np.isfinite(self.sd):
            return float("nan")
        return float(_t_quantile(0.5 + level / 2, self.n - 1) * self.sd / np.sqrt(self.n))


def paired_t_test(a: Sequence[float], b: Sequence[float]) -> PairedTest:
    """Paired t-test of ``a`` against ``b`` (equal lengths): t = mean(d) / (sd(d) / sqrt(n)), df = n - 1.

    With fewer than 2 pairs, or differences that are all equal, ``t`` and ``p`` are NaN: there is no
    spread to test against, and such a comparison is left out of the Holm family.
    """
    from scipy import special

    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(
            f"paired_t_test: need two 1-D arrays of equal length, got shapes {x.shape} and {y.shape}"
        )
    d = x - y
    n = len(d)
    mean = float(d.mean()) if n else float("nan")
    if n < 2:
        return PairedTest(n, mean, float("nan"), float("nan"), float("nan"))
    sd = float(d.std(ddof=1))
    if sd == 0 or not np.isfinite(sd):
        return PairedTest(n, mean, sd, float("nan"), float("nan"))
    t = mean / (sd / np.sqrt(n))
    p = float(2 * special.stdtr(n - 1, -abs(t)))  # Student's t survival function at |t|
    return PairedTest(n, mean, sd, float(t), p)


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm-adjusted p-values, in the input order; NaN entries stay NaN and are not counted in m.

    Sort the m p-values ascending, p_(1) <= ... <= p_(m); the adjusted value of p_(i) is
    max over j <= i of min(1, (m - j + 1) p_(j)). Rejecting where the adjusted value is below alpha
    is Holm's procedure at family-wise level alpha.
    """
    p = np.asarray(pvalues, dtype=np.float64)
    out = np.full(p.shape, np.nan)
    valid = np.flatnonzero(~np.isnan(p))
    m = len(valid)
    if m == 0:
        return out
    order = valid[np.argsort(p[valid], kind="stable")]
    out[order] = np.maximum.accumulate(np.minimum(1.0, (m - np.arange(m)) * p[order]))
    return out


def holm_family(pvalues: Sequence[float]) -> tuple[np.ndarray, int]:
    """(:func:`holm`-adjusted p-values, the family size m): how many p-values were defined (not NaN)."""
    adjusted = holm(pvalues)
    return adjusted, int(np.sum(~np.isnan(adjusted)))


@dataclass(frozen=True)
class BootstrapInterval:
    """A bootstrap percentile interval of a difference of seed-means."""

    estimate: float  # the difference on the examples as they are
    low: float
    high: float
    se: float  # standard deviation of the bootstrap distribution
    n_examples: int
    n_resamples: int


def _as_array(values: Any) -> np.ndarray:
    """A 1-D array of ``values``; per-example lists (token tags) as a 1-D object array."""
    if isinstance(values, np.ndarray):
        return values
    values = list(values)
    if values and isinstance(values[0], list | tuple):
        return sequences_array(values)
    return np.asarray(values)


def bootstrap_difference(
    metric: str | Callable[[np.ndarray, np.ndarray], float],
    labels: np.ndarray,
    predictions_a: Sequence[np.ndarray],
    predictions_b: Sequence[np.ndarray],
    *,
    n_resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> BootstrapInterval:
    """Interval of mean_s metric(a_s) - mean_s metric(b_s) over resamples of the examples.

    ``labels`` (N,) are shared by every run (the same evaluation split); ``predictions_a`` and
    ``predictions_b`` are lists of (N,) predictions, one per seed. Every resample draws N example
    indices with replacement and scores all runs on the same draw (the comparison stays paired by
    example). ``accuracy``, ``f1`` (of class 1) and ``mcc`` are computed from per-resample confusion
    matrices in one pass; any other metric name (or a callable ``f(predictions, labels)``) is
    evaluated resample by resample.
    """
    y = _as_array(labels)
    runs_a = [_as_array(p) for p in predictions_a]
    runs_b = [_as_array(p) for p in predictions_b]
    if not runs_a or not runs_b:
        raise ValueError("bootstrap_difference: need at least one run on each side")
    n = len(y)
    for p in [*runs_a, *runs_b]:
        if p.shape != y.shape:
            raise ValueError(
                f"bootstrap_difference: predictions of shape {p.shape} for labels of shape {y.shape}"
            )
    if not 0 < level < 1:
        raise ValueError(f"bootstrap_difference: level must be in (0, 1), got {level!r}")
    if n_resamples < 10:
        raise ValueError(f"bootstrap_difference: n_resamples must be at least 10, got {n_resamples!r}")
    rng = np.random.default_rng(seed)
    summed = _summed_statistics(metric, y, runs_a + runs_b)
    if summed is not None:
        statistics, score, dtype = summed
        stats_a, stats_b = [statistics(p) for p in runs_a], [statistics(p) for p in runs_b]
        return _bootstrap_summed(stats_a, stats_b, score, dtype, n, n_resamples, level, rng)
    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(
                f"bootstrap_difference: unknown metric {metric!r}; known: {', '.join(sorted(METRICS))}"
            )
        metric = METRICS[metric]

    def difference_on(indices: np.ndarray | None) -> float:
        pick = slice(None) if indices is None else indices
        score_a = np.mean([metric(p[pick], y[pick]) for p in runs_a])
        score_b = np.mean([metric(p[pick], y[pick]) for p in runs_b])
        return float(score_a - score_b)

    estimate = difference_on(None)
    draws = np.array([difference_on(rng.integers(0, n, size=n)) for _ in range(n_resamples)])
    return _interval(estimate, draws, n, level)


def _summed_statistics(metric: Any, y: np.ndarray, runs: list[np.ndarray]) -> tuple[Any, Any, Any] | None:
    """How :func:`bootstrap_difference` scores ``metric`` from per-example statistics summed over the drawn
    examples (:func:`_bootstrap_summed`): (a run's statistics (n, k), the score of their sums, the dtype of
    the weights); None where it scores each resample anew (any other metric, a callable).

    Micro-averaged sequence metrics sum :func:`~attendout.tasks.metrics.sequence_counts` (scored by
    :func:`from_counts`); BLEU, chrF and ROUGE sum :func:`text_statistics` (scored by
    :func:`score_from_statistics`, integer weights: sacrebleu scores integer n-gram counts); accuracy, F1
    and MCC of class indices sum one-hot confusion cells (scored by :func:`_confusion_metric`)."""
    if not isinstance(metric, str):
        return None
    if metric in SEQUENCE_METRICS:  # per-example lists of tags
        return (
            functools.partial(sequence_counts, metric, labels=y),
            functools.partial(from_counts, metric),
            np.float64,
        )
    if metric in TEXT_METRICS:  # generated text against references
        return (
            functools.partial(text_statistics, metric, references=y),
            functools.partial(score_from_statistics, metric),
            np.int64,
        )
    if metric in _CONFUSION_METRICS and _is_class_index(y, runs):
        k = int(max(y.max(), *(p.max() for p in runs))) + 1

        def cells(predictions: np.ndarray) -> np.ndarray:  # (n, k * k): each example's confusion cell
            return np.eye(k * k)[y.astype(np.int64) * k + predictions.astype(np.int64)]

        def score(totals: np.ndarray) -> np.ndarray:
            return _confusion_metric(metric, totals.reshape(-1, k, k))

        return cells, score, np.float64
    return None


def _weighted_draws(
    difference: Callable[[np.ndarray], np.ndarray], n: int, n_resamples: int, rng: np.random.Generator
) -> np.ndarray:
    """``difference(weights)`` over ``n_resamples`` resamples of ``n`` examples, each given as weights
    (b, n): how often each example was drawn. Drawn in chunks of at most 4M weights."""
    draws = np.empty(n_resamples)
    chunk = max(1, min(n_resamples, 4_000_000 // max(n, 1)))
    for start in range(0, n_resamples, chunk):
        b = min(chunk, n_resamples - start)
        idx = rng.integers(0, n, size=(b, n))
        weights = np.bincount((idx + n * np.arange(b)[:, None]).ravel(), minlength=b * n).reshape(b, n)
        draws[start : start + b] = difference(weights)
    return draws


def _interval(estimate: float, draws: np.ndarray, n: int, level: float) -> BootstrapInterval:
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(draws, [tail, 100 - tail])
    return BootstrapInterval(
        estimate=estimate,
        low=float(low),
        high=float(high),
        se=float(draws.std(ddof=1)),
        n_examples=n,
        n_resamples=len(draws),
    )


_CONFUSION_METRICS = ("accuracy", "f1", "mcc")


def _bootstrap_summed(
    stats_a: list[np.ndarray],
    stats_b: list[np.ndarray],
    score: Callable[[np.ndarray], np.ndarray],
    dtype: Any,
    n: int,
    n_resamples: int,
    level: float,
    rng: np.random.Generator,
) -> BootstrapInterval:
    """:func:`bootstrap_difference` of a metric scored from per-example statistics (n, k) summed over the
    examples: each resample weights the examples by how often they were drawn, sums the statistics of
    each run (weights as ``dtype``) and scores the sums with ``score`` ((b, k) -> (b,)), as scoring
    the drawn examples anew would; the difference is of the runs' mean scores."""

    def difference(weights: np.ndarray) -> np.ndarray:  # weights (b, n) -> (b,)
        weights = weights.astype(dtype)
        a = np.mean([score(weights @ c) for c in stats_a], axis=0)
        b = np.mean([score(weights @ c) for c in stats_b], axis=0)
        return a - b

    estimate = float(difference(np.ones((1, n)))[0])
    return _interval(estimate, _weighted_draws(difference, n, n_resamples, rng), n, level)


#: Metrics of generated text that :func:`bootstrap_difference` rescores from per-sentence statistics.
TEXT_METRICS = ("bleu", "chrf", "rouge1", "rouge2", "rougeL")


def text_statistics(metric: str, hypotheses: Sequence[str], references: Sequence[str]) -> np.ndarray:
    """Per-sentence statistics (n, k) whose column sums give ``metric`` (:func:`score_from_statistics`):
    sacrebleu's n-gram counts for BLEU and chrF; the F-measure (×100) and a 1 for ROUGE."""
    hyps, refs = [str(h) for h in hypotheses], [str(r) for r in references]
    if metric in ("bleu", "chrf"):
        from sacrebleu.metrics import BLEU, CHRF

        scorer = BLEU() if metric == "bleu" else CHRF()
        return np.asarray(scorer._extract_corpus_statistics(hyps, [refs]), dtype=np.int64)
    if metric in ("rouge1", "rouge2", "rougeL"):
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer([metric], use_stemmer=True)
        f = [100.0 * scorer.score(r, h)[metric].fmeasure for h, r in zip(hyps, refs, strict=True)]
        return np.stack([np.asarray(f, dtype=np.float64), np.ones(len(f))], axis=1)
    raise ValueError(f"text_statistics: {metric!r} is not one of {', '.join(TEXT_METRICS)}")


def score_from_statistics(metric: str, totals: np.ndarray) -> np.ndarray:
    """``metric`` of summed statistics (b, k) -> (b,), as sacrebleu or rouge-score scores the corpus."""
    totals = np.atleast_2d(totals)
    if metric in ("bleu", "chrf"):
        from sacrebleu.metrics import BLEU, CHRF

        scorer = BLEU() if metric == "bleu" else CHRF()
        return np.array([scorer._compute_score_from_stats([int(v) for v in row]).score for row in totals])
    return totals[:, 0] / np.where(totals[:, 1] == 0, 1, totals[:, 1])


def _is_class_index(y: np.ndarray, runs: list[np.ndarray]) -> bool:
    return all(np.issubdtype(a.dtype, np.integer) and (a.size == 0 or a.min() >= 0) for a in [y, *runs])


def _confusion_metric(name: str, c: np.ndarray) -> np.ndarray:
    """accuracy, f1 of class 1, or multiclass MCC (as in attendout.tasks.metrics) of (B, k, k) matrices."""
    total = c.sum(axis=(1, 2))
    trace = np.trace(c, axis1=1, axis2=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        if name == "accuracy":
            return trace / total
        if name == "f1":
            if c.shape[1] < 2:
                return np.zeros(len(c))
            tp = c[:, 1, 1]
            fp = c[:, :, 1].sum(axis=1) - tp
            fn = c[:, 1, :].sum(axis=1) - tp
            denominator = 2 * tp + fp + fn
            return np.where(denominator == 0, 0.0, 2 * tp / np.where(denominator == 0, 1, denominator))
        # mcc: (c s - t.q) / sqrt((s^2 - q.q)(s^2 - t.t)), 0 when the denominator is 0
        t = c.sum(axis=2)
        q = c.sum(axis=1)
        tq = (t * q).sum(axis=1)
        denominator = np.sqrt((total**2 - (q * q).sum(axis=1)) * (total**2 - (t * t).sum(axis=1)))
        return np.where(
            denominator == 0, 0.0, (trace * total - tq) / np.where(denominator == 0, 1, denominator)
        )


def detectable_difference(sd: float, n: int, alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest true mean difference a two-sided paired t-test over ``n`` pairs detects with ``power``.

    Solves P(|T| > t_{1-alpha/2, n-1}) = power for delta, where T follows the noncentral t
    distribution with n - 1 degrees of freedom and noncentrality delta / (sd / sqrt(n))
    (:func:`t_test_power`). Returns
    NaN for n < 2 or an unknown ``sd``, and 0 for ``sd == 0``.
    """
    if not 0 < alpha < 1 or not 0 < power < 1:
        raise ValueError(
            f"detectable_difference: alpha and power must be in (0, 1), got {alpha!r}, {power!r}"
        )
    if n < 2 or not np.isfinite(sd) or sd < 0:
        return float("nan")
    if sd == 0:
        return 0.0
    return float(sd * _detectable_per_sd(int(n), float(alpha), float(power)))


@functools.lru_cache(maxsize=1024)
def _detectable_per_sd(n: int, alpha: float, power: float) -> float:
    """:func:`detectable_difference` at ``sd == 1``: the noncentrality depends on delta / sd only, so
    the answer scales with sd, and one root per (n, alpha, power) serves every sd (a study asks for the
    same few thousands of times)."""
    from scipy import optimize

    df = n - 1
    critical = t_critical(alpha, df)
    se = 1 / np.sqrt(n)
    s = _chi_nodes(df)

    def shortfall(delta: float) -> float:
        return t_test_power(delta / se, df, critical, nodes=s) - power

    high = se
    while shortfall(high) < 0:
        high *= 2
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-10))


@functools.lru_cache(maxsize=4096)
def t_critical(level: float, df: float) -> float:
    """The two-sided critical value of Student's t at ``level`` with ``df`` degrees of freedom: its
    1 - level / 2 quantile (cached: power and seed-count searches ask for the same few many times)."""
    return _t_quantile(1 - level / 2, df)


@functools.lru_cache(maxsize=4096)
def _t_quantile(q: float, df: float) -> float:
    from scipy import stats

    return float(stats.t.ppf(q, df))


_QUADRATURE = np.polynomial.legendre.leggauss(512)


@functools.lru_cache(maxsize=256)
def _chi_nodes(df: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes over the quantiles u of V ~ chi-square(df): (sqrt(V(u) / df), weights);
    cached per df (read-only arrays: a caller cannot change the cache)."""
    from scipy import stats

    x, w = _QUADRATURE
    u = (x + 1) / 2
    nodes, weights = np.sqrt(stats.chi2.ppf(u, df) / df), w / 2
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def t_test_power(
    noncentrality: float, df: int, critical: float, nodes: tuple[np.ndarray, np.ndarray] | None = None
) -> float:
    """P(|T| > critical) for T noncentral t with ``df`` degrees of freedom and this noncentrality.

    T = (Z + nc) / sqrt(V / df) with Z standard normal and V chi-square(df), so given V = v the
    probability is Phi(nc - c s) + Phi(-nc - c s) with s = sqrt(v / df); it is integrated over the
    quantiles of V (a bounded integrand on [0, 1], Gauss-Legendre with 512 nodes). scipy's ``nct``
    gives NaN for the large noncentralities that few seeds and a Holm-corrected level need.
    """
    from scipy import special

    s, w = nodes if nodes is not None else _chi_nodes(df)
    value = np.sum(
        w * (special.ndtr(noncentrality - critical * s) + special.ndtr(-noncentrality - critical * s))
    )
    return float(min(max(value, 0.0), 1.0))


def detectable_from_examples(ses: Sequence[float], alpha: float = 0.05, power: float = 0.8) -> float:
    """The smallest difference the evaluation examples' noise alone lets a two-sided z-test detect:
    (z(1 - alpha/2) + z(power)) times the median of the bootstrap standard errors ``ses`` (NaN if none)."""
    from scipy import stats

    if not len(ses):
        return float("nan")
    z = stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)
    return float(z * np.median(ses))


def majority_score(metric: str, labels: np.ndarray) -> float | None:
    """``metric`` of always predicting the most frequent label of ``labels``: the score a model that
    learned nothing reaches (MCC 0, F1 2p/(1+p) for a positive share p). Per-example tag lists (an object
    array): always the most frequent tag. None for regression labels (no class to predict) or a score
    that is not finite."""
    if labels.dtype == object:  # tags per word: always the most frequent tag
        constant = _tag_everywhere(labels, _tags_by_frequency(labels)[0])
    elif labels.dtype.kind in "iub":
        values, counts = np.unique(labels, return_counts=True)
        constant = np.full_like(labels, values[np.argmax(counts)])
    else:  # regression: no class to predict
        return None
    score = float(METRICS[metric](constant, labels))
    return score if math.isfinite(score) else None


#: at most this many of the commonest tags are tried as a constant tag sequence
FLOOR_TAGS = 20


@dataclass(frozen=True)
class ChanceFloor:
    """The best score of a constant prediction on a split, and which constant gives it."""

    score: float
    constant: str  # "always predicting 1", "always predicting the labels' mean, 2.31", "copying the source"
    what: str = "the best any constant prediction does"  # what the floor is, for a sentence


def copy_floor(metric: str, sources: Sequence[str], references: Sequence[str]) -> ChanceFloor | None:
    """The floor of a text metric of translation-like generation: the score of an output that copies its
    source (names, numbers and shared words score; for closely related languages, a lot). None for a metric
    that is not a text metric (:data:`TEXT_METRICS`) or without examples."""
    if metric not in TEXT_METRICS or not len(sources) or len(sources) != len(references):
        return None
    totals = text_statistics(metric, sources, references).sum(axis=0)
    score = float(score_from_statistics(metric, totals)[0])
    return ChanceFloor(score, "copying the source", "what an output copying its input does")


def chance_floor(metric: str, labels: np.ndarray) -> ChanceFloor | None:
    """The best ``metric`` a constant prediction reaches on ``labels``, in the metric's direction.

    The constants tried: every class of the labels (accuracy: the majority share; MCC: 0; F1: the better of
    always the majority class and always the positive class, 0.4615 at 30% positives); every one of the
    :data:`FLOOR_TAGS` commonest tags for tag lists; the labels' mean and median for real-valued labels
    (Pearson and Spearman: 0; R²: 0; mean squared error: the labels' variance). None for a generation metric
    (perplexity, BLEU, chrF, ROUGE: a constant output's score is not computed from what a run stores), a
    metric not registered, or no finite score.
    """
    scorer = METRICS.get(metric)
    if scorer is None or metric in METRIC_KINDS or not len(labels):
        return None
    sign = 1.0 if higher_is_better(metric) else -1.0
    best: ChanceFloor | None = None
    for constant, prediction in _constant_predictions(labels):
        score = float(scorer(prediction, labels))
        if math.isfinite(score) and (best is None or sign * score > sign * best.score):
            best = ChanceFloor(score, constant)
    return best


def _constant_predictions(labels: np.ndarray):
    """(name, constant prediction) pairs for :func:`chance_floor`."""
    if labels.dtype == object:  # tags per word: one tag everywhere
        for tag in _tags_by_frequency(labels)[:FLOOR_TAGS]:
            yield f"always predicting {tag}", _tag_everywhere(labels, tag)
    elif labels.dtype.kind == "f":  # real-valued targets
        for name, value in (("mean", np.mean(labels)), ("median", np.median(labels))):
            yield f"always predicting the labels' {name}, {value:.4g}", np.full_like(labels, value)
    else:
        for value in np.unique(labels):
            yield f"always predicting {value}", np.full_like(labels, value)


def _tags_by_frequency(labels: np.ndarray) -> np.ndarray:
    """The tags of per-example tag lists, the commonest first (ties in the tags' order)."""
    tags, counts = np.unique([t for row in labels for t in row], return_counts=True)
    return tags[np.argsort(-counts, kind="stable")]


def _tag_everywhere(labels: np.ndarray, tag: Any) -> np.ndarray:
    """Per-example tag lists of ``tag`` alone, as long as those of ``labels``."""
    return sequences_array([[tag] * len(row) for row in labels])


def pooled_sd(sds: Sequence[float], ns: Sequence[int]) -> float:
    """sqrt(sum (n_i - 1) sd_i^2 / sum (n_i - 1)) over the finite entries with n_i >= 2 (NaN if none)."""
    pooled = [(n - 1, sd) for sd, n in zip(sds, ns, strict=True) if n >= 2 and np.isfinite(sd)]
    den = sum(df for df, _ in pooled)
    return float(np.sqrt(sum(df * sd * sd for df, sd in pooled) / den)) if den else float("nan")
