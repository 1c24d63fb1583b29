"""Models of the generation kinds: a pretrained decoder or encoder-decoder, or one started from scratch.

* ``init="pretrained"``: ``AutoModelForCausalLM`` (``lm``) or ``AutoModelForSeq2SeqLM`` (``seq2seq``) and
  the model's own tokenizer, from a local folder or a hub id (GPT-2, Llama, Qwen2, Mistral; T5, BART,
  Marian).
* ``init="scratch"``: random weights from a config. ``model`` names an architecture of
  :data:`SCRATCH_ARCHITECTURES` (``gpt2``, ``llama``, ``qwen2``, ``mistral`` for ``lm``; ``t5``, ``bart``, ``marian`` for ``seq2seq``)
  sized by :class:`ScratchSize` (layers, hidden size, heads, vocabulary), or a ``config.json`` file or a
  folder holding one (its architecture and sizes; its weights, if any, are not read). The tokenizer is
  the folder's own when it has one, else a byte-level BPE trained on the training split
  (:mod:`attendout.models.tokenizer`), saved with the model. Weights are drawn from the run's seed.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from torch import nn

from ..tasks import LM, SEQ2SEQ, Examples, Task
from .loading import ModelNotFoundError, check_finite, check_model_folder, load_tokenizer, resolve_model
from .size import ScratchSize
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, train_tokenizer

logger = logging.getLogger(__name__)

INITS = ("pretrained", "scratch")
AUTO_CLASSES = {LM: "AutoModelForCausalLM", SEQ2SEQ: "AutoModelForSeq2SeqLM"}


def _decoder(size: ScratchSize, positions: int) -> dict[str, Any]:
    return {
        "hidden_size": size.hidden,
        "num_hidden_layers": size.layers,
        "num_attention_heads": size.heads,
        "num_key_value_heads": size.heads,
        "intermediate_size": 4 * size.hidden,
        "max_position_embeddings": positions,
        "tie_word_embeddings": True,
    }


def _bart(size: ScratchSize, positions: int) -> dict[str, Any]:
    """BART and Marian: learned positions; the decoder starts from ``</s>``, as BART's own does."""
    each = {"layers": size.layers, "attention_heads": size.heads, "ffn_dim": 4 * size.hidden}
    return {
        "d_model": size.hidden,
        **{f"{stack}_{name}": value for stack in ("encoder", "decoder") for name, value in each.items()},
        "max_position_embeddings": positions,
        "decoder_start_token_id": EOS_ID,
        "forced_eos_token_id": EOS_ID,
    }


#: kind -> architecture -> its config's fields for a :class:`ScratchSize` and a context length.
SCRATCH_ARCHITECTURES: dict[str, dict[str, Any]] = {
    LM: {
        "gpt2": lambda size, positions: {
            "n_embd": size.hidden,
            "n_layer": size.layers,
            "n_head": size.heads,
            "n_positions": positions,
        },
        "llama": _decoder,
        "qwen2": _decoder,
        "mistral": _decoder,
    },
    SEQ2SEQ: {
        "bart": _bart,
        "marian": _bart,
        "t5": lambda size, positions: {
            "d_model": size.hidden,
            "d_kv": size.hidden // size.heads,
            "d_ff": 4 * size.hidden,
            "num_layers": size.layers,
            "num_decoder_layers": size.layers,
            "num_heads": size.heads,
            "feed_forward_proj": "relu",
            "decoder_start_token_id": PAD_ID,
        },
    },
}


def scratch_config(architecture: str, kind: str, size: ScratchSize, positions: int, vocab_size: int):
    """A ``transformers`` config of ``architecture`` at ``size``, with our tokenizer's special-token ids."""
    from transformers import AutoConfig
    from transformers.utils import CONFIG_NAME

    known = SCRATCH_ARCHITECTURES[kind]
    if architecture not in known:
        raise ValueError(
            f"--model-init scratch: no {kind} architecture {architecture!r}; choose one of {', '.join(known)}, or give "
            f"a {CONFIG_NAME} (or a folder holding one)"
        )
    fields = known[architecture](size, positions)
    ids = {"pad_token_id": PAD_ID, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID}
    return AutoConfig.for_model(architecture, vocab_size=vocab_size, **ids, **fields)


