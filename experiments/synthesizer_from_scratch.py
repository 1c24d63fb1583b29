"""Synthesizer variants trained from scratch: the paper's setting, without pretraining.

Tay et al., "Synthesizer: Rethinking Self-Attention in Transformer Models" (ICML 2021) train every
attention variant from scratch. attendout mostly inserts synthesizers into a *pretrained* encoder,
where the dot-product attention has a head start; this script compares the variants on equal terms:
one small randomly initialised BERT (same initial weights for every variant, same data, same order,
same steps), its attention replaced by each variant, trained through the real fine-tuning loop
(``attendout.run.loop``) on a single-sentence task (SST-2 subsample, scored on SST-2 dev) or on a pair task
(QNLI: question + sentence; only its dev file is available offline, so it is split here by a stable
hash of the example index, 80% for training and 20% held out as "dev"). The paper finds pair tasks
suffer most without dot-product attention: a synthesizer that ignores the tokens (random) cannot align
one text with the other, which the pair task needs and the single-sentence task does not.

Model: BERT, 2 layers, hidden 128, 4 heads, FFN 512, MiniLM's WordPiece vocabulary, random init.
Data: GLUE SST-2 or QNLI from ``--data-dir`` (train subsample; validation carved from train for
selection; dev for reporting). Every trainable weight (new or not) uses one learning rate.

Usage (from the repository root):

    python experiments/synthesizer_from_scratch.py --steps 300 --train-samples 8000 --seeds 0  # ~3 min
    python experiments/synthesizer_from_scratch.py --steps 3000 --train-samples 60000 --seeds 0 1 2
    python experiments/synthesizer_from_scratch.py --task qnli --max-length 128 --seeds 0 1 2

Prints a Markdown table (mean ± std over seeds) and writes ``OUT/summary.json``.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

VARIANTS = [
    "dot",
    "random",
    "random-fixed",
    "factorized-random",
    "dense",
    "factorized-dense",
    "random+dot",
    "dense+dot",
]


def build_base_model(folder: Path, max_length: int, seed: int) -> None:
    """A small random BERT with MiniLM's tokenizer, saved as a model folder."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from attendout.models.loading import packaged_model_path

    tokenizer = AutoTokenizer.from_pretrained(packaged_model_path())
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=512,
        max_position_embeddings=max_length,
        num_labels=2,
    )
    torch.manual_seed(seed)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


QNLI_DEV_SHARE = 0.2  # of QNLI's dev file, held out for reporting (the rest trains)


