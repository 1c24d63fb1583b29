"""Encoded data of the generation kinds, batched for the loop, and their prediction.

* :class:`LMEncoded` (``lm``): each document is tokenised without special tokens and ended with the
  end-of-sequence token; the documents are joined into one stream and cut into blocks of ``block_size``
  tokens (the last block may be shorter: every token is scored). A batch's ``labels`` are its
  ``input_ids`` (the model shifts them); a block of n tokens predicts n - 1. Prediction gives each
  block's summed negative log-likelihood and its count of predicted tokens: the ``perplexity`` metric's
  inputs (:mod:`attendout.tasks.textmetrics`).
* :class:`Seq2SeqEncoded` (``seq2seq``): sources and targets tokenised (at most ``max_length`` tokens
  each, counted in ``cut``), the targets as ``labels`` padded with -100. Prediction gives the loss and
  the decoded outputs of ``model.generate`` (greedy, or beam search with ``num_beams``), which the
  metrics (BLEU, chrF, ROUGE) compare with the reference texts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..tasks import Examples
from .batches import IGNORE_INDEX, Batches, padded_labels


class LMEncoded(Batches):
    """Documents as one token stream cut into blocks (see the module docstring)."""

    kind = "lm"
    truncation = "blocks"

    def __init__(self, examples: Examples, tokenizer, block_size: int):
        if block_size < 2:
            raise ValueError(
                f"block_size must be at least 2 (a token and the one it predicts), got {block_size}"
            )
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError(f"{type(tokenizer).__name__} has no end-of-sequence token to end documents with")
        self.tokenizer = tokenizer
        self.block_size = self.max_length = block_size
        self.documents = len(examples)
        ids = tokenizer(list(examples.text_a), add_special_tokens=False)["input_ids"]
        stream = [token for doc in ids for token in (*doc, eos)]
        self.blocks = [stream[i : i + block_size] for i in range(0, len(stream), block_size)]
        if self.blocks and len(self.blocks[-1]) < 2:  # a lone last token predicts nothing
            self.blocks.pop()
        if not self.blocks:
            raise ValueError("no text to model: the documents gave fewer than 2 tokens")
        self.tokens = len(stream)
        self.cut = 0  # nothing is cut: the stream continues in the next block
        self.labels = None
        self.unigram_perplexity: float | None = None  # set by :func:`score_unigram_floor`

    def __len__(self) -> int:
        return len(self.blocks)

    @property
    def gold(self) -> list[int]:
        """Predicted tokens per block (perplexity's "labels")."""
        return [len(b) - 1 for b in self.blocks]

    def counts(self) -> dict[str, float]:
        """What the metrics are over: the predicted tokens (and the unigram floor, where it was scored)."""
        floor = {} if self.unigram_perplexity is None else {"unigram_perplexity": self.unigram_perplexity}
        return {"tokens": float(sum(self.gold)), **floor}

    def predicted(self) -> list[int]:
        """Every token a block predicts (all but each block's first), in order."""
        return [token for block in self.blocks for token in block[1:]]

    def examples_count(self) -> int:
        return self.documents

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        labels = padded_labels([self.blocks[i] for i in indices])
        mask = (labels != IGNORE_INDEX).long()
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        return {"input_ids": labels.masked_fill(mask == 0, pad), "attention_mask": mask, "labels": labels}

    predicting = "scoring"

    def _predictions(
        self, model: nn.Module, batches: Iterator[dict[str, torch.Tensor]], autocast: Callable[[], Any]
    ) -> tuple[list[float], None, float]:
        """(summed negative log-likelihood per block, None, mean loss per predicted token)."""
        sums: list[float] = []
        for batch in batches:
            labels = batch.pop("labels")
            with autocast():
                logits = model(**batch).logits
            sums.extend(token_nll(logits.float(), labels).sum(-1).tolist())
        return sums, None, sum(sums) / max(1, sum(self.gold))


def score_unigram_floor(train: Batches, *evaluated: Batches) -> None:
    """For a language model's splits: the perplexity of a unigram model of the training stream (each token's
    training frequency, add-one smoothed over the vocabulary), on the tokens each split predicts: what a
    model that ignores all context scores, ``advise``'s chance floor for perplexity. Stored on each split,
    reported with its metrics as ``unigram_perplexity``. Other task kinds: nothing."""
    if not isinstance(train, LMEncoded):
        return
    import math
    from collections import Counter

    counts = Counter(token for block in train.blocks for token in block)
    vocabulary = max(len(train.tokenizer), max(counts, default=0) + 1)
    total = sum(counts.values()) + vocabulary
    for split in evaluated:
        if isinstance(split, LMEncoded):
            tokens = split.predicted()
            nll = -sum(math.log((counts.get(t, 0) + 1) / total) for t in tokens)
            split.unigram_perplexity = math.exp(nll / max(1, len(tokens)))


def token_nll(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """(B, L-1) negative log-likelihood of each next token (0 where the label is ignored)."""
    shifted = labels[:, 1:]
    # shape (B, L-1)
    nll = nn.functional.cross_entropy(logits[:, :-1].transpose(1, 2), shifted.clamp(min=0), reduction="none")
    return nll.masked_fill(shifted == IGNORE_INDEX, 0.0)


class GenerationOptions:
    """How outputs are generated for the metrics: beams and a length limit (``max_new_tokens``)."""

    def __init__(self, num_beams: int = 1, max_new_tokens: int = 128):
        if num_beams < 1 or max_new_tokens < 1:
            raise ValueError(
                f"num_beams and max_new_tokens must be at least 1, got {num_beams}, {max_new_tokens}"
            )
        self.num_beams, self.max_new_tokens = num_beams, max_new_tokens

    def kwargs(self) -> dict[str, Any]:
        return {"num_beams": self.num_beams, "max_new_tokens": self.max_new_tokens, "do_sample": False}


class Seq2SeqEncoded(Batches):
    """Source and target token ids (see the module docstring)."""

    kind = "seq2seq"
    truncation = "head"

    def __init__(
        self, examples: Examples, tokenizer, max_length: int, generation: GenerationOptions | None = None
    ):
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.generation = generation or GenerationOptions(max_new_tokens=max_length)
        sources = list(examples.text_a)
        self.sources = sources  # written beside each prediction (the copy-the-source floor)
        targets = getattr(examples, "targets", None)
        full = tokenizer(sources)["input_ids"]
        self.features = [
            {"input_ids": ids[:max_length], "attention_mask": [1] * min(len(ids), max_length)} for ids in full
        ]
        self.cut = sum(len(ids) > max_length for ids in full)
        self.references = None if targets is None else list(targets)
        self.target_ids = None
        if targets is not None:
            full_targets = tokenizer(text_target=list(targets))["input_ids"]
            self.cut += sum(len(ids) > max_length for ids in full_targets)
            self.target_ids = [ids[:max_length] for ids in full_targets]
        self.labels = None

    def __len__(self) -> int:
        return len(self.features)

    @property
    def gold(self) -> list[str] | None:
        return self.references

    def counts(self) -> dict[str, float]:
        return {} if self.target_ids is None else {"target_tokens": float(sum(map(len, self.target_ids)))}

    def batch(self, indices: list[int]) -> dict[str, torch.Tensor]:
        batch = dict(
            self.tokenizer.pad([self.features[i] for i in indices], padding=True, return_tensors="pt")
        )
        if self.target_ids is not None:
            batch["labels"] = padded_labels([self.target_ids[i] for i in indices])
        return batch

    predicting = "generating"

    def _predictions(
        self, model: nn.Module, batches: Iterator[dict[str, torch.Tensor]], autocast: Callable[[], Any]
    ) -> tuple[list[str], None, float | None]:
        """(decoded outputs, None, mean loss per target token; None without targets)."""
        outputs: list[str] = []
        nll, tokens = 0.0, 0
        for batch in batches:
            with autocast():
                if "labels" in batch:
                    count = int((batch["labels"] != IGNORE_INDEX).sum())
                    nll += float(model(**batch).loss.float()) * count
                    tokens += count
                generated = model.generate(
                    input_ids=batch["input_ids"],
                    attention_mask=batch["attention_mask"],
                    **self.generation.kwargs(),
                )
            outputs.extend(
                t.strip() for t in self.tokenizer.batch_decode(generated, skip_special_tokens=True)
            )
        return outputs, None, (nll / tokens if tokens else None)