def _config_file(name: str) -> Path | None:
    from transformers.utils import CONFIG_NAME

    path = Path(name)
    if path.is_file() and path.suffix == ".json":
        return path
    if path.is_dir() and (path / CONFIG_NAME).is_file():
        return path / CONFIG_NAME
    return None


def _texts(examples: Examples, kind: str) -> list[str]:
    if kind == SEQ2SEQ:
        return [*examples.text_a, *(getattr(examples, "targets", None) or [])]
    return list(examples.text_a)


def _scratch(name: str, task: Task, size: ScratchSize, positions: int, train: Examples):
    from transformers import AutoConfig
    from transformers.utils import CONFIG_NAME

    auto = _auto_class(task)
    file = _config_file(name)
    tokenizer = None
    if file is not None:
        try:
            config = AutoConfig.from_pretrained(str(file))
        except (OSError, ValueError, json.JSONDecodeError) as error:
            raise ModelNotFoundError(
                f"--model-init scratch: {file} is not a transformers config ({error})"
            ) from None
        if any((file.parent / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json")):
            tokenizer = load_tokenizer(file.parent)
            end_of_sequence(tokenizer, config, str(file.parent), task.kind)
        _refuse_bidirectional(config, str(file), task)
        described = f"{config.model_type} from scratch, config {file}"
    elif os.path.exists(name):
        raise ModelNotFoundError(
            f"--model-init scratch: {name} is neither a {CONFIG_NAME} file nor a folder holding one"
        )
    else:
        config = None
        described = f"{name} from scratch ({size.layers} layers, hidden {size.hidden}, {size.heads} heads)"
    if tokenizer is None:
        tokenizer = train_tokenizer(
            _texts(train, task.kind), size.vocab_size, end_with_eos=task.kind == SEQ2SEQ
        )
        described += f", byte-level BPE of {len(tokenizer)} tokens trained on the training split"
    if config is None:
        config = scratch_config(name, task.kind, size, positions, len(tokenizer))
    elif config.vocab_size < len(tokenizer):
        raise ValueError(
            f"{file}: vocab_size {config.vocab_size} is smaller than the tokenizer's {len(tokenizer)}"
        )
    model = auto.from_config(config)
    return model, tokenizer, described


def _auto_class(task: Task):
    import transformers

    return getattr(transformers, AUTO_CLASSES[task.kind])


#: Bidirectional encoders: ``AutoModelForCausalLM`` loads some of them (BERT as ``BertLMHeadModel``), but
#: unless their config says ``is_decoder`` each position sees the tokens it is to predict.
ENCODER_TYPES = frozenset(
    {
        "bert",
        "roberta",
        "xlm-roberta",
        "electra",
        "distilbert",
        "albert",
        "modernbert",
        "deberta-v2",
        "eurobert",
        "mpnet",
    }
)


def _refuse_bidirectional(config: Any, name: str, task: Task) -> None:
    if task.kind == LM and config.model_type in ENCODER_TYPES and not getattr(config, "is_decoder", False):
        raise ValueError(
            f"model {name!r} is a bidirectional encoder ({config.model_type}): as a language model every position "
            f"would see the token it predicts; task {task.name!r} needs a decoder (GPT-2, Llama, Qwen2, Mistral), "
            "or start one from scratch with --model-init scratch --model gpt2"
        )


def end_of_sequence(tokenizer: Any, config: Any, name: str, kind: str) -> None:
    """Give ``tokenizer`` an end-of-sequence token where it names none: its model ``config``'s
    ``eos_token_id``, said in a warning. A language model (``kind`` lm) ends every document with it, so
    where neither names one (or the config's id is not in the tokenizer's vocabulary) it is a
    ValueError saying how to set one; an encoder-decoder is left as it is."""
    if tokenizer.eos_token_id is not None:
        return
    eos = getattr(config, "eos_token_id", None)
    if isinstance(eos, (list, tuple)):  # Llama 3 and kin: several; the first ends a document
        eos = eos[0] if eos else None
    size = len(tokenizer)
    if isinstance(eos, int) and 0 <= eos < size:
        tokenizer.eos_token = tokenizer.convert_ids_to_tokens(eos)
        logger.warning(
            "model %s: its tokenizer (%s) names no end-of-sequence token; taking its config's eos_token_id %d "
            "(%r), which ends every document and pads",
            name,
            type(tokenizer).__name__,
            eos,
            tokenizer.eos_token,
        )
        return
    if kind != LM:
        return
    config_says = (
        "its config names none (eos_token_id)"
        if eos is None
        else f"its config's eos_token_id {eos} is not in the tokenizer's vocabulary of {size} tokens"
    )
    raise ValueError(
        f"model {name!r}: its tokenizer ({type(tokenizer).__name__}) names no end-of-sequence token and "
        f'{config_says}; a language model ends every document with one: set "eos_token" in the model '
        'folder\'s tokenizer_config.json to a token of its vocabulary (e.g. "[SEP]" or "</s>"), or '
        "eos_token_id in its config.json"
    )


def _pretrained(name: str, task: Task, **kwargs: Any):
    from transformers import AutoConfig

    path, description = resolve_model(name)
    local = os.path.isdir(path)
    if local:
        check_model_folder(path)
    auto = _auto_class(task)
    try:
        config = AutoConfig.from_pretrained(path)
        is_seq2seq = bool(getattr(config, "is_encoder_decoder", False))
        if is_seq2seq != (task.kind == SEQ2SEQ):
            has = "an encoder-decoder" if is_seq2seq else "a decoder-only (or encoder-only) model"
            wants = (
                "an encoder-decoder (T5, BART, Marian)"
                if task.kind == SEQ2SEQ
                else "a decoder (GPT-2, Llama, Qwen2)"
            )
            raise ValueError(
                f"model {name!r} is {has} ({config.model_type}); task {task.name!r} ({task.kind}) needs {wants}"
            )
        _refuse_bidirectional(config, name, task)
        tokenizer = load_tokenizer(path)
        end_of_sequence(tokenizer, config, name, task.kind)  # before the weights load: a refusal is quick
        model = auto.from_pretrained(path, **kwargs)
    except OSError as error:
        hint = "" if local else "; offline, start from a config with --model-init scratch"
        raise ModelNotFoundError(
            f"could not load model {name!r} ({str(error).splitlines()[0]}){hint}"
        ) from None
    if tokenizer.pad_token_id is None:  # decoders ship none: pad with the end-of-sequence token
        tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.eos_token_id
    return model, tokenizer, description


def load_for_generation(
    name: str,
    task: Task,
    *,
    init: str = "pretrained",
    size: ScratchSize | None = None,
    positions: int = 128,
    train: Examples | None = None,
    **kwargs: Any,
) -> tuple[nn.Module, Any, str]:
    """(model, tokenizer, description) for a generation task (see the module docstring).

    ``positions``: the context a scratch model is built for (its position table); ``train``: the
    training split a scratch tokenizer is trained on.
    """
    if task.kind not in AUTO_CLASSES:
        raise ValueError(
            f"task {task.name!r} is {task.kind}, not a generation task ({', '.join(AUTO_CLASSES)})"
        )
    if init not in INITS:
        raise ValueError(f"init must be one of {', '.join(INITS)}, got {init!r}")
    if init == "scratch":
        if train is None:
            raise ValueError("init='scratch' needs the training split (train=) to train a tokenizer on")
        model, tokenizer, description = _scratch(name, task, size or ScratchSize(), positions, train)
    else:
        model, tokenizer, description = _pretrained(name, task, **kwargs)
    check_finite(model, repr(name))
    return model, tokenizer, description
