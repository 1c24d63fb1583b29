"""Token classification data: a CoNLL-style column reader, IOB1 -> IOB2, and the tasks ``conll2003``
and ``ptb-pos``.

**Column files** (:func:`read_conll`): one token per line, its fields separated by spaces or tabs (other
Unicode spaces, such as a no-break space inside a token, belong to the field); a
blank line (or several) ends a sentence; a line whose first field is ``-DOCSTART-`` ends a sentence
and a document and is skipped. Every token line of a file has the same number of columns (the first
token line's, or the number the task fixes: 4 for CoNLL-2003). Errors name the file, the line and
the field: a line with the wrong number of columns, a column index beyond the line, a tag outside
the task's tag set, a file with no sentence.

**IOB1 -> IOB2** (:func:`iob1_to_iob2`): CoNLL-2003 is written in IOB1, where a chunk starts with
``I-X`` and ``B-X`` appears only between two adjacent chunks of type X. We train and score on
IOB2 (every chunk starts with ``B-X``), so ``I-X`` is rewritten ``B-X`` wherever it opens a chunk
(after ``O``, at the start of a sentence, or after a tag of another type). The conversion keeps
every chunk as conlleval reads it, and leaves IOB2 input unchanged. The entity metrics read both.

**conll2003**: CoNLL-2003 English NER. Local folder (``data_dir``, or ``$ATTENDOUT_DATA/conll2003``
or ``$ATTENDOUT_DATA`` itself): ``eng.train`` (train, 14,041 sentences), ``eng.testa`` (``dev``,
3,250) and ``eng.testb`` (``test``, 3,453); four columns (token, POS, chunk, NER), the NER tag is
the fourth. Tags: ``O`` and ``B-``/``I-`` of ``PER``, ``ORG``, ``LOC``, ``MISC``, 9 in the order of
:data:`CONLL2003_TAGS` (the hub's order). ``groups`` is the document (``-DOCSTART-`` to the next), so
:func:`~attendout.tasks.carve_validation` keeps a document on one side. Hub (``hub=True``):
``datasets.load_dataset("eriktks/conll2003")`` (and, should that fail, e.g. because ``datasets`` 4
refuses a loading script, its ``revision="refs/convert/parquet"``), splits train / validation / test,
tag names mapped to ours by name. Metrics: entity F1 (main), entity precision, entity recall (conlleval's micro scores),
token accuracy.

**ptb-pos**: part-of-speech tags of the Penn Treebank WSJ *sample that NLTK ships* (199 files,
``wsj_0001``-``wsj_0199``, 3,914 sentences, about 5% of the PTB WSJ), not the full PTB of paper 001:
scores are not comparable to full-PTB numbers. Read from ``treebank.zip`` without nltk: its
``treebank/combined/wsj_*.mrg`` trees, whose leaves ``(TAG word)`` give the tagged words of each
sentence; ``-NONE-`` leaves (traces and empty elements, 6,592 of them) are dropped. These are the
sentences ``nltk.corpus.treebank.tagged_sents()`` returns. The zip's ``tagged/wsj_*.pos`` files are
not used: they hold no sentence boundaries that can be trusted (a blank line also falls inside
sentences) and an older tagging that differs from the trees' in 104 of the 199 files.
Split by file: ``wsj_0001``-``0159`` train (3,396 sentences, 81,793 tokens), ``0160``-``0179`` ``dev``
(273, 6,327), ``0180``-``0199`` ``test`` (245, 5,964); ``groups`` is the file (one article). The zip
is looked for in ``data_dir`` (the ``nltk_data`` folder, its ``corpora`` folder, a folder holding
``nltk_data/``, or the zip itself); with no ``data_dir``, in ``$ATTENDOUT_DATA/nltk_data``. Tags:
the 45 of :data:`PTB_TAGS` (36 part-of-speech tags and 9 punctuation tags). Metric: token accuracy.
No hub source (the PTB is licensed).

Lengths of the train sentences in word pieces of the packaged MiniLM's tokenizer (``[CLS]`` and
``[SEP]`` included): conll2003 median 15, 99th percentile 56, longest 164 (0.27% above 64, one above
128); ptb-pos median 28, 99th percentile 71, longest 350 (1.7% above 64, 0.15% above 128).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .base import TOKEN_CLASSIFICATION, DataError
from .core import LoadOptions, Task, TaskData, TokenExamples, register_task, split_data
from .hub import HUB_SPLITS, first_line, hub_columns, hub_splits, import_datasets
from .metrics import iob_parts
from .readers import check_file, data_root, find_folder, reading, zip_texts

DOCSTART = "-DOCSTART-"
_ASCII_SPACE = " \t\n\r\f\v"  # what separates the fields of a column file
_FIELD_SEPARATOR = re.compile(r"[ \t\n\r\f\v]+")
ENTITY_METRICS = ("entity_f1", "entity_precision", "entity_recall", "token_accuracy")

CONLL2003_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
CONLL2003_FILES = {"train": "eng.train", "dev": "eng.testa", "test": "eng.testb"}
CONLL2003_COLUMNS = 4  # token, POS, chunk, NER
CONLL2003_HUB = "eriktks/conll2003"
CONLL2003_HUB_PARQUET = "refs/convert/parquet"  # tried when the plain load fails

CONLL2003 = Task(
    name="conll2003",
    kind=TOKEN_CLASSIFICATION,
    text_fields=("tokens",),
    label_names=CONLL2003_TAGS,
    metrics=ENTITY_METRICS,
    eval_split_names=("dev", "test"),
    description="CoNLL-2003 English NER, 4 entity types, IOB1 read as IOB2 (entity F1 as conlleval)",
)

PTB_TAGS = (
    "#", "$", "''", ",", "-LRB-", "-RRB-", ".", ":", "CC", "CD", "DT", "EX", "FW", "IN", "JJ", "JJR",
    "JJS", "LS", "MD", "NN", "NNP", "NNPS", "NNS", "PDT", "POS", "PRP", "PRP$", "RB", "RBR", "RBS",
    "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN", "VBP", "VBZ", "WDT", "WP", "WP$", "WRB", "``",
)  # fmt: skip
PTB_ZIP = "treebank.zip"
PTB_SPLITS = {"train": (1, 159), "dev": (160, 179), "test": (180, 199)}  # wsj file numbers, inclusive
PTB_TRACE = "-NONE-"

PTB_POS = replace(
    CONLL2003,
    name="ptb-pos",
    label_names=PTB_TAGS,
    metrics=("token_accuracy",),
    description="POS tags of NLTK's 3,914-sentence PTB WSJ sample (not the full PTB), split by file (accuracy)",
)


# --------------------------------------------------------------------------------------------------
# Column files


@dataclass(frozen=True)
class TaggedSentences:
    """Sentences read from one source, before tags are checked: words, tags, and where each came from."""

    path: str
    words: list[list[str]]
    tags: list[list[str]]
    lines: list[list[int]]  # 1-based line of each token
    groups: list[str]  # the document (column files) or file (treebank) of each sentence
    tag_field: str  # how errors name the tag field, e.g. "column 4"
    columns: int = 0  # fields per token line of a column file (0: not a column file)

    def __len__(self) -> int:
        return len(self.words)


def read_conll(
    path: str | Path,
    *,
    token_column: int = 0,
    tag_column: int = -1,
    columns: int | None = None,
    what: str = "token file",
) -> TaggedSentences:
    """Read a CoNLL-style column file (see the module docstring); column indices are 0-based, negative
    from the end. ``columns`` fixes the number of columns of every line (else the first line's)."""
    path = Path(path)
    check_file(path, what)
    sentences: list[tuple[str, list[tuple[str, str, int]]]] = []  # (document, [(word, tag, line)])
    ended = True  # the next token line starts a sentence
    document = 0
    first_line = 0  # the first token line, which sets the number of columns
    expected = columns
    with reading(path) as handle:
        for number, line in enumerate(handle, start=1):
            stripped = line.strip(_ASCII_SPACE)
            fields = _FIELD_SEPARATOR.split(stripped) if stripped else []
            if not fields or fields[0] == DOCSTART:  # DOCSTART first: its column count may differ
                ended = True
                if fields:  # -DOCSTART- also ends the document
                    document += 1
                continue
            if expected is None:
                expected, first_line = len(fields), number
            if len(fields) != expected:
                since = f" (as line {first_line})" if first_line else ""
                raise DataError(
                    f"{path} line {number}: expected {expected} whitespace-separated columns{since}, "
                    f"found {len(fields)}"
                )
            for name, index in (("token_column", token_column), ("tag_column", tag_column)):
                if not -len(fields) <= index < len(fields):
                    raise DataError(
                        f"{path} line {number}: {name}={index} is outside the {len(fields)} columns of "
                        f"the line (0-based, negative from the end)"
                    )
            if ended:
                sentences.append((f"{path.name}#doc{document}", []))
                ended = False
            sentences[-1][1].append((fields[token_column], fields[tag_column], number))
    if not sentences:
        raise DataError(f"{path}: no sentence (the file is empty or holds only blank and {DOCSTART} lines)")
    column = (expected or 1) + tag_column if tag_column < 0 else tag_column
    words, tags, lines = ([[token[k] for token in tokens] for _, tokens in sentences] for k in range(3))
    groups = [group for group, _ in sentences]
    return TaggedSentences(str(path), words, tags, lines, groups, f"column {column + 1}", expected or 0)


# --------------------------------------------------------------------------------------------------
# IOB tags


def is_iob(tags: Sequence[str]) -> bool:
    """True when every tag is ``O``, ``B-<type>`` or ``I-<type>`` (and there is at least one)."""
    return bool(tags) and all(iob_parts(tag) is not None for tag in tags)


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
    """One sentence's IOB1 (or IOB2) tags in IOB2: an ``I-X`` that opens a chunk becomes ``B-X``."""
    out: list[str] = []
    previous = "O"
    for tag in tags:
        parts = iob_parts(tag)
        if parts is None:
            raise DataError(f"tag {tag!r} is not O, B-<type> or I-<type> (an IOB tag)")
        prefix, kind = parts
        before = iob_parts(previous)
        if prefix == "I" and (before is None or before[0] == "O" or before[1] != kind):
            tag = f"B-{kind}"
        out.append(tag)
        previous = tag
    return out


def iob_label_names(tags: Sequence[str]) -> tuple[str, ...]:
    """The IOB2 tag set of the entity types in ``tags``: ``O``, then ``B-T``, ``I-T`` per type, sorted."""
    kinds = sorted({parts[1] for tag in tags if (parts := iob_parts(tag)) is not None and parts[1]})
    return ("O", *(f"{prefix}-{kind}" for kind in kinds for prefix in ("B", "I")))


def to_token_examples(
    sentences: TaggedSentences,
    label_names: Sequence[str],
    *,
    split: str,
    iob: bool,
    groups: bool = True,
) -> TokenExamples:
    """Examples with tag indices into ``label_names``; ``iob``: tags are read as IOB1/IOB2 and written
    IOB2 (a tag is checked against the tag set before the conversion). An unknown tag is a DataError
    naming the file, line and tag field."""
    index_of = {name: i for i, name in enumerate(label_names)}
    allowed = set(label_names)
    if iob:  # IOB1 input may write B-X and I-X of any type in the set
        allowed |= {
            f"{p}-{parts[1]}" for n in label_names if (parts := iob_parts(n)) and parts[1] for p in "BI"
        }
    labels: list[list[int]] = []
    for tags, lines in zip(sentences.tags, sentences.lines, strict=True):
        for tag, line in zip(tags, lines, strict=True):
            if tag not in allowed:
                shown = ", ".join(label_names) if len(label_names) <= 12 else f"{len(label_names)} tags"
                raise DataError(
                    f"{sentences.path} line {line}, {sentences.tag_field}: tag {tag!r} is not in the tag set "
                    f"of split {split!r} ({shown})"
                )
        written = iob1_to_iob2(tags) if iob else tags
        for tag, line in zip(written, lines, strict=True):
            if tag not in index_of:  # an IOB tag set given without the B- (or I-) of a type
                raise DataError(
                    f"{sentences.path} line {line}, {sentences.tag_field}: the tag set lacks {tag!r}, which "
                    "this tag becomes in IOB2; give B- and I- of every type"
                )
        labels.append([index_of[t] for t in written])
    return TokenExamples.from_words(
        [list(w) for w in sentences.words], labels, groups=list(sentences.groups) if groups else None
    )


# --------------------------------------------------------------------------------------------------
# conll2003


def _conll_hub_sentences(dataset: Any, where: str) -> TaggedSentences:
    hub_columns(dataset, where, ("tokens", "ner_tags"))
    names = dataset.features["ner_tags"].feature.names  # Sequence(ClassLabel)
    tags = [[names[i] for i in row] for row in dataset["ner_tags"]]
    words = [[str(w) for w in row] for row in dataset["tokens"]]
    keep = [i for i, row in enumerate(words) if row]  # the hub keeps -DOCSTART- rows as empty ones
    return TaggedSentences(
        path=where,
        words=[words[i] for i in keep],
        tags=[tags[i] for i in keep],
        lines=[[i + 1] * len(words[i]) for i in keep],  # row numbers
        groups=[str(i) for i in keep],
        tag_field="column 'ner_tags'",
    )


def _load_conll_hub(task: Task) -> tuple[Task, TaskData]:
    datasets = import_datasets()
    try:
        dataset_dict = datasets.load_dataset(CONLL2003_HUB)
    except Exception as error:  # network, script datasets, cache problems: all reported as one line
        # datasets >= 4 refuses loading scripts; the hub's parquet export of the same data has none
        try:
            dataset_dict = datasets.load_dataset(CONLL2003_HUB, revision=CONLL2003_HUB_PARQUET)
        except Exception:
            raise DataError(
                f"could not load {CONLL2003_HUB} from the hub, nor its revision {CONLL2003_HUB_PARQUET} "
                f"({first_line(error)})"
            ) from None
    parts = {}
    for split, dataset in hub_splits(dataset_dict, (CONLL2003_HUB,), HUB_SPLITS).items():
        sentences = _conll_hub_sentences(dataset, f"hub {CONLL2003_HUB} {HUB_SPLITS[split]}")
        parts[split] = to_token_examples(
            sentences, task.label_names or (), split=split, iob=True, groups=False
        )
    return split_data(task, parts, f"hub {CONLL2003_HUB}")


def load_conll2003(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Loader of ``conll2003`` (see the module docstring)."""
    if options.hub:
        return _load_conll_hub(task)
    needs = (
        "task 'conll2003' needs data_dir=<folder with eng.train, eng.testa, eng.testb> (or the "
        "ATTENDOUT_DATA environment variable), or hub=True to download it"
    )
    root = data_root(options.data_dir, "", needs)
    folder = find_folder(root, "conll2003", CONLL2003_FILES["train"], "conll2003")
    if folder is None:
        raise DataError(
            f"no CoNLL-2003 data in {root}: expected {', '.join(CONLL2003_FILES.values())} there or in "
            f"{root / 'conll2003'}"
        )
    parts = {}
    for split, name in CONLL2003_FILES.items():
        sentences = read_conll(
            folder / name,
            token_column=0,
            tag_column=3,
            columns=CONLL2003_COLUMNS,
            what=f"{split} split of task 'conll2003'",
        )
        parts[split] = to_token_examples(sentences, task.label_names or (), split=split, iob=True)
    return split_data(task, parts, f"conll2003 folder {folder}")


# --------------------------------------------------------------------------------------------------
# ptb-pos


def find_nltk_zip(data_dir: str | Path | None, name: str, task: str) -> Path:
    """An NLTK corpus zip (``treebank.zip``, ``movie_reviews.zip``): ``data_dir`` may be the zip, the
    folder holding it (``corpora``), the ``nltk_data`` folder, or a folder holding ``nltk_data/``;
    with no ``data_dir``, ``$ATTENDOUT_DATA/nltk_data`` is used."""
    needs = (
        f"task {task!r} needs data_dir=<nltk_data folder holding corpora/{name}> (or the "
        "ATTENDOUT_DATA environment variable)"
    )
    root = data_root(data_dir, "nltk_data", needs)
    if root.is_file() and root.name == name:
        return root
    folder = find_folder(root, task, name, "corpora", "nltk_data/corpora")
    if folder is not None:
        return folder / name
    raise DataError(
        f"no {name} for task {task!r} in {root} (looked in it, in corpora/ and in nltk_data/corpora/)"
    )


_PTB_FILE = re.compile(r"treebank/combined/wsj_(\d{4})\.mrg")
_PTB_TOKEN = re.compile(r"\(|\)|[^ \t\n\r\f\v()]+")  # words hold any but ASCII spaces, as in column files


def _parse_mrg(text: str, where: str) -> list[tuple[list[str], list[str], list[int]]]:
    """The tagged words of each tree of one ``.mrg`` file: ``(words, tags, lines)`` with traces."""
    tokens = [(m.group(), m.start()) for m in _PTB_TOKEN.finditer(text)]
    newlines = [m.start() for m in re.finditer("\n", text)]

    def line_of(offset: int) -> int:  # counting the newlines before each word took most of a read
        return bisect.bisect_left(newlines, offset) + 1

    sentences: list[tuple[list[str], list[str], list[int]]] = []
    current: tuple[list[str], list[str], list[int]] = ([], [], [])
    depth = 0
    i = 0
    while i < len(tokens):
        token, offset = tokens[i]
        if token == "(":
            ahead = [t for t, _ in tokens[i + 1 : i + 4]]
            if len(ahead) == 3 and ahead[0] not in "()" and ahead[1] not in "()" and ahead[2] == ")":
                current[0].append(ahead[1])  # (TAG word)
                current[1].append(ahead[0])
                current[2].append(line_of(offset))
                i += 4
                continue
            depth += 1
            if i + 1 < len(tokens) and tokens[i + 1][0] not in "()":
                i += 1  # the constituent's label: (NP-SBJ ...)
        elif token == ")":
            depth -= 1
            if depth < 0:
                raise DataError(f"{where} line {line_of(offset)}: unbalanced ')' in the tree")
            if depth == 0:
                if not current[0]:
                    raise DataError(f"{where} line {line_of(offset)}: a tree with no tagged word")
                sentences.append(current)
                current = ([], [], [])
        elif depth == 0:
            raise DataError(f"{where} line {line_of(offset)}: text {token!r} outside a tree")
        else:  # skipping it would drop a word without a word of warning
            raise DataError(
                f"{where} line {line_of(offset)}: word {token!r} is not in a (TAG word) leaf; write every "
                "word as (TAG word)"
            )
        i += 1
    if depth != 0:
        raise DataError(f"{where}: the last tree is not closed ({depth} '(' left open)")
    return sentences


def read_ptb_zip(path: str | Path) -> dict[int, TaggedSentences]:
    """file number -> the sentences of ``treebank/combined/wsj_NNNN.mrg`` in the zip, traces dropped."""
    path = Path(path)
    files: dict[int, TaggedSentences] = {}
    for member, match, text in zip_texts(path, _PTB_FILE):
        where = f"{path}:{member}"
        words: list[list[str]] = []
        tags: list[list[str]] = []
        lines: list[list[int]] = []
        for number, (w, t, ln) in enumerate(_parse_mrg(text, where), start=1):
            kept = [k for k, tag in enumerate(t) if tag != PTB_TRACE]
            if not kept:
                raise DataError(f"{where} line {ln[0]}: sentence {number} has only {PTB_TRACE} tokens")
            words.append([w[k] for k in kept])
            tags.append([t[k] for k in kept])
            lines.append([ln[k] for k in kept])
        stem = Path(member).stem
        files[int(match.group(1))] = TaggedSentences(
            where, words, tags, lines, [stem] * len(words), "tag of the (TAG word) leaf"
        )
    if not files:
        raise DataError(f"{path}: no treebank/combined/wsj_*.mrg files in the zip")
    return files


def load_ptb_pos(task: Task, options: LoadOptions) -> tuple[Task, TaskData]:
    """Loader of ``ptb-pos`` (see the module docstring)."""
    if options.hub:
        raise DataError(
            "task 'ptb-pos' has no hub source (the PTB sample comes with nltk_data); drop hub=True"
        )
    path = find_nltk_zip(options.data_dir, PTB_ZIP, task.name)
    files = read_ptb_zip(path)
    parts: dict[str, TokenExamples] = {}
    for split, (first, last) in PTB_SPLITS.items():
        chosen = [files[n] for n in sorted(files) if first <= n <= last]
        if not chosen:
            raise DataError(f"{path}: no wsj_{first:04d}..wsj_{last:04d}.mrg for split {split!r}")
        pieces = [to_token_examples(f, task.label_names or (), split=split, iob=False) for f in chosen]
        parts[split] = TokenExamples.from_words(
            [w for piece in pieces for w in piece.words or []],
            [y for piece in pieces for y in piece.labels],
            groups=[g for piece in pieces for g in piece.groups or []],
        )
    return split_data(task, parts, f"nltk treebank sample {path}")


register_task(CONLL2003, load_conll2003, replace=True)
register_task(PTB_POS, load_ptb_pos, replace=True)
