"""Data encoding for the loop: tokenised examples of every task kind, padded batches, batched prediction.

:func:`encode` turns a split's examples into an :class:`Encoded` of the task's kind:

* sequence classification and regression (:class:`Encoded`): one text or a pair per example. Texts
  longer than ``max_length`` word pieces are cut by the ``truncation`` strategy:

  - ``"head-tail"`` (the default for single texts, ``"auto"``): keep the first quarter of the window
    and the last three quarters (of ``max_length - 2`` pieces, for ``[CLS]`` and ``[SEP]``: 127 + 383 at
    512). Sun et al. 2019 ("How to fine-tune BERT for text classification?") found the head plus the
    tail of a long review (128 + 382 of 510 pieces) better on IMDb than the head or the tail alone:
    a review's verdict sits mostly in its closing lines, its topic in the opening ones.
  - ``"head"``: the first pieces only (``transformers``' own truncation; pairs always cut the longer
    text first, whatever the strategy).
  - ``"sliding"`` (:class:`Windows`): every window of ``max_length`` pieces with ``stride`` pieces of
    overlap; each window trains as an example with its document's label, and a document's prediction
    is the mean of its windows' logits.

  ``Encoded.cut`` counts the examples longer than the window (their truncation is in the run's config:
  :func:`truncation_summary`).
* token classification (:class:`TokenEncoded`): the words of each example, tokenised as pre-split
  words; a word's tag sits on its first word piece and every other piece (and special token) has
  label -100, ignored by the loss. Predictions come back one tag per word; a word cut by
  ``max_length`` gets tag 0 (counted in ``cut``).
* multiple choice (:class:`ChoiceEncoded`): each example is ``choices`` pairs (question, option),
  batched as ``(B, choices, L)`` as ``transformers``' multiple-choice heads take them. An empty option
  (padding a question with fewer options) is never predicted: its score is set to -inf before the
  argmax and softmax. In training it stays in the softmax of the loss, as a wrong answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch import nn

from ..tasks import LM, MULTIPLE_CHOICE, REGRESSION, SEQ2SEQ, TOKEN_CLASSIFICATION, Examples
from .batches import IGNORE_INDEX, Batches, padded_labels
from .lm_seq2seq import GenerationOptions, LMEncoded, Seq2SeqEncoded
from .truncation import TRUNCATIONS, head_tail_sizes


def _rows(enc: Any, count: int) -> list[dict[str, list[int]]]:
    """The first ``count`` examples of a tokenizer's output, one ``{name: ids}`` each."""
    return [{k: enc[k][i] for k in enc.keys()} for i in range(count)]


