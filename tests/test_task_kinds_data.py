"""The data of the token classification, multiple choice and long-document tasks: readers on the
real shared data (skipped without it), their counts and splits, IOB1 -> IOB2, hub conversions with a
fake ``datasets``, token and regression files of the ``file`` task, and every bad input's error."""

from __future__ import annotations

import logging
import os
import sys
import types
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attendout.tasks import (
    ChoiceExamples,
    DataError,
    TokenExamples,
    compute_metrics,
    get_task,
    iob1_to_iob2,
    load_task_data,
    read_conll,
)
from attendout.tasks.metrics import entities
from attendout.tasks.tokens import CONLL2003_TAGS, PTB_TAGS, iob_label_names, is_iob

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ATTENDOUT_DATA", REPO.parent / "shared" / "data"))
CORPORA = DATA / "nltk_data" / "corpora"

needs_conll = pytest.mark.skipif(
    not (DATA / "conll2003").is_dir(), reason=f"no {DATA}/conll2003 (set ATTENDOUT_DATA)"
)
needs_treebank = pytest.mark.skipif(
    not (CORPORA / "treebank.zip").is_file(), reason=f"no {CORPORA}/treebank.zip"
)
needs_reviews = pytest.mark.skipif(
    not (CORPORA / "movie_reviews.zip").is_file(), reason=f"no {CORPORA}/movie_reviews.zip"
)
needs_arc = pytest.mark.skipif(not (DATA / "arc").is_dir(), reason=f"no {DATA}/arc (set ATTENDOUT_DATA)")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def one_line(error: pytest.ExceptionInfo[DataError]) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    return message


def tag_names(task: Any, examples: TokenExamples) -> list[list[str]]:
    return [[task.label_names[i] for i in seq] for seq in examples.labels]


# --------------------------------------------------------------------------------------------------
# The real shared data


@needs_conll
@pytest.mark.parametrize("data_dir", ["", "conll2003"])
def test_real_conll2003(data_dir: str) -> None:
    task, data = load_task_data("conll2003", data_dir=str(DATA / data_dir))
    assert data.sizes() == {"train": 14041, "dev": 3250, "test": 3453}
    assert task.label_names == CONLL2003_TAGS and task.metrics[0] == "entity_f1"
    train = data.train
    assert isinstance(train, TokenExamples)
    assert train.words is not None and train.words[0] == [
        "EU",
        "rejects",
        "German",
        "call",
        "to",
        "boycott",
        "British",
        "lamb",
        ".",
    ]
    tags = tag_names(task, train)
    assert tags[0] == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]  # IOB1 I-ORG read as B-ORG
    assert not any("-DOCSTART-" in words for words in train.words)
    # the published entity counts of the train file (Tjong Kim Sang & De Meulder 2003, table 2)
    counts: dict[str, int] = {}
    for seq in tags:
        for kind, _, _ in entities(seq):
            counts[kind] = counts.get(kind, 0) + 1
    assert counts == {"LOC": 7140, "PER": 6600, "ORG": 6321, "MISC": 3438}
    for seq in tags:  # IOB2: every chunk starts with B-
        assert iob1_to_iob2(seq) == seq
    assert len(set(train.groups or [])) > 900  # sentences grouped by document
    perfect = compute_metrics(task, data.eval_splits["dev"].labels, data.eval_splits["dev"].labels)
    assert perfect == {"entity_f1": 1.0, "entity_precision": 1.0, "entity_recall": 1.0, "token_accuracy": 1.0}


