"""Every method on the generation kinds (``lm``: GPT-2; ``seq2seq``: T5), on tiny in-process models.

Each test shows the method acts (realised rates, or a changed loss against the same seed with the
method off), where it acts (self-attention of both T5 stacks, never cross-attention), and what the
feedback methods read: AD-DROP the predicted next token's gradient, AttendOut the gold tokens'
log-likelihood.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, T5Config, T5ForConditionalGeneration

import attendout
from attendout.attention import AttentionMethod, record_attention
from attendout.contract import LoopContext
from attendout.methods import ADDropConfig, AttendOutConfig, SynthesizerConfig
from attendout.methods.addrop import attribute
from attendout.methods.nexttoken import label_log_likelihood, predicted_token_target

VOCAB, B, SOURCE, TARGET = 100, 4, 10, 7
KINDS = ["lm", "seq2seq"]


def tiny_model(kind: str, seed: int = 0):
    """GPT-2 (lm) or T5 (seq2seq, 2 + 2 layers): hidden 32, 2 heads, every dropout of its own off."""
    torch.manual_seed(seed)
    if kind == "lm":
        config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=32, attn_pdrop=0.0,
                            resid_pdrop=0.0, embd_pdrop=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)  # fmt: skip
        return GPT2LMHeadModel(config)
    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=16, d_ff=37, num_layers=2, num_decoder_layers=2,
                      num_heads=2, dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0)  # fmt: skip
    return T5ForConditionalGeneration(config)


def tiny_batch(kind: str, seed: int = 1) -> dict[str, torch.Tensor]:
    """Four sequences, the last two padded: lm labels = input ids; seq2seq labels padded with -100."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (B, SOURCE), generator=g)
    mask = torch.ones_like(ids)
    mask[2, 7:], mask[3, 5:] = 0, 0
    ids = ids.masked_fill(mask == 0, 0)
    if kind == "lm":
        return {"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)}
    labels = torch.randint(5, VOCAB, (B, TARGET), generator=g)
    labels[1, 5:], labels[3, 3:] = -100, -100
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def loss_with_seed(model, batch, seed: int = 3, **extra) -> torch.Tensor:
    torch.manual_seed(seed)
    return model(**batch, **extra).loss


# --------------------------------------------------------------------------------------------------
# The cheap methods: decoder self-attention, both T5 stacks, never cross-attention
# --------------------------------------------------------------------------------------------------

CHEAP = {
    "scores-dropout": dict(p=0.5),
    "attn-dropout": dict(p=0.5, rescale=False),
    "drophead": dict(p=0.5, schedule="fixed"),
    "attn-layerdrop": dict(p=0.5, per_sample=True),
    "layerdrop": dict(p=0.5),
    "scheduled": dict(),
}


class ShapeSpy(AttentionMethod):
    """Records (layer, Lq, Lk) of every attention call the hook hands a method."""

    name = "spy"

    def __init__(self):
        self.layers, self.calls = None, []

    def edit(self, call):
        self.calls.append((call.layer, call.shape[2], call.shape[3]))
        return None


@pytest.mark.parametrize("method", list(CHEAP))
@pytest.mark.parametrize("kind", KINDS)
def test_every_cheap_method_acts_on_every_self_attention_layer(kind, method):
    model, batch = tiny_model(kind).train(), tiny_batch(kind)
    stock = loss_with_seed(model, batch)
    handle = attendout.apply(model, method, **CHEAP[method])
    handle.set_progress(0.5)
    losses = [loss_with_seed(model, batch, seed) for seed in range(3)]  # layerdrop may keep all once
    assert any(not torch.allclose(loss, stock) for loss in losses), f"{method} did not act on {kind}"
    rates = handle.stats()
    layers = {key.rsplit("/L", 1)[1] for key in rates if "/L" in key}
    expected = 4 if kind == "seq2seq" else 2  # T5: encoder layers 0-1, decoder layers 2-3
    if method != "scheduled":  # scheduled keeps its statistics per layer too, as scores dropout
        assert layers == {str(i) for i in range(expected)}, rates
    assert all(0 <= value <= 1 for value in rates.values())
    handle.remove()
    model.eval()  # eval mode: the model is stock
    with torch.no_grad():
        attendout.apply(model, method, **CHEAP[method]).set_progress(0.5)
        torch.testing.assert_close(model(**batch).loss, tiny_model(kind).eval()(**batch).loss)


def test_t5_cross_attention_never_reaches_a_method():
    model = tiny_model("seq2seq").train()
    spy = ShapeSpy()
    attendout.install(model).add(spy)
    names = {id(m): n for n, m in model.named_modules()}
    hooked = [names[id(m)] for m in attendout.attention.get_controller(model).attention_modules]
    assert all(n.endswith("SelfAttention") for n in hooked) and len(hooked) == 4
    assert not any("_attendout_slot" in m.__dict__ for n, m in model.named_modules() if "EncDec" in n)
    model(**tiny_batch("seq2seq"))
    # encoder self-attention over the source, decoder self-attention over the target; never (T, S)
    assert sorted(set(spy.calls)) == [
        (0, SOURCE, SOURCE),
        (1, SOURCE, SOURCE),
        (2, TARGET, TARGET),
        (3, TARGET, TARGET),
    ]


def test_layers_past_both_t5_stacks_name_the_stacks_and_cross_attention():
    config = attendout.get_method_config("scores-dropout", layers="1,4")
    with pytest.raises(ValueError, match=r"0\.\.1 in the encoder, 2\.\.3 in the decoder; cross-attention"):
        config.check_limits(16, tiny_model("seq2seq").config)
    attendout.get_method_config("scores-dropout", layers="3").check_limits(16, tiny_model("seq2seq").config)


# --------------------------------------------------------------------------------------------------
# Synthesizer: self-attention of both stacks, never cross-attention
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_synthesizer_replaces_self_attention_of_every_stack(kind):
    model, batch = tiny_model(kind).eval(), tiny_batch(kind)
    with torch.no_grad():
        stock = model(**batch).loss
        # N(0, 1) logits: visibly not the stock attention (the official glorot start is near uniform,
        # which a tiny random model's own attention nearly is too)
        attendout.synthesize(model, "random", max_length=16, random_init="normal")
        assert not torch.allclose(model(**batch).loss, stock)
    assert sorted(model.attendout_synthesizer) == [str(i) for i in range(4 if kind == "seq2seq" else 2)]


def test_synthesizer_refuses_cross_attention_naming_the_caveat():
    with pytest.raises(ValueError, match="cross_attention=True is refused.*caveat.*self-attention"):
        SynthesizerConfig(cross_attention=True)
    with pytest.raises(ValueError, match="not self-attention layers.*cross-attention layers are never"):
        attendout.synthesize(tiny_model("seq2seq"), "random", layers=[4], max_length=16)
    model = tiny_model("seq2seq").eval()
    cross = {n: p.clone() for n, p in model.named_parameters() if "EncDecAttention" in n}
    attendout.synthesize(model, "random", max_length=16)
    assert not any("EncDec" in n for n, _ in model.attendout_synthesizer.named_parameters())
    assert all(torch.equal(p, cross[n]) for n, p in model.named_parameters() if n in cross)
    with torch.no_grad():  # the decoder still reads its source through dot-product cross-attention
        a = model(**tiny_batch("seq2seq")).logits
        b = model(**{**tiny_batch("seq2seq"), "input_ids": tiny_batch("seq2seq", seed=5)["input_ids"]}).logits
    assert not torch.allclose(a, b)


# --------------------------------------------------------------------------------------------------
# AD-DROP: the predicted next token's attribution, the encoder's self-attention in seq2seq
# --------------------------------------------------------------------------------------------------


def manual_gradient(model, batch, kind, layers):
    """d/dA of the mean log-probability of the argmax token over the scored positions, by hand."""
    model.eval()
    with torch.enable_grad(), record_attention(model, layers, grads=True) as rec:
        logits = model(**batch).logits
        if kind == "lm":
            logits, targets = logits[:, :-1], batch["labels"][:, 1:]
        else:
            targets = batch["labels"]
        log_p = torch.log_softmax(logits.float(), -1)
        scored = targets != -100
        chosen = log_p.gather(-1, log_p.argmax(-1, keepdim=True)).squeeze(-1)
        target = (chosen * scored).sum() / scored.sum()
        grads = torch.autograd.grad(target, [rec.probs[layer] for layer in layers])
    model.train()
    return dict(zip(layers, grads, strict=True))


@pytest.mark.parametrize("kind", KINDS)
def test_addrop_drops_the_top_positions_of_the_predicted_tokens_gradient(kind):
    model, batch = tiny_model(kind).train(), tiny_batch(kind)
    handle = attendout.apply(model, ADDropConfig(cross_tuning="off", p=0.3, q=1.0, layers="task"))
    method = handle.method
    # seq2seq: the encoder's self-attention, as the authors' OPUS-MT trainer; lm: every layer
    assert method.chosen_layers() == [0, 1]
    method.keep_masks = True
    extra = method.prepare(model, batch)
    manual = manual_gradient(model, batch, kind, [0, 1])
    result = attribute(model, batch, [0, 1], "ga")
    real = batch["attention_mask"].bool()
    for layer in (0, 1):
        torch.testing.assert_close(result.scores[layer], manual[layer].float(), rtol=1e-4, atol=1e-7)
        candidate, drop = method.last_masks[layer]
        assert torch.equal(candidate, drop)  # q = 1
        rows = 0
        for b in range(B):
            n_real = int(real[b].sum())
            for h in range(candidate.shape[1]):
                for i in range(n_real - (1 if kind == "lm" else 0)):  # lm: the last row predicts nothing
                    keys = (i + 1) if kind == "lm" else n_real  # a causal row sees keys 0..i
                    g = manual[layer][b, h, i, :keys]
                    k = -(-3 * keys // 10)  # ceil(0.3 * keys)
                    top = set(g.topk(k).indices.tolist())
                    if len(set(g.tolist())) == keys:  # no ties
                        assert set(drop[b, h, i].nonzero().flatten().tolist()) == top
                        rows += 1
        assert rows > 10
    plain = loss_with_seed(model, batch, **method.plain())
    assert not torch.allclose(loss_with_seed(model, batch, **extra), plain)


def test_addrop_in_t5_drops_only_where_asked_and_never_in_cross_attention():
    model, batch = tiny_model("seq2seq").train(), tiny_batch("seq2seq")
    spy = ShapeSpy()
    handle = attendout.apply(model, ADDropConfig(cross_tuning="off", layers="2,3", q=1.0))
    attendout.attention.get_controller(model).add(spy)
    handle.method.keep_masks = True
    extra = handle.method.prepare(model, batch)
    for layer in (2, 3):  # decoder self-attention over the target, causal
        candidate, _ = handle.method.last_masks[layer]
        assert candidate.shape == (B, 2, TARGET, TARGET)
        assert not candidate.triu(1).any()
    spy.calls.clear()
    model(**batch, **extra).loss.backward()
    assert all(lq == lk for _, lq, lk in spy.calls)
    with pytest.raises(ValueError, match="needs an encoder-decoder"):
        attendout.apply(tiny_model("lm"), ADDropConfig(layers="encoder"))


def test_addrop_target_is_the_predicted_token_not_the_gold():
    logits = torch.randn(2, 5, VOCAB, requires_grad=True)
    batch = {"labels": torch.randint(0, VOCAB, (2, 5))}
    _, predicted = predicted_token_target(logits, batch, "seq2seq")
    assert torch.equal(predicted, logits.argmax(-1))


# --------------------------------------------------------------------------------------------------
# AttendOut: reward = the Attacker's log-likelihood of the gold tokens over the Defender's
# --------------------------------------------------------------------------------------------------


class Source:
    def __init__(self, kind: str):
        self.data = tiny_batch(kind, seed=9)

    def __len__(self) -> int:
        return B

    def batch(self, indices):
        return {k: v[indices] for k, v in self.data.items()}


def started(kind: str, **options):
    model = tiny_model(kind)
    strategy = attendout.prepare(model, AttendOutConfig(eval_samples=B, **options))

    def make_optimizer(m):
        return torch.optim.AdamW(m.parameters(), lr=1e-3), None

    optimizer, _ = make_optimizer(model)
    loop = LoopContext(device=torch.device("cpu"), total_steps=10, steps_per_epoch=10, optimizer=optimizer,
                       make_optimizer=make_optimizer, validation=Source(kind), eval_batch_size=2)  # fmt: skip
    strategy.start(loop)
    return strategy


@pytest.mark.parametrize("kind", KINDS)
def test_attendout_reward_follows_the_better_log_likelihood(kind, monkeypatch):
    strategy = started(kind, dropout_steps=1)
    # seq2seq: G masks the encoder's self-attention, whose (B, L, L) scores it reads
    assert strategy.layers == [0, 1]
    batch = tiny_batch(kind)
    strategy.after_step([batch], step=None)  # the Attacker's step under G's masks, then a game
    assert strategy.games == 1 and any("drop_prob" in key for key in strategy.stats())
    better = copy.deepcopy(strategy.defender)
    trainer = torch.optim.Adam(better.parameters(), lr=1e-2)
    better.train()
    for _ in range(30):  # fit the validation samples: a higher log-likelihood of their gold tokens
        trainer.zero_grad()
        better(**Source(kind).data).loss.backward()
        trainer.step()
    rewards = []
    monkeypatch.setattr(strategy.policy, "learn", lambda actions, n, r: rewards.append(r) or {})
    plain, fitted = copy.deepcopy(strategy.defender.state_dict()), copy.deepcopy(better.state_dict())
    for attacker_state, defender_state, sign in ((fitted, plain, 1), (plain, fitted, -1)):
        strategy.attacker.load_state_dict(attacker_state)  # play() overwrites the loser: set both anew
        strategy.defender.load_state_dict(defender_state)
        d = strategy.score(strategy.defender, Source(kind), list(range(B)))
        a = strategy.score(strategy.attacker, Source(kind), list(range(B)))
        with torch.no_grad():  # the per-sample score is the mean log-likelihood of the gold tokens
            direct, _, _ = label_log_likelihood(
                strategy.attacker(**Source(kind).data).logits, Source(kind).data, kind
            )
        torch.testing.assert_close(a.per_sample, direct, rtol=1e-5, atol=1e-6)
        strategy.play()
        assert torch.sign(rewards[-1].mean()).item() == sign
        torch.testing.assert_close(rewards[-1].mean(), (a.per_sample - d.per_sample).mean().float())
    if kind == "seq2seq":
        with pytest.raises(ValueError, match="decoder self-attention layers"):
            started(kind, layers=[1, 2])
    with pytest.raises(ValueError, match="reward 'metric' is not defined"):
        started(kind, reward="metric")
