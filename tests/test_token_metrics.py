"""Entity-level metrics (conlleval rules) against hand-counted cases and seqeval; token accuracy;
compute_metrics for token classification and multiple choice."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from attendout.tasks import DataError, Task, compute_metrics
from attendout.tasks.metrics import entities, entity_f1, entity_precision, entity_recall, token_accuracy

TYPES = ("PER", "LOC", "MISC")


def test_entities_by_conlleval_rules() -> None:
    # IOB2
    assert entities(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 1), ("LOC", 3, 3)}
    # IOB1: I- opens a chunk after O; B- separates two adjacent chunks of one type
    assert entities(["I-PER", "I-PER", "B-PER", "O", "I-LOC"]) == {
        ("PER", 0, 1),
        ("PER", 2, 2),
        ("LOC", 4, 4),
    }
    # a change of type ends a chunk and starts another, whatever the prefix
    assert entities(["B-PER", "I-LOC", "I-LOC"]) == {("PER", 0, 0), ("LOC", 1, 2)}
    assert entities(["O", "O"]) == set()
    assert entities([]) == set()


def test_entity_scores_hand_counted() -> None:
    labels = [["B-PER", "I-PER", "O", "B-LOC"], ["B-MISC", "O"]]  # 3 entities
    predictions = [["B-PER", "I-PER", "O", "B-PER"], ["B-MISC", "I-MISC"]]  # 3 found, 1 right
    assert entity_precision(predictions, labels) == pytest.approx(1 / 3)
    assert entity_recall(predictions, labels) == pytest.approx(1 / 3)
    assert entity_f1(predictions, labels) == pytest.approx(1 / 3)
    predictions = [["B-PER", "I-PER", "O", "O"], ["B-MISC", "O"]]  # 2 found, both right
    assert entity_precision(predictions, labels) == pytest.approx(1.0)
    assert entity_recall(predictions, labels) == pytest.approx(2 / 3)
    assert entity_f1(predictions, labels) == pytest.approx(2 * (2 / 3) / (1 + 2 / 3))


def test_entity_scores_degenerate_cases_are_zero() -> None:
    none = [["O", "O"]]
    some = [["B-PER", "O"]]
    assert entity_precision(none, some) == 0.0  # nothing predicted
    assert entity_recall(some, none) == 0.0  # no true entity
    assert entity_f1(none, none) == 0.0  # no entity anywhere (conlleval prints 0.00)
    assert entity_f1(some, some) == 1.0


def test_token_accuracy_flattens() -> None:
    assert token_accuracy([["a", "b"], ["c"]], [["a", "x"], ["c"]]) == pytest.approx(2 / 3)
    assert token_accuracy([[1, 2, 3, 4]], [[1, 2, 3, 0]]) == pytest.approx(0.75)


def test_bad_sequence_inputs() -> None:
    with pytest.raises(DataError, match="sequence 1 has 1 predicted tags but 2 labels"):
        token_accuracy([["O"], ["O"]], [["O"], ["O", "O"]])
    with pytest.raises(DataError, match="2 predicted sequences but 1 labelled"):
        entity_f1([["O"], ["O"]], [["O"]])
    with pytest.raises(DataError, match="no tags to score"):
        entity_f1([[]], [[]])
    with pytest.raises(DataError, match="tag 'X-PER' is not O, B-<type> or I-<type>"):
        entity_f1([["X-PER"]], [["O"]])


def _random_sequences(rng: np.random.Generator, scheme: str, n: int) -> list[list[str]]:
    """Random tag sequences: "iob2" and "iob1" are valid in that scheme; "any" mixes every tag freely
    (invalid transitions such as O I-X or B-X I-Y included)."""
    sequences = []
    for _ in range(n):
        length = int(rng.integers(0, 12))
        tags: list[str] = []
        for _ in range(length):
            kind = TYPES[int(rng.integers(len(TYPES)))]
            r = rng.random()
            if scheme == "any":
                tags.append("O" if r < 0.3 else ("B-" if r < 0.65 else "I-") + kind)
                continue
            prev = tags[-1] if tags else "O"
            if r < 0.35:
                tags.append("O")
            elif r < 0.6 and prev != "O":  # continue the current chunk
                tags.append("I-" + prev[2:])
            elif scheme == "iob2":
                tags.append("B-" + kind)
            elif prev != "O" and prev[2:] == kind:  # IOB1: B- only between two chunks of one type
                tags.append("B-" + kind)
            else:
                tags.append("I-" + kind)
        sequences.append(tags)
    return sequences


@pytest.mark.parametrize("scheme", ["iob1", "iob2", "any"])
def test_entity_scores_equal_seqeval(scheme: str) -> None:
    seqeval = pytest.importorskip("seqeval.metrics")
    rng = np.random.default_rng({"iob1": 1, "iob2": 2, "any": 3}[scheme])
    for trial in range(200):
        n = int(rng.integers(1, 6))
        labels = _random_sequences(rng, scheme, n)
        if not any(labels):
            continue
        if trial % 4 == 0:  # predictions near the labels: many exact matches
            predictions = [
                [t if rng.random() < 0.85 else str(rng.choice(["O", "B-PER", "I-LOC"])) for t in seq]
                for seq in labels
            ]
        else:
            predictions = [
                seq for seq in _random_sequences(rng, scheme, n * 3) if len(seq) in {len(s) for s in labels}
            ]
            predictions = [
                next((p for p in predictions if len(p) == len(seq)), ["O"] * len(seq)) for seq in labels
            ]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # seqeval warns when a score is 0/0
            expected = (
                seqeval.precision_score(labels, predictions),
                seqeval.recall_score(labels, predictions),
                seqeval.f1_score(labels, predictions),
            )
        ours = (
            entity_precision(predictions, labels),
            entity_recall(predictions, labels),
            entity_f1(predictions, labels),
        )
        assert ours == pytest.approx(expected, abs=1e-12), (labels, predictions)


def test_compute_metrics_token_classification_maps_indices_to_names() -> None:
    names = ("O", "B-PER", "I-PER")
    task = Task(
        "t",
        "token_classification",
        ("words",),
        names,
        ("entity_f1", "token_accuracy"),
        ("dev",),
        "test task",
    )
    labels = [[1, 2, 0], [0, 1]]  # two entities
    predictions = [[1, 2, 0], [0, 2]]  # "O I-PER" is a chunk too: both entities right
    assert compute_metrics(task, predictions, labels) == {
        "entity_f1": 1.0,
        "token_accuracy": pytest.approx(0.8),
    }
    predictions = [[1, 0, 0], ["O", "B-PER"]]  # names are accepted as they are
    result = compute_metrics(task, predictions, labels)
    assert result["entity_f1"] == pytest.approx(0.5) and result["token_accuracy"] == pytest.approx(0.8)
    with pytest.raises(DataError, match="tag index 3, outside 0..2"):
        compute_metrics(task, [[3, 0, 0], [0, 1]], labels)


def test_compute_metrics_multiple_choice_takes_argmax() -> None:
    task = Task("c", "multiple_choice", ("question",), None, ("accuracy",), ("dev",), "test task", choices=4)
    scores = np.array([[0.1, 0.9, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]])  # 1, 0, 3
    assert compute_metrics(task, scores, [1, 0, 2]) == {"accuracy": pytest.approx(2 / 3)}
    assert compute_metrics(task, [1, 0, 2], [1, 0, 2]) == {"accuracy": 1.0}
