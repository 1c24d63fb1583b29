"""Synthesizer variants in language modelling, from scratch: the setting of the paper's LM1B comparison.

Tay et al., "Synthesizer: Rethinking Self-Attention in Transformer Models" (ICML 2021) compare attention
variants as decoders trained from scratch on LM1B. This script does the same at a size this CPU trains:
one small randomly initialised GPT-2 (causal decoder, learned absolute positions), the same initial
weights for every variant (its self-attention then synthesized with ``attendout.synthesize``), the same
data in the same order, the same steps; a plain PyTorch loop, as any user's would be.

Corpus: NLTK's movie reviews (Pang & Lee v2.0, 2,000 reviews, lower-cased and tokenised by their
authors), read offline from ``movie_reviews.zip``; split by the authors' folds as ``attendout``'s
``movie-reviews`` task splits them: cv000-799 train (1,600 reviews), cv800-899 validation (200, the
curves), cv900-999 test (200, the final perplexity). Tokenizer: whitespace words, a vocabulary of the
``--vocab`` most frequent training words plus ``<unk>`` and ``<eos>`` (built from the train split only),
reviews joined with ``<eos>`` and cut into blocks of ``--length`` tokens.

Model: GPT-2, ``--layers`` layers, hidden ``--hidden``, ``--heads`` heads, FFN 4x, tied embeddings, its
dropouts at 0.1. Mixtures ('+dot') start at weight 1/2 (``init='paper'``): from scratch there is no
dot-product model to start exactly from. Variants without '+dot' leave the query and key weights of
GPT-2's fused ``c_attn`` allocated but unused (no gradient): they are left out of "parameters used".

Every run writes ``OUT/runs/VARIANT-seedS.json`` when it ends (the grid resumes by skipping them);
``--report`` (also run at the end) writes ``OUT/table.md`` and ``OUT/perplexity.png``; ``--timing`` times
every variant's training step interleaved in one process (``OUT/timing.json``), which the table prefers to
the runs' own step times (a run alone on a busy machine times the machine).

    python experiments/synthesizer_lm.py --data ../shared/data/nltk_data --steps 30 --seeds 1 --out /tmp/lm  # smoke
    python experiments/synthesizer_lm.py --data ../shared/data/nltk_data --seeds 1 2 3 --threads 1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthesizer_from_scratch import VARIANTS  # noqa: E402  (the same variants as the classification runs)

SPECIALS = ["<unk>", "<eos>"]


# --------------------------------------------------------------------------------------------------
# Data
# --------------------------------------------------------------------------------------------------


def corpus(data: str, vocab_size: int) -> tuple[dict[str, torch.Tensor], list[str]]:
    """Token ids of the train, validation and test reviews (one stream each), and the vocabulary."""
    from attendout.tasks.documents import MOVIE_REVIEWS_ZIP, read_movie_reviews
    from attendout.tasks.tokens import find_nltk_zip

    splits = read_movie_reviews(find_nltk_zip(data, MOVIE_REVIEWS_ZIP, "synthesizer-lm"))
    words = {name: [text.split() for text in examples.text_a] for name, examples in splits.items()}
    counts = Counter(word for review in words["train"] for word in review)
    vocab = SPECIALS + [word for word, _ in counts.most_common(vocab_size)]
    index = {word: i for i, word in enumerate(vocab)}
    eos = index["<eos>"]
    streams = {}
    for name, reviews in words.items():
        ids = [i for review in reviews for i in [index.get(w, 0) for w in review] + [eos]]
        streams[{"train": "train", "dev": "validation", "test": "test"}[name]] = torch.tensor(ids)
    return streams, vocab


def blocks(stream: torch.Tensor, length: int) -> torch.Tensor:
    """(N, length) consecutive blocks of the stream (the remainder is dropped)."""
    n = len(stream) // length
    return stream[: n * length].view(n, length)


# --------------------------------------------------------------------------------------------------
# One run
# --------------------------------------------------------------------------------------------------


def build_model(args: argparse.Namespace, vocab: int, variant: str, seed: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    import attendout

    config = GPT2Config(
        vocab_size=vocab,
        n_positions=args.length,
        n_embd=args.hidden,
        n_layer=args.layers,
        n_head=args.heads,
        bos_token_id=1,
        eos_token_id=1,
    )
    torch.manual_seed(seed)  # the same base weights for every variant of a seed
    model = GPT2LMHeadModel(config)
    if variant != "dot":
        attendout.synthesize(
            model,
            variant.removesuffix("-fixed"),
            max_length=args.length,
            fixed=variant.endswith("-fixed"),
            init="paper",
            rank=args.rank,
        )
    return model


def parameter_counts(model, variant: str) -> dict[str, int]:
    """Trainable parameters in all; those a variant never uses (Q and K of c_attn); synthesizer tensors."""
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    unused = 0
    if variant != "dot" and "+dot" not in variant:
        for block in model.transformer.h:
            d = block.attn.embed_dim
            unused += 2 * (d * d + d)  # the query and key columns of the fused c_attn, and their biases
    synth = sum(t.numel() for n, t in model.state_dict().items() if n.startswith("attendout_synthesizer."))
    return {"total": total, "used": total - unused, "synthesizer_tensors": synth}


@torch.no_grad()
def perplexity(model, data: torch.Tensor, batch_size: int) -> float:
    model.eval()
    total, tokens = 0.0, 0
    for start in range(0, len(data), batch_size):
        chunk = data[start : start + batch_size]
        loss = model(input_ids=chunk, labels=chunk).loss  # mean over chunk.numel() - rows predictions
        n = chunk.numel() - chunk.shape[0]
        total += loss.item() * n
        tokens += n
    model.train()
    return math.exp(total / tokens)


def run(args: argparse.Namespace, variant: str, seed: int) -> dict:
    streams, vocab = corpus(args.data, args.vocab)
    train = blocks(streams["train"], args.length)
    validation = blocks(streams["validation"], args.length)
    test = blocks(streams["test"], args.length)
    curve_blocks = validation[: args.curve_blocks]
    model = build_model(args, len(vocab), variant, seed)
    counts = parameter_counts(model, variant)
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=args.learning_rate, weight_decay=0.01
    )
    warmup = max(1, int(0.1 * args.steps))
    schedule = torch.optim.lr_scheduler.LambdaLR(  # linear warm-up, then linear decay to 0
        optimizer,
        lambda step: (
            (step + 1) / warmup if step < warmup else max(0.0, (args.steps - step) / (args.steps - warmup))
        ),
    )
    order = torch.Generator().manual_seed(1000 + seed)  # the same batches for every variant of a seed
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    model.train()
    curve, step_seconds, losses = [], [], []
    every = max(1, args.steps // args.evaluations)
    for step in range(args.steps):
        rows = torch.randint(0, len(train), (args.batch_size,), generator=order)
        batch = train[rows]
        started = time.perf_counter()
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        step_seconds.append(time.perf_counter() - started)
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            raise SystemExit(f"{variant} seed {seed}: loss {losses[-1]} at step {step + 1}")
        if (step + 1) % every == 0 or step + 1 == args.steps:
            ppl = perplexity(model, curve_blocks, args.batch_size)
            curve.append(
                {"step": step + 1, "validation_ppl": ppl, "train_loss": statistics.mean(losses[-every:])}
            )
            print(
                f"{variant} seed {seed}: step {step + 1}/{args.steps}: validation ppl {ppl:.1f}", flush=True
            )
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "variant": variant,
        "seed": seed,
        "validation_ppl": perplexity(model, validation, args.batch_size),
        "test_ppl": perplexity(model, test, args.batch_size),
        "parameters": counts,
        "step_ms_median": 1000 * statistics.median(step_seconds[len(step_seconds) // 10 :]),
        "peak_rss_growth_mb": (rss_after - rss_before) / 1024,  # ru_maxrss is in KiB on Linux
        "curve": curve,
        "tokens": {k: int(v.numel()) for k, v in streams.items()},
        "vocabulary": len(vocab),
        "threads": torch.get_num_threads(),
        "device": "cpu",
        "args": {k: v for k, v in vars(args).items() if k not in ("one", "report", "timing")},
    }


def timing(args: argparse.Namespace, rounds: int = 5, steps: int = 10) -> dict:
    """Training-step time of every variant, interleaved in one process (so that a busy machine slows
    them alike): ``rounds`` rounds of ``steps`` steps each, after one warm-up step; medians in ms."""
    streams, vocab = corpus(args.data, args.vocab)
    train = blocks(streams["train"], args.length)
    models = {v: build_model(args, len(vocab), v, seed=1) for v in args.variants}
    optimizers = {v: torch.optim.AdamW(m.parameters(), lr=1e-4) for v, m in models.items()}
    batch = train[: args.batch_size]
    times: dict[str, list[float]] = {v: [] for v in models}

    def step(variant: str) -> None:
        loss = models[variant](input_ids=batch, labels=batch).loss
        loss.backward()
        optimizers[variant].step()
        optimizers[variant].zero_grad(set_to_none=True)

    for variant in models:
        models[variant].train()
        step(variant)  # warm-up
    for _ in range(rounds):
        for variant in models:
            for _ in range(steps):
                started = time.perf_counter()
                step(variant)
                times[variant].append(time.perf_counter() - started)
    result = {v: 1000 * statistics.median(t) for v, t in times.items()}
    print("  ".join(f"{v} {ms:.0f} ms" for v, ms in result.items()), flush=True)
    return {"step_ms_median": result, "threads": torch.get_num_threads(), "rounds": rounds, "steps": steps}


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------


def mean_std(values: list[float], digits: int = 1) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def report(out: Path) -> str:
    runs = [json.loads(p.read_text()) for p in sorted((out / "runs").glob("*.json"))]
    if not runs:
        raise SystemExit(f"no finished runs in {out / 'runs'}")
    by = {v: [r for r in runs if r["variant"] == v] for v in VARIANTS}
    by = {v: rs for v, rs in by.items() if rs}
    dot = {r["seed"]: r for r in by.get("dot", [])}
    timed = json.loads((out / "timing.json").read_text()) if (out / "timing.json").exists() else None
    first = runs[0]
    a = first["args"]
    lines = [
        f"GPT-2 from scratch, {a['layers']} layers x {a['hidden']}, {a['heads']} heads, context {a['length']}; "
        f"{a['steps']} steps x batch {a['batch_size']} ({a['steps'] * a['batch_size'] * a['length']:,} tokens, "
        f"{a['steps'] * a['batch_size'] * a['length'] / first['tokens']['train']:.2f} epochs of "
        f"{first['tokens']['train']:,} train tokens); lr {a['learning_rate']}, AdamW, warm-up 10% then linear "
        f"decay; word vocabulary {first['vocabulary']:,} (movie reviews train split); CPU, "
        f"{first['threads']} thread(s). Perplexity on the test reviews ({first['tokens']['test']:,} tokens); "
        "Δ = paired difference to dot in the same seed. Step time: median training step, all variants "
        "interleaved in one process (`--timing`), as a ratio to dot; memory: growth of the run's peak RSS "
        "over training (each run in its own process).",
        "",
        "| variant | seeds | test ppl | Δ ppl vs dot | validation ppl | parameters used | synthesizer | "
        "step time vs dot | peak memory growth (MB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for variant, rs in by.items():
        deltas = [r["test_ppl"] - dot[r["seed"]]["test_ppl"] for r in rs if r["seed"] in dot]
        if timed and variant in timed["step_ms_median"]:
            ratios = [timed["step_ms_median"][variant] / timed["step_ms_median"]["dot"]]
        else:  # the runs' own step times (each run alone: a busy machine makes these noisy)
            ratios = [r["step_ms_median"] / dot[r["seed"]]["step_ms_median"] for r in rs if r["seed"] in dot]
        lines.append(
            f"| {variant} | {len(rs)} | {mean_std([r['test_ppl'] for r in rs])} | "
            f"{mean_std(deltas) if variant != 'dot' and deltas else '—'} | "
            f"{mean_std([r['validation_ppl'] for r in rs])} | {rs[0]['parameters']['used']:,} | "
            f"{rs[0]['parameters']['synthesizer_tensors']:,} | "
            f"{mean_std(ratios, 2) + 'x' if ratios else '—'} | {mean_std([r['peak_rss_growth_mb'] for r in rs], 0)} |"
        )
    table = "\n".join(lines) + "\n"
    (out / "table.md").write_text(table)
    plot(by, out / "perplexity.png")
    return table


def plot(by: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for variant, rs in by.items():
        steps = [p["step"] for p in rs[0]["curve"]]
        values = [[r["curve"][i]["validation_ppl"] for r in rs] for i in range(len(steps))]
        means = [statistics.mean(v) for v in values]
        style = "-" if "+dot" in variant or variant == "dot" else "--"
        line = ax.plot(
            steps,
            means,
            style,
            label=f"{variant} ({len(rs)} seeds)",
            linewidth=2 if variant == "dot" else 1.2,
        )
        if len(rs) > 1:
            lo, hi = [min(v) for v in values], [max(v) for v in values]
            ax.fill_between(steps, lo, hi, color=line[0].get_color(), alpha=0.12)
    ax.set_yscale("log")
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("validation perplexity (log scale; band = min..max over seeds)")
    ax.set_title("Synthesizer variants as GPT-2 language models from scratch (movie reviews)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--data", default=os.path.join(os.environ.get("ATTENDOUT_DATA", "../shared/data"), "nltk_data")
    )
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--length", type=int, default=64, help="context length (and the synthesizers' l_max)")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--rank", type=int, default=8, help="factorized variants' k (random) and a (dense)")
    parser.add_argument("--vocab", type=int, default=5000, help="most frequent training words kept")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--evaluations", type=int, default=10, help="points on the validation curve")
    parser.add_argument("--curve-blocks", type=int, default=160, help="validation blocks per curve point")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="results/synthesizer-lm")
    parser.add_argument("--one", nargs=2, metavar=("VARIANT", "SEED"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--report", action="store_true", help="only write the table and plot from finished runs"
    )
    parser.add_argument(
        "--timing", action="store_true", help="time every variant's step, interleaved; then report"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    if args.report:
        print(report(out))
        return
    if args.timing:
        out.mkdir(parents=True, exist_ok=True)
        (out / "timing.json").write_text(json.dumps(timing(args), indent=1) + "\n")
        print(report(out))
        return
    if args.one:  # one run in its own process, so that its peak memory is its own
        result = run(args, args.one[0], int(args.one[1]))
        path = out / "runs" / f"{args.one[0]}-seed{args.one[1]}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(result, indent=1) + "\n")
        partial.replace(path)  # whole or absent
        return
    for seed in args.seeds:
        for variant in args.variants:
            if (out / "runs" / f"{variant}-seed{seed}.json").exists():
                print(f"{variant} seed {seed}: done already", flush=True)
                continue
            command = [sys.executable, __file__, *sys.argv[1:], "--one", variant, str(seed)]
            subprocess.run(command, check=True)
    print(report(out))


if __name__ == "__main__":
    main()