@needs_treebank
@pytest.mark.parametrize(
    "where", ["nltk_data", "nltk_data/corpora", "nltk_data/corpora/treebank.zip", "", None]
)
def test_real_ptb_pos(where: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ATTENDOUT_DATA", str(DATA))
    task, data = load_task_data("ptb-pos", data_dir=None if where is None else str(DATA / where))
    assert data.sizes() == {"train": 3396, "dev": 273, "test": 245}
    assert sum(data.sizes().values()) == 3914
    assert [sum(len(w) for w in ex.words or []) for ex in (data.train, *data.eval_splits.values())] == [
        81793,
        6327,
        5964,
    ]
    assert task.metrics == ("token_accuracy",) and task.label_names == PTB_TAGS
    assert data.train.words is not None and data.train.words[0][:3] == ["Pierre", "Vinken", ","]
    assert tag_names(task, data.train)[0][:3] == ["NNP", "NNP", ","]
    assert not any("-NONE-" in seq for seq in tag_names(task, data.train))
    assert data.train.groups is not None and data.train.groups[0] == "wsj_0001"
    assert {g for g in data.eval_splits["test"].groups or []} == {f"wsj_{n:04d}" for n in range(180, 200)}
    assert "3,914" in task.description and "not the full PTB" in task.description


@needs_reviews
def test_real_movie_reviews() -> None:
    task, data = load_task_data("movie-reviews", data_dir=str(DATA / "nltk_data"))
    assert data.sizes() == {"train": 1600, "dev": 200, "test": 200}
    for examples in (data.train, *data.eval_splits.values()):
        assert examples.labels.count(0) == examples.labels.count(1)
    assert task.label_names == ("neg", "pos") and task.metrics == ("accuracy", "f1")
    assert data.train.text_a[0].startswith("plot : two teen couples go to a church party")
    assert "\n" not in data.train.text_a[0]
    assert np.median([len(t.split()) for t in data.train.text_a]) > 500


ARC_COUNTS = {  # file -> (rows, refused, kept, 3-option rows)
    "arc_easy_train": (2251, 104, 2147, 5),
    "arc_easy_dev": (570, 21, 549, 1),
    "arc_challenge_train": (1119, 23, 1096, 1),
    "arc_challenge_dev": (299, 5, 294, 3),
}


@needs_arc
@pytest.mark.parametrize("name", ["arc-easy", "arc-challenge"])
def test_real_arc(name: str, caplog: pytest.LogCaptureFixture) -> None:
    prefix = name.replace("-", "_")
    with pytest.raises(DataError, match=rf"{prefix}_train.csv line \d+, fields 2-5 \(options A-D\)") as error:
        load_task_data(name, data_dir=str(DATA))
    refused = ARC_COUNTS[f"{prefix}_train"][1]
    assert f"{refused} such rows in this file" in one_line(error) and "--drop-bad-rows" in str(error.value)
    with caplog.at_level(logging.WARNING):
        task, data = load_task_data(name, data_dir=str(DATA / "arc"), drop_bad_rows=True)
    assert task.choices == 4 and task.metrics == ("accuracy",)
    for split, examples in (("train", data.train), ("dev", data.eval_splits["dev"])):
        _, refused, kept, three = ARC_COUNTS[f"{prefix}_{split}"]
        assert len(examples) == kept
        assert f"dropped {refused} of {kept + refused} rows" in caplog.text
        assert isinstance(examples, ChoiceExamples) and examples.choices is not None
        assert all(len(options) == 4 for options in examples.choices)
        assert sum(1 for options in examples.choices if options.count("") == 1) == three
        assert all(options[label] for options, label in zip(examples.choices, examples.labels, strict=True))


# --------------------------------------------------------------------------------------------------
# IOB1 -> IOB2


def test_iob1_to_iob2() -> None:
    assert iob1_to_iob2(["I-PER", "I-PER", "O", "I-LOC", "B-LOC", "I-LOC"]) == [
        "B-PER",
        "I-PER",
        "O",
        "B-LOC",
        "B-LOC",
        "I-LOC",
    ]
    assert iob1_to_iob2(["I-PER", "I-ORG"]) == ["B-PER", "B-ORG"]  # a change of type opens a chunk
    assert iob1_to_iob2(["B-PER", "I-PER", "O", "B-ORG"]) == ["B-PER", "I-PER", "O", "B-ORG"]  # IOB2 kept
    with pytest.raises(DataError, match="tag 'PER' is not O"):
        iob1_to_iob2(["PER"])


def test_iob1_to_iob2_keeps_the_chunks() -> None:
    rng = np.random.default_rng(0)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    for _ in range(500):
        seq = [tags[i] for i in rng.integers(0, len(tags), size=int(rng.integers(0, 10)))]
        converted = iob1_to_iob2(seq)
        assert entities(converted) == entities(seq)
        assert iob1_to_iob2(converted) == converted
        assert all(
            not t.startswith("I-") or (i > 0 and converted[i - 1][2:] == t[2:])
            for i, t in enumerate(converted)
        )


def test_iob_helpers() -> None:
    assert is_iob(["O", "B-X", "I-Y"]) and not is_iob(["O", "NN"]) and not is_iob([])
    assert iob_label_names(["I-PER", "O", "B-LOC"]) == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")


# --------------------------------------------------------------------------------------------------
# CoNLL column files


CONLL = """-DOCSTART- -X- O

EU NNP I-NP I-ORG
rejects VBZ I-VP O
German JJ I-NP I-MISC


Peter NNP I-NP I-PER
Blackburn NNP I-NP I-PER
-DOCSTART- -X- -X- O
BRUSSELS NNP I-NP I-LOC
"""


def test_read_conll_sentences_docstart_and_blank_lines(tmp_path: Path) -> None:
    sentences = read_conll(write(tmp_path / "a.conll", CONLL), token_column=0, tag_column=3)
    assert sentences.words == [["EU", "rejects", "German"], ["Peter", "Blackburn"], ["BRUSSELS"]]
    assert sentences.tags[1] == ["I-PER", "I-PER"]
    assert sentences.lines == [[3, 4, 5], [8, 9], [11]]
    assert sentences.groups == ["a.conll#doc1", "a.conll#doc1", "a.conll#doc2"]


def write_conll_folder(root: Path, train: str = CONLL) -> Path:
    write(root / "eng.train", train)
    write(root / "eng.testa", CONLL)
    write(root / "eng.testb", CONLL)
    return root


def test_conll2003_small_folder(tmp_path: Path) -> None:
    task, data = load_task_data("conll2003", data_dir=str(write_conll_folder(tmp_path / "conll2003").parent))
    assert data.sizes() == {"train": 3, "dev": 3, "test": 3}
    assert tag_names(task, data.train) == [["B-ORG", "O", "B-MISC"], ["B-PER", "I-PER"], ["B-LOC"]]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "EU NNP I-NP I-ORG\nrejects VBZ O\n",
            r"eng.train line 2: expected 4 whitespace-separated columns, found 3",
        ),
        (
            "EU NNP I-NP I-ORG\nx NN I-NP I-ORGANISATION\n",
            r"eng.train line 2, column 4: tag 'I-ORGANISATION' is not in the tag set",
        ),
        ("EU NNP I-NP i-org\n", r"eng.train line 1, column 4: tag 'i-org'"),
        ("", r"eng.train: no sentence"),
        ("-DOCSTART- -X- -X- O\n\n\n", r"eng.train: no sentence"),
    ],
)
def test_conll2003_bad_files(tmp_path: Path, text: str, message: str) -> None:
    write_conll_folder(tmp_path, train=text)
    with pytest.raises(DataError, match=message) as error:
        load_task_data("conll2003", data_dir=str(tmp_path))
    one_line(error)


