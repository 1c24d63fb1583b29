"""A tokenizer trained on the task's own text, for models started from scratch.

No pretrained decoder or translation model exists offline here, and a model from scratch needs a
vocabulary: :func:`train_tokenizer` trains a byte-level BPE (Hugging Face ``tokenizers``, the GPT-2 /
RoBERTa scheme: any UTF-8 text is encodable) on the training split's texts only (for seq2seq both sides:
one joint vocabulary, e.g. EN-DE). It is returned as a ``transformers`` fast tokenizer and saved beside
the model (``save_pretrained``), so that ``AutoTokenizer`` loads it back.

Decoding gives the text back exactly, in plain ``transformers`` too (``decode(encode(text),
skip_special_tokens=True) == text`` for every text, leading and trailing spaces included, that does not
hold a special token's string such as ``</s>``, which is read as that token): the
normalizer puts one space before every text (so that a text's first word is the same piece as the word
inside a sentence, as RoBERTa's ``add_prefix_space`` does), and the decoder takes exactly that one space
off again. All of it is in the saved ``tokenizer.json`` (normalizer ``Prepend``, decoder ``ByteLevel`` then
``Strip``): loading it needs no import of ours. (Tokenizers saved before 2026-11-27, issue 59, added the space
with the pre-tokenizer and did not take it off: their decoded texts begin with a space. Their pieces
are the same for texts that do not begin with a space.)

Special tokens, at fixed ids: ``<pad>`` 0, ``<s>`` 1 (beginning of sequence; decoder start of
encoder-decoders), ``</s>`` 2 (end of sequence; ends every encoded seq2seq text, and every document of
a language-modelling stream), ``<unk>`` 3 (never produced by byte-level BPE; kept for configs that
expect one). Training is deterministic for the same texts in the same order.
"""

from __future__ import annotations

from collections.abc import Iterable

SPECIAL_TOKENS = {"pad": "<pad>", "bos": "<s>", "eos": "</s>", "unk": "<unk>"}
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


def train_tokenizer(texts: Iterable[str], vocab_size: int, *, end_with_eos: bool):
    """A byte-level BPE tokenizer of ``vocab_size`` entries trained on ``texts``.

    ``end_with_eos``: every encoded text ends with ``</s>`` (sources and targets of seq2seq); off for
    language modelling, whose loop puts ``</s>`` between documents itself.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(SPECIAL_TOKENS.values())
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(specials) + len(alphabet) + 1:
        raise ValueError(
            f"vocab_size must be at least {len(specials) + len(alphabet) + 1} for a byte-level BPE (its "
            f"{len(alphabet)} bytes, {len(specials)} special tokens and one merge), got {vocab_size}"
        )
    model = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk"]))
    # one space before every text, and exactly that one taken off again when decoding (module docstring)
    model.normalizer = normalizers.Prepend(" ")
    model.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    model.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Strip(" ", 1, 0)])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=alphabet, show_progress=False
    )
    model.train_from_iterator(texts, trainer)
    if end_with_eos:
        eos = SPECIAL_TOKENS["eos"]
        model.post_processor = processors.TemplateProcessing(
            single=f"$A {eos}", special_tokens=[(eos, EOS_ID)]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=model,
        **{f"{role}_token": token for role, token in SPECIAL_TOKENS.items()},
        clean_up_tokenization_spaces=False,
    )