class Encoded(Batches):
    """Tokenised examples of sequence classification or regression, batched with dynamic padding.

    ``labels``: the gold labels as a tensor (None for unlabelled text); ``gold``: the same as the
    metrics take them (one per example). ``cut``: how many examples were longer than ``max_length``.
    """

    kind = "sequence"
    regression = False  # set by __init__; the token and choice kinds keep these
    truncation = "head"

    def __init__(
        self,
        examples: Examples,
        tokenizer,
        max_length: int,
        regression: bool,
        truncation: str = "auto",
    ):
        if truncation not in TRUNCATIONS:
            raise ValueError(f"truncation must be one of {', '.join(TRUNCATIONS)}, got {truncation!r}")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.regression = regression
        if truncation == "auto":
            truncation = "head" if examples.text_b is not None else "head-tail"
        self.truncation = truncation
        full = tokenizer(
            examples.text_a, examples.text_b, padding=False, truncation=False, return_token_type_ids=None
        )
        self.cut = sum(len(ids) > max_length for ids in full["input_ids"])
        self.features = self._features(examples, full)
        # Unlabelled examples (``labels`` None: text to predict) give batches without labels.
        self.labels = (
            None
            if examples.labels is None
            else torch.tensor(examples.labels, dtype=torch.float if regression else torch.long)
        )

    def _features(self, examples: Examples, full: Any) -> list[dict[str, list[int]]]:
        if self.truncation == "head-tail" and examples.text_b is None:
            return [self._head_tail(row) for row in _rows(full, len(examples))]
        enc = self.tokenizer(
            examples.text_a,
            examples.text_b,
            truncation=True,
            max_length=self.max_length,
            padding=False,
            return_token_type_ids=None,
        )
        return _rows(enc, len(examples))

    def _head_tail(self, feature: dict[str, list[int]]) -> dict[str, list[int]]:
        """``feature`` (one whole text, with its special tokens) cut to its head and tail pieces."""
        ids = feature["input_ids"]
        if len(ids) <= self.max_length:
            return feature
        tok = self.tokenizer
        if (
            tok.num_special_tokens_to_add(False) != 2
            or ids[0] != tok.cls_token_id
            or ids[-1] != tok.sep_token_id
        ):
            raise ValueError(
                f"head-tail truncation keeps the tokenizer's first and last special token around the cut "
                f"text; {type(tok).__name__} does not wrap one text as one token on each side: use "
                "truncation 'head' or 'sliding'"
            )
        head, tail = head_tail_sizes(self.max_length)
        pieces = ids[1:-1]
        kept = [ids[0], *pieces[:head], *pieces[len(pieces) - tail :], ids[-1]]
        return {k: kept if k == "input_ids" else v[: len(kept)] for k, v in feature.items()}

    def __len__(self) -> int:
        return len(self.features)

    @property
    def gold(self) -> Any:
        """The gold labels as the metrics take them (None for unlabelled text)."""
        return None if self.labels is None else self.labels.numpy()

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        batch = self.tokenizer.pad([self.features[i] for i in indices], padding=True, return_tensors="pt")
        if self.labels is not None:
            batch["labels"] = self.labels[self.label_rows(indices)]
        return dict(batch)

    def label_rows(self, indices: list[int]) -> list[int]:
        """The rows of ``labels`` of the items at ``indices`` (a window's: its document's)."""
        return indices

    # prediction: logits of batches in order -> predictions and scores per example -------------
    def _predictions(
        self, model: nn.Module, batches: Iterator[dict[str, torch.Tensor]], autocast: Callable[[], Any]
    ) -> tuple[Any, Any, float | None]:
        logits_out, losses, rows = [], [], 0
        for batch in batches:
            with autocast():
                out = model(**batch)
            logits = out.logits.float()
            rows += len(logits)
            if out.loss is not None:
                losses.append(out.loss.float() * len(logits))
            logits_out.append(logits.cpu())
        preds, scores = self.collect(logits_out)
        loss = (torch.stack(losses).sum() / rows).item() if losses else None
        if isinstance(preds, np.ndarray) and preds.size != self.examples_count():
            raise RuntimeError(f"{preds.size} predictions for {self.examples_count()} examples")
        return preds, scores, loss

    def collect(self, logits: list[torch.Tensor]) -> tuple[Any, Any]:
        """(predictions, scores) of every example from the logits of :meth:`batches` in order."""
        return self._scored(torch.cat([x.reshape(x.shape[0], -1) for x in logits]))

    def _scored(self, out: torch.Tensor) -> tuple[Any, Any]:
        """(predictions, scores) from one row of logits per example: the values for regression, else the
        argmax and the softmax."""
        if self.regression:
            values = out.squeeze(-1).numpy()
            return values, values
        return out.argmax(-1).numpy(), torch.softmax(out, -1).numpy()


class Windows(Encoded):
    """Sliding windows over long texts: a window is a training example, a document's logits the mean
    of its windows' logits. ``stride`` pieces overlap between neighbouring windows."""

    def __init__(
        self, examples: Examples, tokenizer, max_length: int, regression: bool, stride: int | None = None
    ):
        if examples.text_b is not None:
            raise ValueError(
                "sliding windows are for single texts; a pair task truncates (truncation 'head')"
            )
        self.stride = max_length // 4 if stride is None else stride
        if not 0 <= self.stride < max_length - 2:
            raise ValueError(f"window stride must be in [0, {max_length - 2}), got {self.stride}")
        super().__init__(examples, tokenizer, max_length, regression, truncation="sliding")

    def _features(self, examples: Examples, full: Any) -> list[dict[str, list[int]]]:
        if not getattr(self.tokenizer, "is_fast", False):
            raise ValueError("sliding windows need a fast tokenizer (return_overflowing_tokens)")
        enc = self.tokenizer(
            examples.text_a,
            truncation=True,
            max_length=self.max_length,
            stride=self.stride,
            return_overflowing_tokens=True,
            padding=False,
            return_token_type_ids=None,
        )
        self.doc_of = [int(d) for d in enc.pop("overflow_to_sample_mapping")]
        self.documents = len(examples)
        return _rows(enc, len(self.doc_of))

    def label_rows(self, indices: list[int]) -> list[int]:
        return [self.doc_of[i] for i in indices]

    def examples_count(self) -> int:
        return self.documents

    def collect(self, logits: list[torch.Tensor]) -> tuple[Any, Any]:
        out = torch.cat(logits).float()  # (windows, C)
        doc = torch.tensor(self.doc_of)
        sums = torch.zeros(self.documents, out.shape[-1]).index_add_(0, doc, out)
        counts = torch.bincount(doc, minlength=self.documents).clamp(min=1)[:, None]
        return self._scored(sums / counts)