def test_conll2003_needs_a_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ATTENDOUT_DATA", raising=False)
    with pytest.raises(DataError, match="needs data_dir="):
        load_task_data("conll2003")
    with pytest.raises(DataError, match="no CoNLL-2003 data in"):
        load_task_data("conll2003", data_dir=str(tmp_path))


def test_read_conll_column_errors(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", "a NN\nb NN\n\nc NN X\n")
    with pytest.raises(
        DataError, match=r"a.txt line 4: expected 2 whitespace-separated columns \(as line 1\), found 3"
    ):
        read_conll(path)
    path = write(tmp_path / "b.txt", "a NN\n")
    with pytest.raises(DataError, match=r"b.txt line 1: tag_column=5 is outside the 2 columns"):
        read_conll(path, tag_column=5)
    with pytest.raises(DataError, match="file not found"):
        read_conll(tmp_path / "missing.txt")


# --------------------------------------------------------------------------------------------------
# Token files of the "file" task


IOB1_TRAIN = "John NNP I-PER\nSmith NNP I-PER\nruns VBZ O\n\nin IN O\nParis NNP I-LOC\nRome NNP B-LOC\n"


def test_file_task_token_files_iob(tmp_path: Path) -> None:
    train = write(tmp_path / "train.txt", IOB1_TRAIN)
    dev = write(tmp_path / "dev.txt", "Bob NNP B-PER\nsays VBZ O\n")
    task, data = load_task_data("file", train_file=str(train), eval_files={"dev": str(dev)}, tag_column=2)
    assert task.kind == "token_classification" and task.text_fields == ("tokens",)
    assert task.label_names == ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")  # B- of every type seen
    assert task.metrics == ("entity_f1", "entity_precision", "entity_recall", "token_accuracy")
    assert tag_names(task, data.train) == [["B-PER", "I-PER", "O"], ["O", "B-LOC", "B-LOC"]]
    assert data.eval_splits["dev"].words == [["Bob", "says"]]


def test_file_task_token_files_other_tags(tmp_path: Path) -> None:
    train = write(tmp_path / "train.txt", "the\tDT\tO\ncat\tNN\tO\n\nsat\tVBD\tO\nZ\tO\tO\n")
    task, data = load_task_data(
        "file",
        kind="token_classification",
        train_file=str(train),
        eval_files={"dev": str(train)},
        token_column=0,
        tag_column=1,
    )
    assert task.label_names == ("O", "DT", "NN", "VBD")  # sorted, O first
    assert task.metrics == ("token_accuracy",)
    assert data.train.labels == [[1, 2], [3, 0]]


def test_column_files_split_fields_on_spaces_and_tabs_only(tmp_path: Path) -> None:
    """A no-break space or an ideographic space is part of a token (str.split() cut "1\xa0000" in two,
    making a 3-column line or, in a 2-column file, the token's second half its tag)."""
    path = write(tmp_path / "a.txt", "1\xa0000 CD\n東京\u3000駅 NNP\r\n\t\nx\tNN\n")
    sentences = read_conll(path, token_column=0, tag_column=1)
    assert sentences.words == [["1\xa0000", "東京\u3000駅"], ["x"]]
    assert sentences.tags == [["CD", "NNP"], ["NN"]]


def test_token_and_tag_columns_must_differ(tmp_path: Path) -> None:
    """Issue 30: the words would be their own tags (a tagger that reads its answer) if both options
    name one column, directly or from either end."""
    train = write(tmp_path / "train.txt", IOB1_TRAIN)
    for token_column, tag_column in [(1, 1), (0, -3), (-1, 2)]:
        with pytest.raises(
            DataError, match=f"token_column={token_column} and tag_column={tag_column} are the same column"
        ) as error:
            load_task_data("file", train_file=str(train), token_column=token_column, tag_column=tag_column)
        one_line(error)
    with pytest.raises(
        DataError, match=r"train.txt: token_column=0 and tag_column=-3 are the same column of its 3 columns"
    ):
        load_task_data("file", train_file=str(train), token_column=0, tag_column=-3)


def test_file_task_token_files_carve_dev(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    text = "".join(f"w{i} B-X\nv{i} O\n\n" for i in range(30))
    train = write(tmp_path / "train.txt", text)
    with caplog.at_level(logging.WARNING):
        task, data = load_task_data("file", train_file=str(train), kind="token_classification")
    assert task.eval_split_names == ("dev",) and len(data.train) + len(data.eval_splits["dev"]) == 30
    assert "carving" in caplog.text


def test_file_task_token_file_errors(tmp_path: Path) -> None:
    train = write(tmp_path / "train.txt", IOB1_TRAIN)
    dev = write(tmp_path / "dev.txt", "Bob NNP B-PER\nIBM NNP B-ORG\n")
    with pytest.raises(
        DataError, match=r"dev.txt line 2, column 3: tag 'B-ORG' is not in the tag set of split 'dev'"
    ) as error:
        load_task_data(
            "file", train_file=str(train), eval_files={"dev": str(dev)}, kind="token_classification"
        )
    one_line(error)
    with pytest.raises(DataError, match="text_columns= is for table files"):
        load_task_data("file", train_file=str(train), kind="token_classification", text_columns=["a"])
    with pytest.raises(DataError, match="token_column= is for token files"):
        load_task_data("file", train_file=str(train), kind="classification", token_column=0)
    with pytest.raises(DataError, match="token_column= applies to train_file/eval_files"):
        load_task_data("conll2003", data_dir=str(tmp_path), token_column=0)
    with pytest.raises(DataError, match=r"train.txt line 1, column 3: the tag set lacks 'B-PER'"):
        load_task_data(
            "file",
            train_file=str(train),
            eval_files={"dev": str(train)},
            kind="token_classification",
            label_names=["O", "I-PER", "B-LOC", "I-LOC"],
        )
    only_o = write(tmp_path / "o.txt", "a O\nb O\n")
    with pytest.raises(DataError, match="every tag of the train file is 'O'"):
        load_task_data("file", train_file=str(only_o), kind="token_classification")


def test_builtin_token_task_with_eval_file_override(tmp_path: Path) -> None:
    write_conll_folder(tmp_path)
    extra = write(tmp_path / "extra.txt", "Bob I-PER\nsays O\n")
    task, data = load_task_data("conll2003", data_dir=str(tmp_path), eval_files={"extra": str(extra)})
    assert task.eval_split_names == ("extra",) and task.label_names == CONLL2003_TAGS
    assert tag_names(task, data.eval_splits["extra"]) == [["B-PER", "O"]]
    with pytest.raises(DataError, match="its tag set is fixed"):
        load_task_data(
            "conll2003", train_file=str(extra), eval_files={"x": str(extra)}, label_names=["O", "B-X"]
        )


# --------------------------------------------------------------------------------------------------
# Regression and fractional labels in table files


def test_file_task_regression_csv(tmp_path: Path) -> None:
    rows = "".join(f"sentence {i},{(i * 0.37) % 5:.3f}\n" for i in range(20))
    train = write(tmp_path / "train.csv", "text,score\n" + rows)
    task, data = load_task_data(
        "file", train_file=str(train), eval_files={"dev": str(train)}, label_column="score", kind="regression"
    )
    assert task.kind == "regression" and task.metrics == ("pearson", "spearman") and task.num_labels == 1
    assert data.train.labels[1] == pytest.approx(0.37)
    scores = compute_metrics(task, data.train.labels, data.eval_splits["dev"].labels)
    assert scores == {"pearson": pytest.approx(1.0), "spearman": pytest.approx(1.0)}


def test_fractional_labels_in_a_classification_file(tmp_path: Path) -> None:
    train = write(tmp_path / "train.csv", "text,score\na,0\nb,2.615\nc,1\nd,0.5\n")
    with pytest.raises(
        DataError, match=r"train.csv line 3, column 'score': label '2.615' is not a class"
    ) as error:
        load_task_data("file", train_file=str(train), eval_files={"dev": str(train)}, label_column="score")
    message = one_line(error)
    assert "2 are fractions" in message and "--label-kind regression" in message
    # integers and words stay classification labels
    ints = write(tmp_path / "ints.csv", "text,label\na,0\nb,2\nc,1\n")
    task, _ = load_task_data("file", train_file=str(ints), eval_files={"dev": str(ints)})
    assert task.label_names == ("0", "1", "2")
    mixed = write(tmp_path / "mixed.csv", "text,label\na,0.5\nb,high\n")
    task, _ = load_task_data("file", train_file=str(mixed), eval_files={"dev": str(mixed)})
    assert task.label_names == ("0.5", "high")


# --------------------------------------------------------------------------------------------------
# ptb-pos from a small zip


def write_treebank(path: Path, files: dict[int, str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        for number, text in files.items():
            archive.writestr(f"treebank/combined/wsj_{number:04d}.mrg", text)
            archive.writestr(f"treebank/tagged/wsj_{number:04d}.pos", "[ ignored/NN ]\n")
    return path


TREE = "( (S (NP-SBJ (NNP Mary) ) (VP (VBD ran) (NP (-NONE- *T*-1) )) (. .) ))\n"


def test_ptb_pos_small_zip(tmp_path: Path) -> None:
    files = {1: TREE + TREE, 160: TREE, 199: TREE, 200: TREE}  # wsj_0200 is outside every split
    write_treebank(tmp_path / "corpora" / "treebank.zip", files)
    task, data = load_task_data("ptb-pos", data_dir=str(tmp_path))
    assert data.sizes() == {"train": 2, "dev": 1, "test": 1}
    assert data.train.words == [["Mary", "ran", "."]] * 2  # the trace is dropped
    assert tag_names(task, data.train)[0] == ["NNP", "VBD", "."]


@pytest.mark.parametrize(
    ("tree", "message"),
    [
        (
            "( (S (NP (XYZ Mary) ) ))\n",
            r"wsj_0001.mrg line 1, tag of the \(TAG word\) leaf: tag 'XYZ' is not in the tag set",
        ),
        ("( (S (NP (-NONE- *) ) ))\n", r"wsj_0001.mrg line 1: sentence 1 has only -NONE- tokens"),
        ("( (S (NP (NNP Mary) ) )\n", r"wsj_0001.mrg: the last tree is not closed"),
        ("( (S (NNP Mary) ) ) )\n", r"wsj_0001.mrg line 1: unbalanced"),
        # issue 30: a word outside a (TAG word) leaf was skipped, dropping it from its sentence
        ("( (S (NP Mary (NNP Ann)) ) )\n", r"wsj_0001.mrg line 1: word 'Mary' is not in a \(TAG word\) leaf"),
        ("( (S (NNP Mary Ann) ) )\n", r"wsj_0001.mrg line 1: word 'Mary' is not in a \(TAG word\) leaf"),
    ],
)
def test_ptb_pos_bad_trees(tmp_path: Path, tree: str, message: str) -> None:
    write_treebank(tmp_path / "treebank.zip", {1: tree, 160: TREE, 180: TREE})
    with pytest.raises(DataError, match=message) as error:
        load_task_data("ptb-pos", data_dir=str(tmp_path))
    one_line(error)


def test_ptb_pos_damaged_zip(tmp_path: Path) -> None:
    """Issue 30: a damaged member (a cut download, flipped bytes) raised zlib.error or BadZipFile from
    deep in zipfile; it is a DataError naming the zip and the member."""
    path = tmp_path / "treebank.zip"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for number in (1, 160, 180):
            archive.writestr(f"treebank/combined/wsj_{number:04d}.mrg", TREE * 20)
    data = bytearray(path.read_bytes())
    start = 30 + len("treebank/combined/wsj_0001.mrg")  # the first member's deflated bytes
    data[start + 5 : start + 25] = bytes(b ^ 0x5A for b in data[start + 5 : start + 25])
    path.write_bytes(bytes(data))
    with pytest.raises(
        DataError, match=r"treebank.zip:treebank/combined/wsj_0001.mrg: cannot read it from the zip"
    ) as error:
        load_task_data("ptb-pos", data_dir=str(tmp_path))
    one_line(error)


def test_ptb_pos_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DataError, match="no treebank.zip for task 'ptb-pos'"):
        load_task_data("ptb-pos", data_dir=str(tmp_path))
    monkeypatch.delenv("ATTENDOUT_DATA", raising=False)
    with pytest.raises(DataError, match="needs data_dir="):
        load_task_data("ptb-pos")
    with pytest.raises(DataError, match="no hub source"):
        load_task_data("ptb-pos", hub=True)


# --------------------------------------------------------------------------------------------------
# ARC from small CSV files


def write_arc(root: Path, train: str, dev: str = "Q?,a,b,c,d,A\n") -> Path:
    write(root / "arc_easy_train.csv", train)
    write(root / "arc_easy_dev.csv", dev)
    return root


GOOD = 'Which is a gas?,"water, liquid",oxygen,rock,ice,B\nThree options?,x,y,z,,C\nDigits?,p,q,r,s,4\n'


def test_arc_small_files(tmp_path: Path) -> None:
    task, data = load_task_data("arc-easy", data_dir=str(write_arc(tmp_path / "arc", GOOD).parent))
    train = data.train
    assert isinstance(train, ChoiceExamples)
    assert train.text_a == ["Which is a gas?", "Three options?", "Digits?"]
    assert train.choices == [
        ["water, liquid", "oxygen", "rock", "ice"],
        ["x", "y", "z", ""],
        ["p", "q", "r", "s"],
    ]
    assert train.labels == [1, 2, 3]
    assert task.num_labels == 1 and task.choices == 4


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            "Q?,a,b,c,d,E\n",
            r"line 2, field 6 \(answer\): answer 'E' is not among the row's non-empty options \(A, B, C, D\)",
        ),
        (
            "Q?,a,b,c,,D\n",
            r"line 2, field 6 \(answer\): answer 'D' is not among the row's non-empty options \(A, B, C\)",
        ),
        ("Q?,,,,,2\n", r"line 2, fields 2-5 \(options A-D\): all 4 options are empty"),
        ("Q?,a,b,c,d,Z\n", r"line 2, field 6 \(answer\): answer 'Z' is not a letter"),
        (",a,b,c,d,A\n", r"line 2, field 1 \(question\): the question is empty"),
    ],
)
def test_arc_bad_rows(tmp_path: Path, row: str, message: str, caplog: pytest.LogCaptureFixture) -> None:
    write_arc(tmp_path, "Q?,a,b,c,d,A\n" + row + row + "Q?,a,b,c,d,B\n")
    with pytest.raises(DataError, match=message) as error:
        load_task_data("arc-easy", data_dir=str(tmp_path))
    assert "arc_easy_train.csv" in one_line(error) and "2 such rows in this file" in str(error.value)
    assert "drop_bad_rows=True (--drop-bad-rows)" in str(error.value)
    with caplog.at_level(logging.WARNING):
        _, data = load_task_data("arc-easy", data_dir=str(tmp_path), drop_bad_rows=True)
    assert data.train.labels == [0, 1]
    assert "dropped 2 of 4 rows" in caplog.text and "(lines 2, 3)" in caplog.text


