"""Decoders (GPT-2, Llama, Mistral, Qwen2) and encoder-decoders (T5) through the one hook: every hook method
acts in training only and never lets a position see a later one; synthesized attention is causal, with
and without a KV cache (issue 32)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import (
    AutoModelForSequenceClassification,
    GPT2Config,
    GPT2ForSequenceClassification,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    T5Config,
    T5ForConditionalGeneration,
    T5ForSequenceClassification,
)

import attendout
from attendout.attention import AttentionEdit, get_controller, layer_key_valid
from attendout.cli import main
from attendout.contract import ForwardEdits
from attendout.methods.synthesizer import VARIANTS
from conftest import (
    ATTENTION_DROPOUT,
    FAMILIES,
    assert_same_outputs,
    outputs_on_each_drop_path,
    save_tiny_model_dir,
    tiny_model,
    write_sentiment_csv,
)

VOCAB, LENGTH, CHANGED = 99, 10, 6  # token CHANGED is replaced: logits before it must not move
DECODERS = ["gpt2", "llama", "mistral", "qwen2"]
CAUSAL_LMS = DECODERS + ["t5"]
LLAMA = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,  # grouped-query attention: two query heads per key/value head
    intermediate_size=37,
    max_position_embeddings=64,
    pad_token_id=0,
)


def tiny_lm(family: str, seed: int = 0, **overrides):
    """A tiny randomly initialised causal LM (or T5) with every dropout of its own off."""
    torch.manual_seed(seed)
    if family == "gpt2":
        config = GPT2Config(
            vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, attn_pdrop=0.0,
            resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0, **overrides,
        )  # fmt: skip
        return GPT2LMHeadModel(config)
    if family == "llama":
        return LlamaForCausalLM(LlamaConfig(**LLAMA, **overrides))
    if family == "mistral":  # a sliding window shorter than the sequence
        return MistralForCausalLM(MistralConfig(**LLAMA, sliding_window=4, **overrides))
    if family == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**LLAMA, **overrides))
    if family == "t5":
        return T5ForConditionalGeneration(tiny_t5_config(**overrides))
    raise ValueError(family)


def tiny_t5_config(**overrides) -> T5Config:
    """T5, 2 + 2 layers, hidden 32, 4 heads, its dropout off."""
    options = dict(
        vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=37, num_layers=2, num_decoder_layers=2, num_heads=4,
        dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
    )  # fmt: skip
    return T5Config(**{**options, **overrides})


def ids(seed: int = 1, batch: int = 2) -> torch.Tensor:
    return torch.randint(5, VOCAB, (batch, LENGTH), generator=torch.Generator().manual_seed(seed))


def inputs(family: str, tokens: torch.Tensor, source: torch.Tensor | None = None) -> dict:
    """The forward's keywords: ``tokens`` are the causal side (T5: the decoder's input)."""
    if family == "t5":
        return {"input_ids": ids(seed=7) if source is None else source, "decoder_input_ids": tokens}
    return {"input_ids": tokens}


def changed(tokens: torch.Tensor) -> torch.Tensor:
    out = tokens.clone()
    out[:, CHANGED] = (out[:, CHANGED] + 1 - 5) % (VOCAB - 5) + 5
    return out


def logits(model, family: str, tokens: torch.Tensor, seed: int = 3) -> torch.Tensor:
    torch.manual_seed(seed)  # the same masks for both inputs of a pair
    return model(**inputs(family, tokens)).logits


def assert_causal(model, family: str, seed: int = 3) -> torch.Tensor:
    """Changing token CHANGED leaves every earlier position's logits as they were; later ones move."""
    tokens = ids()
    before, after = logits(model, family, tokens, seed), logits(model, family, changed(tokens), seed)
    torch.testing.assert_close(before[:, :CHANGED], after[:, :CHANGED], rtol=1e-5, atol=1e-5)
    assert not torch.allclose(before[:, CHANGED:], after[:, CHANGED:])
    return before


