"""Cost of a training step of each offline model against the packaged MiniLM, measured in the same run.

Each model is built for the task kind it serves here (MiniLM and MPNet-base: sequence classification;
opus-mt-en-fr: translation, source and target of the same length; SmolLM2-135M: causal language
modelling), given a batch of random token ids, and trained with AdamW (lr 1e-5) for ``--steps`` steps
after one warm-up step, on one thread. The clock is the process's CPU time (``time.process_time``), so
another job on the machine slows the wall clock but not the number. Models that ``make models`` has not
set up are skipped with a line.

Usage (from the repository root):

    python benchmarks/bench_offline_models.py                      # batch 16, length 64, 3 steps
    python benchmarks/bench_offline_models.py --batch 32 --length 32

Prints a Markdown table: parameters, CPU seconds per step, and the ratio to MiniLM's step.
"""

from __future__ import annotations

import argparse
import time

import torch


def build(name: str):
    """(model, vocabulary size, kind) of an offline model name or 'minilm'."""
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        AutoModelForSeq2SeqLM,
        AutoModelForSequenceClassification,
    )

    from attendout.models.loading import resolve_model

    path, _ = resolve_model(name)
    config = AutoConfig.from_pretrained(path)
    if config.is_encoder_decoder:
        return AutoModelForSeq2SeqLM.from_pretrained(path), config.vocab_size, "seq2seq"
    if config.model_type in ("llama", "gpt2", "mistral", "qwen2"):
        return AutoModelForCausalLM.from_pretrained(path), config.vocab_size, "lm"
    return (
        AutoModelForSequenceClassification.from_pretrained(path, num_labels=2),
        config.vocab_size,
        "classification",
    )


def batch_for(kind: str, vocab: int, batch: int, length: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, min(vocab, 30_000), (batch, length), generator=g)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if kind == "classification":
        inputs["labels"] = torch.randint(0, 2, (batch,), generator=g)
    else:  # seq2seq: a target as long as the source; lm: the text predicts itself
        inputs["labels"] = torch.randint(5, min(vocab, 30_000), (batch, length), generator=g)
    return inputs


def step_seconds(name: str, batch: int, length: int, steps: int) -> tuple[int, float, str] | None:
    from attendout.models.loading import ModelNotFoundError

    try:
        model, vocab, kind = build(name)
    except ModelNotFoundError as error:
        print(f"skipped {name}: {error}")
        return None
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    inputs = batch_for(kind, vocab, batch, length)

    def step() -> None:
        model(**inputs).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up: allocations, the optimizer's state
    start = time.process_time()
    for _ in range(steps):
        step()
    parameters = sum(p.numel() for p in model.parameters())
    return parameters, (time.process_time() - start) / steps, kind


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--models", default="minilm,mpnet-base,opus-mt-en-fr,smollm2-135m")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in args.models.split(","):
        measured = step_seconds(name, args.batch, args.length, args.steps)
        if measured is not None:
            rows.append((name, *measured))
    base = next((seconds for name, _, seconds, _ in rows if name == "minilm"), None)
    print(
        f"\nbatch {args.batch}, length {args.length}, {args.steps} steps after one warm-up, 1 thread, CPU seconds"
    )
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}\n")
    print("| model | task kind | parameters | s / step | x MiniLM |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, parameters, seconds, kind in rows:
        ratio = f"{seconds / base:.1f}" if base else "n/a"
        print(f"| {name} | {kind} | {parameters / 1e6:.0f}M | {seconds:.2f} | {ratio} |")


if __name__ == "__main__":
    main()