def test_arc_wrong_field_count_and_empty(tmp_path: Path) -> None:
    write_arc(tmp_path, "Q?,a,b,c,A\n")
    with pytest.raises(
        DataError, match=r"arc_easy_train.csv line 1: expected 6 comma-separated fields .* found 5"
    ):
        load_task_data("arc-easy", data_dir=str(tmp_path))
    write_arc(tmp_path, "Q?,,,,,1\n")
    with pytest.raises(DataError, match=r"split 'train' is empty: .*arc_easy_train.csv has no usable rows"):
        load_task_data("arc-easy", data_dir=str(tmp_path), drop_bad_rows=True)


# --------------------------------------------------------------------------------------------------
# movie-reviews from a small zip


def write_reviews(path: Path, empty: str | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("movie_reviews/README", "readme\n")
        for fold in (0, 1, 800, 950):
            for label in ("neg", "pos"):
                name = f"movie_reviews/{label}/cv{fold:03d}_{fold + 10000}.txt"
                archive.writestr(name, "\n" if name == empty else f"a {label} review .\nsecond line .\n")
    return path


def test_movie_reviews_small_zip(tmp_path: Path) -> None:
    write_reviews(tmp_path / "nltk_data" / "corpora" / "movie_reviews.zip")
    task, data = load_task_data("movie-reviews", data_dir=str(tmp_path))  # a folder holding nltk_data/
    assert data.sizes() == {"train": 4, "dev": 2, "test": 2}
    assert data.train.text_a[0] == "a neg review . second line ." and data.train.labels == [0, 0, 1, 1]


def test_movie_reviews_empty_document(tmp_path: Path) -> None:
    write_reviews(tmp_path / "movie_reviews.zip", empty="movie_reviews/pos/cv800_10800.txt")
    with pytest.raises(
        DataError, match=r"movie_reviews.zip:movie_reviews/pos/cv800_10800.txt: the review is empty"
    ) as error:
        load_task_data("movie-reviews", data_dir=str(tmp_path))
    one_line(error)


# --------------------------------------------------------------------------------------------------
# Hub loaders, with a fake `datasets`


class FakeFeature:
    def __init__(self, names: list[str]) -> None:
        self.names = names
        self.feature = self  # Sequence(ClassLabel).feature


class FakeDataset:
    def __init__(self, columns: dict[str, list], features: dict[str, Any] | None = None) -> None:
        self._columns = columns
        self.column_names = list(columns)
        self.features = features or {}

    def __getitem__(self, column: str) -> list:
        return self._columns[column]

    def __iter__(self):  # rows as dicts
        n = len(next(iter(self._columns.values())))
        return iter({k: v[i] for k, v in self._columns.items()} for i in range(n))


def fake_datasets(monkeypatch: pytest.MonkeyPatch, load: Any) -> list[tuple]:
    calls: list[tuple] = []

    def load_dataset(*args: Any, **kwargs: Any) -> Any:
        calls.append((*args, *kwargs.values()))
        return load(*args, **kwargs)

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    return calls


def test_conll2003_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"][::-1]  # by name
    split = FakeDataset(
        {"tokens": [["EU", "rejects"], [], ["Peter", "Blackburn"]], "ner_tags": [[5, 8], [], [7, 6]]},
        {"ner_tags": FakeFeature(names)},
    )

    def load(name: str, revision: str = "main") -> dict[str, FakeDataset]:
        if revision == "main":
            raise RuntimeError("Dataset scripts are no longer supported, but found conll2003.py")
        return {"train": split, "validation": split, "test": split}

    calls = fake_datasets(monkeypatch, load)
    task, data = load_task_data("conll2003", hub=True)
    assert calls == [("eriktks/conll2003",), ("eriktks/conll2003", "refs/convert/parquet")]
    assert data.sizes() == {"train": 2, "dev": 2, "test": 2}  # the empty (-DOCSTART-) row is left out
    assert tag_names(task, data.train) == [["B-ORG", "O"], ["B-PER", "I-PER"]]


def test_arc_hub_pads_to_the_largest_option_count(monkeypatch: pytest.MonkeyPatch) -> None:
    def split(answers: list[str]) -> FakeDataset:
        return FakeDataset(
            {
                "question": ["q1", "q2", "q3"],
                "choices": [
                    {"text": ["a", "b", "c", "d"], "label": ["A", "B", "C", "D"]},
                    {"text": ["a", "b", "c"], "label": ["1", "2", "3"]},
                    {"text": ["a", "b", "c", "d", "e"], "label": ["A", "B", "C", "D", "E"]},
                ],
                "answerKey": answers,
            }
        )

    calls = fake_datasets(
        monkeypatch,
        lambda *a: {
            "train": split(["B", "3", "E"]),
            "validation": split(["A", "1", "A"]),
            "test": split(["D", "2", "C"]),
        },
    )
    task, data = load_task_data("arc-challenge", hub=True)
    assert calls == [("allenai/ai2_arc", "ARC-Challenge")]
    assert task.choices == 5 and task.eval_split_names == ("dev", "test")
    assert data.train.labels == [1, 2, 4]
    assert data.train.choices == [
        ["a", "b", "c", "d", ""],
        ["a", "b", "c", "", ""],
        ["a", "b", "c", "d", "e"],
    ]
    bad = fake_datasets(
        monkeypatch, lambda *a: {"train": split(["B", "9", "E"]), "validation": split(["A", "1", "A"])}
    )
    with pytest.raises(DataError, match=r"ARC-Challenge train row 2, answerKey: '9' is not among"):
        load_task_data("arc-challenge", hub=True)
    assert bad


def test_swag_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    split = FakeDataset(
        {
            "sent1": ["A man sits."],
            "sent2": ["He"],
            **{f"ending{i}": [f"does {i}."] for i in range(4)},
            "label": [2],
        }
    )
    calls = fake_datasets(monkeypatch, lambda *a: {"train": split, "validation": split, "test": split})
    task, data = load_task_data("swag", hub=True)
    assert calls == [("allenai/swag", "regular")]
    assert task.choices == 4 and data.sizes() == {"train": 1, "dev": 1}
    assert data.train.text_a == ["A man sits."] and data.train.labels == [2]
    assert data.train.choices == [["He does 0.", "He does 1.", "He does 2.", "He does 3."]]


def test_imdb_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    split = FakeDataset(
        {"text": ["bad film", "good film"], "label": [0, 1]}, {"label": FakeFeature(["neg", "pos"])}
    )
    fake_datasets(monkeypatch, lambda *a: {"train": split, "test": split, "unsupervised": split})
    task, data = load_task_data("imdb", hub=True)
    assert task.label_names == ("neg", "pos") and data.sizes() == {"train": 2, "test": 2}
    assert data.train.labels == [0, 1]


@pytest.mark.parametrize(("name", "pointer"), [("swag", "arc-easy"), ("imdb", "movie-reviews")])
def test_hub_only_tasks_say_so(name: str, pointer: str) -> None:
    with pytest.raises(DataError, match=rf"task '{name}' comes from the hub only .* {pointer}") as error:
        load_task_data(name)
    one_line(error)


def test_new_tasks_are_registered() -> None:
    for name in ("conll2003", "ptb-pos", "arc-easy", "arc-challenge", "swag", "movie-reviews", "imdb"):
        task = get_task(name)
        assert task.description
    assert (
        get_task("arc-easy").kind == "multiple_choice" and get_task("ptb-pos").kind == "token_classification"
    )