# --------------------------------------------------------------------------------------------------
# The hook in decoders
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", CAUSAL_LMS)
def test_every_self_attention_is_hooked_and_cross_attention_is_not(family):
    model = tiny_lm(family)
    controller = attendout.install(model)
    expected = 4 if family == "t5" else 2  # T5: 2 encoder + 2 decoder self-attentions
    assert controller.num_layers == len(controller.attention_modules) == len(controller.blocks) == expected
    if family == "t5":
        names = {id(m): n for n, m in model.named_modules()}
        assert [names[id(m)].split(".")[0] for m in controller.attention_modules] == ["encoder"] * 2 + [
            "decoder"
        ] * 2
        assert not any("EncDecAttention" in names[id(m)] for m in controller.attention_modules)
        assert [m.is_causal for m in controller.attention_modules] == [False, False, True, True]


METHODS = {
    "scores-dropout": dict(p=0.3),
    "attn-dropout": dict(p=0.3),
    "drophead": dict(p=0.3, schedule="fixed"),
    "attn-layerdrop": dict(p=0.5, per_sample=True),
    "layerdrop": dict(p=0.5),
    "scheduled": dict(),
}


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("family", CAUSAL_LMS)
def test_every_hook_method_acts_in_training_only_and_stays_causal(family, method):
    model = tiny_lm(family)
    tokens = ids()
    model.eval()
    with torch.no_grad():
        stock_eval = model(**inputs(family, tokens)).logits
    model.train()
    stock_train = logits(model, family, tokens)
    handle = attendout.apply(model, method, **METHODS[method])
    handle.set_progress(0.5)
    trained = assert_causal(model, family)
    assert not torch.allclose(trained, stock_train), f"{method} did not act in training"
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(**inputs(family, tokens)).logits, stock_eval)


@pytest.mark.parametrize("family", CAUSAL_LMS)
def test_generation_with_a_kv_cache_is_stock_with_regularisers_attached(family):
    model = tiny_lm(family).eval()
    prompt = ids()[:, :4]
    source = ids(seed=7) if family == "t5" else None
    kwargs = dict(max_new_tokens=5, do_sample=False, pad_token_id=0)
    if family == "t5":
        stock = model.generate(input_ids=source, decoder_input_ids=prompt, **kwargs)
    else:
        stock = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **kwargs)
    attendout.apply(  # every regulariser at once, combined on purpose
        model, [attendout.get_method_config(method, **options) for method, options in METHODS.items()]
    )
    if family == "t5":
        ours = model.generate(input_ids=source, decoder_input_ids=prompt, **kwargs)
    else:
        ours = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt), **kwargs)
    assert torch.equal(ours, stock)


@pytest.mark.parametrize("family", CAUSAL_LMS)
def test_eq4_in_a_causal_layer_is_uniform_over_the_keys_the_query_may_see(family):
    model = tiny_lm(family)
    model.train()
    layer = 2 if family == "t5" else 0  # T5: the decoder's first layer
    every = torch.ones(1, 1, LENGTH, LENGTH, dtype=torch.bool)
    with attendout.record_attention(model, layers=[layer]) as rec:
        model(**inputs(family, ids()), **ForwardEdits({layer: AttentionEdit(drop_scores=every)}).kwargs())
    distance = torch.arange(LENGTH)[:, None] - torch.arange(LENGTH)[None, :]
    seen = (distance >= 0) & (distance < (model.config.sliding_window if family == "mistral" else LENGTH))
    expected = seen.float() / seen.sum(-1, keepdim=True)  # Mistral: within its window
    torch.testing.assert_close(rec.probs[layer], expected.expand_as(rec.probs[layer]))


