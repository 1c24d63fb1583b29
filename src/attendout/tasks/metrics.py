"""Evaluation metrics (numpy/scipy only), by name; a task's are computed by :func:`~attendout.tasks.core.compute_metrics`.

Every metric takes ``(predictions, labels)`` as 1-D sequences of equal length and returns a float.
Degenerate inputs give 0.0 rather than NaN, so that model selection never compares against NaN:
MCC when a row or column of the confusion matrix is all zero (e.g. constant predictions), F1 when
there is no positive example and no positive prediction, Pearson/Spearman when either side is
constant. Inputs that contain NaN still give NaN.

Token classification: :func:`entity_f1`, :func:`entity_precision` and :func:`entity_recall` score
entities (chunks) as the CoNLL scorer ``conlleval`` does, over sequences of tag names (``O``,
``B-X``, ``I-X``; IOB1 or IOB2), and :func:`token_accuracy` scores tags one by one over all the
sequences. The entity metrics give 0.0 where conlleval prints 0: precision when nothing is
predicted as an entity, recall when the labels have no entity, F1 when both are 0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .base import DataError

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
    from scipy.stats import rankdata  # imported here: scipy.stats takes most of importing the tasks

    return pearson(rankdata(p), rankdata(y))


# --------------------------------------------------------------------------------------------------
# Token classification: sequences of tags


def _sequences(predictions: Any, labels: Any, name: str) -> tuple[list[list[Any]], list[list[Any]]]:
    """Both inputs as lists of per-example tag lists, example by example of the same length."""
    p = [list(seq) for seq in predictions]
    y = [list(seq) for seq in labels]
    if len(p) != len(y):
        raise DataError(f"{name}: {len(p)} predicted sequences but {len(y)} labelled sequences")
    for i, (ps, ys) in enumerate(zip(p, y, strict=True)):
        if len(ps) != len(ys):
            raise DataError(f"{name}: sequence {i} has {len(ps)} predicted tags but {len(ys)} labels")
    if sum(len(ys) for ys in y) == 0:
        raise DataError(f"{name}: no tags to score")
    return p, y


def iob_parts(tag: str) -> tuple[str, str] | None:
    """``"B-PER"`` -> ``("B", "PER")``, ``"O"`` -> ``("O", "")``, anything else None."""
    if tag == "O":
        return "O", ""
    prefix, dash, kind = tag.partition("-")
    if prefix in ("B", "I") and dash and kind:
        return prefix, kind
    return None


def _split_tag(tag: Any, name: str) -> tuple[str, str]:
    """:func:`iob_parts` of a tag of a sequence to score; not an IOB tag: a DataError."""
    parts = iob_parts(str(tag))
    if parts is None:
        raise DataError(f"{name}: tag {str(tag)!r} is not O, B-<type> or I-<type> (IOB1/IOB2 tags)")
    return parts


def entities(tags: Any, name: str = "entities") -> set[tuple[str, int, int]]:
    """The chunks of one tag sequence as ``{(type, first, last)}``, by conlleval's rules.

    A chunk ends before a tag that is ``O`` or ``B-``, or of another type than the chunk; a chunk
    starts at every ``B-X`` and at an ``I-X`` that follows ``O`` or a tag of another type. So IOB1
    (``I-X`` opens a chunk, ``B-X`` only between two adjacent chunks of X) and IOB2 are both read,
    and an "invalid" ``O I-X`` in a prediction counts as a chunk, as conlleval counts it.
    """
    found: set[tuple[str, int, int]] = set()
    start = -1
    kind = ""
    prev = "O"
    for i, tag in enumerate([*tags, "O"]):
        prefix, this_kind = _split_tag(tag, name)
        ends = prev != "O" and (prefix in ("O", "B") or this_kind != kind)
        if ends:
            found.add((kind, start, i - 1))
        if prefix == "B" or (prefix == "I" and (prev == "O" or this_kind != kind)):
            start = i
        prev, kind = prefix, this_kind
    return found


def _summed(metric: str, predictions: Any, labels: Any) -> float:
    """``metric`` over all sequences together: :func:`from_counts` of the summed :func:`sequence_counts`."""
    return float(from_counts(metric, sequence_counts(metric, predictions, labels).sum(axis=0)))


def entity_precision(predictions: Any, labels: Any) -> float:
    """Micro precision of predicted entities (exact type and span); 0.0 when none is predicted."""
    return _summed("entity_precision", predictions, labels)


def entity_recall(predictions: Any, labels: Any) -> float:
    """Micro recall of true entities (exact type and span); 0.0 when the labels have none."""
    return _summed("entity_recall", predictions, labels)


def entity_f1(predictions: Any, labels: Any) -> float:
    """Micro F1 of entities as conlleval computes it: 2 P R / (P + R); 0.0 when P + R is 0."""
    return _summed("entity_f1", predictions, labels)


def token_accuracy(predictions: Any, labels: Any) -> float:
    """Fraction of tags equal to their label, over the tags of all sequences together."""
    return _summed("token_accuracy", predictions, labels)


def sequences_array(rows: Any) -> np.ndarray:
    """Per-example lists (tags of each sentence) as a 1-D object array, indexable by example like the
    arrays of the other metrics (``np.array`` would stack lists of equal length into a 2-D array)."""
    out = np.empty(len(rows), dtype=object)
    for i, row in enumerate(rows):
        out[i] = list(row)
    return out


#: Sequence metrics that are functions of per-example counts summed over examples (micro averages).
SEQUENCE_METRICS = ("entity_f1", "entity_precision", "entity_recall", "token_accuracy")


def sequence_counts(metric: str, predictions: Any, labels: Any) -> np.ndarray:
    """Per-example counts whose sums give ``metric`` (:func:`from_counts`): (n, 3) correct, predicted and
    true entities for the entity metrics; (n, 2) right and all tags for token accuracy. Summing rows
    with weights scores any resample of the examples without re-reading their tags."""
    p, y = _sequences(predictions, labels, metric)
    if metric == "token_accuracy":
        return np.array(
            [
                [sum(int(a == b) for a, b in zip(ps, ys, strict=True)), len(ys)]
                for ps, ys in zip(p, y, strict=True)
            ],
            dtype=np.int64,
        ).reshape(-1, 2)
    if metric not in SEQUENCE_METRICS:
        raise DataError(f"sequence_counts: {metric!r} is not one of {', '.join(SEQUENCE_METRICS)}")
    rows = []
    for ps, ys in zip(p, y, strict=True):
        guessed, gold = entities(ps, metric), entities(ys, metric)
        rows.append([len(guessed & gold), len(guessed), len(gold)])
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def from_counts(metric: str, counts: np.ndarray) -> np.ndarray:
    """``metric`` from summed :func:`sequence_counts` (..., k): the same 0.0 conventions as the metrics."""
    counts = np.asarray(counts, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if metric == "token_accuracy":
            return np.where(counts[..., 1] > 0, counts[..., 0] / counts[..., 1], 0.0)
        correct, found, true = counts[..., 0], counts[..., 1], counts[..., 2]
        precision = np.where(found > 0, correct / found, 0.0)
        recall = np.where(true > 0, correct / true, 0.0)
        if metric == "entity_precision":
            return precision
        if metric == "entity_recall":
            return recall
        total = precision + recall
        return np.where(total > 0, 2 * precision * recall / np.where(total > 0, total, 1.0), 0.0)


METRICS: dict[str, Metric] = {
    "accuracy": accuracy,
    "f1": f1,
    "mcc": mcc,
    "pearson": pearson,
    "spearman": spearman,
    "entity_f1": entity_f1,
    "entity_precision": entity_precision,
    "entity_recall": entity_recall,
    "token_accuracy": token_accuracy,
}


#: Metrics where a lower value is better; every other metric is better higher. Model selection, tables,
#: tests and ``advise`` read the direction from :func:`higher_is_better`.
LOWER_IS_BETTER: set[str] = {"perplexity", "loss"}


def higher_is_better(name: str) -> bool:
    """Whether a higher value of metric ``name`` is better (False for perplexity and the loss)."""
    return name not in LOWER_IS_BETTER


def better(name: str, value: float, than: float) -> bool:
    """Whether ``value`` of metric ``name`` is strictly better than ``than`` (in the metric's direction)."""
    return value > than if higher_is_better(name) else value < than


#: Metrics that only some task kinds can be scored with (perplexity: ``lm``; BLEU, chrF, ROUGE:
#: ``seq2seq``); a metric not named here is for the classification kinds.
METRIC_KINDS: dict[str, tuple[str, ...]] = {}


def register_metric(name: str, metric: Metric, kinds: tuple[str, ...] | None = None) -> None:
    """Make ``metric(predictions, labels) -> float`` usable in ``Task.metrics`` under ``name`` (``kinds``:
    the only task kinds it scores, if it is not a classification metric)."""
    if name in METRICS and METRICS[name] is not metric:
        raise DataError(f"metric name {name!r} is already registered")
    METRICS[name] = metric
    if kinds is not None:
        METRIC_KINDS[name] = tuple(kinds)


def check_metric(where: str, name: str, kind: str | None = None) -> None:
    """A :class:`DataError` naming ``where`` (the task asking) unless ``name`` is a registered metric, and
    (``kind`` given) one that can score a task of that kind."""
    if name not in METRICS:
        raise DataError(f"{where}: unknown metric {name!r}; known metrics: {', '.join(sorted(METRICS))}")
    if kind is not None and not metric_fits(name, kind):
        fitting = ", ".join(sorted(m for m in METRICS if metric_fits(m, kind)))
        raise DataError(f"{where}: metric {name!r} cannot score a {kind} task; its metrics: {fitting}")


def metric_fits(name: str, kind: str) -> bool:
    """Whether metric ``name`` can score a task of ``kind`` (BLEU a seq2seq task, not a classifier)."""
    kinds = METRIC_KINDS.get(name)
    if kinds is not None:
        return kind in kinds
    return kind not in {k for ks in METRIC_KINDS.values() for k in ks}
