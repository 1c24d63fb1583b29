"""Metrics against hand-computed values and scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from attendout.tasks import DataError, Task, accuracy, compute_metrics, f1, mcc, pearson, spearman


def _binary(tp: int, tn: int, fp: int, fn: int) -> tuple[list[int], list[int]]:
    """(predictions, labels) with the given binary confusion counts (positive class 1)."""
    predictions = [1] * tp + [0] * tn + [1] * fp + [0] * fn
    labels = [1] * tp + [0] * tn + [0] * fp + [1] * fn
    return predictions, labels


def test_accuracy() -> None:
    assert accuracy([0, 1, 1, 2], [0, 1, 0, 2]) == 0.75


def test_mcc_binary_known_confusion_matrix() -> None:
    # TP=6 TN=3 FP=1 FN=2: (6*3 - 1*2) / sqrt((6+1)(6+2)(3+1)(3+2)) = 16 / sqrt(1120)
    predictions, labels = _binary(tp=6, tn=3, fp=1, fn=2)
    assert mcc(predictions, labels) == pytest.approx(16 / math.sqrt(1120))


def test_mcc_multiclass_known_confusion_matrix() -> None:
    # confusion (rows true, columns predicted) [[2,1,0],[0,2,1],[1,0,3]]:
    # s=10, c=7, t=p=(3,3,4): (7*10 - 34) / sqrt((100-34)(100-34)) = 36/66
    pairs = [(0, 0)] * 2 + [(0, 1)] + [(1, 1)] * 2 + [(1, 2)] + [(2, 0)] + [(2, 2)] * 3
    labels, predictions = zip(*pairs, strict=True)
    assert mcc(predictions, labels) == pytest.approx(36 / 66)


def test_mcc_extremes_and_degenerate() -> None:
    assert mcc([0, 1, 1, 0], [0, 1, 1, 0]) == pytest.approx(1.0)
    assert mcc([1, 0, 0, 1], [0, 1, 1, 0]) == pytest.approx(-1.0)
    constant = mcc([1, 1, 1, 1], [0, 1, 1, 0])
    assert constant == 0.0 and not math.isnan(constant)
    assert mcc([1, 1, 1], [1, 1, 1]) == 0.0  # one class everywhere: undefined, reported as 0


def test_mcc_works_on_strings_and_missing_classes() -> None:
    # class "c" is only predicted, never a label
    assert mcc(["a", "b", "c"], ["a", "b", "b"]) == pytest.approx(mcc([0, 1, 2], [0, 1, 1]))


def test_f1_binary_positive_class_one() -> None:
    predictions, labels = _binary(tp=6, tn=3, fp=1, fn=2)
    assert f1(predictions, labels) == pytest.approx(2 * 6 / (2 * 6 + 1 + 2))
    assert f1([0, 0], [0, 0]) == 0.0  # no positive anywhere
    assert f1([1, 0], [0, 1]) == 0.0


def test_pearson_and_spearman_match_scipy() -> None:
    rng = np.random.default_rng(0)
    labels = rng.uniform(0, 5, size=50)
    predictions = labels + rng.normal(0, 1, size=50)
    predictions[:10] = 2.0  # ties for the rank correlation
    assert pearson(predictions, labels) == pytest.approx(stats.pearsonr(predictions, labels)[0])
    assert spearman(predictions, labels) == pytest.approx(stats.spearmanr(predictions, labels)[0])


def test_pearson_spearman_by_hand() -> None:
    # x = (1,2,3), y = (1,3,2): centred (-1,0,1), (-1,1,0): 1 / sqrt(2*2) = 0.5; same ranks
    assert pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert spearman([10, 20, 30], [1, 9, 4]) == pytest.approx(0.5)


def test_constant_predictions_give_zero_correlation() -> None:
    assert pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
    assert spearman([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
    assert math.isnan(pearson([float("nan"), 1.0, 2.0], [1.0, 2.0, 3.0]))


def test_bad_metric_inputs() -> None:
    with pytest.raises(DataError, match="3 predictions but 2 labels"):
        accuracy([0, 1, 1], [0, 1])
    with pytest.raises(DataError, match="no predictions"):
        mcc([], [])
    with pytest.raises(DataError, match="1-D"):
        pearson([[1.0, 2.0]], [1.0])


def test_compute_metrics_classification_and_regression() -> None:
    task = Task("t", "classification", ("s",), ("no", "yes"), ("f1", "accuracy"), ("dev",), "test task")
    logits = np.array([[0.1, 0.9], [2.0, -1.0], [0.0, 1.0], [0.3, 0.2]])  # argmax 1, 0, 1, 0
    result = compute_metrics(task, logits, [1, 0, 0, 0])
    assert list(result) == ["f1", "accuracy"]  # task order: the first is the main metric
    assert result == {"f1": pytest.approx(2 / 3), "accuracy": 0.75}
    assert compute_metrics(task, [1, 0, 1, 0], [1, 0, 0, 0]) == result

    regression = Task("r", "regression", ("a", "b"), None, ("pearson", "spearman"), ("dev",), "test task")
    scores = compute_metrics(regression, np.array([[1.0], [2.0], [3.0]]), [1.0, 3.0, 2.0])
    assert scores == {"pearson": pytest.approx(0.5), "spearman": pytest.approx(0.5)}
    assert all(isinstance(v, float) for v in scores.values())