@pytest.mark.parametrize("family", ["llama", "t5"])
def test_every_drop_path_agrees_with_grouped_queries_position_bias_and_the_models_dropout(
    family, monkeypatch
):
    """Drops filled in place (the CPU path with the model's attention dropout on), through SDPA and
    through the explicit softmax (forced by a recorder) give the same output and gradients under one
    seed: Llama's key/value heads are repeated for the explicit paths only, T5's relative bias is added
    on all three (and zeroed on eq. 4 rows on all three)."""
    model = tiny_lm(family, **{ATTENTION_DROPOUT[family]: 0.1})
    attendout.install(model)
    model.train()
    layer = 2 if family == "t5" else 1
    drop = torch.rand(2, 4, LENGTH, LENGTH, generator=torch.Generator().manual_seed(0)) < 0.4
    drop[0, 1, 5] = True  # a row with every key dropped: eq. 4
    edits = ForwardEdits({layer: AttentionEdit(drop_scores=drop)}).kwargs()
    forward = lambda: model(**inputs(family, ids()), **edits).logits  # noqa: E731
    assert_same_outputs(outputs_on_each_drop_path(model, forward, monkeypatch))
    with attendout.record_attention(model, layers=[layer]) as rec:  # the softmax, before the dropout
        forward()
    probs = rec.probs[layer]  # (B, H, L, L): H query heads, though Llama has 2 key/value heads
    assert probs.shape == (2, 4, LENGTH, LENGTH)
    assert not (probs > 0)[~torch.tril(torch.ones(LENGTH, LENGTH, dtype=torch.bool)).expand_as(probs)].any()
    torch.testing.assert_close(probs[0, 1, 5, :6], torch.full((6,), 1 / 6))


def test_t5_layerdrop_of_the_first_block_keeps_the_stack_relative_bias():
    """Skipping the block that computes T5's relative bias equals a stock run whose first block adds
    nothing (its output projections zeroed) but still computes the bias for the blocks after it."""
    model = tiny_lm("t5")
    model.train()
    attendout.apply(model, "layerdrop", p=1.0, layers=[0])  # the encoder's first block
    skipped = model(**inputs("t5", ids())).logits
    attendout.remove(model)
    block = model.encoder.block[0]
    with torch.no_grad():
        block.layer[0].SelfAttention.o.weight.zero_()
        block.layer[1].DenseReluDense.wo.weight.zero_()
    torch.testing.assert_close(skipped, model(**inputs("t5", ids())).logits)


def test_t5_layers_count_through_the_encoder_then_the_decoder():
    model = tiny_lm("t5")
    source = ids(seed=7)[:, :7]  # 7 encoder tokens, 10 decoder tokens
    with attendout.record_attention(model, layers=[1, 2]) as rec:
        model(input_ids=source, decoder_input_ids=ids())
    assert rec.probs[1].shape[-2:] == (7, 7) and rec.probs[2].shape[-2:] == (LENGTH, LENGTH)


@pytest.mark.parametrize("family", ["gpt2", "mistral"])
def test_layer_key_valid_is_causal_and_keeps_the_sliding_window(family):
    model = tiny_lm(family)
    attendout.install(model)
    seen = layer_key_valid(model, 0, torch.ones(1, 1, LENGTH, LENGTH, dtype=torch.bool))[0, 0]
    distance = torch.arange(LENGTH)[:, None] - torch.arange(LENGTH)[None, :]
    expected = distance >= 0
    if family == "mistral":
        expected &= distance < model.config.sliding_window
        model.eval()  # the model's own mask agrees: stock attention sees exactly these keys
        with torch.no_grad(), attendout.record_attention(model, layers=[0]) as rec:
            model(input_ids=ids())
        assert torch.equal(rec.probs[0][0, 0] > 0, expected)
    assert torch.equal(seen, expected)


def tiny_classifier(**overrides):
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, pad_token_id=0, **overrides
    )
    return GPT2ForSequenceClassification(config)


def test_addrop_candidates_in_a_decoder_are_past_keys_only():
    model = tiny_classifier()
    tokens = ids(batch=4)
    batch = {
        "input_ids": tokens,
        "attention_mask": torch.ones_like(tokens),
        "labels": torch.tensor([0, 1, 0, 1]),
    }
    batch["attention_mask"][1, 7:] = 0
    strategy = attendout.prepare(model, "addrop", cross_tuning="off", q=1.0, p=0.9, layers="all")
    strategy.method.keep_masks = True
    strategy.start(attendout.LoopContext(device="cpu", total_steps=1, steps_per_epoch=1))
    model.train()
    strategy.before_forward(model, batch, attendout.StepInfo(0))
    future = ~torch.tril(torch.ones(LENGTH, LENGTH, dtype=torch.bool))
    for layer in (0, 1):
        candidate, dropped = strategy.method.last_masks[layer]  # q = 1 drops every candidate
        assert candidate.any() and not candidate[..., future].any()
        assert torch.equal(dropped, candidate)


