"""A model's and a method's limits, checked before training (issue 41, class 2).

For every supported family the limit is measured, not only read: a forward at the limit runs and one
token more fails where the limit is hard (learned positions), or runs where positions are computed
(rotary, relative), which is then a warning. The check is made in the loop (before the first step),
in ``predict``, in ``bench --dry-run``, in ``attendout.hf.Trainer`` and in ``advise``.
"""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import (
    AutoModelForSequenceClassification,
    DebertaV2Config,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    MT5Config,
    Qwen2Config,
)

from attendout.attention import supported_model_types
from attendout.cli import main
from attendout.core.limits import POSITIONS, LimitError, check_length, position_limit
from attendout.methods import get_method_config
from attendout.run.loop import TrainingLoop
from conftest import VOCAB, tiny_config, toy_cli_args, toy_train_config
from test_decoders import LLAMA, tiny_t5_config


def family_config(family: str):
    if family == "gpt2":
        return GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64, pad_token_id=0)
    if family in ("llama", "mistral", "qwen2"):
        return {"llama": LlamaConfig, "mistral": MistralConfig, "qwen2": Qwen2Config}[family](**LLAMA)
    if family == "t5":
        return tiny_t5_config()
    if family == "mt5":
        return MT5Config(**tiny_t5_config().to_dict())
    if family == "deberta-v2-absolute":  # DeBERTa-v2 with absolute positions added to its input
        return DebertaV2Config(
            vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
            max_position_embeddings=64, position_biased_input=True, relative_attention=False,
        )  # fmt: skip
    if family in ("bart", "mbart", "marian"):
        from transformers import AutoConfig

        return AutoConfig.for_model(
            family, vocab_size=VOCAB, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
            decoder_attention_heads=2, encoder_ffn_dim=37, decoder_ffn_dim=37, max_position_embeddings=64,
            pad_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        )  # fmt: skip
    return tiny_config(family)


FAMILIES = sorted(supported_model_types()) + ["deberta-v2-absolute"]


def test_every_supported_family_says_how_long_its_inputs_may_be():
    assert set(supported_model_types()) <= set(POSITIONS)


def runs(config, length: int) -> bool:
    """Whether a forward of ``length`` tokens runs (a sequence classifier of ``config``, eval mode)."""
    torch.manual_seed(0)
    tokens = torch.randint(5, VOCAB, (1, length), generator=torch.Generator().manual_seed(1))
    if config.model_type in ("bart", "mbart", "marian"):  # a translation model: source and target both long
        from transformers import AutoModelForSeq2SeqLM

        model = AutoModelForSeq2SeqLM.from_config(config).eval()
        try:
            with torch.no_grad():
                model(input_ids=tokens, decoder_input_ids=tokens)
        except (IndexError, RuntimeError):
            return False
        return True
    model = AutoModelForSequenceClassification.from_config(config).eval()
    if config.model_type in ("t5", "mt5"):  # its classifier reads the decoder at the end-of-sequence token
        tokens[:, -1] = config.eos_token_id
    kwargs = {"input_ids": tokens, "attention_mask": torch.ones_like(tokens)}
    try:
        with torch.no_grad():
            model(**kwargs)
    except (IndexError, RuntimeError):
        return False
    return True


@pytest.mark.parametrize("family", FAMILIES)
def test_each_familys_limit_is_where_its_forward_stops_running(family, caplog):
    config = family_config(family)
    limit, hard = position_limit(config)
    if limit is None:  # nothing bounds the positions (T5's relative buckets): a long input runs
        assert family in ("t5", "mt5") and runs(config, 150)
        with caplog.at_level(logging.WARNING, logger="attendout.core.limits"):
            check_length(150, config)
        assert not caplog.records
        return
    assert runs(config, limit)
    check_length(limit, config)  # at the limit: fine
    if hard:
        assert not runs(config, limit + 1)  # one token more has no position: the limit is exact
        with pytest.raises(
            LimitError, match=f"--max-length {limit + 1} is more than .* {limit} learned positions"
        ):
            check_length(limit + 1, config)
    else:  # computed positions: a longer input runs, and the length beyond training is a warning
        assert runs(config, limit + 1)
        with caplog.at_level(logging.WARNING, logger="attendout.core.limits"):
            check_length(limit + 1, config)
        assert f"more than the {limit} positions" in caplog.text


