"""Evaluation metrics (numpy/scipy only) and :func:`compute_metrics`.

Every metric takes ``(predictions, labels)`` as 1-D sequences of equal length and returns a float.
Degenerate inputs give 0.0 rather than NaN, so that model selection never compares against NaN:
MCC when a row or column of the confusion matrix is all zero (e.g. constant predictions), F1 when
there is no positive example and no positive prediction, Pearson/Spearman when either side is
constant. Inputs that contain NaN still give NaN.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.stats import rankdata

from .core import CLASSIFICATION, REGRESSION, DataError

if TYPE_CHECKING:
    from .core import Task

__all__ = ["METRICS", "accuracy", "compute_metrics", "f1", "mcc", "pearson", "register_metric", "spearman"]

Metric = Callable[[Any, Any], float]


def _pair(predictions: Any, labels: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Both inputs as 1-D arrays of the same non-zero length."""
    p = np.asarray(predictions)
    y = np.asarray(labels)
    if p.ndim != 1 or y.ndim != 1:
        raise DataError(f"{name}: expected 1-D predictions and labels, got shapes {p.shape} and {y.shape}")
    if len(p) != len(y):
        raise DataError(f"{name}: {len(p)} predictions but {len(y)} labels")
    if len(p) == 0:
        raise DataError(f"{name}: no predictions to score")
    return p, y


def accuracy(predictions: Any, labels: Any) -> float:
    """Fraction of predictions equal to their label."""
    p, y = _pair(predictions, labels, "accuracy")
    return float(np.mean(p == y))


def f1(predictions: Any, labels: Any, positive: int = 1) -> float:
    """Binary F1 of class ``positive`` (index 1 by default): 2 TP / (2 TP + FP + FN)."""
    p, y = _pair(predictions, labels, "f1")
    tp = int(np.sum((p == positive) & (y == positive)))
    fp = int(np.sum((p == positive) & (y != positive)))
    fn = int(np.sum((p != positive) & (y == positive)))
    denominator = 2 * tp + fp + fn
    return 0.0 if denominator == 0 else 2 * tp / denominator


def mcc(predictions: Any, labels: Any) -> float:
    """Matthews correlation coefficient, multiclass (Gorodkin's R_K); binary MCC for two classes.

    With confusion matrix C (rows: true, columns: predicted), s = sum(C), c = trace(C),
    t_k = row sums, p_k = column sums:
    MCC = (c s - t.p) / sqrt((s^2 - p.p) (s^2 - t.t)); 0.0 when the denominator is 0.
    """
    p, y = _pair(predictions, labels, "mcc")
    _, codes = np.unique(np.concatenate([y, p]), return_inverse=True)
    k = int(codes.max()) + 1
    true_codes, pred_codes = codes[: len(y)], codes[len(y) :]
    confusion = np.zeros((k, k), dtype=np.float64)
    np.add.at(confusion, (true_codes, pred_codes), 1.0)
    s = confusion.sum()
    c = np.trace(confusion)
    t = confusion.sum(axis=1)
    q = confusion.sum(axis=0)
    denominator = np.sqrt((s * s - q @ q) * (s * s - t @ t))
    if denominator == 0:
        return 0.0
    return float((c * s - t @ q) / denominator)


def pearson(predictions: Any, labels: Any) -> float:
    """Pearson correlation; 0.0 when either side is constant."""
    p, y = _pair(predictions, labels, "pearson")
    p = p.astype(np.float64) - np.mean(p, dtype=np.float64)
    y = y.astype(np.float64) - np.mean(y, dtype=np.float64)
    denominator = np.sqrt((p @ p) * (y @ y))
    if np.isnan(denominator):
        return float("nan")
    if denominator == 0:
        return 0.0
    return float(np.clip((p @ y) / denominator, -1.0, 1.0))


def spearman(predictions: Any, labels: Any) -> float:
    """Spearman rank correlation (Pearson of average ranks); 0.0 when either side is constant."""
    p, y = _pair(predictions, labels, "spearman")
    if np.isnan(p.astype(np.float64)).any() or np.isnan(y.astype(np.float64)).any():
        return float("nan")
    return pearson(rankdata(p), rankdata(y))


METRICS: dict[str, Metric] = {
    "accuracy": accuracy,
    "f1": f1,
    "mcc": mcc,
    "pearson": pearson,
    "spearman": spearman,
}


def register_metric(name: str, metric: Metric) -> None:
    """Make ``metric(predictions, labels) -> float`` usable in ``Task.metrics`` under ``name``."""
    if name in METRICS and METRICS[name] is not metric:
        raise DataError(f"metric name {name!r} is already registered")
    METRICS[name] = metric


def compute_metrics(task: Task, predictions: Any, labels: Any) -> dict[str, float]:
    """All of ``task.metrics`` (in order: the first is the main one) as ``{name: value}``.

    predictions: classification -> class indices [N], or scores/logits [N, num_labels] (argmax is
    taken); regression -> floats [N] or [N, 1]. Other kinds are passed to their metrics unchanged.
    """
    if task.kind == CLASSIFICATION:
        predictions = np.asarray(predictions)
        if predictions.ndim == 2:
            predictions = predictions.argmax(axis=-1)
    elif task.kind == REGRESSION:
        predictions = np.asarray(predictions, dtype=np.float64)
        if predictions.ndim == 2 and predictions.shape[1] == 1:
            predictions = predictions[:, 0]
    results: dict[str, float] = {}
    for name in task.metrics:
        if name not in METRICS:
            raise DataError(
                f"task {task.name!r}: unknown metric {name!r}; known metrics: {', '.join(sorted(METRICS))}"
            )
        results[name] = float(METRICS[name](predictions, labels))
    return results
