"""Decoding time with the idle hook, relative to stock decoding, measured in one run.

``model.generate`` (greedy, and beam search with 4 beams) of a small GPT-2 and a small T5 built from
scratch (random weights from a seed; nothing is downloaded), in three forms that share one set of weights:

    stock           the model as `transformers` builds it (SDPA), no attendout hook
    none            ``attendout.apply(model, "none")``: the hook installed, no method
    scores-dropout  ``attendout.apply(model, "scores-dropout", p=0.1)``, the model in eval mode: a
                    regulariser that is idle at inference

A regulariser acts only in training mode, so both hooked forms must decode the very tokens of stock
(checked: a difference stops the benchmark) at the same speed. The forms are timed in turn within each
repeat (stock, none, scores-dropout, stock, ...) in one process, so that a slow spell of the machine
hits every form alike; every call generates exactly ``--new-tokens`` tokens (``min_new_tokens``), so
the work is the same. Ratios are medians over the repeats of each form's time over stock's in the
same repeat.

Usage (from the repository root):

    python benchmarks/bench_decoding.py                     # batch 8, prompts of 16, 32 new tokens
    python benchmarks/bench_decoding.py --repeats 20 --new-tokens 64 --threads 2

Prints a Markdown table; ``--json PATH`` also writes the raw measurements.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

FORMS = ("stock", "none", "scores-dropout")
DECODINGS = {"greedy": 1, "beam 4": 4}


def build(architecture: str, args: argparse.Namespace):
    """A model from scratch of ``architecture`` (``gpt2`` or ``t5``), weights from seed 0, eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    from attendout.models.generation import ScratchSize, scratch_config

    kind = "lm" if architecture == "gpt2" else "seq2seq"
    size = ScratchSize(layers=args.layers, hidden=args.hidden, heads=args.heads, vocab_size=args.vocab)
    positions = args.prompt_length + args.new_tokens
    config = scratch_config(architecture, kind, size, positions, args.vocab)
    torch.manual_seed(0)
    auto = AutoModelForCausalLM if kind == "lm" else AutoModelForSeq2SeqLM
    return auto.from_config(config).eval()


def forms(model) -> dict:
    """The three forms of ``model`` (copies with the same weights; see the module docstring)."""
    import attendout

    made = {"stock": model}
    for name, options in (("none", {}), ("scores-dropout", {"p": 0.1})):
        copied = copy.deepcopy(model)
        attendout.apply(copied, name, **options)
        made[name] = copied.eval()
    return made


def decode(model, inputs: dict, beams: int, new_tokens: int):
    import torch

    with torch.no_grad():
        return model.generate(
            **inputs,
            num_beams=beams,
            do_sample=False,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
        )


def measure(architecture: str, args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    """Seconds per ``generate`` call: decoding -> form -> one time per repeat."""
    import torch

    models = forms(build(architecture, args))
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(3, args.vocab, (args.batch_size, args.prompt_length), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    times: dict[str, dict[str, list[float]]] = {}
    for decoding, beams in DECODINGS.items():
        reference = decode(models["stock"], inputs, beams, args.new_tokens)
        for name, model in models.items():  # warm-up, and the same tokens as stock
            if not torch.equal(decode(model, inputs, beams, args.new_tokens), reference):
                raise SystemExit(f"{architecture} {decoding}: {name} decodes other tokens than stock")
        times[decoding] = {name: [] for name in models}
        for repeat in range(args.repeats):
            for name, model in models.items():
                start = time.perf_counter()
                decode(model, inputs, beams, args.new_tokens)
                times[decoding][name].append(time.perf_counter() - start)
            line = ", ".join(f"{n} {times[decoding][n][-1] * 1000:.0f} ms" for n in models)
            print(
                f"[{architecture} {decoding} {repeat + 1}/{args.repeats}] {line}", file=sys.stderr, flush=True
            )
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "t5"], choices=["gpt2", "t5"])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--prompt-length", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=10, help="timed calls per form, interleaved")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", default=None, help="write the raw measurements here")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    runs = {architecture: measure(architecture, args) for architecture in args.models}
    print(
        f"\nfrom scratch: {args.layers} layers (T5: each of encoder and decoder), hidden {args.hidden}, "
        f"{args.heads} heads, vocabulary {args.vocab}; batch {args.batch_size}, prompts of {args.prompt_length} "
        f"tokens, {args.new_tokens} new tokens; {args.repeats} interleaved repeats, {args.threads} threads, "
        f"torch {torch.__version__}; medians\n"
    )
    print(
        "| model | decoding | stock (ms) | none (ms) | none vs stock | scores-dropout, eval (ms) | vs stock |"
    )
    print("|---|---|---|---|---|---|---|")
    for architecture, decodings in runs.items():
        for decoding, times in decodings.items():
            ratios = {  # paired: each repeat against stock's call in the same repeat
                name: statistics.median(t / s for t, s in zip(values, times["stock"], strict=True))
                for name, values in times.items()
            }
            ms = {name: statistics.median(values) * 1000 for name, values in times.items()}
            print(
                f"| {architecture} | {decoding} | {ms['stock']:.1f} | {ms['none']:.1f} | {ratios['none']:.3f}x | "
                f"{ms['scores-dropout']:.1f} | {ratios['scores-dropout']:.3f}x |"
            )
    print("\nevery hooked form decoded the same tokens as stock (checked before timing)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=2)


if __name__ == "__main__":
    main()