def test_a_tokenizers_model_max_length_below_the_length_is_a_warning(caplog):
    class Tokenizer:
        model_max_length = 32

    with caplog.at_level(logging.WARNING, logger="attendout.core.limits"):
        check_length(48, tiny_config("bert"), tokenizer=Tokenizer())
    assert "model_max_length 32" in caplog.text
    caplog.clear()
    Tokenizer.model_max_length = int(1e30)  # "no limit known"
    with caplog.at_level(logging.WARNING, logger="attendout.core.limits"):
        check_length(48, tiny_config("bert"), tokenizer=Tokenizer())
    assert not caplog.records


def test_a_methods_limits_are_checked_with_the_models():
    config = tiny_config("bert")  # 2 layers, 64 positions
    synthesizer = get_method_config("synthesizer", l_max=16)
    check_length(16, config, method=synthesizer)
    with pytest.raises(LimitError, match="synthesizer: l_max 16 is less than --max-length 32"):
        check_length(32, config, method=synthesizer)
    with pytest.raises(LimitError, match=r"drophead: layers \[5\] do not exist; the model has 2 layers"):
        check_length(16, config, method=get_method_config("drophead", layers=[0, 5]))


def test_the_loop_refuses_a_length_beyond_the_model_before_it_writes_anything(tiny_run):
    config = toy_train_config(tiny_run, max_length=65)  # the tiny model embeds 64 positions
    with pytest.raises(LimitError, match="--max-length 65 is more than .* 64 learned positions"):
        TrainingLoop(config)
    assert not (tiny_run["tmp"] / "run").exists()
    options = {"variant": "dense+dot", "l_max": 8}
    with pytest.raises(LimitError, match="l_max 8 is less than --max-length 16"):
        TrainingLoop(toy_train_config(tiny_run, method="synthesizer", method_options=options))


def test_the_cli_says_it_in_one_sentence(tiny_run, capsys):
    assert main(toy_cli_args(tiny_run, "--max-length", "100")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("attendout: error: --max-length 100 is more than ")
    assert "use --max-length 64 or less" in err[-1]


def test_bench_dry_run_marks_a_cell_beyond_its_models_limits_invalid(tiny_run, capsys):
    from test_bench import write_experiment

    methods = '[[methods]]\nname = "none"\n[[methods]]\nname = "synthesizer"\noptions = { l_max = 8 }\n'
    path = write_experiment(tiny_run, methods=methods, seeds=(1,))
    assert main(["bench", str(path), "--results", str(tiny_run["tmp"] / "results"), "--dry-run"]) == 2
    rows = {
        line.split()[3]: line for line in capsys.readouterr().out.splitlines() if "tiny-bert/toy/" in line
    }
    assert "INVALID" in rows["tiny-bert/toy/synthesizer/seed-1"]
    assert "synthesizer: l_max 8 is less than max_length 16" in rows["tiny-bert/toy/synthesizer/seed-1"]
    assert "INVALID" not in rows["tiny-bert/toy/none/seed-1"]


def test_transformers_trainer_checks_the_length_it_is_given(tiny_run):
    from test_hf_trainer import hf_trainer

    with pytest.raises(LimitError, match="synthesizer: l_max 8 is less than max_length 16"):
        hf_trainer(tiny_run, "synthesizer", {"l_max": 8, "synthesizer_lr": 0.01})


def test_advise_refuses_it_before_its_first_stage_trains(tiny_run, capsys):
    args = toy_cli_args(tiny_run, "--max-length", "100", output_dir=tiny_run["tmp"] / "advice")
    args = ["advise", *[a for a in args[1:] if a != "--no-progress"], "--methods", "scores-dropout"]
    assert main([*args, "--trials", "1", "--seeds", "2", "--regime-epochs", "3", "--no-progress"]) == 2
    assert "attendout: error: --max-length 100 is more than " in capsys.readouterr().err
    assert not list((tiny_run["tmp"] / "advice").rglob("log.jsonl"))  # nothing trained
