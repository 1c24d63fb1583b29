"""Synthesizer attention (Tay et al., "Synthesizer: Rethinking Self-Attention in Transformer Models"):
forward+backward time of one attention layer per variant, relative to dot-product attention, at
several lengths, beside a FLOP estimate and the parameter count of the layer.

One attention layer (MiniLM's shape by default: hidden 384, 12 heads) maps X (B, L, d) to the
output projection of softmax(logits) V. Dot-product attention computes its logits from the query
and key projections; a synthesizer from its own parameters (:mod:`attendout.methods.synthesizer`,
the library's modules, with l_max = L); a mixture from both. Every variant uses the same eager code
for the softmax, A V and the projections, so the ratios isolate the logits. ``dot (sdpa)`` is
torch's fused attention (what stock `transformers` runs) for reference.

Repeats are interleaved (dot, random, ..., dot, random, ...) so a slow spell of the shared machine
hits every variant alike; the median is reported. The FLOP estimate counts matmuls (2 per
multiply-add) and ~5 per softmax element, forward x 3 for forward+backward. Inside a pretrained
encoder (``attendout.synthesize``) the query/key projections and Q K^T are still computed by the
model and the hook, so a synthesizer saves no time there: these numbers are the paper's setting,
a layer built with synthetic attention.

Usage (from the repository root):

    python benchmarks/bench_synthesizer.py                          # lengths 128 512 1024, batch 4
    python benchmarks/bench_synthesizer.py --lengths 128 --repeats 3 --json bench_synth.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
from torch import nn

from attendout.methods.synthesizer.layer import SynthesizerLayer, base_variant, is_mixture

VARIANTS = [
    "dot",
    "dot (sdpa)",
    "random",
    "random (fixed)",
    "factorized-random",
    "dense",
    "factorized-dense",
    "random+dot",
    "dense+dot",
]


class AttentionLayer(nn.Module):
    """One self-attention layer, (B, L, d) -> (B, L, d), with dot-product or synthetic logits."""

    def __init__(self, variant: str, hidden: int, heads: int, length: int, rank: int) -> None:
        super().__init__()
        self.variant, self.heads, self.head_size = variant, heads, hidden // heads
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)
        self.dot = variant.startswith("dot") or is_mixture(variant)
        if self.dot:
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
        self.synth: SynthesizerLayer | None = None
        if not variant.startswith("dot"):
            name = variant.removesuffix(" (fixed)")
            self.synth = SynthesizerLayer(
                name,
                hidden_size=hidden,
                heads=heads,
                l_max=length,
                rank=rank,
                fixed=variant.endswith("(fixed)"),
                init="paper",
            )

    def split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.head_size).transpose(1, 2)  # (B, H, L, dh)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        v = self.split(self.value(x))  # (B, H, L, dh)
        if self.variant == "dot (sdpa)":
            q, k = self.split(self.query(x)), self.split(self.key(x))
            out = nn.functional.scaled_dot_product_attention(q, k, v)  # (B, H, L, dh)
        else:
            if self.dot:
                q, k = self.split(self.query(x)), self.split(self.key(x))
                logits = torch.matmul(q, k.transpose(-1, -2)) * self.head_size**-0.5  # (B, H, L, L)
            else:
                logits = x.new_zeros(1, 1, 1, 1).expand(b, self.heads, n, n)  # shape only, no memory
            if self.synth is not None:
                logits = self.synth(logits, x)  # (B, H, L, L)
            out = torch.matmul(torch.softmax(logits, dim=-1), v)  # (B, H, L, dh)
        return self.output(out.transpose(1, 2).reshape(b, n, d))


def flops(variant: str, batch: int, length: int, hidden: int, heads: int, rank: int) -> float:
    """Estimated forward+backward FLOPs of one layer (matmuls 2/multiply-add, softmax 5/element)."""
    b, n, d, h = batch, length, hidden, heads
    common = 2 * 2 * b * n * d * d + 2 * b * n * n * d + 5 * b * h * n * n  # V, O, A V, softmax
    dot = 2 * 2 * b * n * d * d + 2 * b * n * n * d + b * h * n * n  # Q, K, Q K^T, scale
    name = variant.removesuffix(" (fixed)")
    base = base_variant(name)
    if name.startswith("dot"):
        extra = dot
    else:
        if base == "random":
            extra = 0
        elif base == "factorized-random":
            extra = 2 * h * n * n * rank
        elif base == "dense":
            extra = 2 * b * n * d * d + 2 * b * n * d * h * n
        else:  # factorized-dense: a' = ceil(L / b) values of A, b = ceil(l_max / rank) of B
            b_size = math.ceil(n / rank)
            extra = 2 * b * n * d * d + 2 * b * n * d * h * (math.ceil(n / b_size) + b_size) + b * h * n * n
        if is_mixture(name):
            extra += dot + 3 * b * h * n * n
    return 3.0 * (common + extra)


def parameters(layer: nn.Module) -> int:
    return sum(p.numel() for p in layer.parameters())


def time_step(layer: nn.Module, x: torch.Tensor) -> float:
    start = time.perf_counter()
    layer(x).sum().backward()
    layer.zero_grad(set_to_none=True)
    x.grad = None
    return time.perf_counter() - start


def run(args: argparse.Namespace) -> list[dict]:
    torch.manual_seed(0)
    rows = []
    for length in args.lengths:
        layers = {v: AttentionLayer(v, args.hidden, args.heads, length, args.rank) for v in args.variants}
        x = torch.randn(args.batch, length, args.hidden, requires_grad=True)
        for layer in layers.values():  # warm-up
            time_step(layer, x)
        times: dict[str, list[float]] = {v: [] for v in args.variants}
        for _ in range(args.repeats):
            for variant, layer in layers.items():
                times[variant].append(time_step(layer, x))
        base_time = statistics.median(times["dot"])
        base_flops = flops("dot", args.batch, length, args.hidden, args.heads, args.rank)
        base_params = parameters(layers["dot"])
        for variant, layer in layers.items():
            seconds = statistics.median(times[variant])
            estimate = flops(variant, args.batch, length, args.hidden, args.heads, args.rank)
            rows.append(
                {
                    "length": length,
                    "variant": variant,
                    "params": parameters(layer),
                    "params_vs_dot": parameters(layer) / base_params,
                    "gflop": estimate / 1e9,
                    "flop_vs_dot": estimate / base_flops,
                    "ms": 1000 * seconds,
                    "time_vs_dot": seconds / base_time,
                }
            )
        print(f"length {length} done", flush=True)
    return rows


def table(rows: list[dict], args: argparse.Namespace) -> str:
    lines = [
        f"Attention layer forward+backward, batch {args.batch}, hidden {args.hidden}, {args.heads} heads, "
        f"rank {args.rank}, median of {args.repeats}, {torch.get_num_threads()} threads, torch {torch.__version__}",
        "",
        "| L | variant | params/layer | vs dot | est. GFLOP | vs dot | time ms | vs dot |",
        "|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['length']} | {r['variant']} | {r['params']:,} | {r['params_vs_dot']:.2f} | {r['gflop']:.2f} "
            f"| {r['flop_vs_dot']:.2f} | {r['ms']:.1f} | {r['time_vs_dot']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 1024])
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=384, help="hidden size (MiniLM: 384)")
    parser.add_argument("--heads", type=int, default=12, help="attention heads (MiniLM: 12)")
    parser.add_argument("--rank", type=int, default=8, help="k of the factorized variants")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="also write the rows as JSON")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (1 is faster on a busy shared CPU)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if "dot" not in args.variants:
        args.variants = ["dot", *args.variants]
    rows = run(args)
    print(table(rows, args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
