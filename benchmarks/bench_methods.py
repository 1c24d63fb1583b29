"""Training-step time and peak memory of each method, relative to `none`, measured in one run.

Every method trains through the real fine-tuning loop (``TrainingLoop.train_step``, so methods with their
own training strategy are measured as they train) on the same batches (texts of random vocabulary
words with random lengths between half the length and the length, seeded), in its own child process (peak memory of a process cannot be reset), and the repeats are interleaved
(none, attn-dropout, ..., none, attn-dropout, ...) so that a slow spell of the machine hits every
method alike. Two extra rows compare the hook with stock attention:

    stock      the model as `transformers` builds it (SDPA), no attendout import in the step
    none       the attendout hook installed, no method active (target: at most 1.05x stock)

Usage (from the repository root):

    python benchmarks/bench_methods.py                      # offline MiniLM, batch 32, length 128
    python benchmarks/bench_methods.py --methods none scores-dropout --steps 5 --repeats 2
    python benchmarks/bench_methods.py --methods none@8 attendout attendout@8   # METHOD@N: micro-batches of N

Prints a Markdown table; ``--json PATH`` also writes the raw measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

DEFAULT_METHODS = [
    "stock",
    "none",
    "attn-dropout",
    "scores-dropout",
    "layerdrop",
    "attn-layerdrop",
    "scheduled",
    "drophead",
    "addrop",
    "attendout",
]

# Options that make a child measure the method's own step: AD-DROP's cross-tuning would otherwise
# start with plain fine-tuning, and every benchmark step is step 0 of the loop.
BENCH_OPTIONS: dict[str, dict] = {"addrop": {"cross_tuning": "off"}}


def write_random_texts(path: str, tokenizer, count: int, length: int, seed: int) -> None:
    """A CSV of ``count`` texts of random vocabulary words, each between length/2 and length tokens."""
    import csv
    import random

    rng = random.Random(seed)
    words = [w for w in tokenizer.get_vocab() if w.isalpha() and w.islower() and len(w) > 2]
    words.sort()
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for _ in range(count):
            n = rng.randint(length // 2, length) - 2  # [CLS] and [SEP]
            writer.writerow([" ".join(rng.choice(words) for _ in range(n)), rng.randint(0, 1)])


def child(args: argparse.Namespace) -> None:
    """Train `args.steps` steps with one method through the real loop; print one JSON line."""
    import tempfile

    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(args.threads)
    from attendout.config import TrainConfig
    from attendout.models.loading import resolve_model
    from attendout.run.loop import TrainingLoop

    path, _ = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    count = args.batch_size * (args.warmup + args.steps)
    with tempfile.TemporaryDirectory() as tmp:
        data = f"{tmp}/bench.csv"
        write_random_texts(
            data, tokenizer, count + 64, args.length, seed=1
        )  # the same texts for every method
        entry, _, micro = args.child.partition("@")  # METHOD@N: the same step over micro-batches of N
        method = "none" if entry == "stock" else entry
        trainer = TrainingLoop(
            TrainConfig(
                task="file",
                train_file=data,
                eval_files={"dev": data},
                text_columns=["text"],
                label_column="label",
                model=args.model,
                method=method,
                method_options=BENCH_OPTIONS.get(method, {}),
                max_length=args.length,
                batch_size=args.batch_size,
                micro_batch_size=int(micro) if micro else None,
                validation_split=64 / (count + 64),
                max_steps=args.warmup + args.steps,
                progress=False,
                save_model=False,
                output_dir=f"{tmp}/run",
                seed=0,
                data_seed=0,
            )
        )
        if entry == "stock":
            import attendout

            attendout.remove(trainer.model)  # stock transformers attention: no hook at all
        batches = list(trainer.train_set.batches(args.batch_size))[: args.warmup + args.steps]
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        times = []
        for i, batch in enumerate(batches):
            trainer.strategy.set_progress(i / len(batches))  # as the loop does (DropHead's V, scheduled)
            start = time.perf_counter()
            trainer.train_step(batch)
            if i >= args.warmup:
                times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(
        json.dumps(
            {
                "method": args.child,
                "step_s": statistics.median(times),
                "peak_rss_mib": peak / 1024,
                "train_peak_mib": (peak - rss_before) / 1024,
            }
        )
    )


def run_child(method: str, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        method,
        "--model",
        args.model,
        "--batch-size",
        str(args.batch_size),
        "--length",
        str(args.length),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--threads",
        str(args.threads),
    ]
    out = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    )
    if out.returncode != 0:
        raise RuntimeError(f"child for {method} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def interleaved(methods: list[str], repeats: int, run, label: str = "") -> dict[str, list[dict]]:
    """``run(method)`` for every method, ``repeats`` times in turn (none, a, b, none, a, b, ...), so that a
    slow spell of the machine hits every method alike; progress on stderr."""
    runs: dict[str, list[dict]] = {m: [] for m in methods}
    for repeat in range(repeats):
        for method in methods:
            result = run(method)
            runs[method].append(result)
            print(
                f"[{label}repeat {repeat + 1}/{repeats}] {method}: {result['step_s']:.3f} s/step, "
                f"peak {result['peak_rss_mib']:.0f} MiB (training +{result['train_peak_mib']:.0f} MiB)",
                file=sys.stderr,
                flush=True,
            )
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--methods", nargs="+", default=DEFAULT_METHODS)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per child")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps per child")
    parser.add_argument("--repeats", type=int, default=3, help="children per method, interleaved")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", default=None, help="write the raw measurements here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    methods = list(dict.fromkeys(["none", *args.methods]))
    runs = interleaved(methods, args.repeats, lambda method: run_child(method, args))

    def median(method: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[method])

    base_t, base_m, base_tm = (
        median("none", "step_s"),
        median("none", "peak_rss_mib"),
        median("none", "train_peak_mib"),
    )
    print(
        f"\nmodel {args.model}, batch {args.batch_size}, length {args.length} (random lengths {args.length // 2}-"
        f"{args.length}), {args.steps} timed steps x {args.repeats} interleaved repeats, {args.threads} threads; "
        "medians\n"
    )
    print(
        "| method | step time (s) | time vs none | peak RSS (MiB) | peak vs none | training increment vs none |"
    )
    print("|---|---|---|---|---|---|")
    for method in methods:
        t, m, tm = median(method, "step_s"), median(method, "peak_rss_mib"), median(method, "train_peak_mib")
        print(
            f"| {method} | {t:.3f} | {t / base_t:.2f}x | {m:.0f} | {m / base_m:.2f}x | {tm / max(base_tm, 1e-9):.2f}x |"
        )
    if "stock" in runs:
        print(
            f"\nhook installed, nothing active, vs stock SDPA: {base_t / median('stock', 'step_s'):.3f}x step time "
            "(target: at most 1.05x)"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "runs": runs}, f, indent=2)


if __name__ == "__main__":
    main()