class TokenEncoded(Encoded):
    """Token classification: one tag per word, on the word's first piece (the rest: -100)."""

    kind = "token"

    def __init__(self, examples: Examples, tokenizer, max_length: int):
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("token classification needs a fast tokenizer (word_ids)")
        words = getattr(examples, "words", None)
        if words is None:
            raise ValueError("token classification needs TokenExamples (words and one tag per word)")
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.words = [len(w) for w in words]
        enc = tokenizer(
            words,
            is_split_into_words=True,
            truncation=True,
            max_length=max_length,
            return_token_type_ids=None,
        )
        self.features, self.firsts = _rows(enc, len(words)), []
        tags = examples.labels
        self.cut = 0
        self.token_labels: list[list[int]] | None = None if tags is None else []
        for i in range(len(words)):
            word_ids = enc.word_ids(i)
            first: dict[int, int] = {}  # word -> its first piece
            for pos, w in enumerate(word_ids):
                if w is not None and w not in first:
                    first[w] = pos
            self.firsts.append([first.get(w, -1) for w in range(len(words[i]))])
            self.cut += len(first) < len(words[i])
            if self.token_labels is not None:
                row = [IGNORE_INDEX] * len(word_ids)
                for w, pos in first.items():
                    row[pos] = int(tags[i][w])
                self.token_labels.append(row)
        self.gold_tags = None if tags is None else [list(map(int, t)) for t in tags]
        self.labels = None  # per-word tags: see ``gold``; batches carry per-piece ``labels``

    @property
    def gold(self) -> Any:
        return self.gold_tags

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        batch = dict(
            self.tokenizer.pad([self.features[i] for i in indices], padding=True, return_tensors="pt")
        )
        if self.token_labels is not None:
            rows = [self.token_labels[i] for i in indices]
            batch["labels"] = padded_labels(rows, batch["input_ids"].shape[1])
        return batch

    def collect(self, logits: list[torch.Tensor]) -> tuple[Any, Any]:
        preds, scores, i = [], [], 0
        for block in logits:  # (b, L, T)
            probs = torch.softmax(block.float(), -1)
            best, tag = probs.max(-1)
            for row in range(block.shape[0]):
                firsts = self.firsts[i]
                preds.append([int(tag[row, p]) if p >= 0 else 0 for p in firsts])
                scores.append([round(float(best[row, p]), 6) if p >= 0 else None for p in firsts])
                i += 1
        return preds, scores


class ChoiceEncoded(Encoded):
    """Multiple choice: each example is ``choices`` (question, option) pairs, batched (B, choices, L)."""

    kind = "choice"

    def __init__(self, examples: Examples, tokenizer, max_length: int):
        options = getattr(examples, "choices", None)
        if options is None:
            raise ValueError("multiple choice needs ChoiceExamples (a question and its options)")
        self.tokenizer = tokenizer
        self.max_length = max_length
        counts = {len(o) for o in options}
        if len(counts) > 1:
            raise ValueError(f"every example needs the same number of options, found {sorted(counts)}")
        self.choices = counts.pop() if counts else 0
        first = [q for q, o in zip(examples.text_a, options, strict=True) for _ in o]
        second = [c for o in options for c in o]
        full = tokenizer(first, second, truncation=False, return_token_type_ids=None)["input_ids"]
        self.cut = sum(
            any(len(full[i * self.choices + j]) > max_length for j in range(self.choices))
            for i in range(len(options))
        )
        enc = tokenizer(first, second, truncation=True, max_length=max_length, return_token_type_ids=None)
        flat = _rows(enc, len(first))
        self.features = [flat[i * self.choices : (i + 1) * self.choices] for i in range(len(options))]
        self.labels = None if examples.labels is None else torch.tensor(examples.labels, dtype=torch.long)
        # Empty options pad a question with fewer options (ARC's 3-option rows): never predicted.
        self.empty = torch.tensor([[not c.strip() for c in o] for o in options], dtype=torch.bool)

    def collect(self, logits: list[torch.Tensor]) -> tuple[Any, Any]:
        return self._scored(torch.cat(logits).float().masked_fill(self.empty, float("-inf")))

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        flat = [f for i in indices for f in self.features[i]]
        padded = self.tokenizer.pad(flat, padding=True, return_tensors="pt")
        batch = {k: v.view(len(indices), self.choices, -1) for k, v in padded.items()}
        if self.labels is not None:
            batch["labels"] = self.labels[indices]
        return batch