@pytest.mark.parametrize("method", ["attendout", "addrop", "synthesizer", "drophead"])
@pytest.mark.parametrize("family", ["gpt2", "t5"])
def test_finetune_trains_a_decoder_or_t5_classifier_with_every_kind_of_method(
    tmp_path, family, method, capsys
):
    train, dev = (
        write_sentiment_csv(tmp_path / "train.csv", 48, seed=0),
        write_sentiment_csv(tmp_path / "dev.csv", 16),
    )
    folder = save_tiny_model_dir(tmp_path / family, "bert")  # its word-level tokenizer, then our model in it
    if family == "gpt2":
        classifier = tiny_classifier()
    else:
        torch.manual_seed(0)
        classifier = T5ForSequenceClassification(tiny_t5_config(eos_token_id=3))
    classifier.save_pretrained(folder)
    out = tmp_path / "run"
    args = [
        "finetune", "--task", "file", "--train-file", train, "--eval-file", f"dev={dev}",
        "--text-columns", "text", "--label-column", "label", "--model", folder, "--batch-size", "16",
        "--max-length", "16", "--max-steps", "3", "--no-progress", "--output-dir", str(out), "--method", method,
    ]  # fmt: skip
    if method == "attendout":
        args += ["--dropout-steps", "2", "--eval-samples", "8"]
    assert main(args) == 0, capsys.readouterr().err
    results = json.loads((out / "results.json").read_text())
    assert results["method"] == method and "dev" in results["eval"]
    if method != "synthesizer":  # a plain transformers checkpoint of the same class
        saved = AutoModelForSequenceClassification.from_pretrained(out / "model")
        assert type(saved) is type(classifier)


# --------------------------------------------------------------------------------------------------
# Synthesized attention in decoders and T5
# --------------------------------------------------------------------------------------------------


