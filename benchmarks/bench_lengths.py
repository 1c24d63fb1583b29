"""Cost of each method against stock attention as the sequence grows: time and peak memory of a
training step at lengths 128 to 8192, as ratios to stock `transformers` attention measured in the
same run.

MiniLM stops at 512 positions, so every length runs on one tiny long-context encoder built in code
(BERT architecture, random weights, ``--hidden`` / ``--heads`` / ``--layers``, 8192 positions, MiniLM's
tokenizer): attention dominates its step at long lengths, as in the long-context encoders users
fine-tune. The batch holds about ``--tokens`` tokens at every length (batch = tokens // length).

Each (length, method) trains through the real loop in its own child process (``bench_methods.py``'s
child: ``Trainer.train_step`` on the same random texts), repeats interleaved. Two numbers per cell:

    time     median step time / stock's
    memory   the training increment of peak RSS (peak during the steps minus RSS before them) / stock's;
             process RSS covers every tensor torch allocates on the CPU, the attention matrices included

``stock`` is the model as `transformers` builds it (SDPA, the model's own attention dropout, no hook).

Usage (from the repository root):

    python benchmarks/bench_lengths.py                                   # 128 512 2048 8192, every method
    python benchmarks/bench_lengths.py --lengths 128 512 --methods stock scores-dropout --repeats 1
    python benchmarks/bench_lengths.py --json benchmarks/results/lengths.json --png results/lengths.png

Prints a Markdown table; ``--json`` keeps every measurement (written after each length, and read back
with ``--resume`` so a stopped sweep goes on where it stopped); ``--png`` plots ratio against length.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_methods import interleaved, run_child  # noqa: E402  (the child that trains one method)

METHODS = [
    "stock",
    "none",
    "attn-dropout",
    "scores-dropout",
    "drophead",
    "attn-layerdrop",
    "scheduled",
    "layerdrop",
    "addrop",
    "attendout",
]
#: the methods the hook runs on the fused path (target: at most 1.05x stock time, 1.10x memory at 2048+)
HOOK_METHODS = ["attn-dropout", "scores-dropout", "drophead", "attn-layerdrop", "scheduled"]
#: timed round-robin in one process (drift cancels); the others train through the loop in child processes
ROUND_ROBIN = ["none", *HOOK_METHODS]
#: the control of attn-dropout in the round-robin: stock attention with its own dropout at attn-dropout's
#: rate (torch's CPU dropout takes longer at 0.2 than at the model's 0.1: a cost of the rate, not of the hook)
CONTROL = "stock, attn. dropout 0.2"


def stock_at_rate(stock, rate: float):
    """A copy of the stock model whose attention layers drop their weights at ``rate``."""
    import copy

    from transformers.models.bert.modeling_bert import BertSelfAttention

    control = copy.deepcopy(stock)
    for module in control.modules():
        if isinstance(module, BertSelfAttention):
            module.dropout.p = rate  # read at every forward, passed to SDPA as dropout_p
    return control


def build_long_model(folder: str, hidden: int, heads: int, layers: int, positions: int) -> None:
    """A random-weight BERT encoder with ``positions`` positions and MiniLM's tokenizer, saved to ``folder``."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from attendout.models.loading import packaged_model_path

    tokenizer = AutoTokenizer.from_pretrained(packaged_model_path())
    tokenizer.model_max_length = positions
    config = BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_hidden_layers=layers,
        intermediate_size=4 * hidden,
        max_position_embeddings=positions,
        num_labels=2,
    )
    model = BertForSequenceClassification(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def measure(args: argparse.Namespace, model: str, length: int, method: str) -> dict:
    child = argparse.Namespace(
        model=model,
        batch_size=max(1, args.tokens // length),
        length=length,
        steps=max(args.steps, round(args.steps * 1024 / length)),  # short steps: more of them, for the noise
        warmup=args.warmup,
        threads=args.threads,
    )
    return run_child(method, child)


def round_robin_child(args: argparse.Namespace) -> None:
    """Forward + backward of every hook method in turn, one process, one model copy each; prints JSON.

    Process children measure memory but not time finely enough: this machine's speed drifts by 10-20%
    between minutes, more than the differences in question. Here each round runs stock and every hook
    method on the same batch (in a rotated order), and the ratio to stock is taken within the round, so
    drift cancels; the median over rounds is reported. Each method runs twice in a row and only its
    second step is timed: a step depends on the allocator's state the step before it left (here an
    SDPA step right after a step of the filled path took 10-15% longer than one after an SDPA step), and
    in training a method's step follows a step of its own.
    """
    import copy
    import time

    import torch
    from transformers import AutoModelForSequenceClassification

    import attendout
    from attendout.methods.dropout import AttnDropoutConfig

    torch.set_num_threads(args.threads)
    length = args.rr_child
    batch_size = max(1, args.tokens // length)
    torch.manual_seed(0)
    stock = AutoModelForSequenceClassification.from_pretrained(args.model).train()
    models = {"stock": stock}
    for method in [m for m in args.methods if m in ROUND_ROBIN]:
        models[method] = copy.deepcopy(stock)
        handle = attendout.apply(models[method], method)
        handle.set_progress(0.5)  # DropHead's V and `scheduled` halfway through training
    if "attn-dropout" in models:
        models[CONTROL] = stock_at_rate(stock, AttnDropoutConfig().p)
    ids = torch.randint(1000, 29000, (batch_size, length))
    mask = torch.ones(batch_size, length, dtype=torch.long)
    for row in range(batch_size):  # random lengths L/2..L, as the process children's texts
        mask[row, int(torch.randint(length // 2, length + 1, ())) :] = 0
    labels = torch.randint(0, 2, (batch_size,))
    names = list(models)
    times: dict[str, list[float]] = {name: [] for name in names}
    rounds = max(8, round(args.rounds * (1024 / length) ** 0.5))
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            model = models[name]
            for timed in (False, True):  # the untimed step: the state this method's own step leaves
                model.zero_grad(set_to_none=True)
                start = time.perf_counter()
                model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
                if timed:
                    times[name].append(time.perf_counter() - start)
    per_round = {name: [t / s for t, s in zip(times[name], times["stock"], strict=True)] for name in names}
    print(json.dumps({"length": length, "rounds": rounds, "times": times, "ratio": per_round}))


def round_robin(args: argparse.Namespace, model: str, length: int) -> dict:
    import subprocess

    cmd = [
        sys.executable,
        __file__,
        "--rr-child",
        str(length),
        "--model-dir",
        model,
        "--tokens",
        str(args.tokens),
    ]
    cmd += ["--rounds", str(args.rounds), "--threads", str(args.threads), "--methods", *args.methods]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"round-robin child at length {length} failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ratios(runs: dict[str, list[dict]], method: str) -> tuple[float, float]:
    """(time ratio, memory-increment ratio) of ``method`` to stock, from medians."""

    def median(name: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[name])

    time = median(method, "step_s") / median("stock", "step_s")
    memory = median(method, "train_peak_mib") / max(median("stock", "train_peak_mib"), 1e-9)
    return time, memory


def time_ratio(results, rr, method: str, n: str) -> tuple[float, bool] | None:
    """(step-time ratio to stock, whether from the round-robin) at length ``n``: the round-robin's median
    of within-round ratios where it ran the method, else the process children's ratio of medians."""
    if n in rr and method in rr[n]["ratio"]:
        return statistics.median(rr[n]["ratio"][method]), True
    if method in results.get(n, {}) and "stock" in results[n]:
        return ratios(results[n], method)[0], False
    return None


def table(results: dict[str, dict[str, list[dict]]], rr: dict[str, dict], methods: list[str]) -> str:
    lengths = sorted(set(results) | set(rr), key=int)
    head = "| method | " + " | ".join(f"{n}: time | {n}: memory" for n in lengths) + " |"
    rows = [head, "|---|" + "---|---|" * len(lengths)]
    if any(CONTROL in r["ratio"] for r in rr.values()):
        methods = [methods[0], CONTROL, *methods[1:]]
    for method in methods:
        cells = []
        for n in lengths:
            timed = time_ratio(results, rr, method, n)
            cells.append("--" if timed is None else f"{timed[0]:.2f}x" + ("" if timed[1] else "*"))
            if method in results.get(n, {}) and "stock" in results[n]:
                cells.append(f"{ratios(results[n], method)[1]:.2f}x")
            else:
                cells.append("--")
        rows.append(f"| {method} | " + " | ".join(cells) + " |")
    stock = []
    for n in lengths:
        if "stock" in results.get(n, {}):
            runs = results[n]["stock"]
            step = statistics.median(r["step_s"] for r in runs)
            mem = statistics.median(r["train_peak_mib"] for r in runs)
            stock += [f"{step:.3f} s", f"{mem:.0f} MiB"]
        else:
            stock += ["--", "--"]
    rows.append("| *stock (absolute)* | " + " | ".join(stock) + " |")
    return "\n".join(rows)


def plot(results: dict, rr: dict, methods: list[str], path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = sorted(set(results) | set(rr), key=int)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharex=True)
    for method in methods:
        if method == "stock":
            continue
        style = "-" if method in ROUND_ROBIN else "--"
        timed = [(int(n), t[0]) for n in lengths if (t := time_ratio(results, rr, method, n)) is not None]
        line = None
        if timed:
            (line,) = axes[0].plot(*zip(*timed, strict=True), style, marker="o", label=method)
        memory = [(int(n), ratios(results[n], method)[1]) for n in lengths if method in results.get(n, {})]
        if memory:
            color = None if line is None else line.get_color()
            axes[1].plot(*zip(*memory, strict=True), style, marker="o", label=method, color=color)
    for ax, what, target in (
        (axes[0], "step time", 1.05),
        (axes[1], "peak memory (training increment)", 1.10),
    ):
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.axhline(target, color="grey", linestyle=":", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks([int(n) for n in lengths], [str(n) for n in lengths])
        ax.set_xlabel("sequence length (tokens per batch held constant)")
        ax.set_ylabel(f"{what} / stock attention")
    axes[1].legend(fontsize=8, ncol=2)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def save(args: argparse.Namespace, device: str, results: dict, rr: dict, earlier: list[dict]) -> None:
    """Write every measurement so far to ``--json`` (whole or not at all), with the arguments of this
    invocation after those of the ``earlier`` ones it resumed."""
    if args.json:
        tmp_json = f"{args.json}.tmp"
        invocations = [*earlier, {**vars(args), "device": device}]
        saved = {"invocations": invocations, "results": results, "round_robin": rr}
        Path(tmp_json).write_text(json.dumps(saved, indent=1))
        os.replace(tmp_json, args.json)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048, 8192])
    parser.add_argument("--methods", nargs="+", default=METHODS)
    parser.add_argument("--tokens", type=int, default=8192, help="tokens per batch at every length")
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument(
        "--steps",
        type=int,
        default=3,
        help="timed steps per child at 1024 and longer (x 1024 / length below)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=24,
        help="round-robin rounds at 1024 (x sqrt(1024 / length) at the others, at least 8); a long "
        "step varies by 10-20%% between rounds here, so it takes rounds to tell 1.05x from 1.00x",
    )
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps per child")
    parser.add_argument("--repeats", type=int, default=2, help="children per (length, method), interleaved")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", default=None, help="write every measurement here (after each length)")
    parser.add_argument("--resume", action="store_true", help="keep the lengths already in --json")
    parser.add_argument("--png", default=None, help="plot ratio against length here")
    parser.add_argument("--rr-child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rr_child:
        args.model = args.model_dir
        round_robin_child(args)
        return
    methods = list(dict.fromkeys(["stock", *args.methods]))
    positions = max(args.lengths)

    results: dict[str, dict[str, list[dict]]] = {}
    rr: dict[str, dict] = {}  # length -> the round-robin child's output
    earlier: list[dict] = []  # the arguments of the runs resumed
    if args.resume and args.json and os.path.exists(args.json):
        saved = json.loads(Path(args.json).read_text())
        results, rr = saved["results"], saved.get("round_robin", {})
        earlier = saved.get("invocations") or [{**saved["args"], "device": saved.get("device")}]
    import torch

    device = f"CPU ({os.cpu_count()} cores), torch {torch.__version__}, {args.threads} threads"
    title = (
        f"random BERT encoder: hidden {args.hidden}, {args.heads} heads, {args.layers} layers; "
        f"{args.tokens} tokens per batch; {device}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        build_long_model(tmp, args.hidden, args.heads, args.layers, positions)
        for length in args.lengths:
            if str(length) not in rr and any(m in ROUND_ROBIN for m in methods):
                rr[str(length)] = round_robin(args, tmp, length)
                print(
                    f"[length {length}] round-robin, {rr[str(length)]['rounds']} rounds: "
                    + ", ".join(
                        f"{m} {statistics.median(v):.3f}x" for m, v in rr[str(length)]["ratio"].items()
                    ),
                    file=sys.stderr,
                    flush=True,
                )
                save(args, device, results, rr, earlier)
            if str(length) in results:
                continue
            # untimed: the first child after a pause runs slow (caches, page faults), which would bias its method
            measure(argparse.Namespace(**{**vars(args), "steps": 1, "warmup": 0}), tmp, length, "stock")
            run = functools.partial(measure, args, tmp, length)  # run(method)
            runs = interleaved(methods, args.repeats, run, f"length {length}, ")
            results[str(length)] = runs
            save(args, device, results, rr, earlier)
    print(
        f"\n{title}; {args.steps} timed steps (x 1024 / length below 1024) x {args.repeats} interleaved repeats; ratios of medians to stock\n"
    )
    print(table(results, rr, methods))
    if args.png:
        plot(results, rr, methods, args.png, title)
        print(f"\nplot: {args.png}")


if __name__ == "__main__":
    main()
