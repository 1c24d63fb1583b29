"""A model's and a method's limits, checked against a run's settings before anything trains.

The longest input a model can take depends on how its family encodes positions (:data:`POSITIONS`):

* ``absolute``: a learned table of ``max_position_embeddings`` rows (BERT, ELECTRA, ALBERT,
  DistilBERT, GPT-2; DeBERTa-v2 when ``position_biased_input``). A longer input has no row: the
  forward fails with an index error. A hard limit.
* ``offset``: the same table, but positions start after the padding index (RoBERTa, XLM-R): the
  limit is ``max_position_embeddings - pad_token_id - 1`` (514 rows give 512 positions). MPNet's
  padding index is 1 whatever its config says (its embeddings fix it): always 2 rows fewer
  (``offset-2``).
* ``rotary`` and ``relative``: positions computed, not looked up (Llama, Mistral, Qwen2, ModernBERT,
  EuroBERT; T5's buckets; DeBERTa-v2/v3's relative attention). Nothing fails beyond
  ``max_position_embeddings``, but the model never saw such lengths: a warning, not an error.

A tokenizer's ``model_max_length`` below the run's length is a warning too (it is often set by hand
and sometimes wrong), and a method may have limits of its own (:meth:`MethodConfig.check_limits
<attendout.methods.MethodConfig.check_limits>`: Synthesizer's ``l_max``). :func:`check_length`
applies them all to one length; the fine-tuning loop, ``predict``, ``bench --dry-run``, ``advise`` and
``attendout.hf.Trainer`` call it before the first step.

The generation kinds send more than one length through a model, and :func:`check_lengths` checks each
against the side of the model it goes through, naming the option that set it:

* ``lm`` (a decoder): a block of ``--block-size`` tokens (default ``--max-length``) against the
  context; ``--max-new-tokens`` must leave a prompt at least one token of it (``predict`` keeps a
  prompt's last ``context - max_new_tokens`` tokens).
* ``seq2seq`` (an encoder-decoder): ``--max-length`` tokens of a source against the encoder's
  positions and of a target (teacher-forced) against the decoder's, and ``--max-new-tokens`` (default
  ``--max-length``) against the decoder's: BART, mBART and Marian have ``max_position_embeddings`` on
  each side (learned, or a fixed table), and decoding past it fails at the first output that long.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

#: How each supported family encodes positions (see the module docstring). A family added to
#: :data:`attendout.attention.families.FAMILIES` must say here how long its inputs may be.
POSITIONS: dict[str, str] = {
    "bert": "absolute",
    "electra": "absolute",
    "albert": "absolute",
    "distilbert": "absolute",
    "gpt2": "absolute",
    "roberta": "offset",
    "xlm-roberta": "offset",
    "mpnet": "offset-2",  # positions start at 2: its padding index is fixed at 1, not read from the config
    "deberta-v2": "absolute-if-biased",
    "modernbert": "rotary",
    "eurobert": "rotary",
    "llama": "rotary",
    "mistral": "rotary",
    "qwen2": "rotary",
    "t5": "relative",
    "mt5": "relative",
    # learned positions (BART, mBART: the table holds 2 more rows, an offset its forward adds itself) or a
    # fixed sinusoidal table (Marian): max_position_embeddings tokens, on each side of an encoder-decoder
    "bart": "absolute",
    "mbart": "absolute",
    "marian": "absolute",
}

#: tokenizers without a known length say so with a huge model_max_length (int(1e30))
_NO_TOKENIZER_LIMIT = 10**8


class LimitError(ValueError):
    """A run's setting is beyond what its model or method can take."""


def position_limit(config: Any) -> tuple[int | None, bool]:
    """(the longest input ``config``'s model takes, whether longer inputs fail) for a model config.

    ``(None, False)`` where nothing is known (a family not in :data:`POSITIONS`, or no
    ``max_position_embeddings``).
    """
    kind = POSITIONS.get(getattr(config, "model_type", ""), "")
    rows = getattr(config, "max_position_embeddings", None)
    if not kind or not isinstance(rows, int):
        return None, False
    if kind == "offset":
        return rows - int(getattr(config, "pad_token_id", 0) or 0) - 1, True
    if kind == "offset-2":
        return rows - 2, True
    if kind == "absolute-if-biased":
        return rows, bool(getattr(config, "position_biased_input", True))
    return rows, kind == "absolute"