def synthesized(family: str, variant: str):
    model = tiny_lm(family).eval()
    attendout.synthesize(model, variant, max_length=16)
    return model


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("family", ["gpt2", "llama", "t5"])
def test_no_synthesized_variant_lets_a_position_see_a_later_one(family, variant):
    model = synthesized(family, variant)
    if variant.endswith("+dot"):  # start away from the dot-product model, so the synthesizer counts
        with torch.no_grad():
            for layer in model.attendout_synthesizer.values():
                layer.mix.fill_(0.5)
    with torch.no_grad():
        full = assert_causal(model, family)
    # with a KV cache: one token at a time gives the full forward's logits at every step, so step t
    # reads its own row of the synthesizer and nothing after it
    tokens = ids()
    source = ids(seed=7) if family == "t5" else None
    with torch.no_grad():
        cache, steps = None, []
        if family == "t5":
            encoded = model.get_encoder()(input_ids=source)
        for t in range(LENGTH):
            step = {"past_key_values": cache, "use_cache": True}
            if family == "t5":
                out = model(encoder_outputs=encoded, decoder_input_ids=tokens[:, t : t + 1], **step)
            else:
                out = model(input_ids=tokens[:, t : t + 1], **step)
            cache = out.past_key_values
            steps.append(out.logits[:, 0])
    torch.testing.assert_close(torch.stack(steps, dim=1), full, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("variant", ["random+dot", "dense+dot", "factorized-random+dot"])
@pytest.mark.parametrize("family", ["gpt2", "llama", "t5"])
def test_synthesized_mixtures_start_at_the_model_they_were_given(family, variant):
    tokens = ids()
    model = tiny_lm(family).eval()
    with torch.no_grad():
        stock = model(**inputs(family, tokens)).logits
        attendout.synthesize(model, variant, max_length=16, mixing="head")  # init "exact": weight 0
        torch.testing.assert_close(model(**inputs(family, tokens)).logits, stock)


def test_t5_cross_attention_stays_dot_product_and_needs_a_length():
    model = tiny_lm("t5")
    with pytest.raises(ValueError, match="relative positions and no fixed length"):
        attendout.synthesize(model, "random")
    attendout.synthesize(model, "random", max_length=16)
    assert sorted(model.attendout_synthesizer) == ["0", "1", "2", "3"]  # 2 encoder + 2 decoder layers
    # the cross-attention still reads the encoder: a different source changes the decoder's logits
    model.eval()
    with torch.no_grad():
        a = model(**inputs("t5", ids(), source=ids(seed=7))).logits
        b = model(**inputs("t5", ids(), source=ids(seed=8))).logits
    assert not torch.allclose(a, b)


def test_a_synthesized_decoder_refuses_to_generate_past_its_length(tmp_path):
    model = tiny_lm("gpt2").eval()
    attendout.synthesize(model, "random", max_length=12)
    with pytest.raises(attendout.SequenceTooLongError, match="from the KV cache"):
        model.generate(input_ids=ids()[:, :8], attention_mask=torch.ones(2, 8, dtype=torch.long),
                       max_new_tokens=8, do_sample=False, pad_token_id=0)  # fmt: skip


def test_a_synthesized_decoder_saves_and_generates_the_same_after_loading(tmp_path):
    model = tiny_lm("llama").eval()
    attendout.synthesize(model, "dense+dot", max_length=16, init="paper")
    prompt = ids()[:, :4]
    kwargs = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False, pad_token_id=0)
    before = model.generate(input_ids=prompt, **kwargs)
    attendout.save_synthesized(model, tmp_path / "lm")
    loaded = attendout.load_synthesized(tmp_path / "lm")
    assert type(loaded) is LlamaForCausalLM and get_controller(loaded) is not None
    assert torch.equal(loaded.generate(input_ids=prompt, **kwargs), before)


def test_layer_key_valid_stays_bidirectional_in_every_encoder():
    everything = torch.ones(1, 1, LENGTH, LENGTH, dtype=torch.bool)
    for family in FAMILIES:
        model = tiny_model(family)
        attendout.install(model)
        assert layer_key_valid(model, 0, everything).all(), family  # layer 0: global in ModernBERT too


def test_finetune_pads_a_decoder_without_a_pad_token_with_its_eos_token(tmp_path):
    """GPT-2 and Llama tokenizers ship no padding token: the run pads with the end-of-sequence token, and
    the classifier reads each example's last real token, so padding never changes an example's logits."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from attendout.models.loading import load_for_task
    from attendout.tasks import get_task

    words = ["<eos>", "<unk>", *[f"w{i}" for i in range(VOCAB - 2)]]
    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    folder = tmp_path / "gpt2"
    PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<eos>", unk_token="<unk>").save_pretrained(
        folder
    )
    torch.manual_seed(0)
    GPT2ForSequenceClassification(
        GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4)
    ).save_pretrained(folder)
    model, tokenizer, _ = load_for_task(str(folder), get_task("sst2"))
    assert tokenizer.pad_token == "<eos>" and model.config.pad_token_id == 0
    model.eval()
    batch = tokenizer(["w3 w4 w5", "w6 w7 w8 w9 w10"], padding=True, return_tensors="pt")
    alone = tokenizer(["w3 w4 w5"], return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(model(**batch).logits[:1], model(**alone).logits)


def test_a_synthesized_decoder_refuses_a_static_cache_rather_than_misread_its_rows():
    model = tiny_lm("llama").eval()
    attendout.synthesize(model, "random", max_length=32)
    prompt = ids()[:, :4]
    kwargs = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=4, do_sample=False, pad_token_id=0)
    model.generate(input_ids=prompt, **kwargs)  # a dynamic cache: fine (the other tests check its logits)
    with pytest.raises(ValueError, match="dynamic KV caches only"):
        model.generate(input_ids=prompt, cache_implementation="static", **kwargs)
