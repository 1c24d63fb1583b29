"""Metrics of the generation kinds, registered in :data:`attendout.tasks.metrics.METRICS`.

* ``perplexity``: ``exp`` of the mean negative log-likelihood (nats) per predicted token. Its
  "predictions" are each block's summed negative log-likelihood and its "labels" each block's count of
  predicted tokens, so that the mean is over tokens, not blocks. Lower is better.
* ``bleu`` and ``chrf``: corpus BLEU and chrF of ``sacrebleu`` (its default 13a tokenisation, one
  reference per sentence), 0-100, over decoded strings.
* ``rouge1``, ``rouge2``, ``rougeL``: the mean F-measure of ``rouge_score`` (with its Porter
  stemmer), times 100.

Scorers are imported when first used, so that the classification tasks never load them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .base import LM, SEQ2SEQ, DataError
from .metrics import register_metric


def _texts(predictions: Any, references: Any, name: str) -> tuple[list[str], list[str]]:
    hyps, refs = [str(p) for p in predictions], [str(r) for r in references]
    if len(hyps) != len(refs):
        raise DataError(f"{name}: {len(hyps)} outputs but {len(refs)} references")
    if not hyps:
        raise DataError(f"{name}: no outputs to score")
    return hyps, refs


def perplexity(nll_sums: Sequence[float], token_counts: Sequence[float]) -> float:
    """``exp(sum(nll_sums) / sum(token_counts))``: perplexity per token (see the module docstring)."""
    nll = np.asarray(nll_sums, dtype=np.float64)
    tokens = np.asarray(token_counts, dtype=np.float64)
    if nll.shape != tokens.shape:
        raise DataError(f"perplexity: {nll.shape} log-likelihood sums but {tokens.shape} token counts")
    total = tokens.sum()
    if total <= 0:
        raise DataError("perplexity: no predicted token to score")
    mean = nll.sum() / total
    return math.exp(mean) if mean < 700 else math.inf  # exp overflows a float past ~709


def bleu(predictions: Any, references: Any) -> float:
    """Corpus BLEU (sacrebleu, 0-100)."""
    import sacrebleu

    hyps, refs = _texts(predictions, references, "bleu")
    return float(sacrebleu.corpus_bleu(hyps, [refs]).score)


def chrf(predictions: Any, references: Any) -> float:
    """Corpus chrF (sacrebleu, 0-100)."""
    import sacrebleu

    hyps, refs = _texts(predictions, references, "chrf")
    return float(sacrebleu.corpus_chrf(hyps, [refs]).score)


def rouge(kind: str):
    """The mean ROUGE F-measure of ``kind`` (``rouge1``, ``rouge2``, ``rougeL``), times 100."""

    def score(predictions: Any, references: Any) -> float:
        from rouge_score import rouge_scorer

        hyps, refs = _texts(predictions, references, kind)
        scorer = rouge_scorer.RougeScorer([kind], use_stemmer=True)
        return 100.0 * float(
            np.mean([scorer.score(r, h)[kind].fmeasure for h, r in zip(hyps, refs, strict=True)])
        )

    score.__name__ = kind
    score.__doc__ = f"Mean {kind} F-measure (rouge-score, stemmed), 0-100."
    return score


register_metric("perplexity", perplexity, kinds=(LM,))
register_metric("bleu", bleu, kinds=(SEQ2SEQ,))
register_metric("chrf", chrf, kinds=(SEQ2SEQ,))
for _kind in ("rouge1", "rouge2", "rougeL"):
    register_metric(_kind, rouge(_kind), kinds=(SEQ2SEQ,))