def encode(
    examples: Examples,
    task,
    tokenizer,
    max_length: int,
    truncation: str = "auto",
    stride: int | None = None,
    *,
    block_size: int | None = None,
    generation: GenerationOptions | None = None,
) -> Encoded:
    """``examples`` of ``task`` encoded for its kind (see the module docstring).

    Generation kinds (:mod:`attendout.encoding.lm_seq2seq`): ``lm`` cuts the documents into blocks of
    ``block_size`` tokens (default ``max_length``); ``seq2seq`` generates with ``generation``
    (:class:`~attendout.encoding.lm_seq2seq.GenerationOptions`) when predicting.
    """
    if task.kind == LM:
        return LMEncoded(examples, tokenizer, block_size or max_length)
    if task.kind == SEQ2SEQ:
        return Seq2SeqEncoded(examples, tokenizer, max_length, generation)
    if task.kind in (TOKEN_CLASSIFICATION, MULTIPLE_CHOICE) and truncation not in ("auto", "head"):
        raise ValueError(
            f"truncation {truncation!r} is for long texts of sequence classification and regression; task "
            f"{task.name!r} is {task.kind}, whose inputs are cut at max_length (truncation 'auto' or 'head')"
        )
    if task.kind == TOKEN_CLASSIFICATION:
        return TokenEncoded(examples, tokenizer, max_length)
    if task.kind == MULTIPLE_CHOICE:
        return ChoiceEncoded(examples, tokenizer, max_length)
    regression = task.kind == REGRESSION
    if truncation == "sliding":
        return Windows(examples, tokenizer, max_length, regression, stride)
    return Encoded(examples, tokenizer, max_length, regression, truncation)


def truncation_summary(sets: dict[str, Encoded], task, max_length: int) -> dict[str, Any]:
    """How texts longer than ``max_length`` were cut, and how many were, per split of ``sets``.

    The first split's strategy (the training split's) is every split's. A run records the summary in
    its config.json and results.json.
    """
    first = next(iter(sets.values()))
    summary: dict[str, Any] = {"strategy": first.truncation, "max_length": max_length}
    if first.truncation == "head-tail":
        summary["head"], summary["tail"] = head_tail_sizes(max_length)
    if first.truncation == "sliding":
        summary["stride"] = first.stride
        summary["windows"] = {name: len(data) for name, data in sets.items()}
    summary["cut"] = {name: data.cut for name, data in sets.items()}
    if task.kind == TOKEN_CLASSIFICATION:  # the words past the cut get the first tag
        summary["cut_words_tagged"] = task.label_names[0]
    return summary


def predict_batches(
    model: nn.Module,
    data: Encoded,
    batch_size: int,
    device: torch.device,
    autocast_dtype: torch.dtype | None = None,
    *,
    regression: bool | None = None,
    progress: bool = False,
    between: Callable[[], None] | None = None,
) -> tuple[Any, Any, float | None]:
    """Run ``model`` (in eval mode) over ``data`` in order: (predictions, scores, mean loss).

    Classification: predictions are class indices, scores the softmax probabilities [n, classes].
    Regression: both are the predicted values [n]. Token classification: a list per example of one
    tag index per word, and the probability of each (None for a word cut by max_length). Multiple
    choice: the chosen option's index, and the softmax over the options [n, choices]. The loss
    (mean over the batches' rows; windows and pieces as the model's loss counts them) is ``None`` for
    unlabelled data. ``progress`` shows a bar of the batches (on stderr). ``regression`` is read from
    ``data`` and kept for callers that pass it. ``between`` is called before each batch: the loop's
    check for a stop request, which ends a long evaluation at the next batch by raising.
    """
    return data.predict(model, batch_size, device, autocast_dtype, progress, between)