def split_qnli(data_dir: str, folder: Path) -> dict[str, str]:
    """QNLI's dev.tsv split into train.tsv / dev.tsv in ``folder`` by a stable hash of the index."""
    from attendout.tasks.core import stable_unit_hash

    source = Path(data_dir) / "QNLI" / "dev.tsv"
    if not source.is_file():
        raise SystemExit(f"no {source}: --data-dir must be a GLUE folder with QNLI/dev.tsv")
    with open(source, encoding="utf-8-sig", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    parts: dict[str, list[dict]] = {"train": [], "dev": []}
    for row in rows:
        parts["dev" if stable_unit_hash(f"qnli-{row['index']}") < QNLI_DEV_SHARE else "train"].append(row)
    paths = {}
    for name, part in parts.items():
        path = folder / f"qnli-{name}.tsv"
        with open(path, "w", newline="") as handle:
            writer = csv.writer(
                handle, delimiter="\t", quoting=csv.QUOTE_NONE, quotechar=None, escapechar="\\"
            )
            writer.writerow(["question", "sentence", "label"])
            writer.writerows([r["question"], r["sentence"], r["label"]] for r in part)
        paths[name] = str(path)
    return paths


def task_options(args: argparse.Namespace, folder: Path) -> dict:
    """The TrainConfig fields naming the task's data."""
    if args.task == "sst2":
        return {"task": "sst2", "data_dir": args.data_dir}
    paths = split_qnli(args.data_dir, folder)
    return {
        "task": "file",
        "train_file": paths["train"],
        "eval_files": {"dev": paths["dev"]},
        "text_columns": ["question", "sentence"],
        "label_column": "label",
    }


def method_of(variant: str, lr: float, rank: int) -> tuple[str, dict]:
    if variant == "dot":
        return "none", {}
    fixed = variant.endswith("-fixed")
    return "synthesizer", {
        "variant": variant.removesuffix("-fixed"),
        "fixed": fixed,
        "init": "paper",  # from scratch there is no pretrained attention to start from
        "rank": rank,
        "synthesizer_lr": lr,
    }


def run_one(args: argparse.Namespace, base: Path, data: dict, variant: str, seed: int) -> dict:
    from attendout.config import TrainConfig
    from attendout.run.loop import TrainingLoop

    method, options = method_of(variant, args.learning_rate, args.rank)
    config = TrainConfig(
        **data,
        model=str(base),
        method=method,
        method_options=options,
        max_train_samples=args.train_samples,
        max_eval_samples=args.eval_samples,
        max_length=args.max_length,
        max_steps=args.steps,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        warmup_ratio=0.1,
        eval_steps=max(1, args.steps // args.evaluations),
        seed=seed,
        data_seed=0,
        save_model=False,
        progress=False,
        overwrite=True,
        output_dir=str(Path(args.out) / variant / f"seed{seed}"),
    )
    started = time.time()
    trainer = TrainingLoop(config)
    synth_params = sum(
        t.numel()
        for name, t in trainer.model.state_dict().items()
        if name.startswith("attendout_synthesizer.")
    )  # parameters and fixed random buffers
    results = trainer.fit()
    return {
        "variant": variant,
        "seed": seed,
        "dev_accuracy": results["eval"]["dev"]["accuracy"],
        "validation_accuracy": results["validation"]["accuracy"],
        "best_step": results["best_step"],
        "synthesizer_params": synth_params,
        "seconds": round(time.time() - started, 1),
    }


def mean_std(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=["sst2", "qnli"], default="sst2", help="single sentence or pair")
    parser.add_argument("--variants", nargs="+", default=VARIANTS, choices=VARIANTS)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--train-samples", type=int, default=8000)
    parser.add_argument("--eval-samples", type=int, default=872, help="cap of validation and dev")
    parser.add_argument("--evaluations", type=int, default=4, help="validations per run (model selection)")
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--data-dir", default="../shared/data/glue")
    parser.add_argument("--out", default="runs/synthesizer-from-scratch")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch threads (1 is faster on a busy shared CPU)"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base"
        build_base_model(base, args.max_length, seed=1234)
        data = task_options(args, Path(tmp))
        for seed in args.seeds:
            for variant in args.variants:
                row = run_one(args, base, data, variant, seed)
                rows.append(row)
                print(json.dumps(row), flush=True)

    what = "SST-2" if args.task == "sst2" else "QNLI (pair; 80/20 split of its dev file)"
    held_out = "SST-2 dev" if args.task == "sst2" else "the held-out 20% of QNLI dev"
    lines = [
        f"{what} from scratch: BERT 2x128, 4 heads, {args.steps} steps x batch {args.batch_size}, "
        f"{args.train_samples} train examples, max length {args.max_length}, lr {args.learning_rate}, "
        f"seeds {args.seeds}; dev = {held_out} (a seeded subsample of {args.eval_samples} at most)",
        "",
        "| variant | synthesizer params (all layers) | dev accuracy | validation accuracy | s/run |",
        "|---|---:|---:|---:|---:|",
    ]
    for variant in args.variants:
        mine = [r for r in rows if r["variant"] == variant]
        lines.append(
            f"| {variant} | {mine[0]['synthesizer_params']:,} | {mean_std([r['dev_accuracy'] for r in mine])} "
            f"| {mean_std([r['validation_accuracy'] for r in mine])} "
            f"| {statistics.mean(r['seconds'] for r in mine):.0f} |"
        )
    print("\n".join(lines))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