def check_length(
    max_length: int,
    config: Any,
    *,
    tokenizer: Any = None,
    method: Any = None,
    model: str = "the model",
    setting: str = "--max-length",
    warn: bool = True,
    what: str = "input",
) -> None:
    """Raise :class:`LimitError` if inputs of ``max_length`` tokens are more than the model (its
    ``config``) or ``method`` (a :class:`~attendout.methods.MethodConfig`) can take; warn where the
    length is only beyond what the model or its tokenizer was made for (unless not ``warn``). ``model``,
    ``setting`` and ``what`` (the sequence: "input", "output") name them in the messages."""
    if max_length < 1:
        raise LimitError(f"{setting} must be at least 1, got {max_length}")
    limit, hard = position_limit(config)
    family = getattr(config, "model_type", "?")
    if limit is not None and max_length > limit:
        if hard:
            long_document = (  # a classifier's input may be cut into windows; a block or a target not
                " (a long document: --truncation sliding)"
                if (setting, what) == ("--max-length", "input")
                else ""
            )
            raise LimitError(
                f"{setting} {max_length} is more than {model} can embed: its family ({family}) has "
                f"{limit} learned positions (max_position_embeddings {config.max_position_embeddings}), and a "
                f"longer {what} fails mid-run; use {setting} {limit} or less{long_document}"
            )
        if warn:
            logger.warning(
                "%s %d is more than the %d positions %s (%s) was trained with (max_position_embeddings); its "
                "positions are computed, so longer inputs run, but how well the model reads them is not known",
                setting,
                max_length,
                limit,
                model,
                family,
            )
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    if warn and isinstance(tokenizer_limit, int) and max_length > tokenizer_limit < _NO_TOKENIZER_LIMIT:
        if limit is None or tokenizer_limit < limit:  # not said twice
            logger.warning(
                "%s %d is more than the tokenizer of %s says the model takes (model_max_length %d)",
                setting,
                max_length,
                model,
                tokenizer_limit,
            )
    if method is not None:
        method.check_limits(max_length, config, setting=setting)


def check_lengths(
    kind: str,
    config: Any,
    *,
    max_length: int,
    block_size: int | None = None,
    max_new_tokens: int | None = None,
    tokenizer: Any = None,
    method: Any = None,
    model: str = "the model",
    warn: bool = True,
    flags: bool = True,
) -> None:
    """Every length a run of task kind ``kind`` sends through the model of ``config``, checked against
    the side of the model it goes through (see the module docstring), before anything trains. Each
    message names the option (``--block-size``, ``--max-length``, ``--max-new-tokens``; without
    ``flags`` as a config or an experiment file names it: ``block_size``...) and the limit.
    ``max_new_tokens`` None: seq2seq decodes up to ``max_length`` tokens (checked with the targets); lm
    has no prompt to check."""

    def named(option: str) -> str:
        return option if flags else option[2:].replace("-", "_")

    if kind == "lm":
        length, setting = (
            (block_size, named("--block-size")) if block_size else (max_length, named("--max-length"))
        )
        check_length(
            length, config, tokenizer=tokenizer, method=method, model=model, setting=setting, warn=warn,
            what="block",
        )  # fmt: skip
        context = position_limit(config)[0]  # predict refuses it for computed positions too
        where = f"the {context} positions of {model} (max_position_embeddings)"
        l_max = getattr(method, "l_max", None)  # Synthesizer's: the longest sequence it has rows for
        if isinstance(l_max, int) and (context is None or l_max < context):
            context, where = l_max, f"the synthesizer's l_max of {l_max}"
        if max_new_tokens is not None and context is not None and max_new_tokens >= context:
            raise LimitError(
                f"{named('--max-new-tokens')} {max_new_tokens} leaves no room for a prompt in {where}: prompt plus new "
                f"tokens must fit; use {named('--max-new-tokens')} {context - 1} or less"
            )
        return
    seq2seq = kind == "seq2seq"
    check_length(
        max_length, config, tokenizer=tokenizer, method=method, model=model, warn=warn,
        setting=named("--max-length"), what="source or target" if seq2seq else "input",
    )  # fmt: skip
    if not seq2seq:
        return
    if max_new_tokens is not None and max_new_tokens > max_length:  # an output longer than any target
        check_length(
            max_new_tokens, config, method=method, model=model, setting=named("--max-new-tokens"), warn=warn,
            what="output",
        )  # fmt: skip
